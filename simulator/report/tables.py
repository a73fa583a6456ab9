"""Rich terminal rendering of a ``StepReport`` (the CLI prints it; no file I/O here)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simulator.report.step_report import StepReport
from simulator.units import fmt_bytes, fmt_seconds, fmt_seconds_range

_COMM_LABELS = {
    "param_allgather": "param all-gather",
    "grad_reduce": "gradient reduce",
    "post_step_gather": "post-step gather",
    "tp": "tensor parallel",
    "pp": "pipeline p2p",
    "cp": "context parallel",
    "ep": "expert all-to-all",
}


def memory_verdict(mem: dict) -> str:
    """The fit verdict of a memory breakdown (``workload.memory.breakdown``'s dict), rich markup: fits
    with its headroom; fits tightly (the allocated peak fits, the fragmentation allowance does not);
    or does not fit, short by what the allocated peak exceeds."""
    frag = mem.get("fragmentation_bytes", 0.0)
    if mem["fits"] and not mem.get("tight"):
        return f"[green]fits[/]: headroom {fmt_bytes(mem['headroom_bytes'])}"
    if mem["fits"]:
        return (f"[yellow]fits tightly[/]: {fmt_bytes(mem['headroom_bytes'] + frag)} to spare at the allocated "
                f"peak, {fmt_bytes(-mem['headroom_bytes'])} over with the allocator's fragmentation allowance "
                f"({fmt_bytes(frag)}): expect cache flushes and cudaMalloc retries near the peak "
                "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids most)")
    return f"[bold red]does not fit[/]: short by {fmt_bytes(-(mem['headroom_bytes'] + frag))} at the allocated peak"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def render(report: StepReport, console: Console, interval: Any = None) -> None:
    """The run report; ``interval`` (``simulator.validation.intervals.Interval``) adds the expected
    error band of the step time from the validation residuals."""
    lay, bd, step = report.layout, report.breakdown, report.step_time_s
    n_micro = lay["grad_accum_steps"]
    cp = f", cp={lay['cp']}" if lay.get("cp", 1) > 1 else ""
    cap = f" at {lay['gpu_power_limit_W']:g} W" if "gpu_power_limit_W" in lay else ""
    console.print(
        f"[bold]{escape(report.scenario)}[/]: {lay['framework']} ZeRO-{lay['zero_stage']}"
        f"{' (BF16_Optimizer)' if lay.get('bf16_optimizer') else ''}{', Muon' if lay.get('optimizer') else ''}"
        f" on {report.n_gpus} x "
        f"{lay['gpu']}{cap} (dp={lay['dp']}, tp={lay['tp']}{cp}, pp={lay['pp']}, "
        + (f"ep={lay['ep']}, etp={lay['etp']}, edp={lay['edp']}, " if "ep" in lay else "")
        + f"{n_micro} micro-batch{'' if n_micro == 1 else 'es'} of {lay['micro_batch_size']})"
    )
    summary = Table(show_header=False, box=None)
    step_text = fmt_seconds(step)
    if interval is not None:
        step_text += (f", {100 * interval.coverage:.0f}% interval {fmt_seconds_range(interval.low_s, interval.high_s)} "
                      f"(validation residuals: {interval.group}, {interval.n_runs} runs)")
    summary.add_row("step time", step_text)
    summary.add_row("tokens/s", f"{report.tokens_per_s:,.0f}  ({report.tokens_per_s_per_gpu:,.0f} per GPU)")
    convention = "causal" if "attention 'causal'" in report.conventions.get("mfu", "") else "full"
    summary.add_row(f"MFU ({convention} attn) / HFU", f"{100 * report.mfu:.1f}% / {100 * report.hfu:.1f}%")
    console.print(summary)

    t = Table(title="where the step goes (representative rank)")
    t.add_column("component")
    t.add_column("on link / busy", justify="right")
    t.add_column("exposed", justify="right")
    t.add_column("of step", justify="right")
    for key in ("forward", "backward", "recompute", "optimizer"):
        value = bd[f"{key}_s"]
        if value == 0 and key == "recompute":
            continue
        t.add_row(key, fmt_seconds(value), "", _pct(value, step))
    if bd.get("host_bound_s"):  # part of the busy time above: the GPU waits for the CPU to issue kernels
        t.add_row("  of the compute above, CPU-bound", fmt_seconds(bd["host_bound_s"]), "", _pct(bd["host_bound_s"], step))
    for kind, label in _COMM_LABELS.items():
        c = bd["communication"].get(kind)
        if c and c["on_link_s"] > 0:
            t.add_row(label, fmt_seconds(c["on_link_s"]), fmt_seconds(c["exposed_s"]), _pct(c["exposed_s"], step))
    off = bd["offload"]
    if off["on_link_s"] > 0 or off["cpu_optimizer_s"] > 0:
        t.add_row("offload (PCIe + CPU)", fmt_seconds(off["on_link_s"]), fmt_seconds(off["exposed_s"]),
                  _pct(off["exposed_s"], step))
    # The idle time holds the exposed communication above and the pipeline bubble: not added again.
    t.add_row("compute stream idle", "", fmt_seconds(bd["idle_s"]), _pct(bd["idle_s"], step))
    if bd.get("bubble_s"):
        t.add_row("  of which pipeline bubble", "", fmt_seconds(bd["bubble_s"]), _pct(bd["bubble_s"], step))
    console.print(t)
    _dimensions(bd, console)
    _stages(report, console)

    mem = report.memory
    m = Table(title="memory per GPU")
    m.add_column("component")
    m.add_column("size", justify="right")
    for key, value in mem.items():
        if key.endswith("_bytes") and key not in ("total_bytes", "hbm_bytes", "headroom_bytes") and value:
            m.add_row(key.removesuffix("_bytes"), fmt_bytes(value))
    m.add_row("[bold]total", fmt_bytes(mem["total_bytes"]))
    m.add_row("usable HBM", fmt_bytes(mem["hbm_bytes"]))
    console.print(m)
    console.print(memory_verdict(mem))


def _dimensions(bd: dict, console: Console) -> None:
    """Exposed vs on-link communication per parallel dimension (TP / PP / DP), when there are two."""
    dims = {k: v for k, v in bd.get("by_dimension", {}).items() if v["on_link_s"] > 0}
    if len(dims) < 2:
        return
    d = Table(title="communication by parallel dimension")
    d.add_column("dimension")
    d.add_column("on link", justify="right")
    d.add_column("exposed", justify="right")
    for dim, c in dims.items():
        d.add_row(dim.upper(), fmt_seconds(c["on_link_s"]), fmt_seconds(c["exposed_s"]))
    console.print(d)


def _stages(report: StepReport, console: Console) -> None:
    """One row per pipeline stage: layers, busy, bubble, exposed communication, activations."""
    bd = report.breakdown
    if not bd.get("stages"):
        return
    st = Table(title="pipeline stages")
    for col in ("stage", "layers", "compute busy", "bubble", "exposed comm", "activations"):
        st.add_column(col, justify="right")
    mem_rows = {r["stage"]: r for r in report.memory.get("stages", [])}
    layers = report.layout.get("stage_layers") or []
    for row in bd["stages"]:
        i = row["stage"]
        mr = mem_rows.get(i)
        st.add_row(str(i), str(layers[i]) if i < len(layers) else "", fmt_seconds(row["compute_busy_s"]),
                   fmt_seconds(row.get("bubble_s", 0.0)), fmt_seconds(row.get("exposed_comm_s", 0.0)),
                   fmt_bytes(mr["activations_bytes"]) if mr else "")
    console.print(st)
