"""Where one micro-batch's compute time goes, kernel by kernel (``dtsim run --kernels``).

The step graph of one micro-batch (``n_micro`` 1; with pipelining, the first stage's rank) is built as
``dtsim run`` builds it, and every distinct compute task (the builders share one ops tuple across the
blocks of a kind) is priced by the same compute model (``RooflineComputeModel``): each op's GPU time
``max(math, memory, launch floor) + fixed`` (``op_terms``), what bounds it (``op_bound``), and the task's
host dispatch time. A task runs ``max(Σ GPU time, host time)`` (``RooflineComputeModel.time``), so a
task whose host time is the larger is CPU-bound. The optimizer step's tasks appear once.

Nothing here models anything: it lays out what the simulation prices, so that a kernel profile (Nsight
Systems' ``cuda_gpu_kern_sum``) can be set beside it op by op.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

from simulator.config.scenario import Scenario
from simulator.hardware.efficiency import Efficiency
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.ir import ComputeTask

#: A task name's block index and micro-batch (``fwd 12 mb0 experts`` → ``fwd experts``, ``bwd 31.mlp mb0``
#: → ``bwd mlp``).
_NUMBERS = re.compile(r"\s(?:mb)?\d+(?:\.|(?=\s|$))")


@dataclasses.dataclass(frozen=True)
class KernelRow:
    """One op of a task: its GPU seconds per call (``weight`` copies included), what bounds it, its FLOPs,
    HBM bytes and kernels."""

    name: str
    kind: str
    time_s: float
    bound: str
    flops: float
    bytes: float
    kernels: float


@dataclasses.dataclass(frozen=True)
class TaskRows:
    """One distinct compute task: ``calls`` per micro-batch on the rank, GPU and host seconds per call."""

    task: str
    calls: int
    gpu_s: float
    host_s: float
    ops: tuple[KernelRow, ...]

    @property
    def time_s(self) -> float:
        return max(self.gpu_s, self.host_s)

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "calls": self.calls, "gpu_s": self.gpu_s, "host_s": self.host_s,
                "time_s": self.time_s, "ops": [dataclasses.asdict(op) for op in self.ops]}


def kernel_table(scenario: Scenario, efficiency: Efficiency | None = None) -> list[TaskRows]:
    """The distinct compute tasks of one micro-batch on the first (pipeline-stage) rank, in graph order."""
    from simulator.api import compute_model_for  # api imports the report package

    compute = compute_model_for(scenario, efficiency)
    ctx = dataclasses.replace(context_for(scenario), n_micro=1)
    first: dict[int, ComputeTask] = {}  # one task per shared ops tuple, priced once
    calls: Counter[int] = Counter()
    for task in build_step_graph(ctx).tasks:
        if isinstance(task, ComputeTask) and task.device == 0 and task.ops:
            first.setdefault(id(task.ops), task)
            calls[id(task.ops)] += 1
    merged: dict[tuple, TaskRows] = {}  # builders may rebuild equal ops per block: one row per distinct cost
    for key_id, task in first.items():
        ops = tuple(KernelRow(op.name, op.kind, compute.op_time(op), compute.op_bound(op), op.flops * _weight(op),
                              op.bytes * _weight(op), compute.launches(op) * _weight(op)) for op in task.ops)
        row = TaskRows(" ".join(_NUMBERS.sub(" ", task.name).split()), calls[key_id], sum(op.time_s for op in ops),
                       compute.host_time(task.ops), ops)
        key = (row.task, row.host_s, ops)
        merged[key] = dataclasses.replace(row, calls=row.calls + (merged[key].calls if key in merged else 0))
    return list(merged.values())


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _weight(op: Any) -> float:
    return getattr(op, "weight", 1.0)


def render_kernel_table(rows: list[TaskRows], console: Any) -> None:
    """One table: each task (calls per micro-batch, GPU and host time per call, whether the GPU or the CPU
    sets its pace), then its ops with their GPU time per call, share of the task's GPU time, what bounds
    them and the rates they reach."""
    from rich import box
    from rich.table import Table

    t = Table(title="one micro-batch's compute, op by op, per call (first rank)", box=box.SIMPLE_HEAD)
    for col in ("task ×calls / op", "GPU µs", "share", "bound", "TFLOP/s", "GB/s", "kernels"):
        t.add_column(col, justify="left" if col in ("task ×calls / op", "bound") else "right")
    for task in rows:
        pace = "CPU-bound" if task.host_s > task.gpu_s else "GPU-bound"
        t.add_row(f"[bold]{task.task}[/] ×{task.calls}, host {_us(task.host_s)} µs", _us(task.gpu_s), "", pace,
                  "", "", "")
        for op in task.ops:
            if op.time_s <= 0:  # ops another kernel absorbed (fused epilogues) cost nothing here
                continue
            t.add_row(f"  {op.name}", _us(op.time_s), f"{100 * op.time_s / task.gpu_s:.0f}%", op.bound,
                      f"{op.flops / op.time_s / 1e12:.0f}" if op.flops else "",
                      f"{op.bytes / op.time_s / 1e9:.0f}" if op.bytes else "", f"{op.kernels:g}")
        t.add_section()
    console.print(t)
