"""Fitting the compute model's efficiency parameters per GPU architecture, with leave-one-source-out
cross-validation (used by benchmarks/calibrate.py).

What is fitted (three physically meaningful numbers per architecture, never per run):

* ``gemm_sustained_of_mamf``: sustained GEMM rate in a training step / best-shape microbenchmark
  (MAMF, hardware.md §4 [S1]); the compute model uses ``mamf_fraction × this`` of dense peak;
* ``attention_sustained_of_bench``: fused attention rate in a training step / the published
  long-sequence benchmark rate of the framework's kernel (FlashAttention-2/3, cuDNN; per kernel and
  architecture in ``simulator.hardware.attention``);
* ``compute_slowdown_during_comm``: compute kernels run ``1/(1+x)`` as fast while an NCCL kernel
  shares the GPU (overlap slowdown).

Not fitted, because they are measured directly: ``hbm_fraction`` (the achieved / datasheet HBM
bandwidth of streaming kernels per architecture, [S56][S57], ``efficiency.yaml``); launch floors, host
dispatch and GEMM tile/wave quantisation (``simulator.hardware.kernels``). The network efficiency parameters are not refitted here either: they
belong to the network layer and are fitted there against nccl-tests bus-bandwidth curves. A listed
parameter an architecture's runs do not identify is held too: at a measurement (``MEASURED``: the
overlap slowdown) or at the fit of the architecture whose fitting runs run the same kernels
(``TRANSFERRED``: Blackwell's attention share, from Hopper's).

Runs: the expressible runs of ``load_runs()`` (whatever files it reads) that are not
``calibration_excluded`` and are pure data parallel or attention-dominated, grouped by GPU
architecture. Pure data parallelism keeps the fit away from tensor/pipeline-parallel network effects
the compute parameters must not absorb. But at the sequence lengths of pure data-parallel runs (≤ 8k
tokens but for a few) the attention core is 5-30 % of the work, so they hardly identify
``attention_sustained_of_bench``: on Hopper it then took the value of the one source with many long
rows, llm-foundry's 2023 Triton FlashAttention (0.52), or, without it, whatever a weak trade-off with
the GEMM share left (0.79), while NeMo's and torchtitan's 32k-1M-token runs (context parallel, most
with tensor parallelism too) want 0.56-0.68 one by one. So a run whose attention core is at least
``ATTENTION_DOMINATED`` (half) of a block's forward FLOPs (``attention_share``) joins the fit whatever
its layout: its step is mostly one kernel whose rate is the parameter, and its ring exchange overlaps
that kernel. The threshold is not critical: on Hopper 0.40 (one run more) and 0.65 (three fewer) fit
the attention share at 0.59 and 0.57 against 0.58, the GEMM share at 0.74 alike (5 December 2026).

Method: the objective is the mean absolute relative error of tokens/s per GPU over the fitting runs of
one architecture, each run's error capped at ``CAP`` (a redescending, outlier-robust loss: a run
missed by more than 25 % is a structural miss, e.g. DeepSpeed 2021 ZeRO-3 collapsing at 96+ nodes,
which efficiency parameters must not chase). The search is a steepest descent on a fixed grid, coarse
to fine (``SCALES`` grid units of ``STEP``), inside ``bounds(arch)``, from ``START``: at each scale it
moves to the best of the neighbours (± one scale step in any combination of the fitted parameters,
diagonals included: 8 for two fitted shares, in a fixed order) while that strictly lowers the
objective. Grid values are integers in units of ``STEP``, so the result is
exactly reproducible.

Cross-validation: every publication (``source_key``) is held out once: the parameters are refitted on
the other sources' runs of the architecture, by the same search from the same ``START`` as the full
fit (not from the full fit, which has seen the held-out source: a local descent started there keeps
some of it), and the held-out source's runs are predicted with them. These out-of-fold errors are the honest accuracy and,
with every other validated run's errors, feed the prediction intervals of ``dtsim run`` (``intervals``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from simulator.config.hardware import GPUSpec
from simulator.hardware.efficiency import Efficiency, for_gpu
from simulator.validation.publications import source_key
from simulator.validation.suite import Run, scenario_for
from simulator.workload import flops

#: The fitted parameters, in the order the search visits them.
PARAMS = ("gemm_sustained_of_mamf", "attention_sustained_of_bench", "compute_slowdown_during_comm")
#: Grid spacing of every parameter.
STEP = 0.01
#: Coarse-to-fine descent scales (grid units).
SCALES = (4, 2, 1)
#: Starting point (grid units): sustained 0.75 of MAMF (hardware.md §4 planning factor); attention 0.75
#: of its benchmark (the same planning factor); overlap slowdown 0.20 (NCCL holds 16–32 of 108–132 SMs).
START = {"gemm_sustained_of_mamf": 75, "attention_sustained_of_bench": 75, "compute_slowdown_during_comm": 20}
#: Physically plausible ranges (grid units), inclusive, from microbenchmarks (hardware.md §4):
#: sustained GEMM 0.60–0.95 of MAMF. Overlap slowdown 0.05–0.80: NCCL's 16–32 channels hold 12–30 % of
#: 108–132 SMs, and its traffic costs HBM 2–3× the link rate (it stores, then reads back), so kernels lose
#: both; measured in training steps: A100-SXM4-80GB under an AllGather, GEMM 1.18 → 2.08 ms (+76 %),
#: attention 0.18 → 0.33 ms (+83 %), the NCCL maintainer naming HBM contention (NVIDIA/nccl issue #1428);
#: H100 matmuls under NCCL collectives 30–40 % slower (pytorch/pytorch PR #179937); 4×A100/4×H100 GPT and
#: Llama training +18.9 % on average, +40 % at worst (Lee et al., arXiv:2507.03114). The upper edge is
#: the largest measured GEMM slowdown (+76 %) on the grid's next 0.05; the former 0.35 edge (SM share
#: alone) ignored the HBM contention. Attention 0.30–1.00 of the published kernel
#: benchmark (``simulator.hardware.attention``: 16k tokens, no causal mask, head dim 128, boost clocks).
#: Upper: a training step cannot beat the best-case benchmark. Lower: the previous kernel generation's
#: rate, FlashAttention-1's "25–40 % of the theoretical maximum" on A100 against FlashAttention-2's 73 %
#: (Dao 2023, arXiv:2307.08691), i.e. 0.34–0.55 of the FA2 benchmark, times causal masking's 0.90 at 16k
#: (FA3 paper, arXiv:2407.08608, FA2 forward head dim 128 on H100: 335 causal vs 370 TFLOP/s): 0.31, on the grid 0.30.
BOUNDS = {"gemm_sustained_of_mamf": (60, 95), "attention_sustained_of_bench": (30, 100),
          "compute_slowdown_during_comm": (5, 80)}
ARCH_BOUNDS: dict[str, dict[str, tuple[int, int]]] = {}
#: Parameters taken from a measurement instead of fitted (grid units), because the fitting runs do not
#: identify them. The overlap slowdown: refitting the other two parameters at each value
#: (``python benchmarks/calibrate.py --profile``), the in-sample objective moves by at most 0.011 (one
#: point of MAPE) over 0.05-0.80 on every architecture (ampere 0.0559 at 0.05 → 0.0540 at 0.80, hopper
#: 0.0771 → 0.0665, blackwell 0.0529 → 0.0578), so a free fit lands wherever one publication pulls it
#: (Hopper: 0.80, the box's upper edge, with llm-foundry's 2023 FSDP rows; 0.05, the lower edge, without
#: them) or on a local minimum of the descent (Ampere's former 0.44, Blackwell's 0.10). Measured: "NCCL
#: collectives use SMs, which makes matmuls that are overlapped by them 30-40% slower" (Llama 3 8B,
#: 8×H100 NVLink, pytorch/pytorch PR #179937), the midpoint 0.35; on A100 and H100 training, 18.9 % on
#: average and 40 % at worst (Lee et al., arXiv:2507.03114), and +76 % for one GEMM of one A100 profile
#: under an all-gather (NVIDIA/nccl issue #1428). The mechanism (NCCL's 16-32 channels of 108-148 SMs,
#: its HBM traffic 2-3× its link rate) scales alike on A100, H100 and B200 (link/HBM bandwidth
#: 600/2,039, 900/3,350, 1,800/8,000 GB/s), so the H100 figure stands for all three (D on A100 and
#: Blackwell).
MEASURED: dict[str, dict[str, int]] = {arch: {"compute_slowdown_during_comm": 35}
                                       for arch in ("ampere", "hopper", "blackwell")}
#: Parameters an architecture's fitting runs do not identify either, each held at the fit of the
#: architectures named (``held_for``; their mean when several). Blackwell's attention share: its
#: eleven fitting runs (Megatron-Bridge's dense Llama rows at 8k tokens, cuDNN attention) trade it against
#: the GEMM share along a ragged valley, the objective between 0.0397 and 0.0416 for shares 0.50-0.67
#: with the GEMM share refitted (0.84-0.76), so the descent stopped wherever one more row left it (0.59,
#: 0.61, 0.67 as rows came in, 2-3 Dec 2026), while the runs it prices most, torchao's FlashAttention-2
#: rows on B200, moved 4-5 points each time. The share is a kernel's rate in a training step over its
#: published benchmark, so it comes from the only architecture whose fitting runs include the kernel
#: Blackwell's run, Transformer Engine's cuDNN attention: Hopper's (10 of its 65 runs cuDNN, 19
#: FlashAttention-2, 36 llm-foundry's Triton kernel at its rate measured from their sequence sweeps,
#: ``attention.TRITON_OF_FA2``: 0.61, and 0.62 without them), not Ampere's, whose runs are the
#: FlashAttention family (Triton, 1.x, 2) near their benchmarks (0.92) and unfused attention. Without a
#: fit of a named architecture, the mean of the others.
TRANSFERRED: dict[str, dict[str, tuple[str, ...]]] = {"blackwell": {"attention_sustained_of_bench": ("hopper",)}}
#: Per-run error beyond which a run no longer pulls the fit (the issue-7 "no run worse than" bound).
CAP = 0.25
#: Attention-core share of a block's FLOPs from which a run joins the fitting runs whatever its
#: parallelism: only such long-sequence runs identify ``attention_sustained_of_bench`` (``attention_share``).
ATTENTION_DOMINATED = 0.5
#: Safety limit on descent moves per scale.
MAX_MOVES = 200

Point = tuple[int, ...]


def bounds(arch: str, held: dict[str, int] | None = None) -> dict[str, tuple[int, int]]:
    """The search box of an architecture (grid units); a ``MEASURED`` parameter, and any in ``held``
    (``held_for``), is held at its value."""
    fixed = {name: (k, k) for name, k in {**MEASURED.get(arch, {}), **(held or {})}.items()}
    return {**BOUNDS, **ARCH_BOUNDS.get(arch, {}), **fixed}


def fitted(arch: str) -> tuple[str, ...]:
    """The parameters fitted on ``arch``: ``PARAMS`` less the ``MEASURED`` and ``TRANSFERRED`` ones."""
    return tuple(name for name in PARAMS
                 if name not in MEASURED.get(arch, {}) and name not in TRANSFERRED.get(arch, {}))


def start_point(arch: str, held: dict[str, int] | None = None) -> Point:
    """The descent's starting point on ``arch``: ``START``, with the ``MEASURED`` and ``held`` values."""
    fixed = {**MEASURED.get(arch, {}), **(held or {})}
    return tuple(fixed.get(name, START[name]) for name in PARAMS)


