"""Micro-batches issued by copying one micro-batch's tasks instead of re-running the hooks.

Without a pipeline, a framework whose hooks keep no state from one micro-batch to the next (every
per-pass structure rebuilt at the pass's first unit, everything else fixed for the step) issues,
for micro-batch ``g``, exactly the tasks of micro-batch ``g − 1``: the same types, streams, ops,
sizes and dependency pattern, ids shifted by the micro-batch's task count, ``mb{g−1}`` renamed
``mb{g}``. Such hooks say so (``Hooks.repeats``); a ``Template`` of one issued micro-batch then
appends each further one, which costs a fraction of running the framework hooks, the prefetcher
and the builder per task.

A template is refused (the caller issues the micro-batches normally) unless every task of the
source micro-batch is tagged with it, every name and every part label ends with `` mb{g}``, and
every dependency points inside the source micro-batch. ``tests/parallel/test_replicate.py`` builds
steps both ways and requires identical task lists.
"""

from __future__ import annotations

from simulator.parallel.ir import CollectiveTask, ComputeTask, CopyTask, GraphBuilder, HostTask


class Template:
    """The tasks of one issued micro-batch with their ids relative to its first, names without
    their `` mb{g}`` suffix; ``append(b, g)`` issues them again as micro-batch ``g``."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    @classmethod
    def of(cls, b: GraphBuilder, lo: int, hi: int, g: int) -> Template | None:
        """The template of tasks ``lo..hi−1`` (micro-batch ``g``), or ``None`` when they are not a
        self-contained, uniformly named micro-batch."""
        suffix = f" mb{g}"
        cut = len(suffix)
        rows = []
        for t in b.tasks[lo:hi]:
            if t.micro_batch != g or not t.name.endswith(suffix):
                return None
            deps = t.deps
            if deps and min(deps) < lo:
                return None
            parts = getattr(t, "parts", ())
            if parts:
                stems = tuple([(label[:-cut], nbytes) for label, nbytes in parts if label.endswith(suffix)])
                if len(stems) != len(parts):
                    return None
                parts = stems
            if type(t) not in (ComputeTask, CollectiveTask, CopyTask, HostTask):
                return None
            rows.append((t, t.name[:-cut], tuple([d - lo for d in deps]), parts))
        return cls(rows)

    def append(self, b: GraphBuilder, g: int) -> int:
        """Issue the template as micro-batch ``g``; returns its first task id."""
        tasks = b.tasks
        base = len(tasks)
        mb = f" mb{g}"
        out = []
        add = out.append
        for i, (t, stem, deps, parts) in enumerate(self.rows):
            tid = base + i
            name = stem + mb
            if len(deps) == 1:
                deps = (deps[0] + base,)
            elif deps:
                deps = tuple([d + base for d in deps])
            kind = type(t)
            if kind is ComputeTask:
                add(ComputeTask(tid, name, t.kind, t.ops, t.stream, deps, g, t.layer, t.device))
            elif kind is CollectiveTask:
                if parts:
                    parts = tuple([(label + mb, nbytes) for label, nbytes in parts])
                add(CollectiveTask(tid, name, t.kind, t.op, t.group, t.nbytes, t.count, t.stream, deps, g,
                                   t.layer, t.device, t.host_s, parts, t.sm_share))
            elif kind is CopyTask:
                add(CopyTask(tid, name, t.direction, t.nbytes, t.stream, deps, t.kind, g, t.layer, t.device, t.source))
            else:
                add(HostTask(tid, name, t.n_params, t.nvme_bytes, t.stream, deps, t.kind, g, t.layer, t.device))
        tasks.extend(out)
        return base
