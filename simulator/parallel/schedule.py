"""The shared skeleton of one optimizer step on one rank, and gradient bucketing.

``run_micro_batches`` issues, for every micro-batch, the forward of the units ``E, 0..L-1, H`` and
then their backward in reverse (``H, L-1..0, E``), with the recomputation of a block (full
checkpointing) right before its backward. A block's backward runs in pieces (MLP, then attention
and norms) so gradients become ready in the order autograd produces them. A strategy plugs in
through ``Hooks``: before a unit's compute it may issue collectives and return the task ids the
compute must wait for; when gradients are ready (``grads_ready``) or a unit is done it may issue
reductions. This mirrors where frameworks hook in (FSDP pre/post-forward and pre/post-backward
hooks, DeepSpeed module and gradient hooks, DDP autograd hooks).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from simulator.parallel.ir import COMPUTE, TP_COMM, GraphBuilder
from simulator.parallel.work import StepWork

Unit = Hashable  # "E", "H" or a block index


def forward_order(work: StepWork) -> list[Unit]:
    return ["E", *range(work.n_layers), "H"]


def backward_order(work: StepWork) -> list[Unit]:
    """Gradient-ready order: the head first, the embedding last."""
    return ["H", *range(work.n_layers - 1, -1, -1), "E"]


def pieces(work: StepWork) -> tuple[tuple[str, tuple, float], ...]:
    """A block's backward as (name, ops, parameters whose gradients are ready after it) pieces:
    the MLP's weight gradients come out before the attention's. One piece when not split."""
    return work.layer_bwd_pieces or (("", work.layer_bwd, work.layer_params),)


def ready_order(work: StepWork) -> list[tuple[Unit, float]]:
    """Gradient-ready keys with their parameter counts, in the order backward produces them:
    ``H``, then per block (last first) its pieces, then ``E``. A key is a unit, or (block, piece)."""
    out: list[tuple[Unit, float]] = [("H", work.head_params)]
    for i in range(work.n_layers - 1, -1, -1):
        for name, _, n in pieces(work):
            out.append(((i, name) if name else i, n))
    out.append(("E", work.embed_params))
    return out


def unit_params(work: StepWork, unit: Unit) -> float:
    if unit == "E":
        return work.embed_params
    if unit == "H":
        return work.head_params
    return work.layer_params


def unit_persistent(work: StepWork, unit: Unit) -> float:
    if unit == "H":
        return work.head_persistent
    if unit == "E":
        return 0.0
    return work.layer_persistent


class Hooks:
    """No-op hooks (a purely local step). Strategies override what they need."""

    def pre_forward(self, b: GraphBuilder, g: int, unit: Unit) -> Sequence[int | None]:
        return ()

    def post_forward(self, b: GraphBuilder, g: int, unit: Unit, task: int) -> None:
        return None

    def pre_backward(self, b: GraphBuilder, g: int, unit: Unit) -> Sequence[int | None]:
        return ()

    def grads_ready(self, b: GraphBuilder, g: int, key: Unit, task: int) -> None:
        """Gradients of ``key`` (a unit or a (block, piece)) are complete when ``task`` ends."""
        return None

    def post_backward(self, b: GraphBuilder, g: int, unit: Unit, task: int) -> None:
        return None


def _ops(work: StepWork, unit: Unit, phase: str) -> tuple:
    table = {"E": (work.embed_fwd, work.embed_bwd), "H": (work.head_fwd, work.head_bwd)}
    fwd, bwd = table.get(unit, (work.layer_fwd, work.layer_bwd))
    return fwd if phase == "fwd" else bwd


def _tp(b: GraphBuilder, work: StepWork, name: str, after: int, g: int, layer: int) -> list[int]:
    """Megatron TP: two all-reduces of ``b·s·h`` per block and pass (after attention and after the
    MLP), on the critical path: they run in the compute stream's order (Shoeybi et al. 2019). With
    sequence parallelism each is a reduce-scatter plus an all-gather of the same buffer (Korthikanti
    et al. 2022 §4.2.2). With ``tp_comm_overlap`` they run on their own stream (``TP_COMM``) and
    the caller makes only a later unit wait for them. Returns the issued task ids."""
    stream = TP_COMM if work.tp_comm_overlap else COMPUTE
    ops = ("reduce_scatter", "all_gather") if work.sequence_parallel else ("all_reduce",)
    out = []
    for op in ops:
        label = "allreduce" if op == "all_reduce" else op
        tid = b.collective(f"tp {label} {name}", "tp", op, "tp", work.tp_allreduce_bytes, count=2,
                           stream=stream, deps=(after,), micro_batch=g, layer=layer)
        if tid is not None:
            out.append(tid)
    return out


class _TPLag:
    """Which overlapped TP collectives a unit's compute must wait for: those issued two units back
    (the next unit's GEMMs hide them; Megatron's userbuffer overlap pipelines the chunks of the GEMM
    that consumes the result, modelled here as one unit of slack), and all of them before the pass
    ends. Without overlap the collectives sit on the compute stream and nothing is needed."""

    def __init__(self, work: StepWork) -> None:
        self.on = work.tp_comm_overlap
        self.history: list[list[int]] = []

    def push(self, ids: list[int]) -> None:
        if self.on:
            self.history.append(ids)

    def wait(self, last: bool) -> list[int]:
        if not self.on:
            return []
        keep = 0 if last else 1
        due = self.history[:max(0, len(self.history) - keep)]
        self.history = self.history[len(due):]
        return [t for ids in due for t in ids]


def forward_pass(b: GraphBuilder, work: StepWork, g: int, hooks: Hooks, after=()) -> int:
    """Forward of micro-batch ``g`` through this rank's units; the first waits for ``after`` (a
    pipeline receive). Returns the last compute task."""
    tid = -1
    lag = _TPLag(work)
    units = forward_order(work)
    for i, unit in enumerate(units):
        deps = [*hooks.pre_forward(b, g, unit), *(after if i == 0 else ()), *lag.wait(i == len(units) - 1)]
        layer = unit if isinstance(unit, int) else -1
        tid = b.compute(f"fwd {unit} mb{g}", "forward", _ops(work, unit, "fwd"), deps=deps,
                        micro_batch=g, layer=layer)
        if isinstance(unit, int):
            lag.push(_tp(b, work, f"fwd {unit} mb{g}", tid, g, layer))
        hooks.post_forward(b, g, unit, tid)
    return tid


def backward_pass(b: GraphBuilder, work: StepWork, g: int, hooks: Hooks, after=()) -> int:
    """Backward of micro-batch ``g`` (recomputing each block first under full checkpointing)."""
    tid = -1
    lag = _TPLag(work)
    units = backward_order(work)
    for i, unit in enumerate(units):
        deps = [*hooks.pre_backward(b, g, unit), *(after if i == 0 else ()), *lag.wait(i == len(units) - 1)]
        layer = unit if isinstance(unit, int) else -1
        if isinstance(unit, int) and work.layer_recompute:
            rid = b.compute(f"recompute {unit} mb{g}", "recompute", work.layer_recompute, deps=deps,
                            micro_batch=g, layer=layer)
            if len(work.layer_recompute) == len(work.layer_fwd):  # full recompute re-runs the TP all-reduces
                # The block's backward needs the recomputed outputs: wait even when overlapped.
                ids = _tp(b, work, f"recompute {unit} mb{g}", rid, g, layer)
                deps = ids if work.tp_comm_overlap else []
        if isinstance(unit, int):
            for name, ops, _ in pieces(work):
                label = f"{unit}.{name}" if name else f"{unit}"
                tid = b.compute(f"bwd {label} mb{g}", "backward", ops, deps=deps, micro_batch=g, layer=layer)
                deps = []
                hooks.grads_ready(b, g, (unit, name) if name else unit, tid)
            lag.push(_tp(b, work, f"bwd {unit} mb{g}", tid, g, layer))
        else:
            tid = b.compute(f"bwd {unit} mb{g}", "backward", _ops(work, unit, "bwd"), deps=deps,
                            micro_batch=g, layer=layer)
            hooks.grads_ready(b, g, unit, tid)
        hooks.post_backward(b, g, unit, tid)
    return tid


def run_micro_batches(b: GraphBuilder, work: StepWork, n_micro: int, hooks: Hooks) -> None:
    """Issue forward + backward of ``n_micro`` micro-batches through ``hooks`` (no pipeline)."""
    for g in range(n_micro):
        forward_pass(b, work, g, hooks)
        backward_pass(b, work, g, hooks)


@dataclass(frozen=True)
class Bucket:
    """``count`` consecutive buckets of ``elements`` each, all complete when ``ready_unit``'s grads are."""

    ready_unit: Unit
    elements: float
    count: int = 1