def _grid_mean(name: str, others: Sequence[Fit]) -> int:
    """The mean of parameter ``name`` over the fits ``others``, in grid units, halves rounded up."""
    return math.floor(sum(point_of(f.params)[PARAMS.index(name)] for f in others) / len(others) + 0.5)


def held_for(arch: str, others: Mapping[str, Fit]) -> dict[str, int]:
    """``arch``'s ``TRANSFERRED`` parameters (grid units), each at the mean of the fits in ``others``
    (architecture → fit) of the architectures it names, or of all of ``others`` when none of those is
    there."""
    held = {}
    for name, sources in TRANSFERRED.get(arch, {}).items():
        fits = [others[a] for a in sources if a in others] or list(others.values())
        if fits:
            held[name] = _grid_mean(name, fits)
    return held


def values(point: Point) -> dict[str, float]:
    """Grid point → parameter values (rounded to the grid, so they print and store exactly)."""
    return {name: round(k * STEP, 4) for name, k in zip(PARAMS, point, strict=True)}


def point_of(params: dict[str, float]) -> Point:
    """Parameter values → grid point."""
    return tuple(int(round(params[name] / STEP)) for name in PARAMS)


def on_bound(params: dict[str, float], arch: str) -> list[str]:
    """The fitted parameters that sit on an edge of ``bounds(arch)`` (a sign of missing physics)."""
    box = bounds(arch)
    return [n for n, k in zip(PARAMS, point_of(params), strict=True) if k in box[n] and n in fitted(arch)]


