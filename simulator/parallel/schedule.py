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
from typing import Any

from simulator.parallel import context_parallel, expert, expert_tp, replicate, tp_overlap
from simulator.parallel.ir import GraphBuilder
from simulator.parallel.tp_plain import block_tp as _tp
from simulator.parallel.tp_plain import edge_tp as _edge_tp
from simulator.parallel.work import StepWork
from simulator.units import DTYPE_BYTES

FP8_BYTES = DTYPE_BYTES["fp8"]

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


def unit_gather_bytes(work: StepWork, unit: Unit, param_bytes: float, fp8_linear: bool = False) -> float:
    """Bytes of one parameter all-gather of ``unit`` (its full size ``S``, before the ring's
    ``(n−1)/n``): ``unit_params · param_bytes``; with ``fp8_linear`` (``parallel.fp8_param_gather``)
    a block's linear weights travel in FP8, ``(P − V)·1 + V·param_bytes`` with ``V`` its vector
    parameters (norms, biases), while the embedding and the output layer keep ``param_bytes``."""
    n = unit_params(work, unit)
    if not fp8_linear or unit in ("E", "H"):
        return n * param_bytes
    vectors = min(work.layer_vector_params, n)
    return (n - vectors) * FP8_BYTES + vectors * param_bytes


def model_gather_bytes(work: StepWork, param_bytes: float, fp8_linear: bool = False) -> float:
    """Bytes of one all-gather of every parameter of ``work``: its blocks, embedding and output
    layer, each priced by ``unit_gather_bytes``."""
    return (work.n_layers * unit_gather_bytes(work, 0, param_bytes, fp8_linear)
            + sum(unit_gather_bytes(work, u, param_bytes) for u in ("E", "H")))


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

    def post_recompute(self, b: GraphBuilder, g: int, unit: Unit, task: int) -> Sequence[int | None]:
        """After block ``unit``'s full recompute (task ``task``): extra dependencies of its backward."""
        return ()

    def grads_ready(self, b: GraphBuilder, g: int, key: Unit, task: int) -> None:
        """Gradients of ``key`` (a unit or a (block, piece)) are complete when ``task`` ends."""
        return None

    def post_backward(self, b: GraphBuilder, g: int, unit: Unit, task: int) -> None:
        return None

    def repeats(self, g: int) -> bool:
        """Whether micro-batch ``g`` issues exactly the tasks of ``g − 1``, renamed and with ids
        shifted (no hook state carries over between them other than what ``replicated`` updates);
        ``run_micro_batches`` then copies them (``simulator.parallel.replicate``)."""
        return False

    def replicated(self, lo: int, hi: int, shift: int) -> None:
        """Tasks ``lo..hi−1`` (one micro-batch) were copied ``shift`` ids later (``repeats``)."""
        return None


class WrappedHooks:
    """A framework's hooks with more tasks around them (``expert_sync``, ``activation_offload``): every
    hook the wrapper does not override is the inner one's, and so is every attribute the framework's
    ``finish`` reads. ``repeats`` is False: the wrapper's own tasks are keyed by micro-batch."""

    def __init__(self, inner: Any, ctx: Any) -> None:
        self.inner, self.ctx = inner, ctx

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "ctx"):  # not set yet (copying): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def repeats(self, g: int) -> bool:
        return False


def _ops(work: StepWork, unit: Unit, phase: str) -> tuple:
    table = {"E": (work.embed_fwd, work.embed_bwd), "H": (work.head_fwd, work.head_bwd)}
    fwd, bwd = table.get(unit, (work.layer_fwd, work.layer_bwd))
    return fwd if phase == "fwd" else bwd


def _overlapped(work: StepWork) -> bool:
    return work.tp_comm_overlap and work.tp_allreduce_bytes > 0


def forward_unit(b: GraphBuilder, work: StepWork, g: int, unit: Unit, deps: list) -> tuple[int, list]:
    """Forward of one unit of micro-batch ``g`` after ``deps``; returns its last compute task and the
    overlapped TP collectives the next unit must wait for."""
    layer = unit if isinstance(unit, int) else -1
    name = f"fwd {unit} mb{g}"
    pending: list[int] = []
    if expert.is_moe(work, unit):  # MoE block: dispatch / combine around the experts
        tid = expert.forward_block(b, work, "forward", name, deps, g, layer)
        count = expert_tp.plain_tp_calls(work, "fwd")
        if count:
            _tp(b, work, name, tid, g, layer, count=count)
    elif isinstance(unit, int) and _overlapped(work):
        tid, pending = tp_overlap.forward_block(b, work, work.layer_fwd, "forward", name, deps, g, layer)
    elif isinstance(unit, int) and work.cp_kv_bytes > 0:
        tid = context_parallel.forward_block(b, work, work.layer_fwd, "forward", name, deps, g, layer)
        _tp(b, work, name, tid, g, layer)
    else:
        tid = b.compute(name, "forward", _ops(work, unit, "fwd"), deps=deps, micro_batch=g, layer=layer)
        if isinstance(unit, int):
            _tp(b, work, name, tid, g, layer)
        else:
            _edge_tp(b, work, unit, "fwd", name, tid, g)
    return tid, pending


