"""Pipeline parallelism: one representative GPU per stage, GPipe / 1F1B / interleaved 1F1B.

The model is cut into ``p·v`` virtual stages (``v`` = ``parallel.virtual_stages``, 1 unless
interleaved); virtual stage ``j`` runs on GPU stage ``j mod p`` (Megatron's chunk placement).
Blocks are placed by ``simulator.parallel.pipeline_split`` (as evenly as possible by default, or
Megatron's uneven placements);
the first virtual stage also holds the embedding, the last the head (output layer and loss), so
stages are uneven even when blocks divide. Each stage issues its items in the schedule's order
(``simulator.parallel.pipeline_order``). With ``parallel.defer_embedding_wgrad_compute`` the head's
weight-gradient GEMMs of the first micro-batches wait for the pipeline flush
(``simulator.parallel.deferred_wgrad``).

Between virtual stages a micro-batch's activations (forward) and their gradients (backward) travel
as one ``send_recv`` of ``b·s·h/t`` elements per rank (formulas.md §6; Megatron's scatter/gather
optimisation sends each TP rank's ``1/t`` slice, SC'21 §4.1) on the sender's p2p stream, over the
real links of that boundary (mesh group ``pp_next:s``); the receiver's pass waits for it. The
bubble comes out of the dependencies. In 1F1B the sender also waits for its own transfer
(``blocking_sends``): the stage computes again only once its send has completed.

Data parallelism composes per stage (each stage's DP group reduces its own gradients, ``Ψ/(t·p)``
per rank); with ``v > 1`` every model chunk reduces and steps its own parameters. DeepSpeed's
pipeline engine reduces gradients after the schedule (``ReduceGrads`` follows the last
``BackwardPass``/``SendGrad`` in ``TrainSchedule``), so its gradient hooks of the last micro-batch
are replayed after that pass's send (``_AfterSend``): a reduction issued on the compute stream
must not hold back the gradient the previous stage waits for. DDP/Megatron and FSDP reduce on
their communication streams, which never block the send. FSDP under a pipeline follows torchtitan:
parameters gathered in micro-batch 0 stay unsharded, gradients are reduce-scattered in the last
backward (``simulator.parallel.fsdp``). DeepSpeed ZeRO-2/3 is refused with pipelines, as DeepSpeed
does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from simulator.parallel import deferred_wgrad, pipeline_order, pipeline_split
from simulator.parallel.context import BuildContext
from simulator.parallel.ir import P2P, GraphBuilder, StepGraph
from simulator.parallel.schedule import Hooks, a2a_overlap, backward_pass, combined_pass, forward_pass
from simulator.parallel.work import StepWork


def stage_work(work: StepWork, stage: int, layers: list[int]) -> StepWork:
    """The part of ``work`` on (virtual) stage ``stage`` holding ``layers[stage]`` blocks (block
    indices local to it; ``layers`` from ``pipeline_split.virtual_stage_layers``)."""
    first, last = stage == 0, stage == len(layers) - 1
    moe = work.moe.slice(sum(layers[:stage]), layers[stage]) if work.moe is not None else None
    return dataclasses.replace(
        work,
        moe=moe,
        n_layers=layers[stage],
        embed_fwd=work.embed_fwd if first else (),
        embed_bwd=work.embed_bwd if first else (),
        embed_params=work.embed_params if first else 0.0,
        head_fwd=work.head_fwd if last else (),
        head_bwd=work.head_bwd if last else (),
        head_params=work.head_params if last else 0.0,
        head_mtp_params=work.head_mtp_params if last else 0.0,
        head_persistent=work.head_persistent if last else 0.0,
    )


def one_f_one_b(stage: int, pp: int, n_micro: int) -> list[tuple[str, int]]:
    """The 1F1B order of stage ``stage``: ("F", g) and ("B", g) items."""
    return [(phase, g) for phase, g, _ in pipeline_order.one_f_one_b(stage, pp, n_micro)]


class _AfterSend(Hooks):
    """Wraps a stage's hooks; ``grads_ready`` of micro-batch ``last`` is recorded, and ``flush``
    replays it once the pass's p2p send has been issued."""

    def __init__(self, inner: Hooks, last: int) -> None:
        self.inner, self.last = inner, last
        self.pending: list[tuple] = []

    def pre_forward(self, b, g, unit):
        return self.inner.pre_forward(b, g, unit)

    def post_forward(self, b, g, unit, task):
        return self.inner.post_forward(b, g, unit, task)

    def pre_backward(self, b, g, unit):
        return self.inner.pre_backward(b, g, unit)

    def post_backward(self, b, g, unit, task):
        return self.inner.post_backward(b, g, unit, task)

    def grads_ready(self, b, g, key, task):
        if g == self.last:
            self.pending.append((g, key, task))
        else:
            self.inner.grads_ready(b, g, key, task)

    def flush(self, b: GraphBuilder) -> None:
        for g, key, task in self.pending:
            self.inner.grads_ready(b, g, key, task)
        self.pending.clear()


