from __future__ import annotations

from simulator.config.scenario import ParallelConfig
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate
from simulator.parallel.build import build_step_graph
from simulator.parallel.context import BuildContext
from simulator.parallel.mesh import RankMesh
from simulator.parallel.volume import bytes_per_rank
from tests.parallel.fakes import AlphaBeta, SumCompute, work


def ctx(n: int = 2, n_micro: int = 1, precision: str = "bf16", gpus_per_node: int = 8, w=None, **par) -> BuildContext:
    return BuildContext(work=w or work(), mesh=RankMesh(tp=1, dp=n, pp=1, gpus_per_node=gpus_per_node),
                        parallel=ParallelConfig(**par), n_micro=n_micro, precision=precision)


def run(c: BuildContext, compute=None, net=None, slowdown: float = 0.0):
    graph = build_step_graph(c)
    costing = Costing(compute or SumCompute(), net or AlphaBeta(), c.mesh, pcie_Bps=10e9, cpu_adam_params_per_s=1e9)
    return graph, simulate(graph, costing.costs(graph), slowdown)


def volume(c: BuildContext) -> dict[str, float]:
    return bytes_per_rank(build_step_graph(c), c.mesh)
