"""Collective algorithms as phases of concurrent point-to-point transfers.

A ``Phase`` is a set of transfers that run at the same time (a pipelined algorithm such as a ring
all-reduce is one phase carrying its whole volume; hierarchical all-reduce is three phases in
sequence) plus its NCCL latency step counts (formulas.md §3.5). Volumes per rank, S = nbytes
(nccl-tests convention, formulas.md §3.1-3.4):

* ring all-reduce: every hop carries ``2(n−1)/n·S``; reduce-scatter / all-gather ``(n−1)/n·S``;
  broadcast / reduce: a pipelined chain, every hop ``S``. NCCL-style channels: one ring per member
  of a node, each rotated so it enters every node on a different GPU, hence a different NIC rail;
  cross-node hops use the rail of the receiving GPU (PXN). On a full mesh, a one-node ring uses all
  ``n−1`` strides at once (each link carries ``1/(n−1)`` of the volume).
* double binary tree (all-reduce): intra-node chains up and down, inter-node binary trees (the
  second mirrored, or shifted by one for odd node counts, NCCL trees.cc); each channel carries
  ``S/C`` up and down; steps ``2(p−1)`` intra and ``2·ceil(log2 N)`` inter.
* hierarchical (all-reduce): intra-node reduce-scatter → inter-node ring all-reduce on ``S/p``
  shards per local index → intra-node all-gather (formulas.md §3.4).
* NVLS (NVLink SHARP, one node): all-reduce: each GPU sends ``S(p+1)/p`` to the switch and receives
  the same (``ld_reduce`` of every shard + multicast store of its own shard); reduce-scatter: up
  ``S``, down ``S/p``; all-gather: up ``S/p``, down ``S``. Multi-node NVLS all-reduce pipelines the
  in-node NVLS all-reduce with inter-node rings on ``S/p`` shards (NCCL NVLSTree-like).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator.network.cluster import Cluster
from simulator.network.fabric import Transfer
from simulator.network.loads import compact_transfers

_I64 = np.int64


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=_I64)


@dataclass
class Phase:
    """Concurrent transfers plus latency step counts.

    Transfers are kept as arrays of hops (``src``, ``dst``, bytes, rail; rail −1 = default) and of
    NVLS switch traffic (GPU, wire bytes up, wire bytes down, bytes injected), so a ring over
    16,384 GPUs is a handful of arrays; ``transfers`` turns them into per-hop ``Route``s on demand.
    """

    steps_intra: int = 0
    steps_inter: int = 0
    nvls: bool = False
    route_latency_s: float = 0.0
    cluster: Cluster | None = field(default=None, repr=False)
    _hops: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)
    _switch: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    def add(self, cluster: Cluster, src: int, dst: int, nbytes: float, rail: int | None = None) -> None:
        self.add_hops(cluster, _arr([src]), _arr([dst]), np.array([nbytes], dtype=np.float64),
                      None if rail is None else _arr([rail]))

    def add_hops(self, cluster: Cluster, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                 rail: np.ndarray | None = None) -> None:
        """Hops ``src[t] → dst[t]`` of ``nbytes[t]`` (empty and self hops are dropped)."""
        self.cluster = cluster
        nbytes = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
        keep = (nbytes > 0) & (src != dst)
        rail = np.full(src.shape, -1, dtype=_I64) if rail is None else rail
        if keep.all():  # the usual case: no copies
            self._hops.append((src, dst, np.ascontiguousarray(nbytes), rail))
        elif keep.any():
            self._hops.append((src[keep], dst[keep], nbytes[keep], rail[keep]))

    def add_switch(self, cluster: Cluster, gpu, up_bytes: float, down_bytes: float, efficiency: float) -> None:
        """NVLS traffic between ``gpu`` (one index or an array) and its NVSwitch chips; NVLS reaches
        only ``efficiency`` of the NVLink bandwidth, modelled as ``1/efficiency`` times the bytes on
        the wire."""
        self.cluster = cluster
        g = np.atleast_1d(_arr(gpu))
        one = np.ones(len(g))
        self._switch.append((g, one * (up_bytes / efficiency), one * (down_bytes / efficiency), one * up_bytes))

    def extend(self, other: Phase) -> None:
        """Add ``other``'s traffic (same latency terms)."""
        self.cluster = self.cluster or other.cluster
        self._hops += other._hops
        self._switch += other._switch

    def merge(self, other: Phase) -> None:
        """Run ``other`` at the same time (another group of the same query)."""
        self.extend(other)
        self.steps_intra = max(self.steps_intra, other.steps_intra)
        self.steps_inter = max(self.steps_inter, other.steps_inter)
        self.nvls = self.nvls or other.nvls
        self.route_latency_s = max(self.route_latency_s, other.route_latency_s)

    # --- views ------------------------------------------------------------------------------------
    def hop_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if not self._hops:
            e = np.zeros(0, dtype=_I64)
            return e, e, np.zeros(0), e
        if len(self._hops) > 1:  # concatenate once; later calls reuse the single chunk
            self._hops = [tuple(np.concatenate(col) for col in zip(*self._hops, strict=True))]  # type: ignore[list-item]
        return self._hops[0]

    def switch_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if not self._switch:
            e = np.zeros(0, dtype=_I64)
            return e, np.zeros(0), np.zeros(0), np.zeros(0)
        if len(self._switch) > 1:
            self._switch = [tuple(np.concatenate(col) for col in zip(*self._switch, strict=True))]  # type: ignore[list-item]
        return self._switch[0]

    def _sent_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        src, _, b, _ = self.hop_arrays()
        gpu, _, _, up = self.switch_arrays()
        return np.concatenate((src, gpu)), np.concatenate((b, up))

    @property
    def sent(self) -> dict[int, float]:
        """Bytes each GPU injects (GPU index → bytes)."""
        gpus, b = self._sent_arrays()
        ids, inv = np.unique(gpus, return_inverse=True)
        return dict(zip(ids.tolist(), np.bincount(inv, weights=b).tolist(), strict=True))

    def max_sent(self) -> float:
        """Bytes injected by the busiest GPU."""
        gpus, b = self._sent_arrays()
        return float(np.bincount(gpus, weights=b).max()) if len(gpus) else 0.0

    def _transfers(self, compact: bool) -> list[Transfer]:
        c = self.cluster
        if c is None:
            return []
        src, dst, b, rail = self.hop_arrays()
        if compact:
            out = compact_transfers(c, src, dst, b, rail)
        else:
            out = [Transfer(c.route(s, d, None if r < 0 else r), x)
                   for s, d, x, r in zip(src.tolist(), dst.tolist(), b.tolist(), rail.tolist(), strict=True)]
        gpu, up, down, _ = self.switch_arrays()
        for k, u, d in zip(gpu.tolist(), up.tolist(), down.tolist(), strict=True):
            out.append(Transfer(c.switch_route(k, True), u))
            out.append(Transfer(c.switch_route(k, False), d))
        return out

    @property
    def transfers(self) -> list[Transfer]:
        """Every transfer on its exact route (real edge ids, ``Cluster.route``)."""
        return self._transfers(compact=False)

    def compact_transfers(self) -> list[Transfer]:
        """Every transfer on its compact route (leaf↔spine pseudo-edges, ``network.edges``)."""
        return self._transfers(compact=True)