def blocking_sends(ctx: BuildContext) -> bool:
    """Whether a stage's next pass waits for its own p2p send to complete: in every framework's 1F1B.

    Megatron's non-interleaved 1F1B issues each send together with the next receive and waits for
    both before computing on (``pipeline_parallel/schedules.py``
    ``forward_backward_pipelining_without_interleaving``: ``send_forward_recv_backward`` and the other
    ``p2p_communication`` calls run ``_communicate`` with ``wait_on_reqs=True``), and Megatron-LM forces
    ``overlap_p2p_comm`` off without interleaving (``training/arguments.py``: "non-interleaved schedule
    does not support overlapping p2p communication"); DeepSpeed's ``PipelineEngine`` sends with a
    synchronous ``p2p.send``; torch.distributed.pipelining's ``Schedule1F1B`` (torchtitan) fuses each
    send with the next receive and waits for both before the next pass (``fwd_send_bwd_recv``,
    ``bwd_send_fwd_recv``; only its warm-up forwards overlap one send). Megatron's interleaved schedule
    overlaps its sends (``overlap_p2p_comm``, on by default with virtual stages), as do
    torch.distributed.pipelining's runtime schedules (``ScheduleInterleaved1F1B``) and ``ScheduleGPipe``,
    which waits for its forward sends once after the forwards.
    """
    return ctx.parallel.pipeline_schedule == "1f1b"