def plan_buckets(ready: Sequence[tuple[Unit, float]], cap: float, first_cap: float | None = None) -> list[Bucket]:
    """Fill buckets with gradients in ready order; close a bucket once it holds ``cap`` elements.

    The first bucket holds ``first_cap`` (DDP: 1 MiB; reducer.cpp ``compute_bucket_assignment_by_size``
    with limits [first, cap]). Parameters are treated as divisible at this granularity (a real
    bucket may exceed the cap by up to one tensor). Consecutive identical buckets that become ready
    at the same unit are merged into one ``Bucket`` with ``count``.
    """
    if cap <= 0 or (first_cap is not None and first_cap <= 0):
        raise ValueError("bucket sizes must be positive")
    out: list[Bucket] = []

    def emit(unit: Unit, n: float, count: int = 1) -> None:
        if out and out[-1].ready_unit == unit and out[-1].elements == n:
            out[-1] = Bucket(unit, n, out[-1].count + count)
        else:
            out.append(Bucket(unit, n, count))

    limit = first_cap if first_cap is not None else cap
    fill = 0.0
    last: Unit = None
    for unit, n in ready:
        if n > 0:
            last = unit
        remaining = float(n)
        while remaining > 0:
            if fill == 0 and limit == cap and remaining >= cap:
                whole = int(remaining // cap)
                emit(unit, cap, whole)
                remaining -= whole * cap
                continue
            take = min(remaining, limit - fill)
            fill += take
            remaining -= take
            if fill >= limit:
                emit(unit, fill)
                fill, limit = 0.0, cap
    if fill > 0:
        emit(last, fill)
    return out
