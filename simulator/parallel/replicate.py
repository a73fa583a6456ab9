"""Micro-batches issued by copying the previous one's tasks instead of re-running the hooks.

Without a pipeline, a framework whose hooks keep no state from one micro-batch to the next (every
per-pass structure rebuilt at the pass's first unit, everything else fixed for the step) issues,
for micro-batch ``g``, exactly the tasks of micro-batch ``g − 1``: the same types, streams, ops,
sizes and dependency pattern, ids shifted by the micro-batch's task count, ``mb{g−1}`` renamed
``mb{g}``. Such hooks say so (``Hooks.repeats``); ``copy_micro_batch`` then appends that copy,
which costs a fraction of running the framework hooks, the prefetcher and the builder per task.

A copy is refused (the caller issues the micro-batch normally) unless every task of the source
micro-batch is tagged with it, every name and every part label ends with `` mb{g−1}``, and every
dependency points inside the source micro-batch. ``tests/parallel/test_replicate.py`` builds steps
both ways and requires identical task lists.
"""

from __future__ import annotations

from simulator.parallel.ir import CollectiveTask, ComputeTask, CopyTask, GraphBuilder, HostTask


def copy_micro_batch(b: GraphBuilder, lo: int, hi: int, g_from: int, g_to: int) -> bool:
    """Append tasks ``lo..hi−1`` (micro-batch ``g_from``) again as micro-batch ``g_to``; ``False``
    (nothing appended) when they are not a self-contained, uniformly named micro-batch."""
    tasks = b.tasks
    shift = len(tasks) - lo
    old, new = f" mb{g_from}", f" mb{g_to}"
    cut = len(old)
    out = []
    append = out.append
    for t in tasks[lo:hi]:
        name = t.name
        if t.micro_batch != g_from or not name.endswith(old):
            return False
        name = name[:-cut] + new
        deps = t.deps
        if deps:
            if min(deps) < lo:
                return False
            deps = tuple([d + shift for d in deps])
        tid = t.id + shift
        kind = type(t)
        if kind is ComputeTask:
            append(ComputeTask(tid, name, t.kind, t.ops, t.stream, deps, g_to, t.layer, t.device))
        elif kind is CollectiveTask:
            parts = t.parts
            if parts:
                if not all(label.endswith(old) for label, _ in parts):
                    return False
                parts = tuple([(label[:-cut] + new, nbytes) for label, nbytes in parts])
            append(CollectiveTask(tid, name, t.kind, t.op, t.group, t.nbytes, t.count, t.stream, deps, g_to,
                                  t.layer, t.device, t.host_s, parts, t.sm_share))
        elif kind is CopyTask:
            append(CopyTask(tid, name, t.direction, t.nbytes, t.stream, deps, t.kind, g_to, t.layer, t.device))
        elif kind is HostTask:
            append(HostTask(tid, name, t.n_params, t.nvme_bytes, t.stream, deps, t.kind, g_to, t.layer, t.device))
        else:
            return False
    tasks.extend(out)
    return True