def efficiency_with(gpu: GPUSpec, params: dict[str, float]) -> Efficiency:
    """The catalogued efficiency of ``gpu`` with the fitted parameters replaced."""
    base = for_gpu(gpu)
    mamf = gpu.mamf_fraction if gpu.mamf_fraction is not None else base.gemm_fraction / base.gemm_sustained_of_mamf
    return replace(base, gemm_fraction=mamf * params["gemm_sustained_of_mamf"],
                   gemm_sustained_of_mamf=params["gemm_sustained_of_mamf"],
                   attention_sustained_of_bench=params["attention_sustained_of_bench"],
                   compute_slowdown_during_comm=params["compute_slowdown_during_comm"])


@dataclass
class Case:
    """One fitting run with its GPU, and the parts of a simulation that do not depend on the fitted
    parameters (validated scenario, cluster graph, collective model with its cache), built once."""

    run: Run
    gpu: GPUSpec
    _parts: tuple[Any, Any, Any] | None = None

    def simulate(self, params: dict[str, float]) -> Any:
        """The run with the fitted compute parameters ``params`` (``efficiency_with``)."""
        return self.simulate_with(efficiency_with(self.gpu, params))

    def simulate_with(self, efficiency: Efficiency) -> Any:
        """The run with the efficiencies ``efficiency``."""
        from simulator.api import _nodes, simulate
        from simulator.collectives import CollectiveModel
        from simulator.network import build_cluster

        if self._parts is None:
            scn = scenario_for(self.run)
            cl = scn.cluster
            cluster = build_cluster(cl.topology, _nodes(scn), cl.gpu_spec)
            coll = CollectiveModel(cluster, fidelity=cl.network_fidelity, algorithm=cl.collective_algorithm)
            self._parts = (scn, cluster, coll)
        scn, cluster, coll = self._parts
        return simulate(scn, efficiency=efficiency, collective_model=coll, cluster=cluster)


