"""``CollectiveModel``: the time of one collective run at once by several groups, cached by shape.

For each applicable algorithm the model builds phases of transfers (``algorithms``), evaluates each
phase's β-time on the graph with the chosen fidelity (``analytical`` bottleneck or ``flow`` max–min
fair sharing, ``simulator.network.fabric``) and adds NCCL-like latency and protocol terms
(``constants``)::

    T(algo, proto) = Σ_phases [ base_proto + steps_intra·lat_proto[intra] + steps_inter·lat_proto[net]
                                + β_phase / fraction_proto ]

``auto`` picks the fastest (algorithm, protocol) pair, as NCCL's tuner does (formulas.md §3.5). A
forced algorithm that does not apply to the operation or the hardware (e.g. ``nvls`` without NVLink
SHARP, ``tree`` for all-gather) falls back to ``auto``; ``CollectiveResult.algorithm`` names the
algorithm actually used. Bus bandwidth follows nccl-tests (formulas.md §3.2).

Speed (docs/network.md, "Scaling"): alike groups are planned together (``batched``), phases are
arrays of hops whose analytical loads are summed through the node template (``network.loads``),
and both fidelities run on compact edge ids where a leaf's ``S`` spine uplinks are one pseudo-edge
(``network.edges``). All three are exact: ``tests/collectives/test_fast_path.py`` compares them with
per-group plans on real routes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.collectives import algorithms as alg
from simulator.collectives import batched
from simulator.collectives import nccl_tuning as nt
from simulator.collectives.batched import group_tensor
from simulator.collectives.constants import DEFAULT_CALIBRATION, Calibration, Protocol
from simulator.collectives.groups import normalise_groups, shape_key
from simulator.collectives.scale_up import scale_up_GBps
from simulator.errors import InputError
from simulator.network.builder import LINK_CLASSES
from simulator.network.cluster import Cluster
from simulator.network.fabric import flow_time
from simulator.network.loads import HopLoads

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "nvls", "collnet")
FIDELITIES = ("analytical", "flow")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw factor (PERFORMANCE.md): AR 2(n−1)/n; RS, AG, all-to-all (n−1)/n; else 1."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveResult:
    """Time of the slowest group, the algorithm and protocol used, nccl-tests bandwidths (GB/s =
    1e9 B/s) and the bytes the busiest rank injects into the network."""

    op: str
    nbytes: float
    group_size: int
    time_s: float
    algorithm: str
    protocol: str
    algbw_GBps: float
    busbw_GBps: float
    bytes_on_wire_per_rank: float


class CollectiveModel:
    """Collective times on one ``Cluster``; see the module docstring.

    Parameters
    ----------
    cluster : the built cluster.
    fidelity : ``analytical`` or ``flow``.
    algorithm : ``auto``, ``ring``, ``tree``, ``hierarchical`` or ``nvls``.
    calibration : constants (``DEFAULT_CALIBRATION``).
    """

    def __init__(self, cluster: Cluster, fidelity: str = "analytical", algorithm: str = "auto",
                 calibration: Calibration = DEFAULT_CALIBRATION):
        if fidelity not in FIDELITIES:
            raise InputError(f"unknown fidelity {fidelity!r}; valid: {', '.join(FIDELITIES)}", field="fidelity")
        if algorithm not in ALGORITHMS:
            raise InputError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}", field="algorithm")
        self.cluster = cluster
        self.fidelity = fidelity
        self.algorithm = algorithm
        self.calibration = calibration
        sm = cluster.gpu.sm
        # effective capacity per compact edge id (real edges, then the leaves' spine pseudo-edges)
        eff_by_class = np.array([calibration.link_efficiency(link, sm) for link in LINK_CLASSES])
        self._capacity = cluster.edges.compact_capacity_Bps(eff_by_class)
        self._hop_loads = HopLoads(cluster)
        self._nvls_eff = calibration.nvls_efficiency_by_arch.get(cluster.gpu.arch, 0.0)
        self._nvls_hw = cluster.topology.nvls and self._nvls_eff > 0
        self._sharp = cluster.topology.sharp
        self._intra_GBps = scale_up_GBps(cluster, calibration)
        self._topo_memo: dict[tuple, nt.NcclTopo] = {}
        self._cache: dict[tuple, CollectiveResult] = {}
        self._exact: dict[tuple, CollectiveResult] = {}  # same query as given, skips normalisation
        self._groups_memo: dict[tuple, tuple] = {}  # groups as given -> (normalised, shape key)
        self._profile_cache: dict[tuple, list[_Profile]] = {}  # (op, shape) -> per-algorithm costs
        self._plan_cache: dict[tuple, _Profile] = {}  # (algorithm, planned op, shape) -> costs

    # --- public API -----------------------------------------------------------------------------
    def run(self, op: str, groups: Sequence[Sequence[int]], nbytes: float) -> CollectiveResult:
        """Time of ``op`` on ``nbytes`` (nccl-tests convention) run at once by every group."""
        if op not in OPS:
            raise InputError(f"unknown collective {op!r}; valid: {', '.join(OPS)}", field="op")
        if not nbytes >= 0:
            raise InputError(f"message size must be >= 0 bytes, got {nbytes}", field="nbytes")
        try:
            as_given = (op, tuple(map(tuple, groups)))
            hit = self._exact.get((as_given, float(nbytes)))
        except TypeError:
            as_given, hit = None, None
        if hit is not None:
            return hit
        known = self._groups_memo.get(as_given) if as_given is not None else None
        if known is None:
            norm = normalise_groups(self.cluster, op, groups)
            known = (norm, shape_key(self.cluster, norm))
            if as_given is not None:
                self._groups_memo[as_given] = known
        norm, shape = known
        n = len(norm[0])
        if n <= 1 or nbytes == 0:
            return CollectiveResult(op, float(nbytes), n, 0.0, "none", "none", 0.0, 0.0, 0.0)
        key = (op, shape, float(nbytes))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._evaluate(op, norm, shape, float(nbytes))
            self._cache[key] = hit
        if as_given is not None:
            self._exact[as_given, float(nbytes)] = hit
        return hit

    def p2p_time(self, src_gpu: int, dst_gpu: int, nbytes: float) -> float:
        """Seconds for one point-to-point transfer of ``nbytes`` (0 when ``src == dst``)."""
        if src_gpu == dst_gpu:
            self.cluster.check_gpu(src_gpu)
            return 0.0
        return self.run("send_recv", [[src_gpu, dst_gpu]], nbytes).time_s

    def candidates(self, op: str, groups: Sequence[Sequence[int]]) -> list[str]:
        """Algorithms that apply to ``op`` on every one of these groups (``auto`` chooses among them)."""
        if op == "all_to_all":
            return ["direct"]
        if op == "send_recv":
            return ["p2p"]
        tensor = group_tensor(self.cluster, [sorted(g) for g in groups])
        if tensor is not None:  # all groups alike: N nodes x p members
            return self._candidates_shape(op, tensor.shape[1], tensor.shape[2])
        out: list[str] | None = None
        for group in groups:
            mine = self._candidates_one(op, list(group))
            out = mine if out is None else [a for a in out if a in mine]
        return out or ["ring"]

    def _candidates_one(self, op: str, members: list[int]) -> list[str]:
        nodes = alg.by_node(self.cluster, members)
        equal = len({len(ms) for ms in nodes}) == 1
        return self._candidates_shape(op, len(nodes), len(nodes[0]) if equal else 0)

    def _candidates_shape(self, op: str, n_nodes: int, per_node: int) -> list[str]:
        """Candidates for a group on ``n_nodes`` machines with ``per_node`` members on each (0: unequal)."""
        out = ["ring"]
        if op == "all_reduce":
            out.append("tree")
            if n_nodes > 1 and per_node > 1:
                out.append("hierarchical")
        if self._nvls_hw and op in ("all_reduce", "reduce_scatter", "all_gather"):
            if n_nodes == 1 or (op == "all_reduce" and "hierarchical" in out):
                out.append("nvls")
        # CollNet: all-reduce only (NCCL's SHARP all-gather/reduce-scatter need plugin support and
        # one NIC per local rank; not modelled), equal members per node.
        if self._sharp and op == "all_reduce" and n_nodes > 1 and per_node > 0:
            out.append("collnet")
        return out

    def cache_size(self) -> int:
        return len(self._cache)

    # --- internals ------------------------------------------------------------------------------
    def _plan(self, name: str, op: str, members: list[int], nbytes: float) -> list[alg.Phase]:
        c = self.cluster
        if name == "ring":
            return alg.ring(c, op, members, nbytes)
        if name == "tree":
            return alg.tree(c, members, nbytes)
        if name == "hierarchical":
            return alg.hierarchical(c, members, nbytes)
        if name == "nvls":
            return alg.nvls(c, op, members, nbytes, self._nvls_eff)
        if name == "collnet":
            return alg.collnet(c, members, nbytes)
        if name == "direct":
            return alg.all_to_all(c, members, nbytes)
        return alg.send_recv(c, members, nbytes)

    def _beta(self, phase: alg.Phase) -> float:
        """β-time of a phase (s): bottleneck load / capacity (analytical, vectorised over hops,
        ``network.loads``) or the max–min fair makespan (flow), both on compact edge ids."""
        if self.fidelity == "analytical":
            src, dst, b, rail = phase.hop_arrays()
            gpu, up, down, _ = phase.switch_arrays()
            return self._hop_loads.bottleneck(src, dst, b, rail, (gpu, up, down), self._capacity)
        return flow_time(phase.compact_transfers(), self._capacity)

    def _profiles(self, op: str, groups: list[list[int]], key: tuple) -> list[_Profile]:
        """Per candidate algorithm: each phase's β-time per byte and latency terms, cached by shape.

        Every transfer of every algorithm is proportional to S, and both fidelities are
        scale-invariant (loads and max–min makespans grow linearly with the bytes), so one
        evaluation at a reference size serves every message size.
        """
        hit = self._profile_cache.get(key)
        if hit is not None:
            return hit
        names = self.candidates(op, groups)
        if self.algorithm != "auto" and self.algorithm in names:
            names = [self.algorithm]
        out = [self._profile(name, op, groups, key[1]) for name in names]
        self._profile_cache[key] = out
        return out

    def _profile(self, name: str, op: str, groups: list[list[int]], shape: tuple) -> _Profile:
        # A ring reduce-scatter and all-gather move the same (n-1)/n·S per hop with the same step
        # counts, so they share one plan (ZeRO-3 asks for both on every group).
        planned = "all_gather" if name == "ring" and op == "reduce_scatter" else op
        hit = self._plan_cache.get((name, planned, shape))
        if hit is not None:
            return hit
        # alike groups (N nodes x p members each) are planned together with array slicing
        tensor = group_tensor(self.cluster, groups) if name in _BATCHED else None
        phases: list[alg.Phase] = []
        if tensor is not None:
            phases = batched.plan(self.cluster, name, planned, tensor, _REF_BYTES, self._nvls_eff)
        for members in groups if tensor is None else ():
            plan = self._plan(name, planned, members, _REF_BYTES)
            if not phases:
                phases = plan
            else:
                for mine, theirs in zip(phases, plan, strict=True):
                    mine.merge(theirs)
        rows = tuple(
            _PhaseCost(self._beta(ph) / _REF_BYTES, ph.steps_intra, ph.steps_inter, ph.nvls, ph.route_latency_s)
            for ph in phases
        )
        sent = sum(ph.max_sent() for ph in phases) / _REF_BYTES
        out = self._plan_cache[name, planned, shape] = _Profile(name, rows, sent)
        return out

    def _latency(self, proto: Protocol, ph: _PhaseCost) -> float:
        intra = self.cluster.intra_link_class
        return (proto.base_latency_s + ph.steps_intra * proto.step_latency_s[intra]
                + ph.steps_inter * proto.step_latency_s["net"] + ph.route_latency_s)

    def nccl_topo(self, n_ranks: int, n_nodes: int, ppn: int) -> nt.NcclTopo:
        """What NCCL's tuner would see for a group of ``n_ranks`` on ``n_nodes`` machines, ``ppn`` each.

        Per-GPU bandwidths are NCCL's model values (``constants``: line rate × per-class efficiency):
        scale-up ``intra`` (A100 240, H100 370.8 GB/s) and, across nodes, the NICs next to the member
        GPUs (one per GPU on rail-optimised nodes; fewer NICs than members share them). Channels: one
        ring channel per ~20 GB/s of NVLink in one node (NCCL's per-link model bandwidth, topo.h),
        two per NIC across nodes (NCCL duplicates each NIC's channel, connect.cc), 2..32. A channel crosses
        nodes through one NIC, half of it once duplicated: where the channel cap leaves NICs unused (an NVL72
        rack's 72), the channels' bandwidth is that half, not the rack's NICs shared out.
        """
        c, cal = self.cluster, self.calibration
        topo = c.topology
        intra = self._intra_GBps
        if n_nodes == 1:
            nch = max(2, min(32, int(intra // 20.0))) if c.intra_link_class == "nvlink" else 2
            bw_intra = bw_inter = intra / nch
        else:
            nics = max(1, min(ppn, topo.nics.per_node)) if topo.nics.per_node else 1
            inter = nics * topo.nics.bandwidth_Gbps / 8.0 * cal.net_efficiency
            nch = max(2, min(32, 2 * nics))
            bw_intra = bw_inter = inter / max(nch, 2 * nics)
        return nt.NcclTopo(
            n_ranks=n_ranks, n_nodes=n_nodes, ppn=ppn, n_channels=nch, bw_intra_GBps=bw_intra,
            bw_inter_GBps=bw_inter, arch=c.gpu.arch, intra_link=c.intra_link_class,
            cpu_vendor=topo.host.cpu_vendor, nvls=self._nvls_hw, nvls_channels=cal.nvls_channels,
            nvls_bw_GBps=intra, ll128=c.has_p2p_scale_up, pat=cal.nccl_pat,
            collnet=self._sharp and n_nodes > 1, collnet_channels=max(1, topo.nics.per_node),
            collnet_bw_GBps=topo.nics.bandwidth_Gbps / 8.0 * cal.net_efficiency,
        )

    def _evaluate(self, op: str, groups: list[list[int]], shape: tuple, nbytes: float) -> CollectiveResult:
        profiles = {p.name: p for p in self._profiles(op, groups, (op, shape))}
        n = len(groups[0])
        view = self._nccl_view(groups, shape)
        choice = self._nccl_choice(op, view, profiles, nbytes)
        if choice is not None:
            algo, proto = choice
            t = self._physical_time(op, profiles[_PLAN_OF[algo]], proto, nbytes, view, algo)
            name, prof = algo, profiles[_PLAN_OF[algo]]
        else:  # all-to-all, send/recv, a forced non-NCCL algorithm: fastest physical pair
            best: tuple[float, str, str] | None = None
            for prof_ in profiles.values():
                for proto_ in self._protocols():
                    tt = self._physical_time(op, prof_, proto_.name, nbytes, view, None)
                    if best is None or tt < best[0]:
                        best = (tt, prof_.name, proto_.name)
            assert best is not None
            t, name, proto = best
            prof = profiles[name]
        if all(ph.nvls for ph in prof.phases):
            proto = "Simple"
        algbw = nbytes / t / 1e9
        return CollectiveResult(op, nbytes, n, t, name, proto, algbw, algbw * bus_factor(op, n),
                                prof.sent_per_byte * nbytes)

    def _protocols(self) -> list[Protocol]:
        nvlink = self.cluster.intra_link_class == "nvlink" and self.cluster.has_p2p_scale_up
        return [p for p in self.calibration.protocols if not p.needs_nvlink or nvlink]

    def _nccl_view(self, groups: list[list[int]], shape: tuple) -> nt.NcclTopo:
        """NCCL's view of a query, per group shape: the group spanning the most nodes (groups of one
        query are alike or share their algorithm candidates; the widest sets the tuner's inputs)."""
        hit = self._topo_memo.get(shape)
        if hit is None:
            widest = max((alg.by_node(self.cluster, g) for g in groups), key=lambda ns: (len(ns), sum(map(len, ns))))
            hit = self._topo_memo[shape] = self.nccl_topo(sum(map(len, widest)), len(widest), max(map(len, widest)))
        return hit

    def _nccl_choice(self, op: str, t: nt.NcclTopo, profiles: dict, nbytes: float) -> tuple[str, str] | None:
        """(NCCL algorithm, protocol) NCCL's tuner picks among those dtsim can play here, or ``None``."""
        if op not in nt.NCCL_OPS:
            return None
        algos = tuple(a for a in nt.ALGOS if _PLAN_OF.get(a) in profiles)
        if self.algorithm != "auto":
            algos = tuple(a for a in algos if a == self.algorithm or _FAMILY.get(a) == self.algorithm)
        if not algos:
            return None
        algo, proto, tt = nt.choose(op, t, nbytes, algos)
        return (algo, proto) if math.isfinite(tt) else None

    def _physical_time(self, op: str, prof: _Profile, proto_name: str, nbytes: float, t: nt.NcclTopo,
                       nccl_algo: str | None) -> float:
        """dtsim's time for one call of a group NCCL sees as ``t``.

        Latency: NCCL's own latency formula for the pair (``nccl_tuning.latency_us``) when NCCL runs
        it, else the ``constants`` per-step tables per phase; plus each phase's pipeline fill
        (``Protocol.fill``). Bandwidth: the graph's β-time over the protocol's bandwidth fraction
        (contention included), never faster than the bandwidth NCCL's own model allows for that pair
        (software caps: channels, tree and LL factors)."""
        cal = self.calibration
        proto = next((p for p in cal.protocols if p.name == proto_name), cal.protocols[-1])
        lat = beta = 0.0
        for ph in prof.phases:
            pr = cal.nvls_protocol if ph.nvls else proto
            fill = pr.phase_fill(op, nbytes, t.ppn, ph.steps_intra, ph.steps_inter)
            lat += fill + (0.0 if nccl_algo else self._latency(pr, ph))
            beta += ph.beta_s_per_byte * nbytes / pr.bandwidth_fraction
        if nccl_algo is not None:
            lat += nt.latency_us(op, nccl_algo, proto_name, t, nbytes) * 1e-6 + prof.phases[0].route_latency_s
            # CollNet is not capped: NCCL's ×0.5 CollNet ratio assumes up and down traffic share one
            # link direction, but SHARP's shards go up and come down on the two directions of the
            # full-duplex NIC link, which the graph plan carries.
            cap = 0.0 if nccl_algo.startswith("collnet") else nt.bus_bandwidth_GBps(op, nccl_algo, proto_name, t, nbytes)
            if cap > 0:
                beta = max(beta, nbytes / (cap * 1e9))
        return lat + beta


_REF_BYTES = float(2**30)
_BATCHED = ("ring", "tree", "hierarchical", "nvls")
#: The dtsim plan that plays each NCCL algorithm (PAT moves the ring's bytes; NVLSTree is the
#: multi-node NVLS plan, in-switch reduction pipelined with inter-node rings).
_PLAN_OF = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvls_tree": "nvls", "pat": "ring",
            "collnet_direct": "collnet", "collnet_chain": "collnet"}
#: ``--algo nvls`` forces NVLS on one node and NVLSTree on several; ``--algo collnet`` either CollNet.
_FAMILY = {"nvls_tree": "nvls", "collnet_direct": "collnet", "collnet_chain": "collnet"}


@dataclass(frozen=True)
class _PhaseCost:
    beta_s_per_byte: float
    steps_intra: int
    steps_inter: int
    nvls: bool
    route_latency_s: float


@dataclass(frozen=True)
class _Profile:
    name: str
    phases: tuple[_PhaseCost, ...]
    sent_per_byte: float
