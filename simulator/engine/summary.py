"""Where the step's time went, measured from the recorded spans by interval arithmetic.

* compute kinds (forward, backward, recompute, optimizer): busy time of their spans, s;
* each communication kind: ``on_link_s`` = time at least one of its collectives runs (union of its
  spans) and ``exposed_s`` = the part of that time when no compute kernel runs
  (``measure(union(kind) − union(compute))``);
* offload: PCIe copies on link, and copies + CPU optimizer exposed (the GPU idles meanwhile).
"""

from __future__ import annotations

from typing import Any

from simulator.engine.intervals import exposed, measure, union
from simulator.engine.trace import Trace

COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer")
COMM_KINDS = ("param_allgather", "grad_reduce", "post_step_gather", "tp", "pp")


def summarize(trace: Trace) -> dict[str, Any]:
    """Plain-dict summary of one step's trace (seconds)."""
    compute_iv = union(trace.intervals(category="compute"))
    out: dict[str, Any] = {"step_time_s": trace.end_s, "compute_busy_s": measure(compute_iv)}
    for kind in COMPUTE_KINDS:
        out[f"{kind}_s"] = sum(s.duration_s for s in trace.spans if s.category == "compute" and s.kind == kind)
    out["cpu_optimizer_s"] = sum(s.duration_s for s in trace.spans if s.category == "host")
    out["optimizer_s"] += out["cpu_optimizer_s"]
    comm: dict[str, dict[str, float]] = {}
    for kind in COMM_KINDS:
        iv = trace.intervals(category="comm", kind=kind)
        comm[kind] = {"on_link_s": measure(iv), "exposed_s": exposed(iv, compute_iv)}
    all_comm = trace.intervals(category="comm")
    comm["total"] = {"on_link_s": measure(all_comm), "exposed_s": exposed(all_comm, compute_iv)}
    out["communication"] = comm
    copies = trace.intervals(category="copy")
    host = trace.intervals(category="host")
    out["offload"] = {"on_link_s": measure(copies), "exposed_s": exposed(copies + host, compute_iv),
                      "cpu_optimizer_s": out["cpu_optimizer_s"]}
    out["idle_s"] = out["step_time_s"] - out["compute_busy_s"]
    return out