def by_node(cluster: Cluster, members) -> list[list[int]]:
    """Members grouped by machine, machines in order of first appearance (members sorted)."""
    m = np.sort(_arr(members))
    k = m // cluster.gpus_per_node
    bounds = [0, *(np.flatnonzero(np.diff(k)) + 1).tolist(), len(m)]
    flat = m.tolist()
    return [flat[a:z] for a, z in zip(bounds[:-1], bounds[1:], strict=True)]


def _node_matrix(nodes: list[list[int]]) -> np.ndarray | None:
    """Members as an (nodes × per-node) matrix when every node holds as many; else ``None``."""
    if len({len(ms) for ms in nodes}) != 1:
        return None
    return np.array(nodes, dtype=_I64)


def _full_mesh_one_node(cluster: Cluster, nodes: list[list[int]]) -> bool:
    return cluster.topology.intra_node.kind == "full_mesh" and len(nodes) == 1


def _rotation(mesh: bool, p: int, c: int) -> np.ndarray:
    """Channel ``c``'s visiting order of a node's ``p`` members (indices into the sorted members)."""
    if mesh and p > 2:
        strides = [s for s in range(1, p) if math.gcd(s, p) == 1]
        return (c + strides[c % len(strides)] * np.arange(p)) % p
    return (c + np.arange(p)) % p


