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

from simulator.network.cluster import Cluster
from simulator.network.fabric import Transfer


@dataclass
class Phase:
    """Concurrent transfers plus latency step counts; ``sent`` = bytes each GPU injects."""

    transfers: list[Transfer] = field(default_factory=list)
    steps_intra: int = 0
    steps_inter: int = 0
    nvls: bool = False
    route_latency_s: float = 0.0
    sent: dict[int, float] = field(default_factory=dict)

    def add(self, cluster: Cluster, src: int, dst: int, nbytes: float, rail: int | None = None) -> None:
        if nbytes <= 0 or src == dst:
            return
        self.transfers.append(Transfer(cluster.route(src, dst, rail), nbytes))
        self.sent[src] = self.sent.get(src, 0.0) + nbytes

    def add_switch(self, cluster: Cluster, gpu: int, up_bytes: float, down_bytes: float, efficiency: float) -> None:
        """NVLS traffic between ``gpu`` and its NVSwitch chips; NVLS reaches only ``efficiency`` of
        the NVLink bandwidth, modelled as ``1/efficiency`` times the bytes on the wire."""
        self.transfers.append(Transfer(cluster.switch_route(gpu, True), up_bytes / efficiency))
        self.transfers.append(Transfer(cluster.switch_route(gpu, False), down_bytes / efficiency))
        self.sent[gpu] = self.sent.get(gpu, 0.0) + up_bytes

    def merge(self, other: Phase) -> None:
        """Run ``other`` at the same time (another group of the same query)."""
        self.transfers += other.transfers
        self.steps_intra = max(self.steps_intra, other.steps_intra)
        self.steps_inter = max(self.steps_inter, other.steps_inter)
        self.nvls = self.nvls or other.nvls
        self.route_latency_s = max(self.route_latency_s, other.route_latency_s)
        for k, v in other.sent.items():
            self.sent[k] = self.sent.get(k, 0.0) + v


def by_node(cluster: Cluster, members: list[int]) -> list[list[int]]:
    """Members grouped by machine, machines in order of first appearance (members sorted)."""
    out: dict[int, list[int]] = {}
    for m in sorted(members):
        out.setdefault(cluster.node_of(m), []).append(m)
    return list(out.values())


def _full_mesh_one_node(cluster: Cluster, members: list[int]) -> bool:
    return cluster.topology.intra_node.kind == "full_mesh" and len(by_node(cluster, members)) == 1


def ring_hops(cluster: Cluster, members: list[int]) -> list[tuple[int, int, float]]:
    """(src, dst, share of the per-hop volume) for all channels of a ring over ``members``."""
    nodes = by_node(cluster, members)
    if _full_mesh_one_node(cluster, members) and len(members) > 2:
        m = nodes[0]
        p = len(m)
        return [(m[t], m[(t + s) % p], 1.0 / (p - 1)) for s in range(1, p) for t in range(p)]
    channels = max(len(ms) for ms in nodes) if len(nodes) > 1 else 1
    mesh = cluster.topology.intra_node.kind == "full_mesh"
    hops = []
    for c in range(channels):
        order: list[int] = []
        for ms in nodes:
            p = len(ms)
            if mesh and p > 2:
                strides = [s for s in range(1, p) if math.gcd(s, p) == 1]
                stride = strides[c % len(strides)]
                order += [ms[(c + stride * t) % p] for t in range(p)]
            else:
                order += [ms[(c + t) % p] for t in range(p)]
        n = len(order)
        hops += [(order[t], order[(t + 1) % n], 1.0 / channels) for t in range(n)]
    return hops


def ring(cluster: Cluster, op: str, members: list[int], nbytes: float) -> list[Phase]:
    """Ring (or pipelined chain for broadcast/reduce) over ``members`` in GPU index order."""
    n = len(members)
    n_nodes = len(by_node(cluster, members))
    per_hop = {
        "all_reduce": 2 * (n - 1) / n * nbytes,
        "reduce_scatter": (n - 1) / n * nbytes,
        "all_gather": (n - 1) / n * nbytes,
        "broadcast": nbytes,
        "reduce": nbytes,
    }[op]
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}.get(op, n - 1)
    inter = {"all_reduce": 2 * (n_nodes - 1)}.get(op, n_nodes - 1)
    ph = Phase(steps_intra=steps - inter, steps_inter=inter)
    root = min(members)
    for src, dst, share in ring_hops(cluster, members):
        if op == "broadcast" and dst == root or op == "reduce" and src == root:
            continue  # the chain is open at the root
        ph.add(cluster, src, dst, per_hop * share)
    return [ph]


def tree(cluster: Cluster, members: list[int], nbytes: float) -> list[Phase]:
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
    for c in range(channels):
        heads = []
        for ms in nodes:
            chain = [ms[(c + t) % len(ms)] for t in range(len(ms))]
            heads.append(chain[0])
            for a, z in zip(chain[:-1], chain[1:], strict=True):
                ph.add(cluster, z, a, 2 * b)  # reduce towards the head (both trees)
                ph.add(cluster, a, z, 2 * b)  # broadcast back down
        if n_nodes == 1:
            continue
        shift = list(range(n_nodes))[::-1] if n_nodes % 2 == 0 else list(range(1, n_nodes)) + [0]
        for perm in (list(range(n_nodes)), shift):
            for pos in range(1, n_nodes):
                child, parent = heads[perm[pos]], heads[perm[(pos - 1) // 2]]
                ph.add(cluster, child, parent, b)
                ph.add(cluster, parent, child, b)
    return [ph]


def nvls(cluster: Cluster, op: str, members: list[int], nbytes: float, efficiency: float) -> list[Phase]:
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
    for m in members:
        ph.add_switch(cluster, m, up, down, efficiency)
    if len(nodes) > 1:
        for j in range(p):
            shard = ring(cluster, "all_reduce", [ms[j] for ms in nodes], nbytes / p)[0]
            ph.transfers += shard.transfers
            for k, v in shard.sent.items():
                ph.sent[k] = ph.sent.get(k, 0.0) + v
    return [ph]


def hierarchical(cluster: Cluster, members: list[int], nbytes: float) -> list[Phase]:
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


def all_to_all(cluster: Cluster, members: list[int], nbytes: float) -> list[Phase]:
    """Every rank sends ``S/n`` to every other rank at once (NCCL's p2p-based all-to-all)."""
    n = len(members)
    multi = len(by_node(cluster, members)) > 1
    ph = Phase(steps_intra=1, steps_inter=1 if multi else 0)
    for a in members:
        for z in members:
            ph.add(cluster, a, z, nbytes / n)
    return [ph]


def send_recv(cluster: Cluster, members: list[int], nbytes: float) -> list[Phase]:
    """One transfer ``members[0] → members[1]``; latency adds the route's hop latencies."""
    src, dst = members
    cross = cluster.node_of(src) != cluster.node_of(dst)
    ph = Phase(steps_intra=0 if cross else 1, steps_inter=1 if cross else 0)
    ph.add(cluster, src, dst, nbytes)
    ph.route_latency_s = cluster.route(src, dst).latency_s
    return [ph]