def errors(cases: Sequence[Case], params: dict[str, float]) -> list[float]:
    """Signed relative throughput errors (predicted / measured − 1) of ``cases`` under ``params``."""
    return [c.simulate(params).tokens_per_s_per_gpu / c.run.measured_tokens_per_s_per_gpu - 1.0 for c in cases]


def mape(errs: Sequence[float]) -> float:
    """Mean absolute (relative) error; 0 for no runs."""
    return sum(abs(e) for e in errs) / len(errs) if errs else 0.0


def objective(errs: Sequence[float]) -> float:
    """The fitting objective: mean of ``min(|e|, CAP)``."""
    return sum(min(abs(e), CAP) for e in errs) / len(errs) if errs else 0.0


@dataclass(frozen=True)
class Fit:
    """Result of one fit: the parameters, their objective on the fitting runs, evaluations, moves."""

    params: dict[str, float]
    objective: float
    evaluations: int
    moves: int


def neighbours(point: Point, scale: int = 1, box: dict[str, tuple[int, int]] | None = None) -> list[Point]:
    """Every grid point ``scale`` steps away in any combination of the parameters (each moves by
    ``−scale``, 0 or ``+scale``; ``3^n − 1`` points, the diagonals included), clipped to ``box``
    (default ``BOUNDS``; its keys, in order, name the point's coordinates), without duplicates, in
    ``itertools.product`` order. The
    diagonals let the descent follow a valley along which two shares trade against each other (the
    GEMM and attention shares of Blackwell's runs): with axis steps alone it stopped where a diagonal
    step still lowered the objective."""
    box = box or BOUNDS
    out: list[Point] = []
    for deltas in itertools.product((-scale, 0, scale), repeat=len(box)):
        cand = tuple(min(box[name][1], max(box[name][0], k + d))
                     for name, k, d in zip(box, point, deltas, strict=True))
        if cand != point and cand not in out:
            out.append(cand)
    return out


def descend(objective: Callable[[Point], float], start: Point, scales: Sequence[int] = (1,),
            box: dict[str, tuple[int, int]] | None = None) -> tuple[Point, float, int, int]:
    """Steepest descent on the grid, at each of ``scales`` in turn: (best point, its objective,
    evaluations, moves). Ties keep the earlier neighbour; a move needs a strict improvement, so the
    search terminates."""
    cache: dict[Point, float] = {}

    def f(p: Point) -> float:
        if p not in cache:
            cache[p] = objective(p)
        return cache[p]

    point, best, moves = start, f(start), 0
    for scale in scales:
        for _ in range(MAX_MOVES):
            candidates = neighbours(point, scale, box)
            if not candidates:
                break
            candidate = min(candidates, key=f)
            if not f(candidate) < best:
                break
            point, best, moves = candidate, f(candidate), moves + 1
    return point, best, len(cache), moves


