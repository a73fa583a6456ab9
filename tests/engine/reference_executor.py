"""The generator-process executor dtsim used before issue 14's speed work, kept as the reference
the callback executor (``simulator/engine/executor.py``) must equal span for span, bit for bit.

One simpy process per (device, stream) runs its tasks in issue order: it waits for each unfinished
dependency's completion event, starts the task (compute at a reduced rate while a collective runs
on the same GPU), waits for its end, records the span and triggers the task's completion event.
Collectives that state the SMs they hold (``CollectiveTask.sm_share``, added with the TP overlap)
slow compute by that share, as in the engine.
"""

from __future__ import annotations

import simpy

from simulator.engine.trace import Span, Trace
from simulator.parallel.ir import COMPUTE, CollectiveTask, ComputeTask, CopyTask, Task

_EPS = 1e-15
_CATEGORY = {ComputeTask: "compute", CollectiveTask: "comm", CopyTask: "copy"}


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
        self.held_share = 0.0  # SMs held by collectives that state them (``CollectiveTask.sm_share``)
        # [remaining idle-GPU work (s), time it was last updated, event to fire, generation]
        self.job: list | None = None

    def _rate(self) -> float:
        rate = 1.0 / (1.0 + self.slowdown) if self.active_comm else 1.0
        if self.held_share > 0:
            rate *= max(1.0 - self.held_share, 0.05)
        return rate

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

    def bump(self, delta: int, share: float | None = None) -> None:
        job = self.job
        if job is not None:
            now = self.env.now
            job[0] -= (now - job[1]) * self._rate()
            job[1] = now
        if share is None:
            self.active_comm += delta
        else:
            self.held_share = max(self.held_share + delta * share, 0.0)
        if job is not None:
            self._schedule()


class ReferenceSimulation:
    """Run ``graph`` with per-task ``costs`` (indexed by task id); ``run()`` returns the ``Trace``."""

    def __init__(self, graph, costs, compute_slowdown: float = 0.0) -> None:
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
        done = [env.event() for _ in self.graph.tasks]
        spans: list[Span] = []
        for (dev, stream), tasks in self.graph.streams().items():
            state = devices.setdefault(dev, _Device(env, self.slowdown))
            env.process(self._stream(env, state, stream, tasks, done, spans))
        env.run()
        missing = [t for t, ev in zip(self.graph.tasks, done, strict=True) if not ev.processed]
        if missing:
            first = missing[0]
            raise RuntimeError(
                f"deadlock: {len(missing)} tasks never ran; first: {first.name!r} on {first.stream!r} "
                f"waiting for {first.deps} (a dependency issued later on the same stream, or a cycle)"
            )
        return Trace(tuple(spans))

    def _stream(self, env, device: _Device, stream: str, tasks: list[Task], done, spans: list[Span]):
        # collectives that state the SMs they hold (``sm_share``) slow compute even without the slowdown
        slows = self.slowdown > 0 or any(isinstance(t, CollectiveTask) and t.sm_share for t in self.graph.tasks)
        is_comm_stream = slows and any(isinstance(t, CollectiveTask) for t in tasks)
        slow_compute = stream == COMPUTE and slows
        costs, timeout, append = self.costs, env.timeout, spans.append
        for task in tasks:
            for dep in task.deps:
                if not done[dep].processed:
                    yield done[dep]
            cost = costs[task.id]
            start = env.now
            category = _CATEGORY.get(type(task), "host")
            if slow_compute and category == "compute":
                yield device.compute(cost.duration_s)
            elif is_comm_stream and category == "comm" and (task.sm_share is not None or self.slowdown > 0):
                device.bump(+1, task.sm_share)
                yield timeout(cost.duration_s)
                device.bump(-1, task.sm_share)
            else:
                yield timeout(cost.duration_s)
            append(Span(task.id, task.name, stream, category, task.kind, start, env.now, cost.args, task.device))
            done[task.id].succeed()
