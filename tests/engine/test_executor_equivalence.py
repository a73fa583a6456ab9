"""The callback executor equals the generator-process executor it replaced (issue 14), bit for bit.

Random step graphs on one or two devices, with cross-stream dependencies, same-stream
dependencies, zero-length tasks and durations drawn from a few values so that many events fall on
the same instant (the cases where the order of simultaneous events could matter), with and without
the compute slowdown during collectives. Every span (task, stream, start, end, device) must be
identical: the reference is ``tests/engine/reference_executor.py``, the engine as it was.
"""

from __future__ import annotations

import random

import pytest

from simulator.engine.executor import TaskCost, simulate
from simulator.parallel.ir import COMM, COMPUTE, P2P, TP_COMM, GraphBuilder
from tests.engine.reference_executor import ReferenceSimulation

DURATIONS = (0.0, 0.25, 0.5, 1.0, 1.0, 1.5, 2.0, 3.0, 1e-16)


def _random_graph(rng: random.Random, n: int, devices: int, shares: tuple = (None,)):
    """``shares``: the ``sm_share`` values collectives draw from (``None``: an NCCL collective)."""
    b = GraphBuilder()
    costs = []
    for i in range(n):
        b.device = rng.randrange(devices)
        deps = rng.sample(range(i), k=min(i, rng.choice((0, 1, 1, 1, 2, 3))))
        kind = rng.random()
        if kind < 0.45:
            b.compute(f"c{i}", "forward", (), deps=deps)
        elif kind < 0.9:
            stream = rng.choice((COMM, COMM, TP_COMM, P2P, COMPUTE))
            share = rng.choice(shares)
            b.collective(f"k{i}", "grad_reduce", "all_reduce", "dp", 1.0, deps=deps, stream=stream, sm_share=share)
        else:
            b.copy(f"d{i}", "d2h", 1.0, deps=deps)
        costs.append(TaskCost(rng.choice(DURATIONS) * rng.choice((1.0, 1.0, 0.1, 3.0))))
    return b.build(), costs


def _key(trace):
    return [(s.task_id, s.name, s.stream, s.category, s.kind, s.start_s, s.end_s, s.device) for s in trace.spans]


@pytest.mark.parametrize("seed", range(40))
def test_callback_executor_equals_generator_executor(seed):
    rng = random.Random(seed)
    graph, costs = _random_graph(rng, rng.randrange(5, 120), rng.choice((1, 1, 2)))
    slowdown = rng.choice((0.0, 0.3, 1.0))
    try:
        expected = _key(ReferenceSimulation(graph, costs, slowdown).run())
    except RuntimeError:  # a dependency issued later on the same stream: both must say deadlock
        with pytest.raises(RuntimeError, match="deadlock"):
            simulate(graph, costs, slowdown)
        return
    assert _key(simulate(graph, costs, slowdown)) == expected


def test_random_graphs_exercise_simultaneous_events():
    """The test above is only meaningful if its graphs have many ends at the same instant."""
    rng = random.Random(0)
    graph, costs = _random_graph(rng, 100, 2)
    ends = [s.end_s for s in ReferenceSimulation(graph, costs, 1.0).run().spans]
    assert len(ends) - len(set(ends)) > 20


@pytest.mark.parametrize("seed", range(30))
def test_equal_with_collectives_that_hold_sms(seed):
    """Collectives stating their SMs (TE userbuffers TP overlap) change the compute rate at their
    start and end, with or without the NCCL slowdown: many rate changes per compute task, the case
    where the engine queues a re-planned finish only when it moves earlier."""
    rng = random.Random(1000 + seed)
    graph, costs = _random_graph(rng, rng.randrange(5, 120), rng.choice((1, 1, 2)), (None, 16 / 132, 1 / 132, 0.5))
    slowdown = rng.choice((0.0, 0.3))
    try:
        expected = _key(ReferenceSimulation(graph, costs, slowdown).run())
    except RuntimeError:
        with pytest.raises(RuntimeError, match="deadlock"):
            simulate(graph, costs, slowdown)
        return
    assert _key(simulate(graph, costs, slowdown)) == expected
