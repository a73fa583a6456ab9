"""Fitting the host layer (``simulator.workload.host``) on host-bound measured steps (used by
``benchmarks/calibrate_host.py``).

The host layer has one fitted number, ``host_dispatch_scale``: a training host's CPU time per PyTorch
call over the CPU-only benchmark that measured the eager blocks' host times
(``benchmarks/host_dispatch.py``). The CPU-only run pays neither ``cudaLaunchKernel`` (1-3 µs) nor the
CUDA caching allocator for the half of a block's calls that launch a kernel, and ran a newer PyTorch
(2.13) on a faster core than a DGX A100's AMD EPYC 7742 (Zen 2, 2019). Bounds 1.0-3.0: the CPU-only
figure is a lower bound; 25 µs per call, the top of the 5-25 µs of CPU work per eager op on a GPU host
(``simulator.hardware.kernels`` sources), is 2.9× its 8.5 µs.

It belongs to the host CPU and the software stack, not to the GPU, but a GPU generation comes with its
own host platform (DGX A100: EPYC 7742; DGX H100: Intel Xeon 8480C, Sapphire Rapids, 2023) and stack, and
only the A100 platform has host-bound measurements. So it is fitted for ``ARCH`` and every other
architecture keeps the CPU-only figure (1.0). Applied to DGX H100 runs the A100 value makes NeMo 24.07's
one-layer virtual pipeline chunks host-bound (70B SFT −5 → −12 %, GPT-3 175B −9 → −14 %), which those
measured steps are not.

The GPU-bound runs the compute efficiencies are fitted on do not identify it, so the host layer is
fitted first, on its own runs, as the network layer is on nccl-tests curves: vTrain's single-node
Megatron-DeepSpeed grid (``simulator.validation.vtrain``), whose small models at micro-batch 1-2 are
host-bound (their iteration time barely moves between hidden 1,024 and 2,048 or micro-batch 1 and 2).
The fitting runs are its 2- and 4-GPU runs (720); the 8-GPU runs (720) are held out and reported, and
the compute fit excludes the whole grid (``calibration_excluded``).

A second number was tried and dropped: a serial host time per micro-batch (Megatron's ``get_batch``
synchronises the device: ``broadcast_data`` reads the batch sizes back with ``.cpu()``). On the fitting
runs it trades against the scale along a shallow valley (objective 0.0711 at 1.40 / 6 ms, 0.0708 at
1.50 / 2 ms) whose floor is at 0 ms, its lower bound (0.0692 at 1.55 / 0 ms): these runs do not support it.

Method: the compute calibration's objective (mean of ``min(|error|, CAP)`` of tokens/s per GPU) and its
steepest descent (``calibration.descend``) on a grid of ``STEP``, coarse to fine (``SCALES``), inside
``BOUNDS``, from ``START`` (the CPU-only figure), so the result is exactly reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simulator.hardware.efficiency import for_gpu
from simulator.validation import calibration as cal
from simulator.validation.suite import scenario_for
from simulator.validation.vtrain import Row, as_run, host_fit_rows, host_test_rows

#: The architecture whose training platform the host runs identify (vTrain's A100 nodes).
ARCH = "ampere"
#: The fitted parameter (a one-coordinate grid point).
PARAMS = ("host_dispatch_scale",)
#: Grid spacing.
STEP = 0.01
#: Physical bounds (grid units, inclusive; module docstring): 1.0-3.0.
BOUNDS = {"host_dispatch_scale": (100, 300)}
#: Start: the CPU-only benchmark's figure.
START = (100,)
#: Coarse-to-fine descent scales (grid units).
SCALES = (16, 4, 1)

Point = tuple[int, ...]


def values(point: Point) -> dict[str, float]:
    """Grid point → parameter values (rounded, so they print and store exactly)."""
    return {name: round(k * STEP, 4) for name, k in zip(PARAMS, point, strict=True)}


def point_of(params: dict[str, float]) -> Point:
    """Parameter values → grid point."""
    return tuple(int(round(params[name] / STEP)) for name in PARAMS)


@dataclass
class HostCase:
    """One measured run as a fitting case: the compute calibration's ``Case`` of its ``Run``
    (``vtrain.as_run``; scenario, cluster graph and collective model built once), simulated with the
    architecture's efficiencies and the host parameters replaced."""

    row: Row
    _case: cal.Case | None = None

    def simulate(self, params: dict[str, float]) -> Any:
        if self._case is None:
            run = as_run(self.row)
            self._case = cal.Case(run, scenario_for(run).cluster.gpu_spec)
        return self._case.simulate_with(replace(for_gpu(self._case.gpu), **params))

    def error(self, params: dict[str, float]) -> float:
        """Signed throughput error, predicted / measured − 1."""
        return self.simulate(params).tokens_per_s_per_gpu / self.row.tokens_per_s_per_gpu - 1.0


def cases(rows: Sequence[Row]) -> list[HostCase]:
    return [HostCase(r) for r in rows]


def errors(host_cases: Sequence[HostCase], params: dict[str, float]) -> list[float]:
    return [c.error(params) for c in host_cases]


def fit(host_cases: Sequence[HostCase]) -> cal.Fit:
    """The host parameters that minimise the objective on ``host_cases``."""
    point, best, evals, moves = cal.descend(lambda p: cal.objective(errors(host_cases, values(p))),
                                            START, SCALES, BOUNDS)
    return cal.Fit(values(point), best, evals, moves)


def on_bound(params: dict[str, float]) -> list[str]:
    """The host parameters on an edge of ``BOUNDS``."""
    return [n for n, k in zip(PARAMS, point_of(params), strict=True) if k in BOUNDS[n]]


def train_cases() -> list[HostCase]:
    """The fitting runs (vTrain single-node, 2 and 4 GPUs)."""
    return cases(host_fit_rows())


def held_out_cases() -> list[HostCase]:
    """The held-out runs (vTrain single-node, 8 GPUs)."""
    return cases(host_test_rows())