def forward_pass(b: GraphBuilder, work: StepWork, g: int, hooks: Hooks, after=()) -> int:
    """Forward of micro-batch ``g`` through this rank's units; the first waits for ``after`` (a
    pipeline receive). Returns the last compute task."""
    tid = -1
    pending: list[int] = []  # overlapped TP collectives the next unit needs
    for i, unit in enumerate(forward_order(work)):
        deps = [*hooks.pre_forward(b, g, unit), *(after if i == 0 else ()), *pending]
        tid, pending = forward_unit(b, work, g, unit, deps)
        hooks.post_forward(b, g, unit, tid)
    return tid


def _backward_block(b: GraphBuilder, work: StepWork, unit: int, g: int, hooks: Hooks, deps: list) -> tuple[int, list]:
    """Recompute (full checkpointing, or selective recomputation's modules) and the backward pieces of one
    block; returns the last compute task and the overlapped TP collectives the next unit must wait for."""
    if expert.is_moe(work, unit):
        tid, pending = expert.backward_block(b, work, f"bwd {unit} mb{g}", deps, g, unit)
        hooks.grads_ready(b, g, unit, tid)
        # the TP collectives the block did not place beside its GEMMs (expert_tp.plain_tp_calls)
        count = expert_tp.plain_tp_calls(work, "bwd")
        if count:
            _tp(b, work, f"bwd {unit} mb{g}", tid, g, unit, count=count)
        return tid, pending
    overlap = _overlapped(work)
    name = f"recompute {unit} mb{g}"
    if work.recomputes(unit):
        full = work.recompute_full  # full recompute re-runs the TP collectives
        if overlap and full:
            rid, deps = tp_overlap.forward_block(b, work, work.layer_recompute, "recompute", name, deps, g, unit)
        else:
            if work.cp_kv_bytes > 0:
                rid = context_parallel.forward_block(b, work, work.layer_recompute, "recompute", name, deps, g, unit)
            else:
                rid = b.compute(name, "recompute", work.layer_recompute, deps=deps, micro_batch=g, layer=unit)
            if full or work.recompute_mlp:  # the whole block's collectives, or the MLP's
                _tp(b, work, name, rid, g, unit, count=2 if full else 1)
            deps = []
        if full:
            deps = [*deps, *hooks.post_recompute(b, g, unit, rid)]
    parts = pieces(work)
    asynchronous = not overlap and _async_backward(work)
    tid = -1
    for piece, ops, _ in parts:
        label = f"{unit}.{piece}" if piece else f"{unit}"
        if overlap:
            count = max(1, 2 // len(parts))
            tid, deps = tp_overlap.backward_piece(b, work, ops, f"bwd {label} mb{g}", deps, g, unit, count)
        elif asynchronous:
            tid, deps = tp_overlap.async_backward_piece(b, work, ops, f"bwd {label} mb{g}", deps, g, unit)
        elif work.cp_kv_bytes > 0:
            tid = context_parallel.backward_piece(b, work, ops, f"bwd {label} mb{g}", deps, g, unit)
            deps = []
        else:
            tid = b.compute(f"bwd {label} mb{g}", "backward", ops, deps=deps, micro_batch=g, layer=unit)
            deps = []
        hooks.grads_ready(b, g, (unit, piece) if piece else unit, tid)
    if not overlap and not asynchronous:
        _tp(b, work, f"bwd {unit} mb{g}", tid, g, unit)
    return tid, list(deps)


def backward_unit(b: GraphBuilder, work: StepWork, g: int, hooks: Hooks, unit: Unit, deps: list) -> tuple[int, list]:
    """Backward of one unit of micro-batch ``g`` (its recomputation first under full checkpointing);
    returns the last compute task and the overlapped TP collectives the next unit must wait for."""
    if isinstance(unit, int):
        return _backward_block(b, work, unit, g, hooks, deps)
    tid = b.compute(f"bwd {unit} mb{g}", "backward", _ops(work, unit, "bwd"), deps=deps, micro_batch=g)
    _edge_tp(b, work, unit, "bwd", f"bwd {unit} mb{g}", tid, g)
    hooks.grads_ready(b, g, unit, tid)
    return tid, []


def _async_backward(work: StepWork) -> bool:
    """Megatron's asynchronous backward TP collectives apply (``tp_overlap.async_backward_piece``)."""
    return work.tp_async_backward and work.tp_allreduce_bytes > 0 and tp_overlap.standard_block(work)


def backward_pass(b: GraphBuilder, work: StepWork, g: int, hooks: Hooks, after=()) -> int:
    """Backward of micro-batch ``g`` (recomputing each block first under full checkpointing)."""
    tid = -1
    pending: list[int] = []
    for i, unit in enumerate(backward_order(work)):
        deps = [*hooks.pre_backward(b, g, unit), *(after if i == 0 else ()), *pending]
        tid, pending = backward_unit(b, work, g, hooks, unit, deps)
        hooks.post_backward(b, g, unit, tid)
    return tid


def combined_pass(b: GraphBuilder, fwd: tuple[StepWork, int, Hooks, tuple],
                  bwd: tuple[StepWork, int, Hooks, tuple]) -> tuple[int, int]:
    """The forward of one micro-batch and the backward of another issued together, unit by unit
    (Megatron-Core ``overlap_moe_expert_parallel_comm``, ``pipeline_parallel/combined_1f1b.py``
    ``combined_forward_backward_step``): step ``k`` issues the forward of unit ``k`` (order ``E, 0..L-1,
    H``) and the backward of unit ``k`` (order ``H, L-1..0, E``); when both are MoE blocks their
    pieces interleave so that each pass's all-to-alls run under the other pass's compute
    (``expert.combined_block``); otherwise the forward unit, then the backward unit. ``fwd`` / ``bwd``
    are (work, micro-batch, hooks, tasks the first unit waits for). Returns both passes' last tasks."""
    fw, gf, fh, f_after = fwd
    bw, gb, bh, b_after = bwd
    f_units, b_units = forward_order(fw), backward_order(bw)
    f_tid = b_tid = -1
    for k in range(max(len(f_units), len(b_units))):
        fu = f_units[k] if k < len(f_units) else None
        bu = b_units[k] if k < len(b_units) else None
        f_deps = [*fh.pre_forward(b, gf, fu), *(f_after if k == 0 else ())] if fu is not None else []
        b_deps = [*bh.pre_backward(b, gb, bu), *(b_after if k == 0 else ())] if bu is not None else []
        if fu is not None and bu is not None and expert.is_moe(fw, fu) and expert.is_moe(bw, bu):
            f_tid, b_tid = expert.combined_block(b, fw, gf, fu, f_deps, bw, gb, bu, b_deps)
            _tp(b, fw, f"fwd {fu} mb{gf}", f_tid, gf, fu, count=expert_tp.combined_tp_calls(fw, "fwd"))
            bh.grads_ready(b, gb, bu, b_tid)
            _tp(b, bw, f"bwd {bu} mb{gb}", b_tid, gb, bu, count=expert_tp.combined_tp_calls(bw, "bwd"))
        else:
            if fu is not None:
                f_tid, _ = forward_unit(b, fw, gf, fu, f_deps)
            if bu is not None:
                b_tid, _ = backward_unit(b, bw, gb, bh, bu, b_deps)
        if fu is not None:
            fh.post_forward(b, gf, fu, f_tid)
        if bu is not None:
            bh.post_backward(b, gb, bu, b_tid)
    return f_tid, b_tid


def a2a_overlap(work: StepWork) -> bool:
    """Whether the step runs Megatron-Core's combined 1F1B (``parallel.moe_a2a_overlap``)."""
    return getattr(work, "moe", None) is not None and work.moe.a2a_overlap


def run_micro_batches(b: GraphBuilder, work: StepWork, n_micro: int, hooks: Hooks) -> None:
    """Issue forward + backward of ``n_micro`` micro-batches through ``hooks`` (no pipeline). With
    ``parallel.moe_a2a_overlap`` (Megatron-Core ``combined_1f1b_schedule_for_no_pipelining``): the
    first forward alone, then the backward of ``g`` together with the forward of ``g + 1``
    (``combined_pass``), then the last backward alone."""
    if not a2a_overlap(work) or n_micro < 2:
        repeats = getattr(hooks, "repeats", None)
        template, lo, hi = None, 0, 0
        for g in range(n_micro):
            if g and repeats is not None and repeats(g):
                if template is None:  # the first repeat: the micro-batch just issued is its template
                    template = replicate.Template.of(b, lo, hi, g - 1)
                if template is not None:
                    start = template.append(b, g)
                    hooks.replicated(lo, hi, start - lo)
                    continue
            lo = len(b.tasks)
            forward_pass(b, work, g, hooks)
            backward_pass(b, work, g, hooks)
            hi = len(b.tasks)
        return
    forward_pass(b, work, 0, hooks)
    for g in range(n_micro - 1):
        combined_pass(b, (work, g + 1, hooks, ()), (work, g, hooks, ()))
    backward_pass(b, work, n_micro - 1, hooks)


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
