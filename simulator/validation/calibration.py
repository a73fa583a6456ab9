"""Fitting the compute model's efficiency parameters per GPU architecture (used by benchmarks/calibrate.py).

What is fitted (four physically meaningful numbers per architecture, never per run):

* ``gemm_sustained_of_mamf``: sustained GEMM rate in a training step / best-shape microbenchmark
  (MAMF, hardware.md §4 [S1]); the compute model uses ``mamf_fraction × this`` of dense peak;
* ``flash_attention_fraction``: fused attention kernel rate / 16-bit dense peak ([S52][S53]);
* ``hbm_fraction``: achieved / datasheet HBM bandwidth of memory-bound ops ([S56][S57]);
* ``compute_slowdown_during_comm``: compute kernels run ``1/(1+x)`` as fast while an NCCL kernel
  shares the GPU (overlap slowdown).

The network efficiency parameters are not refitted here: they belong to the network layer and are
fitted there against nccl-tests bus-bandwidth curves (tests/collectives/test_calibration.py).

Method: the objective is the mean absolute relative error of tokens/s per GPU over the training
runs of one architecture, each run's error capped at ``CAP`` (a redescending, outlier-robust loss:
a run missed by more than 25 % is a structural miss, e.g. DeepSpeed 2021 ZeRO-3 collapsing at 96+
nodes, which efficiency parameters must not chase); the search is a steepest descent on a fixed grid (``STEP`` apart,
inside ``BOUNDS``, from ``START``, the datasheet-derived priors), moving to the best of the 8
neighbours (± one step in one parameter, in a fixed order) while that strictly lowers the
objective. Grid values are integers in units of ``STEP``, so the result is exactly reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from simulator.config.hardware import GPUSpec
from simulator.hardware.efficiency import Efficiency, for_gpu
from simulator.validation.suite import Run, scenario_for, simulate_run

#: The fitted parameters, in the order the search visits them.
PARAMS = ("gemm_sustained_of_mamf", "flash_attention_fraction", "hbm_fraction", "compute_slowdown_during_comm")
#: Grid spacing of every parameter.
STEP = 0.01
#: Starting point (grid units): sustained 0.75 of MAMF and HBM 0.85 (hardware.md §4 planning factor
#: and [S56][S57]); FlashAttention 0.50 of peak (between FA2's 72 % on A100 and ~35 % on H100, [S52]
#: [S53]); overlap slowdown 0.20 (NCCL holds 16–32 of 108–132 SMs).
START = {"gemm_sustained_of_mamf": 75, "flash_attention_fraction": 50, "hbm_fraction": 85,
         "compute_slowdown_during_comm": 20}
#: Physically plausible ranges (grid units), inclusive, from the microbenchmarks (hardware.md §4):
#: sustained GEMM 0.60–0.95 of MAMF; FlashAttention 0.35 (FA2 on H100, [S53]) to 0.75 (FA3 forward,
#: [S53]; FA2 72 % end-to-end on A100, [S52]); HBM 0.80–0.92 (84–88 % measured, ~90 % the best any
#: kernel reaches, [S56][S57]); overlap slowdown 0.05–0.35 (overlap studies: 10–30 % slower GEMMs).
BOUNDS = {"gemm_sustained_of_mamf": (60, 95), "flash_attention_fraction": (35, 75), "hbm_fraction": (80, 92),
          "compute_slowdown_during_comm": (5, 35)}
#: Per-run error beyond which a run no longer pulls the fit (the issue-7 "no run worse than" bound).
CAP = 0.25
#: Safety limit on descent moves.
MAX_MOVES = 200

Point = tuple[int, ...]


def values(point: Point) -> dict[str, float]:
    """Grid point → parameter values (rounded to the grid, so they print and store exactly)."""
    return {name: round(k * STEP, 4) for name, k in zip(PARAMS, point, strict=True)}


def point_of(params: dict[str, float]) -> Point:
    """Parameter values → grid point."""
    return tuple(int(round(params[name] / STEP)) for name in PARAMS)


def efficiency_with(gpu: GPUSpec, params: dict[str, float]) -> Efficiency:
    """The catalogued efficiency of ``gpu`` with the fitted parameters replaced."""
    base = for_gpu(gpu)
    mamf = gpu.mamf_fraction if gpu.mamf_fraction is not None else base.gemm_fraction / base.gemm_sustained_of_mamf
    return replace(base, gemm_fraction=mamf * params["gemm_sustained_of_mamf"],
                   gemm_sustained_of_mamf=params["gemm_sustained_of_mamf"],
                   flash_attention_fraction=params["flash_attention_fraction"],
                   hbm_fraction=params["hbm_fraction"],
                   compute_slowdown_during_comm=params["compute_slowdown_during_comm"])


def errors(runs: Sequence[tuple[Run, GPUSpec]], params: dict[str, float]) -> list[float]:
    """Signed relative throughput errors (predicted / measured − 1) of ``runs`` under ``params``."""
    out = []
    for run, gpu in runs:
        report = simulate_run(run, efficiency_with(gpu, params))
        out.append(report.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu - 1.0)
    return out


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


def neighbours(point: Point) -> list[Point]:
    """± one grid step in each parameter, in ``PARAMS`` order (minus first), inside ``BOUNDS``."""
    out = []
    for i, name in enumerate(PARAMS):
        lo, hi = BOUNDS[name]
        for delta in (-1, 1):
            k = point[i] + delta
            if lo <= k <= hi:
                out.append(point[:i] + (k,) + point[i + 1:])
    return out


def descend(objective: Callable[[Point], float], start: Point) -> tuple[Point, float, int, int]:
    """Steepest descent on the grid: (best point, its objective, evaluations, moves).

    Ties keep the earlier neighbour; a move needs a strict improvement, so the search terminates."""
    cache: dict[Point, float] = {}

    def f(p: Point) -> float:
        if p not in cache:
            cache[p] = objective(p)
        return cache[p]

    point, best, moves = start, f(start), 0
    while moves < MAX_MOVES:
        candidate = min(neighbours(point), key=f)
        if not f(candidate) < best:
            break
        point, best, moves = candidate, f(candidate), moves + 1
    return point, best, len(cache), moves


def fit(runs: Sequence[tuple[Run, GPUSpec]], start: dict[str, int] | None = None) -> Fit:
    """Fit the four parameters of one architecture on ``runs`` (pairs of run and its GPU)."""
    start_point = tuple((start or START)[name] for name in PARAMS)
    point, best, evals, moves = descend(lambda p: objective(errors(runs, values(p))), start_point)
    return Fit(values(point), best, evals, moves)


def is_local_minimum(runs: Sequence[tuple[Run, GPUSpec]], params: dict[str, float]) -> tuple[bool, float]:
    """Whether no grid neighbour of ``params`` strictly improves the objective (the descent's stop
    condition), and the objective at ``params``: the quick reproducibility check."""
    point = point_of(params)
    here = objective(errors(runs, values(point)))
    return all(not objective(errors(runs, values(n))) < here for n in neighbours(point)), here


def cases_by_arch(runs: Sequence[Run], split: str) -> dict[str, list[tuple[Run, GPUSpec]]]:
    """Expressible pure data-parallel runs of one ``split`` (``train``/``test``), grouped by GPU arch."""
    out: dict[str, list[tuple[Run, GPUSpec]]] = {}
    for run in runs:
        if run.split == split and run.parallelism == "pure_dp" and run.expressible:
            gpu = scenario_for(run).cluster.gpu_spec
            out.setdefault(gpu.arch, []).append((run, gpu))
    return out
