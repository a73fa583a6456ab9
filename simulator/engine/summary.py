"""Where the step's time went, measured from the recorded spans by interval arithmetic.

* compute kinds (forward, backward, recompute, optimizer): busy time of their spans, s; the recompute
  ops inside a backward span (an MoE block's op-level recomputes, ``training.recompute_modules``) count
  as recompute, by their share of the span's GPU work (``args["recompute_share"]``);
* each communication kind: ``on_link_s`` = time at least one of its collectives runs (union of its
  spans) and ``exposed_s`` = the part of that time when no compute kernel runs
  (``measure(union(kind) − union(compute))``);
* offload: PCIe copies on link, and copies + CPU optimizer exposed (the GPU idles meanwhile);
* ``host_bound_s``: of the compute busy time, the part the GPU waits for the CPU to issue kernels
  (each host-bound task's host time minus its GPU work, ``RooflineComputeModel.host_bound``): what CUDA
  graphs, torch.compile or larger micro-batches would win back;
* ``by_dimension``: the same two numbers per parallel dimension: ``tp`` (tensor-parallel
  collectives), ``cp`` (context-parallel K/V ring), ``pp`` (pipeline p2p) and ``dp`` (gradient
  reduction, parameter gathers);
* ``bubble_s`` (pipelines, :func:`stage_row`): from the first to the last forward/backward kernel of
  any stage, the time this stage runs neither a forward, backward or recompute kernel nor one of
  their tensor-parallel collectives (those belong to the pass and are reported as TP
  communication). With uniform stages and free communication it equals ``(p−1)/m`` of the ideal
  compute time (Narayanan et al. SC'21 §2.2), but here it is measured on the simulated spans.
"""

from __future__ import annotations

from typing import Any

from simulator.engine.intervals import exposed, length, measure, subtract, union
from simulator.engine.trace import Trace

COMPUTE_KINDS = ("forward", "backward", "recompute", "optimizer")
COMM_KINDS = ("param_allgather", "grad_reduce", "post_step_gather", "tp", "pp", "cp", "ep")
DIMENSIONS = {"tp": ("tp",), "cp": ("cp",), "pp": ("pp",), "ep": ("ep",), "dp": ("param_allgather", "grad_reduce", "post_step_gather")}
PASS_KINDS = ("forward", "backward", "recompute")


