"""Sweep charts (matplotlib, imported only when a chart is asked for).

Left: step time against the numeric swept key with the most values, one line per combination of
the other swept keys (e.g. step time vs bucket size, one line per ZeRO stage), the legend beside
the plot; integer keys get integer ticks; a sweep without a feasible point says so. Right: expected wall-clock vs cost of every
feasible point with the Pareto front marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.atomic import replacing


def _num(v: Any) -> float | None:
    try:
        return None if v in (None, "") else float(v)
    except (TypeError, ValueError):
        return None


def _label(v: Any) -> str:
    n = _num(v)
    return f"{n:g}" if n is not None else str(v)


def write_sweep_png(rows: list[dict], grid: dict[str, list], front: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    numeric = [p for p, vals in grid.items() if len(vals) > 1 and all(_num(v) is not None for v in vals)]
    # The numeric key with the most values is the x axis (a bucket-size range); every other varied key
    # together names a line, so a line joins only points that differ in x (no sawtooth across axes).
    x_key = max(numeric, key=lambda p: len(grid[p])) if numeric else next(iter(grid))
    others = [p for p in grid if p != x_key and len(grid[p]) > 1]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))

    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault(tuple(r.get(k) for k in others), []).append(r)
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        pts = sorted((_num(r[x_key]) or 0.0, float(r["step_time_s"])) for r in members if _num(r[x_key]) is not None)
        if pts:
            label = ", ".join(f"{k}={_label(v)}" for k, v in zip(others, key, strict=True)) or None
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    xs = [_num(v) for v in grid[x_key]]
    if xs and all(x and x > 0 for x in xs) and max(xs) / min(xs) >= 20:
        ax1.set_xscale("log")
    elif xs and all(x is not None and float(x).is_integer() for x in xs):
        ax1.set_xticks(sorted(set(xs)))  # integer keys (micro-batch, tp): no 1.25 ticks
    ax1.set_xlabel(x_key)
    ax1.set_ylabel("step time (s)")
    ax1.set_title("step time")
    if not ok:
        ax1.text(0.5, 0.5, "no feasible point: every point was invalid\nor out of memory (see the results file)",
                 ha="center", va="center", transform=ax1.transAxes)
    elif others:
        ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, not over
    ax1.grid(alpha=0.3)

    pairs = [(_num(r.get("wall_clock_s")), _num(r.get("cost_usd"))) for r in ok]
    pairs = [(a / 86400, b) for a, b in pairs if a is not None and b is not None]
    if pairs:
        ax2.scatter([p[0] for p in pairs], [p[1] for p in pairs], s=14, alpha=0.6, label="feasible points")
        fx = [float(r["wall_clock_s"]) / 86400 for r in front]
        fy = [float(r["cost_usd"]) for r in front]
        ax2.plot(fx, fy, color="crimson", marker="D", label="Pareto front")
        ax2.legend(fontsize=8)
    else:
        ax2.text(0.5, 0.5, "no run budget or no feasible point", ha="center", transform=ax2.transAxes)
    ax2.set_xlabel("expected wall-clock (days)")
    ax2.set_ylabel("cost (USD)")
    ax2.set_title("cost vs time")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
