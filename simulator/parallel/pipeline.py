"""Pipeline parallelism: one representative GPU per stage, a 1F1B schedule, p2p activations.

Blocks are split as evenly as possible over the ``pp`` stages (the first ``L mod pp`` stages take one
more); the first stage also holds the embedding, the last the head. Each stage runs the
non-interleaved 1F1B schedule (PipeDream-Flush / Megatron-LM, Narayanan et al. SC'21 §2.2): ``p−s−1``
warm-up forwards, then one forward and one backward alternately, then the remaining backwards.
Between stages a micro-batch's activations (forward) and their gradients (backward) travel as one
``send_recv`` of ``b·s·h`` elements (formulas.md §6) on the sender's p2p stream; the receiver's
pass waits for it. The bubble, ``(p−1)/m`` of the ideal time, comes out of the dependencies.

Data parallelism composes per stage (each stage's DP group reduces its own gradients); ZeRO-2/3 and
FSDP are refused with pipelines, as DeepSpeed does for ZeRO-2/3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from simulator.parallel.context import BuildContext
from simulator.parallel.ir import P2P, GraphBuilder, StepGraph
from simulator.parallel.schedule import Hooks, backward_pass, forward_pass
from simulator.parallel.work import StepWork


def stage_layers(n_layers: int, pp: int) -> list[int]:
    base, extra = divmod(n_layers, pp)
    return [base + (1 if s < extra else 0) for s in range(pp)]


def stage_work(work: StepWork, stage: int, pp: int) -> StepWork:
    """The part of ``work`` on pipeline stage ``stage`` (block indices are local to the stage)."""
    first, last = stage == 0, stage == pp - 1
    return dataclasses.replace(
        work,
        n_layers=stage_layers(work.n_layers, pp)[stage],
        embed_fwd=work.embed_fwd if first else (),
        embed_bwd=work.embed_bwd if first else (),
        embed_params=work.embed_params if first else 0.0,
        head_fwd=work.head_fwd if last else (),
        head_bwd=work.head_bwd if last else (),
        head_params=work.head_params if last else 0.0,
        head_persistent=work.head_persistent if last else 0.0,
    )


def one_f_one_b(stage: int, pp: int, n_micro: int) -> list[tuple[str, int]]:
    """The 1F1B order of stage ``stage``: ("F", g) and ("B", g) items."""
    warmup = min(pp - stage - 1, n_micro)
    order = [("F", g) for g in range(warmup)]
    for i in range(n_micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", g) for g in range(n_micro - warmup, n_micro)]
    return order


def build(ctx: BuildContext, make_hooks: Callable[[BuildContext], Hooks],
          finish: Callable[[GraphBuilder, BuildContext, Hooks], dict]) -> StepGraph:
    """All stages' tasks in one graph; stage ``s`` is device ``s``."""
    pp, m = ctx.mesh.pp, ctx.n_micro
    ctxs = [dataclasses.replace(ctx, work=stage_work(ctx.work, s, pp)) for s in range(pp)]
    hooks = [make_hooks(c) for c in ctxs]
    orders = [one_f_one_b(s, pp, m) for s in range(pp)]
    pos = [0] * pp
    sent_fwd: dict[tuple[int, int], int | None] = {}
    sent_bwd: dict[tuple[int, int], int | None] = {}
    act = ctx.work.p2p_bytes
    b = GraphBuilder()
    # Issue each stage's next item as soon as what it receives has been issued (CPU order per stage).
    while any(pos[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            while pos[s] < len(orders[s]):
                phase, g = orders[s][pos[s]]
                source = (s - 1, g) if phase == "F" else (s + 1, g)
                inbox = sent_fwd if phase == "F" else sent_bwd
                has_source = 0 <= source[0] < pp
                if has_source and source not in inbox:
                    break
                after = (inbox[source],) if has_source else ()
                b.device = s
                if phase == "F":
                    last = forward_pass(b, ctxs[s].work, g, hooks[s], after)
                    sent_fwd[(s, g)] = (b.collective(f"send activations mb{g}", "pp", "send_recv", "pp_next", act,
                                                     stream=P2P, deps=(last,), micro_batch=g) if s < pp - 1 else None)
                else:
                    last = backward_pass(b, ctxs[s].work, g, hooks[s], after)
                    sent_bwd[(s, g)] = (b.collective(f"send gradients mb{g}", "pp", "send_recv", "pp_next", act,
                                                     stream=P2P, deps=(last,), micro_batch=g) if s > 0 else None)
                pos[s] += 1
                progressed = True
        assert progressed, "1F1B schedule cannot make progress"
    meta: dict = {}
    for s in range(pp):
        b.device = s
        meta = {**finish(b, ctxs[s], hooks[s]), **meta}
    return b.build(**meta, pp=pp, schedule="1f1b", stage_layers=stage_layers(ctx.work.n_layers, pp))