def summarize(trace: Trace) -> dict[str, Any]:
    """Plain-dict summary of one step's trace (seconds).

    One pass over the spans groups them by (category, kind) and merges each group once; every
    union of several groups merges those already merged (far fewer) intervals, the compute union is
    built once and every exposed-time query subtracts from it. Merging is exact (endpoints are
    kept, never recomputed), so the figures equal those of a union of the raw spans bit for bit."""
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    host_bound = 0.0
    moved: dict[str, float] = {}  # recompute time inside other kinds' spans (an MoE block's backward)
    for s in trace.spans:
        if s.args and s.category == "compute":
            host_bound += s.args.get("host_bound_s", 0.0)
            share = s.args.get("recompute_share", 0.0)
            if share and s.kind != "recompute":
                moved[s.kind] = moved.get(s.kind, 0.0) + share * (s.end_s - s.start_s)
        key = (s.category, s.kind)
        ivs = by.get(key)
        if ivs is None:
            ivs = by[key] = []
        ivs.append((s.start_s, s.end_s))
    # busy time per group: its spans' durations added in span order, as a running sum would
    busy = {key: sum([end - start for start, end in ivs], 0.0) for key, ivs in by.items()}
    by = {key: union(ivs) for key, ivs in by.items()}

    def cat(category: str, kinds: tuple[str, ...] | None = None) -> list[tuple[float, float]]:
        return [iv for (c, k), ivs in by.items() if c == category and (kinds is None or k in kinds) for iv in ivs]

    compute_iv = union(cat("compute"))
    splits: dict[tuple, tuple[float, float]] = {}

    def split(category: str, kinds: tuple[str, ...] | None = None) -> dict[str, float]:
        """On-link and exposed time of the union of the groups; each distinct set of non-empty groups
        is merged and measured once (the total and the dp dimension are often the same set). A single
        group is already merged: merging it again returns it unchanged."""
        keys = tuple(key for key, ivs in by.items() if key[0] == category and (kinds is None or key[1] in kinds) and ivs)
        hit = splits.get(keys)
        if hit is None:
            iv = by[keys[0]] if len(keys) == 1 else union([iv for key in keys for iv in by[key]])
            hit = splits[keys] = (length(iv), measure(subtract(iv, compute_iv, merged=True)))
        return {"on_link_s": hit[0], "exposed_s": hit[1]}

    out: dict[str, Any] = {"step_time_s": trace.end_s, "compute_busy_s": length(compute_iv)}
    for kind in COMPUTE_KINDS:
        out[f"{kind}_s"] = busy.get(("compute", kind), 0.0)
    for kind, seconds in moved.items():
        out[f"{kind}_s"] -= seconds
        out["recompute_s"] += seconds
    out["cpu_optimizer_s"] = sum(v for (c, _), v in busy.items() if c == "host")
    out["optimizer_s"] += out["cpu_optimizer_s"]
    # "ep" (MoE token all-to-alls) appears only in runs that have them.
    kinds = [k for k in COMM_KINDS if k != "ep" or ("comm", "ep") in by]
    comm: dict[str, dict[str, float]] = {kind: split("comm", (kind,)) for kind in kinds}
    comm["total"] = split("comm")
    out["communication"] = comm
    out["by_dimension"] = {dim: split("comm", dk) for dim, dk in DIMENSIONS.items() if dim in kinds or dim != "ep"}
    copies = cat("copy")
    host = cat("host")
    out["offload"] = {"on_link_s": measure(copies), "exposed_s": exposed(copies + host, compute_iv),
                      "cpu_optimizer_s": out["cpu_optimizer_s"]}
    out["idle_s"] = out["step_time_s"] - out["compute_busy_s"]
    # compute time the GPU spends waiting for the CPU to issue kernels (host-bound tasks)
    out["host_bound_s"] = host_bound
    return out


def pass_window(trace: Trace) -> tuple[float, float]:
    """[first start, last end] of forward/backward/recompute kernels over all devices (the pipeline
    from its first forward to its flush), s."""
    iv = [(s.start_s, s.end_s) for s in trace.spans if s.category == "compute" and s.kind in PASS_KINDS]
    if not iv:
        return 0.0, 0.0
    return min(a for a, _ in iv), max(b for _, b in iv)


#: Collectives that run inside a forward or backward pass (its tensor-parallel, expert all-to-all and
#: context-parallel ring exchanges): a stage waiting on them is in its pass, not in the pipeline bubble.
IN_PASS_COMM = ("tp", "ep", "cp")


def stage_row(spans: list, window: tuple[float, float]) -> dict[str, float]:
    """One pipeline stage's ``compute_busy_s``, ``bubble_s`` (the ``window`` minus the union of its
    pass kernels and in-pass collectives, ``IN_PASS_COMM``) and ``exposed_comm_s``, from that stage's
    spans."""
    compute = union([(s.start_s, s.end_s) for s in spans if s.category == "compute"])
    passes = union([(s.start_s, s.end_s) for s in spans
                    if (s.category == "compute" and s.kind in PASS_KINDS) or s.kind in IN_PASS_COMM])
    comm = union([(s.start_s, s.end_s) for s in spans if s.category == "comm"])
    return {"compute_busy_s": measure(compute), "bubble_s": (window[1] - window[0]) - measure(passes),
            "exposed_comm_s": measure(subtract(comm, compute, merged=True))}


def bubble(trace: Trace, device: int, window: tuple[float, float]) -> float:
    """Pipeline bubble of ``device``: the window minus the union of its pass kernels and in-pass
    collectives (TP, EP, CP), s."""
    return stage_row([s for s in trace.spans if s.device == device], window)["bubble_s"]