def build(ctx: BuildContext, make_hooks: Callable[[BuildContext], Hooks],
          finish: Callable[[GraphBuilder, BuildContext, Hooks], dict]) -> StepGraph:
    """All stages' tasks in one graph; GPU stage ``s`` is device ``s``."""
    pp, m = ctx.mesh.pp, ctx.n_micro
    schedule = ctx.parallel.pipeline_schedule
    v = ctx.parallel.virtual_stages if schedule == "interleaved" else 1
    n_virtual = pp * v
    mtp = ctx.work.mtp_layers
    layers = pipeline_split.virtual_stage_layers(ctx.work.n_layers - mtp, pp, v, ctx.parallel, mtp)
    ctxs = [dataclasses.replace(ctx, work=stage_work(ctx.work, j, layers), model_chunk=j // pp) for j in range(n_virtual)]
    hooks = [make_hooks(c) for c in ctxs]
    if ctx.parallel.framework == "deepspeed":
        hooks = [_AfterSend(h, m - 1) for h in hooks]
    # defer_embedding_wgrad_compute: the head's first `deferred` backward passes without their weight gradient
    head, deferred = n_virtual - 1, deferred_wgrad.deferred_count(ctx.parallel, m)
    lean_head, wgrad = deferred_wgrad.split_head(ctxs[head].work) if deferred else (None, ())

    def backward_work(j: int, g: int) -> StepWork:
        return lean_head if j == head and g < deferred else ctxs[j].work
    orders = [pipeline_order.order(schedule, s, pp, m, v) for s in range(pp)]
    pos = [0] * pp
    sent: dict[tuple[str, int, int], int | None] = {}  # (phase, virtual stage, micro-batch) → send task
    act = ctx.work.p2p_bytes
    b = GraphBuilder()
    combine = a2a_overlap(ctx.work)
    relax = False  # a round without progress lets a forward go alone instead of waiting for its pair
    blocking = blocking_sends(ctx)
    own_send: list[int | None] = [None] * pp  # each GPU stage's last send, when sends block

    def source(phase: str, j: int, g: int) -> tuple[bool, tuple]:
        """(ready, tasks to wait for) of virtual stage ``j``'s ``phase`` of micro-batch ``g``."""
        src = j - 1 if phase == "F" else j + 1
        if not 0 <= src < n_virtual:
            return True, ()
        if (phase, src, g) not in sent:
            return False, ()
        return True, tuple(x for x in (sent[(phase, src, g)],) if x is not None)

    def send(phase: str, j: int, g: int, last: int) -> None:
        dst, label = (j + 1, "activations") if phase == "F" else (j - 1, "gradients")
        task = None
        if 0 <= dst < n_virtual:
            # The boundary between virtual stages j and dst is the link after GPU stage min(..).
            boundary = (min(j, dst)) % pp
            task = b.collective(f"send {label} v{j}->v{dst} mb{g}", "pp", "send_recv",
                                f"pp_next:{boundary}", act, stream=P2P, deps=(last,), micro_batch=g)
        sent[(phase, j, g)] = task
        if blocking and task is not None:
            own_send[j % pp] = task
        if isinstance(hooks[j], _AfterSend):
            hooks[j].flush(b)

    # Issue each stage's next item as soon as what it receives has been issued (CPU order per stage).
    while any(pos[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):
                phase, g, chunk = orders[s][pos[s]]
                j = chunk * pp + s
                ready, after = source(phase, j, g)
                if not ready:
                    break
                if own_send[s] is not None:
                    after = (*after, own_send[s])
                b.device = s
                nxt = orders[s][pos[s] + 1] if pos[s] + 1 < len(orders[s]) else None
                if combine and phase == "F" and nxt is not None and nxt[0] == "B":
                    # moe_a2a_overlap: a steady-state forward runs together with the next backward
                    # (Megatron-Core combined_1f1b_schedule_for_interleaved_pipelining).
                    _, gb, chunk_b = nxt
                    jb = chunk_b * pp + s
                    ready_b, after_b = source("B", jb, gb)
                    if ready_b:
                        f_last, b_last = combined_pass(b, (ctxs[j].work, g, hooks[j], after),
                                                       (backward_work(jb, gb), gb, hooks[jb], after_b))
                        send("F", j, g, f_last)
                        send("B", jb, gb, b_last)
                        pos[s] += 2
                        progressed = True
                        continue
                    if not relax:
                        break
                if phase == "F":
                    last = forward_pass(b, ctxs[j].work, g, hooks[j], after)
                else:
                    last = backward_pass(b, backward_work(j, g), g, hooks[j], after)
                send(phase, j, g, last)
                pos[s] += 1
                progressed = True
        if not progressed and combine and not relax:
            relax = True
            continue
        relax = False
        assert progressed, f"{schedule} schedule cannot make progress"
    if deferred:  # the flush: after everything the last GPU stage issued, before its optimizer step
        b.device = pp - 1  # the last virtual stage's GPU stage
        deferred_wgrad.drain(b, wgrad, deferred)
    meta: dict = {}
    for j in range(n_virtual):
        b.device = j % pp
        inner = hooks[j].inner if isinstance(hooks[j], _AfterSend) else hooks[j]
        meta = {**finish(b, ctxs[j], inner), **meta}
    per_gpu = [sum(layers[c * pp + s] for c in range(v)) for s in range(pp)]
    return b.build(**meta, pp=pp, schedule=schedule, virtual_stages=v, stage_layers=per_gpu)
