"""Entry point of the parallel layer: the step graph for a framework × ZeRO stage / sharding strategy."""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator.errors import InputError
from simulator.parallel import activation_offload, ddp, deepspeed, expert_sync, fsdp, pipeline, replicate
from simulator.parallel.context import BuildContext
from simulator.parallel.ir import GraphBuilder, StepGraph
from simulator.parallel.mesh import RankMesh
from simulator.parallel.schedule import a2a_overlap, run_micro_batches
from simulator.parallel.work import StepWork
from simulator.parallel.work import from_scenario as work_from_scenario

_FRAMEWORKS = {
    "ddp": (ddp.make_hooks, ddp.finish),
    "deepspeed": (deepspeed.make_hooks, deepspeed.finish),
    "fsdp": (fsdp.make_hooks, fsdp.finish),
}


def check_pipeline(parallel) -> None:
    """Pipelines compose with DDP (optionally Megatron's distributed optimizer), DeepSpeed ZeRO 0-1
    and FSDP (torchtitan); DeepSpeed's pipeline engine refuses ZeRO-2/3, and so does this."""
    if parallel.pp > 1 and parallel.framework == "deepspeed" and parallel.zero_stage >= 2:
        raise InputError(
            f"pipeline parallelism (pp={parallel.pp}) with deepspeed needs zero_stage 0 or 1 (DeepSpeed's "
            f"pipeline engine refuses ZeRO-{parallel.zero_stage}); set parallel.pp: 1, zero_stage <= 1, or use "
            "framework fsdp (torchtitan 3D)",
            "parallel.pp",
        )


def build_step_graph(ctx: BuildContext) -> StepGraph:
    """Dispatch on ``parallel.framework``: ``ddp``, ``deepspeed`` (stages 0-3) or ``fsdp``; with
    ``pp > 1`` every stage's representative runs the pipeline schedule (``parallel.pipeline_schedule``)."""
    make_hooks, finish = _FRAMEWORKS[ctx.parallel.framework]
    if ctx.mesh.pp > 1:
        check_pipeline(ctx.parallel)
        return pipeline.build(ctx, _wrap(make_hooks), expert_sync.wrap_finish(finish))
    b = GraphBuilder()
    hooks = make_hooks(ctx)
    run_micro_batches(b, ctx.work, ctx.n_micro, _wrap(lambda _: hooks)(ctx))
    return b.build(**expert_sync.wrap_finish(finish)(b, ctx, hooks))


def _wrap(make_hooks):
    """The framework's hooks with the expert-DP synchronisation and the activation offload copies."""
    return activation_offload.wrap_hooks(expert_sync.wrap_hooks(make_hooks))


def copies_every_micro_batch(ctx: BuildContext) -> bool:
    """Whether every micro-batch after the first issues exactly the first one's tasks (renamed, ids
    shifted): no pipeline, no combined MoE 1F1B, and hooks whose ``repeats(g)`` holds for every
    ``g`` (``schedule.Hooks.repeats``; ZeRO-2/3 and FSDP, not DDP or ZeRO-0/1, whose last
    micro-batch reduces)."""
    if ctx.mesh.pp > 1 or ctx.n_micro < 2 or a2a_overlap(ctx.work):
        return False
    make_hooks, _ = _FRAMEWORKS[ctx.parallel.framework]
    hooks = _wrap(make_hooks)(ctx)
    return all(hooks.repeats(g) for g in range(1, ctx.n_micro))


def build_copied_samples(ctx: BuildContext, sizes: tuple[int, ...]) -> list[StepGraph] | None:
    """The step graphs of ``ctx`` with each of ``sizes`` (ascending) micro-batches, issuing the first
    micro-batch through the hooks once for all of them: each graph is the first micro-batch, copies
    of it up to its size (``simulator.parallel.replicate``) and the framework's ``finish``. Equal to
    ``build_step_graph`` of each size (``tests/parallel/test_replicate.py``); ``None`` where the
    micro-batches are not all copies of the first (``copies_every_micro_batch``) or the first cannot
    be a template."""
    if not copies_every_micro_batch(ctx) or not sizes or sizes[0] < 1 or list(sizes) != sorted(set(sizes)):
        return None
    make_hooks, finish = _FRAMEWORKS[ctx.parallel.framework]
    hooks = make_hooks(ctx)
    b = GraphBuilder()
    run_micro_batches(b, ctx.work, 1, hooks)
    hi = len(b.tasks)
    template = replicate.Template.of(b, 0, hi, 0)
    if template is None:
        return None
    graphs = []
    g = 1
    for n in sizes:
        while g < n:
            hooks.replicated(0, hi, template.append(b, g))
            g += 1
        fork = GraphBuilder()
        fork.tasks.extend(b.tasks)
        fork.device = b.device
        sample = ctx if n == ctx.n_micro else dataclasses.replace(ctx, n_micro=n)
        graphs.append(fork.build(**expert_sync.wrap_finish(finish)(fork, sample, hooks)))
    return graphs


def mesh_for(scenario: Any, gpus_per_node: int) -> RankMesh:
    p = scenario.parallel
    cp = getattr(p, "cp", 1)
    return RankMesh(tp=p.tp, dp=scenario.n_gpus // (p.tp * cp * p.pp), pp=p.pp, gpus_per_node=gpus_per_node, cp=cp,
                    ep=getattr(p, "ep", 1), etp=getattr(p, "etp", 1),
                    pp_before_dp=bool(getattr(p, "use_tp_pp_dp_mapping", False)))


def context_for(scenario: Any, work: StepWork | None = None, gpus_per_node: int | None = None) -> BuildContext:
    """The build context of a validated ``Scenario``."""
    per_node = gpus_per_node or scenario.cluster.topology.gpus_per_node
    p = scenario.parallel
    work = work or work_from_scenario(scenario, p.stage3_param_persistence_threshold)
    return BuildContext(work=work, mesh=mesh_for(scenario, per_node), parallel=p,
                        n_micro=n_micro(scenario), precision=scenario.training.precision)


def n_micro(scenario: Any) -> int:
    """Micro-batches per step per rank: ``B / (b · dp)`` with ``dp = GPUs / (tp·cp·pp)`` (the cp ranks
    of a group share its sequences), i.e. ``Scenario.grad_accum_steps``."""
    return scenario.grad_accum_steps
