"""Collective prices are shared by every step priced with the same collective model (``Costing._price``):
a second step asks the model nothing, and gets the same costs."""

from __future__ import annotations

from simulator.engine.costing import Costing
from simulator.parallel.ir import GraphBuilder
from simulator.parallel.mesh import RankMesh
from tests.parallel.fakes import AlphaBeta, SumCompute


class Counting(AlphaBeta):
    def __init__(self) -> None:
        super().__init__(10e-6, 100e9)
        self.calls = 0

    def run(self, op, groups, nbytes):
        self.calls += 1
        return super().run(op, groups, nbytes)


def _graph():
    b = GraphBuilder()
    b.collective("rs", "grad_reduce", "reduce_scatter", "dp", 8e6)
    b.collective("ag", "param_allgather", "all_gather", "dp", 8e6)
    b.collective("ag again", "param_allgather", "all_gather", "dp", 8e6)
    return b.build()


def test_second_step_reuses_the_prices():
    model, mesh = Counting(), RankMesh(tp=1, dp=16, pp=1, gpus_per_node=8)
    first = Costing(SumCompute(), model, mesh, 1e10, 1e9).costs(_graph())
    assert model.calls == 2  # two distinct collectives
    second = Costing(SumCompute(), model, mesh, 1e10, 1e9).costs(_graph())
    assert model.calls == 2
    # 16 ranks, alpha 10 us, 100 GB/s: (15/16) * 8e6 / 1e11 + 1e-5 s
    assert [c.duration_s for c in second] == [c.duration_s for c in first] == [15 / 16 * 8e6 / 1e11 + 1e-5] * 3
    assert second[0].args == first[0].args and second[0].args["group_size"] == 16


def test_other_mesh_or_model_is_priced_again():
    model = Counting()
    Costing(SumCompute(), model, RankMesh(tp=1, dp=16, pp=1, gpus_per_node=8), 1e10, 1e9).costs(_graph())
    costs = Costing(SumCompute(), model, RankMesh(tp=2, dp=8, pp=1, gpus_per_node=8), 1e10, 1e9).costs(_graph())
    assert model.calls == 4 and costs[0].args["group_size"] == 8
    other = Counting()
    Costing(SumCompute(), other, RankMesh(tp=1, dp=16, pp=1, gpus_per_node=8), 1e10, 1e9).costs(_graph())
    assert other.calls == 2
