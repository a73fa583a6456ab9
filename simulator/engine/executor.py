"""The discrete-event executor: plays a ``StepGraph`` on one representative GPU with simpy.

Semantics (CUDA streams):

* every stream of every representative GPU (one per pipeline stage) runs its tasks strictly in
  issue order (FIFO), one at a time;
* a task starts when it is at the head of its stream and every task in ``deps`` has finished;
* a task's duration is given (``TaskCost.duration_s``) except on the compute stream while a
  collective runs on the same GPU: NCCL kernels occupy SMs and HBM bandwidth, so compute then
  progresses at rate ``1 / (1 + compute_slowdown)`` (work-conserving; the rate changes whenever a
  collective starts or ends). A collective that states the share of SMs it holds
  (``CollectiveTask.sm_share``, Transformer Engine's userbuffers TP overlap) leaves compute the
  rest: rate ``(1 − Σ sm_share) / (1 + compute_slowdown if an NCCL collective runs)``.

The engine knows nothing about frameworks or hardware; it records spans. This is the only module
that imports simpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from heapq import heappush
from itertools import chain
from typing import Any

import simpy
from simpy.events import NORMAL, URGENT

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


class _Event:
    """A simpy event reduced to what ``Environment.step`` reads (``callbacks``, ``_ok``), put on
    simpy's queue under the key ``Environment.schedule`` gives it: ``(now + delay, priority, eid)``.
    Timers and task completions are made by the thousand per step; a full ``simpy.Event`` (and its
    ``schedule`` call) cost more than the work they stand for."""

    __slots__ = ("callbacks", "_ok", "_value", "at")

    def __init__(self, callbacks: list) -> None:
        self.callbacks = callbacks
        self._ok = True
        self._value = None


def _push(env: simpy.Environment, delay: float, callback, priority=NORMAL) -> _Event:
    """What ``env.timeout(delay).callbacks.append(callback)`` schedules: the same key on the queue."""
    event = _Event([callback])
    heappush(env._queue, (env._now + delay, priority, next(env._eid), event))
    return event


class _Device:
    """Shared state of one GPU: how many collectives run now, and the compute task in progress.

    The compute task's finish time is re-planned whenever a collective starts or ends (its rate
    changes), by callbacks rather than by waking the compute stream, with the same arithmetic as a
    process that re-plans its remaining work and sleeps until then.

    Such a process leaves a stale timer on the queue at every rate change. Here each re-planned
    finish reserves its place in simpy's order (time and event id, as ``schedule`` would give it)
    but is put on the queue only when it is earlier than the one already there: a timer that comes
    due before the planned finish puts the planned one on the queue then, under its reserved key.
    Since that happens before anything later than the due timer is processed, the queue yields the
    same events in the same order, without the stale ones (which did nothing).
    """

    __slots__ = ("env", "slowdown", "slow_rate", "active_comm", "held_share", "rate", "job")

    def __init__(self, env: simpy.Environment, slowdown: float) -> None:
        self.env = env
        self.slowdown = slowdown
        self.slow_rate = 1.0 / (1.0 + slowdown)
        self.active_comm = 0
        # SMs held by collectives that size their own kernels (``sm_share``), summed while they run
        self.held_share = 0.0
        self.rate = 1.0  # compute's current rate: ``_rate()``, kept up to date by ``bump``
        # [remaining idle-GPU work (s), time it was last updated, stream to notify,
        #  planned finish (time, eid), key (time, eid) of the timer on the queue]
        self.job: list | None = None

    def _rate(self) -> float:
        rate = self.slow_rate if self.active_comm else 1.0
        if self.held_share > 0:
            rate *= max(1.0 - self.held_share, 0.05)
        return rate

    def compute(self, work_s: float, stream: _Stream) -> None:
        """Start ``work_s`` of idle-GPU work; ``stream._finished`` is called when it is done."""
        env = self.env
        if work_s <= _EPS:
            self.job = None
            _push(env, 0, stream._finished)  # the "done" event, as the generator engine had it
            return
        now = env._now
        # the key ``env.schedule`` would give a timer of the work at the current rate
        plan = (now + work_s / self.rate, next(env._eid))
        self.job = [work_s, now, stream, plan, plan]
        self._queue(plan)

    def _schedule(self, job: list) -> None:
        env = self.env
        if job[0] <= _EPS:
            self.job = None
            _push(env, 0, job[2]._finished)  # the "done" event, as the generator engine had it
            return
        # the key ``env.schedule`` would give a timer of the remaining work at the current rate
        plan = job[3] = (env._now + job[0] / self.rate, next(env._eid))
        queued = job[4]
        if queued is None or plan[0] < queued[0]:
            job[4] = plan
            self._queue(plan)

    def _queue(self, key: tuple) -> None:
        event = _Event([self._fired])
        event.at = key
        heappush(self.env._queue, (key[0], NORMAL, key[1], event))

    def _fired(self, event: _Event) -> None:
        job = self.job
        if job is None or event.at is not job[4]:
            return  # a timer of a finished job, or one overtaken by an earlier plan: it does nothing
        if job[3] is not event.at:
            # the plan moved later since this timer was queued: queue it now, under its own key
            job[4] = job[3]
            self._queue(job[3])
            return
        self.job = None
        env = self.env
        queue = env._queue
        if not queue or queue[0][0] > env._now:
            # Nothing else is due at this instant, so a "done" event scheduled now would be the
            # very next one processed: finishing the task here is the same, one event less.
            job[2]._finished(None)
        else:
            _push(env, 0, job[2]._finished)

    def bump(self, delta: int, share: float | None = None) -> None:
        """A collective starts (``delta`` +1) or ends (−1); ``share``: the SMs it holds (else NCCL's)."""
        job = self.job
        if job is not None:
            now = self.env._now
            job[0] -= (now - job[1]) * self.rate
            job[1] = now
        if share is None:
            self.active_comm += delta
        else:
            self.held_share = max(self.held_share + delta * share, 0.0)
        self.rate = self._rate()
        if job is not None:
            self._schedule(job)


class Simulation:
    """Run ``graph`` with per-task ``costs`` (indexed by task id); ``run()`` returns the ``Trace``."""

    def __init__(self, graph: StepGraph, costs: Sequence[TaskCost], compute_slowdown: float = 0.0) -> None:
        if len(costs) != len(graph.tasks):
            raise ValueError(f"{len(costs)} costs for {len(graph.tasks)} tasks")
        if compute_slowdown < 0:
            raise ValueError("compute_slowdown must be >= 0")
        if any(c.duration_s < 0 for c in costs):
            raise ValueError("task durations must be >= 0")
        self.graph = graph
        self.costs = costs
        self.slowdown = compute_slowdown
        # collectives that state the SMs they hold (TE userbuffers TP overlap) slow compute too
        self.shares = any(isinstance(t, CollectiveTask) and t.sm_share for t in graph.tasks)

    def run(self) -> Trace:
        env = simpy.Environment()
        devices: dict[int, _Device] = {}
        tasks = self.graph.tasks
        # A completion event only for the tasks another task waits on: an event nobody waits on
        # has no callbacks, and leaving it out does not change the order of the others.
        done: list[_Event | None] = [None] * len(tasks)
        for d in set(chain.from_iterable([t.deps for t in tasks])):
            done[d] = _Event([])
        spans: list[Span] = []
        for (dev, stream), stream_tasks in self.graph.streams().items():
            state = devices.setdefault(dev, _Device(env, self.slowdown))
            _Stream(env, state, stream, stream_tasks, self.costs, self.slowdown, done, spans, self.shares)
        env.run()
        if len(spans) != len(tasks):
            ran = {s.task_id for s in spans}
            missing = [t for t in tasks if t.id not in ran]
            first = missing[0]
            raise RuntimeError(
                f"deadlock: {len(missing)} tasks never ran; first: {first.name!r} on {first.stream!r} "
                f"waiting for {first.deps} (a dependency issued later on the same stream, or a cycle)"
            )
        return Trace(tuple(spans))


class _Stream:
    """One stream: runs its tasks in issue order, each once its dependencies have finished.

    A state machine driven by simpy callbacks, equivalent step for step to a generator process
    that, per task, waits for each unfinished dependency's completion event, starts the task,
    waits for its end and then triggers its own completion event (the engine before issue 14;
    ``tests/engine/reference_executor.py``). It is started by an urgent event, as simpy starts a
    process, and registers its continuation where that process would have waited, so events are
    scheduled and processed in the same order and every span is the same, bit for bit.

    Two events of that process are elided where they provably change nothing: a completion event
    nobody waits on, and an event that would be the very next one processed (nothing else due at
    the same instant), whose callbacks then run at once, in the same order.
    """

    __slots__ = ("env", "queue", "device", "stream", "tasks", "n", "costs", "done", "append", "i", "dep", "task",
                 "start", "cost", "category", "slow_compute", "is_comm_stream")

    def __init__(self, env: simpy.Environment, device: _Device, stream: str, tasks: list[Task], costs,
                 slowdown: float, done: list, spans: list[Span], shares: bool = False) -> None:
        self.env, self.queue, self.device, self.stream, self.tasks = env, env._queue, device, stream, tasks
        self.costs, self.n, self.done, self.append, self.task = costs, len(tasks), done, spans.append, None
        slows = slowdown > 0 or shares
        self.is_comm_stream = slows and any(isinstance(t, CollectiveTask) for t in tasks)
        self.slow_compute = stream == COMPUTE and slows
        self.i, self.dep = 0, 0
        self.start, self.cost, self.category = 0.0, None, ""
        _push(env, 0, self._next, URGENT)  # what ``env.process`` schedules first

    def _next(self, _event=None) -> None:
        """Wait for the current task's dependencies, then start it."""
        if self.i >= self.n:
            return
        task = self.task = self.tasks[self.i]
        deps = task.deps
        if deps:
            done = self.done
            while self.dep < len(deps):
                ev = done[deps[self.dep]]
                self.dep += 1
                if ev.callbacks is not None:  # not processed yet
                    ev.callbacks.append(self._next)
                    return
            self.dep = 0
        env = self.env
        cost = self.cost = self.costs[task.id]
        self.start = env._now
        category = self.category = _CATEGORY.get(type(task), "host")
        if self.slow_compute and category == "compute":
            self.device.compute(cost.duration_s, self)
        elif self.is_comm_stream and category == "comm" and (task.sm_share is not None or self.device.slowdown > 0):
            self.device.bump(+1, task.sm_share)
            _push(env, cost.duration_s, self._comm_finished)
        else:
            _push(env, cost.duration_s, self._finished)

    def _comm_finished(self, _event) -> None:
        self.device.bump(-1, self.task.sm_share)
        self._finished(_event)

    def _finished(self, _event) -> None:
        task = self.task
        env = self.env
        now = env._now
        self.append(Span(task.id, task.name, self.stream, self.category, task.kind, self.start, now,
                         self.cost.args, task.device))
        self.i += 1
        ev = self.done[task.id]
        if ev is None:
            self._next()
            return
        queue = self.queue
        if not queue or queue[0][0] > now:
            # Nothing else is due now: the completion event would be processed right after this
            # stream's continuation, before anything that continuation schedules.
            self._next()
            if not queue or queue[0][0] > now:
                callbacks, ev.callbacks = ev.callbacks, None
                for callback in callbacks:
                    callback(ev)
            else:  # the continuation scheduled something for now: the event must come first
                heappush(queue, (now, URGENT, next(env._eid), ev))
        else:
            heappush(queue, (now, NORMAL, next(env._eid), ev))  # what ``event.succeed()`` schedules
            self._next()


def simulate(graph: StepGraph, costs: Sequence[TaskCost], compute_slowdown: float = 0.0) -> Trace:
    """Convenience wrapper: ``Simulation(graph, costs, compute_slowdown).run()``."""
    return Simulation(graph, costs, compute_slowdown).run()
