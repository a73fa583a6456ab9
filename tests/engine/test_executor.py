"""Exact small cases of the executor: overlap fully hidden / partly hidden / fully exposed."""

from __future__ import annotations

import pytest

from simulator.engine.executor import TaskCost, simulate
from simulator.engine.intervals import exposed
from simulator.parallel.ir import COMPUTE, GraphBuilder


def _graph(comm_s: float, blocking: bool):
    """compute A (10 s) → comm C (after A) ; compute B (10 s), which waits for C if ``blocking``."""
    b = GraphBuilder()
    a = b.compute("A", "forward", ())
    c = b.collective("C", "grad_reduce", "all_reduce", "dp", 1.0, deps=(a,))
    b.compute("B", "backward", (), deps=(c,) if blocking else ())
    return b.build(), [TaskCost(10.0), TaskCost(comm_s), TaskCost(10.0)]


def _exposed(trace):
    return exposed(trace.intervals(category="comm"), trace.intervals(category="compute"))


def test_fully_hidden():
    graph, costs = _graph(5.0, blocking=False)
    trace = simulate(graph, costs)
    assert trace.end_s == 20.0
    assert _exposed(trace) == 0.0


def test_partly_hidden():
    graph, costs = _graph(15.0, blocking=False)
    trace = simulate(graph, costs)
    assert trace.end_s == 25.0  # comm runs 10..25, compute B 10..20
    assert _exposed(trace) == 5.0


def test_fully_exposed():
    graph, costs = _graph(7.0, blocking=True)
    trace = simulate(graph, costs)
    assert trace.end_s == 27.0
    assert _exposed(trace) == 7.0


def test_stream_fifo_order():
    """A task queued behind another on the same stream waits even if its deps are met."""
    b = GraphBuilder()
    a = b.compute("A", "forward", ())
    b.collective("C1", "grad_reduce", "all_reduce", "dp", 1.0, deps=(a,))
    b.collective("C2", "grad_reduce", "all_reduce", "dp", 1.0)
    trace = simulate(b.build(), [TaskCost(4.0), TaskCost(1.0), TaskCost(1.0)])
    spans = {s.name: s for s in trace.spans}
    assert spans["C2"].start_s == 5.0


def test_compute_slowdown_while_comm_runs():
    """Compute 10 s at rate 1/(1+1) during a 5 s collective: 2.5 s of work done by t=5, ends at 12.5."""
    b = GraphBuilder()
    b.compute("A", "forward", ())
    b.collective("C", "grad_reduce", "all_reduce", "dp", 1.0)
    trace = simulate(b.build(), [TaskCost(10.0), TaskCost(5.0)], compute_slowdown=1.0)
    span = next(s for s in trace.spans if s.stream == COMPUTE)
    assert span.end_s == pytest.approx(12.5)


def test_deadlock_is_loud():
    b = GraphBuilder()
    b.compute("A", "forward", (), deps=(1,))
    b.compute("B", "forward", ())
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(b.build(), [TaskCost(1.0), TaskCost(1.0)])