def ring_hops(cluster: Cluster, members) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, share of the per-hop volume) arrays for all channels of a ring over ``members``."""
    nodes = by_node(cluster, members)
    if _full_mesh_one_node(cluster, nodes) and len(nodes[0]) > 2:
        m = np.array(nodes[0], dtype=_I64)
        p = len(m)
        t = np.arange(p)
        dst = np.concatenate([m[(t + s) % p] for s in range(1, p)])
        return np.tile(m, p - 1), dst, np.full(len(dst), 1.0 / (p - 1))
    channels = max(len(ms) for ms in nodes) if len(nodes) > 1 else 1
    mesh = cluster.topology.intra_node.kind == "full_mesh"
    mat = _node_matrix(nodes)
    src, dst = [], []
    for c in range(channels):
        if mat is not None:
            order = mat[:, _rotation(mesh, mat.shape[1], c)].ravel()
        else:
            order = np.concatenate([np.array(ms, dtype=_I64)[_rotation(mesh, len(ms), c)] for ms in nodes])
        src.append(order)
        dst.append(np.roll(order, -1))
    s = np.concatenate(src)
    return s, np.concatenate(dst), np.full(len(s), 1.0 / channels)


def ring_volume(op: str, n: int, n_nodes: int, nbytes: float) -> tuple[float, Phase]:
    """Bytes each ring hop carries and the (empty) phase with its step counts.

    Per hop: all-reduce ``2(n−1)/n·S``, reduce-scatter and all-gather ``(n−1)/n·S``, pipelined
    broadcast/reduce ``S`` (Thakur et al. 2005; formulas.md §3.1). Steps: ``2(n−1)`` for all-reduce,
    ``n−1`` otherwise, of which ``2(N−1)`` resp. ``N−1`` cross the network (NCCL ``nInterSteps``).
    """
    per_hop = {
        "all_reduce": 2 * (n - 1) / n * nbytes,
        "reduce_scatter": (n - 1) / n * nbytes,
        "all_gather": (n - 1) / n * nbytes,
        "broadcast": nbytes,
        "reduce": nbytes,
    }[op]
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}.get(op, n - 1)
    inter = {"all_reduce": 2 * (n_nodes - 1)}.get(op, n_nodes - 1)
    return per_hop, Phase(steps_intra=steps - inter, steps_inter=inter)


def ring(cluster: Cluster, op: str, members, nbytes: float) -> list[Phase]:
    """Ring (or pipelined chain for broadcast/reduce) over ``members`` in GPU index order."""
    per_hop, ph = ring_volume(op, len(members), len(by_node(cluster, members)), nbytes)
    root = min(members)
    src, dst, share = ring_hops(cluster, members)
    keep = np.ones(len(src), dtype=bool)
    if op == "broadcast":
        keep = dst != root  # the chain is open at the root
    elif op == "reduce":
        keep = src != root
    ph.add_hops(cluster, src[keep], dst[keep], per_hop * share[keep])
    return [ph]


def tree(cluster: Cluster, members, nbytes: float) -> list[Phase]:
    """Double binary tree all-reduce (intra-node chains + inter-node trees), one pipelined phase.

    Every channel (one per member of a node, rotated so each uses its own rail) runs both trees,
    each on half of the channel's ``S/C`` bytes, so a node is interior in one tree and a leaf in the
    other on every NIC: per NIC ``3/2 + 1/2 = 2`` times ``S/C`` in each direction.
    """
    nodes = by_node(cluster, members)
    n_nodes = len(nodes)
    ppn = max(len(ms) for ms in nodes)
    channels = ppn if n_nodes > 1 else 1
    b = nbytes / channels / 2
    ph = Phase(steps_intra=2 * (ppn - 1), steps_inter=2 * math.ceil(math.log2(n_nodes)) if n_nodes > 1 else 0)
    mat = _node_matrix(nodes)
    pos = np.arange(1, n_nodes)
    ident = np.arange(n_nodes)
    shift = ident[::-1] if n_nodes % 2 == 0 else np.roll(ident, -1)
    for c in range(channels):
        if mat is not None:
            chains = [mat[:, (c + np.arange(mat.shape[1])) % mat.shape[1]]]
        else:
            chains = [np.array(ms, dtype=_I64)[(c + np.arange(len(ms))) % len(ms)][None, :] for ms in nodes]
        heads = np.concatenate([ch[:, 0] for ch in chains])
        a = np.concatenate([ch[:, :-1].ravel() for ch in chains])
        z = np.concatenate([ch[:, 1:].ravel() for ch in chains])
        ph.add_hops(cluster, z, a, 2 * b)  # reduce towards the head (both trees)
        ph.add_hops(cluster, a, z, 2 * b)  # broadcast back down
        if n_nodes == 1:
            continue
        for perm in (ident, shift):
            child, parent = heads[perm[pos]], heads[perm[(pos - 1) // 2]]
            ph.add_hops(cluster, child, parent, b)
            ph.add_hops(cluster, parent, child, b)
    return [ph]


def nvls(cluster: Cluster, op: str, members, nbytes: float, efficiency: float) -> list[Phase]:
    """NVLS (see module docstring for the volumes). On several nodes (all-reduce only), pipelined like
    NCCL's NVLSTree: in-switch reduction and multicast inside each node run concurrently with an
    inter-node ring all-reduce of each ``S/p`` shard among the GPUs of one local index."""
    nodes = by_node(cluster, members)
    p = len(nodes[0])
    up, down = {
        "all_reduce": (nbytes * (p + 1) / p, nbytes * (p + 1) / p),
        "reduce_scatter": (nbytes, nbytes / p),
        "all_gather": (nbytes / p, nbytes),
    }[op]
    ph = Phase(steps_intra=1, steps_inter=2 * (len(nodes) - 1), nvls=True)
    ph.add_switch(cluster, np.sort(_arr(members)), up, down, efficiency)
    if len(nodes) > 1:
        for j in range(p):
            ph.extend(ring(cluster, "all_reduce", [ms[j] for ms in nodes], nbytes / p)[0])
    return [ph]


def hierarchical(cluster: Cluster, members, nbytes: float) -> list[Phase]:
    """Intra-node ring reduce-scatter → inter-node ring all-reduce of ``S/p`` per local index →
    intra-node ring all-gather, in sequence (formulas.md §3.4)."""
    nodes = by_node(cluster, members)
    p = len(nodes[0])
    first, last, middle = Phase(), Phase(), Phase()
    for ms in nodes:
        first.merge(ring(cluster, "reduce_scatter", ms, nbytes)[0])
        last.merge(ring(cluster, "all_gather", ms, nbytes)[0])
    for j in range(p):
        middle.merge(ring(cluster, "all_reduce", [ms[j] for ms in nodes], nbytes / p)[0])
    return [first, middle, last]


def collnet(cluster: Cluster, members, nbytes: float) -> list[Phase]:
    """CollNet (SHARP) all-reduce, one pipelined phase (see the module docstring for the volumes).
    Steps: the in-node legs ``2(p−1)`` and one trip up and down the aggregation tree."""
    nodes = by_node(cluster, members)
    p = len(nodes[0])
    ph = Phase(steps_intra=2 * (p - 1), steps_inter=2)
    for ms in nodes:
        ph.extend(ring(cluster, "all_reduce", ms, nbytes)[0])
    if len(nodes) > 1:
        for j in range(p):
            rail = _arr([ms[j] for ms in nodes])
            ph.add_hops(cluster, rail, np.roll(rail, -1), np.full(len(rail), nbytes / p))
    return [ph]


def all_to_all(cluster: Cluster, members, nbytes: float) -> list[Phase]:
    """Every rank sends ``S/n`` to every other rank at once (NCCL's p2p-based all-to-all)."""
    m = _arr(members)
    n = len(m)
    multi = len(by_node(cluster, members)) > 1
    ph = Phase(steps_intra=1, steps_inter=1 if multi else 0)
    ph.add_hops(cluster, np.repeat(m, n), np.tile(m, n), nbytes / n)
    return [ph]


def send_recv(cluster: Cluster, members, nbytes: float) -> list[Phase]:
    """One transfer ``members[0] → members[1]``; latency adds the route's hop latencies."""
    src, dst = members
    cross = cluster.node_of(src) != cluster.node_of(dst)
    ph = Phase(steps_intra=0 if cross else 1, steps_inter=1 if cross else 0)
    ph.add(cluster, src, dst, nbytes)
    ph.route_latency_s = cluster.route(src, dst).latency_s
    return [ph]
