"""Plans for many alike groups at once: the same phases as ``algorithms``, built with array indexing.

A query's groups usually share one structure: every group spans ``N`` machines with ``p`` members on
each (TP groups: ``N = 1``; DP groups with TP = 8: ``p = 1``; one data-parallel group of a whole
cluster: ``p = 8``). They then form a tensor ``A[group, node, member]`` (members sorted), and each
algorithm's hops are slices of it — the ring of channel ``c`` visits ``A[:, :, rot_c]`` node after
node, the tree's chains are the same slices and its heads ``A[:, :, rot_c[0]]``. The phases hold
exactly the hops of ``algorithms.<name>`` run on every group and merged, so every fidelity gives
the same result (the tests compare both on small clusters); only the Python loops are gone.
``group_tensor`` returns ``None`` for ragged groups, which the model plans one by one.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.collectives.algorithms import Phase, _rotation, ring_volume
from simulator.network.cluster import Cluster


def group_tensor(cluster: Cluster, groups: list[list[int]]) -> np.ndarray | None:
    """Sorted groups as ``A[group, node, member]`` when all have ``N`` nodes × ``p`` members."""
    if len({len(g) for g in groups}) != 1 or not len(groups[0]):
        return None
    arr = np.sort(np.asarray(groups, dtype=np.int64), axis=1)
    n = arr.shape[1]
    k = arr // cluster.gpus_per_node
    n_nodes = int(np.count_nonzero(np.diff(k[0]))) + 1
    if n % n_nodes:
        return None
    k3 = k.reshape(len(arr), n_nodes, n // n_nodes)
    if not (k3 == k3[:, :, :1]).all() or not (np.diff(k3[:, :, 0], axis=1) > 0).all():
        return None
    return arr.reshape(k3.shape)


def _hops(cluster: Cluster, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``algorithms.ring_hops`` for every group of ``a`` (G × N × p): (src, dst, share), each G × H."""
    _, n_nodes, p = a.shape
    mesh = cluster.topology.intra_node.kind == "full_mesh"
    if mesh and n_nodes == 1 and p > 2:
        t = np.arange(p)
        m = a[:, 0, :]
        dst = np.concatenate([m[:, (t + s) % p] for s in range(1, p)], axis=1)
        return np.tile(m, (1, p - 1)), dst, np.full(dst.shape, 1.0 / (p - 1))
    channels = p if n_nodes > 1 else 1
    src, dst = [], []
    for c in range(channels):
        order = a[:, :, _rotation(mesh, p, c)].reshape(len(a), -1)
        src.append(order)
        dst.append(np.roll(order, -1, axis=1))
    s = np.concatenate(src, axis=1)
    return s, np.concatenate(dst, axis=1), np.full(s.shape, 1.0 / channels)


def ring(cluster: Cluster, op: str, a: np.ndarray, nbytes: float) -> Phase:
    """``algorithms.ring`` on every group of ``a``, merged into one phase."""
    _, n_nodes, p = a.shape
    per_hop, ph = ring_volume(op, n_nodes * p, n_nodes, nbytes)
    src, dst, share = _hops(cluster, a)
    root = a[:, 0, :1]  # the smallest member of each group
    keep = np.ones(src.shape, dtype=bool)
    if op == "broadcast":
        keep = dst != root
    elif op == "reduce":
        keep = src != root
    ph.add_hops(cluster, src[keep], dst[keep], per_hop * share[keep])
    return ph


def tree(cluster: Cluster, a: np.ndarray, nbytes: float) -> Phase:
    """``algorithms.tree`` on every group of ``a``, merged into one phase."""
    _, n_nodes, p = a.shape
    channels = p if n_nodes > 1 else 1
    b = nbytes / channels / 2
    ph = Phase(steps_intra=2 * (p - 1), steps_inter=2 * math.ceil(math.log2(n_nodes)) if n_nodes > 1 else 0)
    pos = np.arange(1, n_nodes)
    ident = np.arange(n_nodes)
    shift = ident[::-1] if n_nodes % 2 == 0 else np.roll(ident, -1)
    for c in range(channels):
        chain = a[:, :, (c + np.arange(p)) % p]
        up_a, up_z = chain[:, :, :-1].ravel(), chain[:, :, 1:].ravel()
        ph.add_hops(cluster, up_z, up_a, 2 * b)  # reduce towards the head (both trees)
        ph.add_hops(cluster, up_a, up_z, 2 * b)  # broadcast back down
        if n_nodes == 1:
            continue
        heads = chain[:, :, 0]
        for perm in (ident, shift):
            child, parent = heads[:, perm[pos]].ravel(), heads[:, perm[(pos - 1) // 2]].ravel()
            ph.add_hops(cluster, child, parent, b)
            ph.add_hops(cluster, parent, child, b)
    return ph


def _columns(a: np.ndarray) -> np.ndarray:
    """One group per (group, local member): the inter-node rings of hierarchical and NVLS."""
    g, n_nodes, p = a.shape
    return a.transpose(0, 2, 1).reshape(g * p, n_nodes, 1)


def _rows(a: np.ndarray) -> np.ndarray:
    """One group per (group, node): the intra-node rings of hierarchical."""
    g, n_nodes, p = a.shape
    return a.reshape(g * n_nodes, 1, p)


def hierarchical(cluster: Cluster, a: np.ndarray, nbytes: float) -> list[Phase]:
    """``algorithms.hierarchical`` on every group of ``a``, merged phase by phase."""
    p = a.shape[2]
    rows = _rows(a)
    return [ring(cluster, "reduce_scatter", rows, nbytes), ring(cluster, "all_reduce", _columns(a), nbytes / p),
            ring(cluster, "all_gather", rows, nbytes)]


def nvls(cluster: Cluster, op: str, a: np.ndarray, nbytes: float, efficiency: float) -> Phase:
    """``algorithms.nvls`` on every group of ``a``, merged into one phase."""
    _, n_nodes, p = a.shape
    up, down = {
        "all_reduce": (nbytes * (p + 1) / p, nbytes * (p + 1) / p),
        "reduce_scatter": (nbytes, nbytes / p),
        "all_gather": (nbytes / p, nbytes),
    }[op]
    ph = Phase(steps_intra=1, steps_inter=2 * (n_nodes - 1), nvls=True)
    ph.add_switch(cluster, a.ravel(), up, down, efficiency)
    if n_nodes > 1:
        ph.extend(ring(cluster, "all_reduce", _columns(a), nbytes / p))
    return ph


def plan(cluster: Cluster, name: str, op: str, a: np.ndarray, nbytes: float, nvls_efficiency: float) -> list[Phase]:
    """Phases of algorithm ``name`` for all groups of ``a`` (``direct``/``p2p`` are not batched)."""
    if name == "ring":
        return [ring(cluster, op, a, nbytes)]
    if name == "tree":
        return [tree(cluster, a, nbytes)]
    if name == "hierarchical":
        return hierarchical(cluster, a, nbytes)
    if name == "nvls":
        return [nvls(cluster, op, a, nbytes, nvls_efficiency)]
    raise ValueError(f"no batched plan for {name!r}")
