"""A picture of one simulated step (``dtsim run --png step.png``): one timeline row per stream of each
simulated GPU, coloured by what runs (forward, backward, recompute, optimizer, each communication
kind, offload), gaps are idle; below, the step split into compute, exposed communication per kind and
idle. matplotlib is imported only here."""

from __future__ import annotations

from pathlib import Path

from simulator.atomic import replacing
from simulator.report.step_report import StepReport

COLOURS = {
    "forward": "#4c72b0",
    "backward": "#55a868",
    "recompute": "#8172b3",
    "optimizer": "#937860",
    "param_allgather": "#dd8452",
    "grad_reduce": "#c44e52",
    "post_step_gather": "#da8bc3",
    "tp": "#ccb974",
    "pp": "#64b5cd",
    "offload": "#8c8c8c",
    "idle": "#eeeeee",
}


def write_step_png(report: StepReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = sorted({(s.device, s.stream) for s in report.trace})
    fig, (ax, bar) = plt.subplots(2, 1, figsize=(13, 1.2 + 0.55 * len(rows) + 1.6),
                                  gridspec_kw={"height_ratios": [max(len(rows), 1), 1.3]})
    seen: set[str] = set()
    for y, (device, stream) in enumerate(rows):
        spans = [s for s in report.trace if s.device == device and s.stream == stream]
        by_kind: dict[str, list[tuple[float, float]]] = {}
        for s in spans:
            by_kind.setdefault(s.kind, []).append((s.start_s, s.duration_s))
        for kind, segments in by_kind.items():
            ax.broken_barh(segments, (y - 0.4, 0.8), facecolors=COLOURS.get(kind, "#333333"))
            seen.add(kind)
    ax.set_yticks(range(len(rows)), [f"GPU {d} · {st}" for d, st in rows])
    ax.set_xlim(0, report.step_time_s)
    ax.set_xlabel("time in step (s)")
    ax.set_facecolor(COLOURS["idle"])
    ax.set_title(f"{report.scenario}: one step = {report.step_time_s:.3f} s, MFU {report.mfu:.1%}")
    handles = [Patch(color=COLOURS.get(k, "#333333"), label=k) for k in sorted(seen)]
    handles.append(Patch(color=COLOURS["idle"], label="idle"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)

    b = report.breakdown
    parts = [("forward", b["forward_s"]), ("backward", b["backward_s"]), ("recompute", b["recompute_s"]),
             ("optimizer", b["optimizer_s"]), ("offload", b["offload"]["exposed_s"])]
    parts += [(k, v["exposed_s"]) for k, v in b["communication"].items() if k != "total"]
    used = sum(v for _, v in parts)
    parts.append(("idle", max(report.step_time_s - used, 0.0)))
    left = 0.0
    for kind, value in parts:
        if value <= 0:
            continue
        bar.barh(0, value, left=left, color=COLOURS.get(kind, "#333333"), edgecolor="white")
        if value / report.step_time_s > 0.06:
            bar.text(left + value / 2, 0, f"{kind}\n{value / report.step_time_s:.0%}", ha="center", va="center",
                     fontsize=8)
        left += value
    bar.set_xlim(0, max(left, report.step_time_s))
    bar.set_yticks([])
    bar.set_xlabel("step time split: compute, exposed communication by kind, idle (s)")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
