"""The discrete-event executor: plays a ``StepGraph`` on one representative GPU with simpy.

Semantics (CUDA streams):

* every stream of every representative GPU (one per pipeline stage) runs its tasks strictly in
  issue order (FIFO), one at a time;
* a task starts when it is at the head of its stream and every task in ``deps`` has finished;
* a task's duration is given (``TaskCost.duration_s``) except on the compute stream while a
  collective runs on the same GPU: NCCL kernels occupy SMs and HBM bandwidth, so compute then
  progresses at rate ``1 / (1 + compute_slowdown)`` (work-conserving; the rate changes whenever a
  collective starts or ends).

The engine knows nothing about frameworks or hardware; it records spans. This is the only module
that imports simpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import URGENT

from simulator.engine.trace import Span, Trace
from simulator.parallel.ir import COMPUTE, CollectiveTask, ComputeTask, CopyTask, StepGraph, Task

_EPS = 1e-15


@dataclass(slots=True)
class TaskCost:
    """Resolved cost of one task: its duration on an idle GPU (s) and annotations for the trace."""

    duration_s: float
    args: dict[str, Any] = field(default_factory=dict)


_CATEGORY = {ComputeTask: "compute", CollectiveTask: "comm", CopyTask: "copy"}


def _category(task: Task) -> str:
    return _CATEGORY.get(type(task), "host")


class _Device:
    """Shared state of one GPU: how many collectives run now, and the compute task in progress.

    The compute task's finish time is rescheduled whenever a collective starts or ends (its rate
    changes), by callbacks rather than by waking the compute process: one timeout per rate change,
    no condition events, the same arithmetic as a process that re-plans its remaining work.
    """

    def __init__(self, env: simpy.Environment, slowdown: float) -> None:
        self.env = env
        self.slowdown = slowdown
        self.active_comm = 0
        # [remaining idle-GPU work (s), time it was last updated, event to fire, generation]
        self.job: list | None = None

    def _rate(self) -> float:
        return 1.0 / (1.0 + self.slowdown) if self.active_comm else 1.0

    def compute(self, work_s: float) -> simpy.Event:
        """Start ``work_s`` of idle-GPU work; the returned event fires when it is done."""
        done = self.env.event()
        self.job = [work_s, self.env.now, done, 0]
        self._schedule()
        return done

    def _schedule(self) -> None:
        job = self.job
        job[3] += 1
        if job[0] <= _EPS:
            self.job = None
            job[2].succeed()
            return
        timer = self.env.timeout(job[0] / self._rate())
        generation = job[3]
        timer.callbacks.append(lambda _event: self._finish(job, generation))

    def _finish(self, job: list, generation: int) -> None:
        # A timer made stale by a later rate change does nothing.
        if self.job is job and job[3] == generation:
            self.job = None
            job[2].succeed()

    def bump(self, delta: int) -> None:
        job = self.job
        if job is not None:
            now = self.env.now
            job[0] -= (now - job[1]) * self._rate()
            job[1] = now
        self.active_comm += delta
        if job is not None:
            self._schedule()


class Simulation:
    """Run ``graph`` with per-task ``costs`` (indexed by task id); ``run()`` returns the ``Trace``."""

    def __init__(self, graph: StepGraph, costs: Sequence[TaskCost], compute_slowdown: float = 0.0) -> None:
        if len(costs) != len(graph.tasks):
            raise ValueError(f"{len(costs)} costs for {len(graph.tasks)} tasks")
        if compute_slowdown < 0:
            raise ValueError("compute_slowdown must be >= 0")
        self.graph = graph
        self.costs = costs
        self.slowdown = compute_slowdown

    def run(self) -> Trace:
        env = simpy.Environment()
        devices: dict[int, _Device] = {}
        tasks = self.graph.tasks
        # A completion event only for the tasks another stream waits on: an event nobody waits on
        # has no callbacks, and leaving it out does not change the order of the others.
        waited = {d for t in tasks for d in t.deps}
        done: list[simpy.Event | None] = [env.event() if i in waited else None for i in range(len(tasks))]
        finished = bytearray(len(tasks))
        spans: list[Span] = []
        for (dev, stream), stream_tasks in self.graph.streams().items():
            state = devices.setdefault(dev, _Device(env, self.slowdown))
            _Stream(env, state, stream, stream_tasks, self.costs, self.slowdown, done, finished, spans)
        env.run()
        if len(spans) != len(tasks):
            missing = [t for t in tasks if not finished[t.id]]
            first = missing[0]
            raise RuntimeError(
                f"deadlock: {len(missing)} tasks never ran; first: {first.name!r} on {first.stream!r} "
                f"waiting for {first.deps} (a dependency issued later on the same stream, or a cycle)"
            )
        return Trace(tuple(spans))


class _Stream:
    """One stream: runs its tasks in issue order, each once its dependencies have finished.

    A state machine driven by simpy callbacks. It is the generator process it replaces, step for
    step: it is started by an urgent event (as simpy starts a process), and it registers its
    continuation on exactly the events that process would have waited on, in the same order, so
    every event is scheduled and processed in the same order and the spans are bit for bit the
    same; it saves the generator and ``Process`` machinery on each of the 10⁴-10⁵ tasks.
    """

    __slots__ = ("env", "device", "stream", "tasks", "costs", "done", "finished", "append", "i", "dep",
                 "start", "cost", "category", "slow_compute", "is_comm_stream")

    def __init__(self, env, device: _Device, stream: str, tasks: list[Task], costs, slowdown: float,
                 done: list, finished: bytearray, spans: list[Span]) -> None:
        self.env, self.device, self.stream, self.tasks, self.costs = env, device, stream, tasks, costs
        self.done, self.finished, self.append = done, finished, spans.append
        self.is_comm_stream = slowdown > 0 and any(isinstance(t, CollectiveTask) for t in tasks)
        self.slow_compute = stream == COMPUTE and slowdown > 0
        self.i, self.dep = 0, 0
        self.start, self.cost, self.category = 0.0, None, ""
        init = simpy.Event(env)  # what ``env.process`` schedules first: an urgent, triggered event
        init.callbacks.append(self._next)
        init._ok, init._value = True, None
        env.schedule(init, URGENT)

    def _next(self, _event=None) -> None:
        """Wait for the current task's dependencies, then start it."""
        tasks = self.tasks
        if self.i >= len(tasks):
            return
        task = tasks[self.i]
        deps, done = task.deps, self.done
        while self.dep < len(deps):
            ev = done[deps[self.dep]]
            self.dep += 1
            if not ev.processed:
                ev.callbacks.append(self._next)
                return
        self.dep = 0
        env = self.env
        cost = self.cost = self.costs[task.id]
        self.start = env.now
        category = self.category = _CATEGORY.get(type(task), "host")
        if self.slow_compute and category == "compute":
            self.device.compute(cost.duration_s).callbacks.append(self._finished)
        elif self.is_comm_stream and category == "comm":
            self.device.bump(+1)
            env.timeout(cost.duration_s).callbacks.append(self._comm_finished)
        else:
            env.timeout(cost.duration_s).callbacks.append(self._finished)

    def _comm_finished(self, _event) -> None:
        self.device.bump(-1)
        self._finished(_event)

    def _finished(self, _event) -> None:
        task = self.tasks[self.i]
        self.append(Span(task.id, task.name, self.stream, self.category, task.kind, self.start, self.env.now,
                         self.cost.args, task.device))
        self.finished[task.id] = 1
        ev = self.done[task.id]
        if ev is not None:
            ev.succeed()
        self.i += 1
        self._next()


def simulate(graph: StepGraph, costs: Sequence[TaskCost], compute_slowdown: float = 0.0) -> Trace:
    """Convenience wrapper: ``Simulation(graph, costs, compute_slowdown).run()``."""
    return Simulation(graph, costs, compute_slowdown).run()