def fit(cases: Sequence[Case], arch: str, start: Point | None = None, scales: Sequence[int] = SCALES,
        box: dict[str, tuple[int, int]] | None = None, held: dict[str, int] | None = None) -> Fit:
    """Fit the parameters of one architecture on ``cases`` (``fitted(arch)``; the ``MEASURED`` ones and
    those in ``held`` stay at their values) inside ``box`` (default ``bounds(arch, held)``)."""
    point, best, evals, moves = descend(lambda p: objective(errors(cases, values(p))),
                                        start or start_point(arch, held), scales, box or bounds(arch, held))
    return Fit(values(point), best, evals, moves)


def profile(cases: Sequence[Case], arch: str, name: str, grid: Sequence[int]) -> list[Fit]:
    """The profile of parameter ``name`` (grid units ``grid``): at each value, the best fit of the
    others (the same search), whose objective shows whether the runs identify ``name`` at all."""
    out = []
    for k in grid:
        box = {**bounds(arch), name: (k, k)}
        start = tuple(k if n == name else START[n] for n in PARAMS)
        out.append(fit(cases, arch, start=start, box=box))
    return out


def is_local_minimum(cases: Sequence[Case], params: dict[str, float], arch: str) -> tuple[bool, float]:
    """Whether no finest-scale grid neighbour of ``params`` strictly improves the objective (the
    descent's stop condition), and the objective at ``params``: the quick reproducibility check."""
    point = point_of(params)
    box = bounds(arch, {name: point[PARAMS.index(name)] for name in TRANSFERRED.get(arch, {})})
    here = objective(errors(cases, values(point)))
    return all(not objective(errors(cases, values(n))) < here for n in neighbours(point, 1, box)), here


def attention_share(scenario: Any) -> float:
    """The attention core's share of a transformer block's forward FLOPs at the scenario's sequence
    length (causal): the weight ``attention_sustained_of_bench`` carries in its step time."""
    lf = flops.layer_forward(scenario.model, 1, scenario.training.seq_len, causal=True)
    return lf.attention_core / lf.total


def fits_on(parallelism: str, scenario: Any) -> bool:
    """Whether a run joins the fitting runs: pure data parallel, or attention-dominated."""
    return parallelism == "pure_dp" or attention_share(scenario) >= ATTENTION_DOMINATED


def fitting_cases(runs: Sequence[Run]) -> dict[str, list[Case]]:
    """The fitting runs, grouped by GPU arch: the expressible runs not ``calibration_excluded`` that are
    pure data parallel or whose attention core is at least ``ATTENTION_DOMINATED`` of the block's
    FLOPs (``attention_share``)."""
    out: dict[str, list[Case]] = {}
    for run in runs:
        if not run.expressible or run.extra.get("calibration_excluded"):
            continue
        scenario = scenario_for(run)
        if fits_on(run.parallelism, scenario):
            gpu = scenario.cluster.gpu_spec
            out.setdefault(gpu.arch, []).append(Case(run, gpu))
    return out


@dataclass(frozen=True)
class Fold:
    """One leave-one-source-out fold: the held-out source, the parameters fitted without it, the
    held-out runs and their out-of-fold errors."""

    arch: str
    source: str
    params: dict[str, float]
    run_ids: tuple[str, ...]
    errors: tuple[float, ...]
    evaluations: int


def transferred(arch: str, others: Mapping[str, Fit]) -> Fit:
    """The parameters an architecture gets with none of its own runs: each parameter the mean of the
    other architectures' full fits ``others`` (architecture → fit), on the grid (``MEASURED`` ones at the
    architecture's own values, ``TRANSFERRED`` ones at ``held_for``'s). The held-out prediction for an
    architecture whose runs all come from one publication."""
    fixed = {**held_for(arch, others), **MEASURED.get(arch, {})}
    point = tuple(fixed[name] if name in fixed else _grid_mean(name, list(others.values()))
                  for name in PARAMS)
    return Fit(values(point), float("nan"), 0, 0)


def leave_one_source_out(arch: str, cases: Sequence[Case], full: Fit,
                         others: Mapping[str, Fit] | None = None) -> list[Fold]:
    """Every source of ``cases`` held out once (sources in sorted order). Holding out an
    architecture's only source leaves nothing to fit: that fold takes the other architectures'
    parameters (``transferred``), or the full fit when there are none."""
    folds = []
    fixed = held_for(arch, others) if others else None
    for source in sorted({source_key(c.run) for c in cases}):
        held = [c for c in cases if source_key(c.run) == source]
        rest = [c for c in cases if source_key(c.run) != source]
        f = fit(rest, arch, held=fixed) if rest else (transferred(arch, others) if others else full)
        folds.append(Fold(arch, source, f.params, tuple(c.run.id for c in held), tuple(errors(held, f.params)),
                          f.evaluations))
    return folds

