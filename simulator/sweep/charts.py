"""Sweep charts (matplotlib, imported only when a chart is asked for).

Left: step time against the first numeric swept key, one line per value of the next swept key
(e.g. step time vs bucket size, one line per ZeRO stage). Right: expected wall-clock vs cost of every
feasible point with the Pareto front marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
    # The numeric key with the most values is the x axis (a bucket-size range); the varied key with
    # the fewest values names the lines (a ZeRO stage).
    x_key = max(numeric, key=lambda p: len(grid[p])) if numeric else next(iter(grid))
    others = [p for p in grid if p != x_key and len(grid[p]) > 1]
    series_key = min(others, key=lambda p: len(grid[p])) if others else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))

    groups: dict[Any, list[dict]] = {}
    for r in ok:
        groups.setdefault(r.get(series_key) if series_key else "all", []).append(r)
    for label, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        pts = sorted((_num(r[x_key]) or 0.0, float(r["step_time_s"])) for r in members if _num(r[x_key]) is not None)
        if pts:
            ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                     label=f"{series_key}={_label(label)}" if series_key else None)
    xs = [_num(v) for v in grid[x_key]]
    if xs and all(x and x > 0 for x in xs) and max(xs) / min(xs) >= 20:
        ax1.set_xscale("log")
    ax1.set_xlabel(x_key)
    ax1.set_ylabel("step time (s)")
    ax1.set_title("step time")
    if series_key:
        ax1.legend(fontsize=8)
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
    fig.savefig(path, dpi=120)
    plt.close(fig)
