"""NCCL's own cost model (``src/graph/tuning.cc``, NCCL 2.30.7) as the algorithm and protocol chooser.

NCCL picks, for every collective call, the (algorithm, protocol) pair with the smallest *predicted*
time (formulas.md §3.5, ``ncclTopoGetAlgoTime``)::

    t_us = latency_us + bytes / (1000 · algbw_GBps)

with per-pair latency and bandwidth derived from its topology graph (channels, per-channel intra- and
inter-node bandwidths) and fixed tables. dtsim reproduces that choice with the same tables, so the
simulated job runs the algorithm NCCL would run — including where NCCL's prediction is optimistic
(e.g. NCCL prefers the ring over the tree for large all-reduces on 2+ nodes because its tree model
applies ``0.92 · busBw · 0.5``; a physically ideal double binary tree would beat the NIC-bound ring).
The *time* dtsim reports for the chosen pair is its own physical model (``model.py``: graph β-time
with contention, calibrated latencies, capped by the bandwidth NCCL's model allows).

Every constant below is NCCL 2.30.7's (formulas.md §3.5 reproduces the tables with the file names);
``docs/network.md`` lists them. CollNet runs only where the fabric has SHARP (``fabric.sharp``, off
by default in every bundled fabric), all-reduce only. Not modelled: NCCL_ALGO/NCCL_PROTO overrides other than
dtsim's ``--algo``, and the per-call ``NCCL_MAX_DEV_WORK_BATCH_COLLS`` aggregation (one call each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("LL", "LL128", "Simple")

#: baseLatencies [LL, LL128, Simple] in µs (tuning.cc).
BASE_LAT_US = {
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0.0, 0.0, 0.0),
    "collnet_chain": (0.0, 0.0, 0.0), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}
#: hwLatencies[link][algo][proto] in µs (tuning.cc); link classes nvlink / pci / net.
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 3.7),
               "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0),
               "pat": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
            "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 31.0),
            "collnet_chain": (0.0, 0.0, 30.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 20.9),
            "pat": (0.0, 0.0, 14.0)},
}
_ARCH_ROW = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
#: Bandwidth caps in GB/s; rows Volta, Ampere, Hopper, Blackwell; columns 1 node, 2 nodes, > 2 nodes.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_MAX_TREE_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
#: NVLS efficiency per architecture (tuning.cc ``nvlsEfficiency``).
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
#: treeCorrectionFactor[proto][log2(bytes/64)], i = 0..23 (tuning.cc).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
#: Ring/Simple multi-node all-reduce latency factor on sm >= 80 (1.9 before): the ring "plateau".
RING_SIMPLE_PLATEAU = 1.4
#: Network post overhead in µs per step (Intel/other x86 1.0, AMD 2.0), x3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}

_OPS_WITH_NVLS = ("all_reduce", "all_gather", "reduce_scatter")
#: Host CPU vendors of x86 machines (``cpuArch == NCCL_TOPO_CPU_ARCH_X86``); Grace is ``arm``.
_X86 = ("intel", "amd")
#: Operations NCCL's tuner chooses an algorithm for (all-to-all and send/recv are p2p, no choice).
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


@dataclass(frozen=True)
class NcclTopo:
    """What NCCL's tuner knows about one communicator (``ncclTopoGraph`` results, per rank).

    ``bw_intra_GBps`` / ``bw_inter_GBps`` are per channel (GB/s); ``n_channels`` ring/tree channels,
    ``nvls_channels`` NVLS heads; ``intra_link`` ``nvlink`` or ``pci``; ``arch`` names the
    ``_ARCH_ROW`` row; ``cpu_vendor`` ``intel``, ``amd`` or ``arm`` (multi-node LL cap, net overhead, and
    x86 or not for Blackwell's NVLSTree correction).
    """

    n_ranks: int
    n_nodes: int
    ppn: int
    n_channels: int
    bw_intra_GBps: float
    bw_inter_GBps: float
    arch: str
    intra_link: str = "nvlink"
    cpu_vendor: str = "intel"
    nvls: bool = False
    nvls_channels: int = 16
    nvls_bw_GBps: float = 0.0
    ll128: bool = True
    pat: bool = True
    collnet: bool = False
    #: CollNet graph: one channel per NIC head, each at its NIC's model bandwidth (GB/s) (HPC-X SHARP
    #: plugin docs: one aggregation flow, i.e. NCCL channel, per HCA rail).
    collnet_channels: int = 0
    collnet_bw_GBps: float = 0.0


def n_steps(op: str, n: int) -> int:
    """Ring steps (tuning.cc ``nsteps``): all-reduce 2(n−1); all-gather, reduce-scatter n−1; else n."""
    if op == "all_reduce":
        return 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter"):
        return n - 1
    return n


def enabled(op: str, algo: str, proto: str, t: NcclTopo) -> bool:
    """Whether NCCL would consider ``algo``/``proto`` for ``op`` (formulas.md §3.5 "Protocol enablement")."""
    if proto == "LL128" and not (t.ll128 and t.intra_link == "nvlink"):
        return False
    if algo in ("tree", "nvls_tree", "collnet_direct", "collnet_chain") and op != "all_reduce":
        return False
    if algo == "ring":
        return op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
    if algo == "tree":
        return True
    if algo == "nvls":
        # single-node NVLS (multi-node NVLS needs CollNet); Simple only; >= 2 NVLS channels.
        return t.nvls and t.nvls_channels >= 2 and t.n_nodes == 1 and proto == "Simple" and op in _OPS_WITH_NVLS
    if algo == "nvls_tree":
        return t.nvls and t.nvls_channels >= 2 and t.n_nodes > 1 and proto == "Simple"
    if algo == "pat":
        return t.pat and t.ppn == 1 and t.n_nodes > 1 and proto == "Simple" and op in ("all_gather", "reduce_scatter")
    if algo.startswith("collnet"):
        return t.collnet and t.n_nodes > 1 and proto == "Simple"
    return False


def _log2i(x: float) -> int:
    """NCCL's ``log2i``: the floor of log2 (0 for x < 2)."""
    return max(0, int(x).bit_length() - 1)


def _col(t: NcclTopo) -> int:
    return 0 if t.n_nodes == 1 else (1 if t.n_nodes == 2 else 2)


def bus_bandwidth_GBps(op: str, algo: str, proto: str, t: NcclTopo, nbytes: float) -> float:
    """NCCL's predicted *algorithm* bandwidth (GB/s) of ``algo``/``proto`` (``ncclTopoGetAlgoTime``'s bw)."""
    arch = _ARCH_ROW.get(t.arch, 1)
    col = _col(t)
    cpu_row = 1 if t.cpu_vendor == "amd" else 0  # llMaxBws: AMD (and mixed) row, else Intel's (Arm too)
    ll_max = LL_MAX_BW[arch][0] if t.n_nodes == 1 else LL_MAX_BW[cpu_row][col]
    nch = t.n_channels
    bw = t.bw_intra_GBps if t.n_nodes <= 2 else t.bw_inter_GBps
    if algo.startswith("collnet"):
        nch, bw = t.collnet_channels, t.collnet_bw_GBps
    bus = nch * bw
    i = _log2i(nbytes / 64) if nbytes >= 64 else -1  # the tree correction's size index, log2i(bytes >> 6)
    if algo == "ring" and proto == "LL":
        bus = min(ll_max, bus * 0.5)
    elif algo == "ring" and proto == "LL128":
        bus = min(bus * 0.92, nch * PER_CH_MAX_RING_LL128_BW[arch][col])
    elif algo == "tree":
        bus = min(bus * 0.92, nch * PER_CH_MAX_TREE_BW[arch][col])
        if proto == "LL":
            bus = min(bus / 3.8, ll_max)
        elif proto == "LL128":
            bus = min(bus * (7.0 / 9.0 if t.n_nodes == 1 else 120.0 / 128.0), nch * PER_CH_MAX_TREE_LL128_BW[arch][col])
        if 0 <= i < 23:
            bus *= TREE_CORRECTION[proto][i]
    elif algo == "pat":
        bus *= 0.75
    elif algo == "collnet_direct":
        # "Collnet+Direct requires all GPUs to have a local NIC to work at full speed"
        factor = t.ppn / nch
        factor -= (factor - 1) / 2
        bus /= factor
        if arch >= 2:  # minCompCap >= 90 (Hopper and later)
            bus *= 0.85
    elif algo == "collnet_chain":
        bus *= 0.75
    elif algo in ("nvls", "nvls_tree"):
        eff = NVLS_EFFICIENCY.get(t.arch, 0.0)
        nv = t.nvls_channels
        intra = t.nvls_bw_GBps * eff * (nv - 1) / nv
        intra *= 2 if op == "all_reduce" else (t.ppn - 1) / t.ppn
        bus = intra
        if t.n_nodes > 1:
            inter = t.n_channels * t.bw_inter_GBps * (2 if t.n_nodes <= 2 else 1)
            bus = min(bus, inter, nv * PER_CH_MAX_NVLS_TREE_BW[arch][col])
        # NVLSTree all-reduce on Blackwell (sm >= 100) with x86 hosts takes the tree's correction, one
        # size further (i < 24); Grace (Arm) hosts do not (nvls.cc ncclTuningNvlsModelSim, formulas.md §3.5)
        if (algo == "nvls_tree" and op == "all_reduce" and arch >= _ARCH_ROW["blackwell"]
                and t.cpu_vendor in _X86 and 0 <= i < 24):
            bus *= TREE_CORRECTION[proto][i]
    # bus -> algorithm bandwidth
    if algo in ("ring", "nvls", "nvls_tree", "pat"):
        return bus * t.n_ranks / n_steps(op, t.n_ranks)
    return bus * 0.5  # tree and CollNet all-reduce: data goes up and down


def latency_us(op: str, algo: str, proto: str, t: NcclTopo, nbytes: float) -> float:
    """NCCL's predicted latency (µs) of one call (``ncclTopoGetAlgoTime``'s lat)."""
    p = PROTOS.index(proto)
    base = BASE_LAT_US[algo][p]
    intra = HW_LAT_US[t.intra_link][algo][p]
    inter = HW_LAT_US["net"]["tree" if (algo == "ring" and t.ppn == 1) else algo][p]
    n, nodes = t.n_ranks, t.n_nodes
    if algo == "ring":
        steps = n_steps(op, n)
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
        if nodes > 1:
            intra = max(intra, NET_OVERHEAD_US.get(t.cpu_vendor, 1.0) * (3 if proto == "Simple" else 1))
        lat = base + (steps - inter_steps) * intra + inter_steps * inter
        if (op == "all_reduce" and nodes > 1 and proto == "Simple"
                and nbytes / (t.n_channels * n) >= 64):
            lat *= RING_SIMPLE_PLATEAU
        return lat
    log_nodes = _log2i(nodes)  # NCCL's log2i: the tree's depth in whole levels
    if algo == "tree":
        return base + 2 * ((t.ppn - 1) * intra + log_nodes * inter)
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return base + intra + 2 * log_nodes * inter
    if algo == "pat":
        return base + log_nodes * inter / 3.5 + 2.8 * n
    if algo == "collnet_direct":
        return base + 2 * (min(1, t.ppn - 1) * intra + 0.4 * (t.ppn - 1)) + inter
    return base + 2 * (t.ppn - 1) * intra + inter  # collnet_chain


def predicted_time_s(op: str, algo: str, proto: str, t: NcclTopo, nbytes: float) -> float:
    """NCCL's predicted seconds for one call; ``inf`` when the pair is disabled."""
    if not enabled(op, algo, proto, t):
        return math.inf
    bw = bus_bandwidth_GBps(op, algo, proto, t, nbytes)
    if bw <= 0:
        return math.inf
    return (latency_us(op, algo, proto, t, nbytes) + nbytes / (1000.0 * bw)) * 1e-6


def choose(op: str, t: NcclTopo, nbytes: float, algos: tuple[str, ...] = ALGOS) -> tuple[str, str, float]:
    """(algorithm, protocol, predicted seconds) NCCL would pick among ``algos`` for ``nbytes``."""
    best = ("ring", "Simple", math.inf)
    for algo in algos:
        for proto in PROTOS:
            tt = predicted_time_s(op, algo, proto, t, nbytes)
            if tt < best[2]:
                best = (algo, proto, tt)
    return best
