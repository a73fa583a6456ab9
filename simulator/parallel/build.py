"""Entry point of the parallel layer: the step graph for a framework × ZeRO stage / sharding strategy."""

from __future__ import annotations

from typing import Any

from simulator.parallel import ddp, deepspeed, fsdp
from simulator.parallel.context import BuildContext
from simulator.parallel.ir import StepGraph
from simulator.parallel.mesh import RankMesh
from simulator.parallel.work import StepWork
from simulator.parallel.work import from_scenario as work_from_scenario


def build_step_graph(ctx: BuildContext) -> StepGraph:
    """Dispatch on ``parallel.framework``: ``ddp``, ``deepspeed`` (stages 0-3) or ``fsdp``."""
    framework = ctx.parallel.framework
    if ctx.mesh.pp > 1 or ctx.mesh.tp > 1:
        # Representative rank of stage 0 only; TP collectives and PP schedules are not built yet.
        pass
    builder = {"ddp": ddp.build, "deepspeed": deepspeed.build, "fsdp": fsdp.build}[framework]
    return builder(ctx)


def mesh_for(scenario: Any, gpus_per_node: int) -> RankMesh:
    p = scenario.parallel
    return RankMesh(tp=p.tp, dp=scenario.dp, pp=p.pp, gpus_per_node=gpus_per_node)


def context_for(scenario: Any, work: StepWork | None = None, gpus_per_node: int | None = None) -> BuildContext:
    """The build context of a validated ``Scenario``."""
    per_node = gpus_per_node or scenario.cluster.topology.gpus_per_node
    p = scenario.parallel
    work = work or work_from_scenario(scenario, p.stage3_param_persistence_threshold)
    return BuildContext(work=work, mesh=mesh_for(scenario, per_node), parallel=p,
                        n_micro=scenario.grad_accum_steps, precision=scenario.training.precision)
