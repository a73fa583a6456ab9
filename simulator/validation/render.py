"""Writers for a validation pass: terminal table (rich), markdown report, scatter plot (PNG).

All figures come from ``summary.row`` / ``summary.summarize``; nothing here computes an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

from rich.console import Console
from rich.table import Table

from simulator.atomic import replacing
from simulator.validation.intervals import COVERAGE
from simulator.validation.summary import headline


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _num(x: float, metric: str) -> str:
    return f"{x:.3f}" if metric == "MFU" else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def _signed(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}%"


def _groups(summary: dict[str, Any]) -> list[tuple[str, str, int, float | None, float | None]]:
    """(group, value, runs, MAPE, bias) rows of the summary table."""
    out = [("overall", "all simulated", summary["simulated"], summary["mape"], summary.get("bias")),
           ("overall", "pure DP", summary["pure_dp"]["n"], summary["pure_dp"]["mape"], summary["pure_dp"].get("bias")),
           ("overall", "pure DP held-out", summary["held_out_pure_dp"]["n"], summary["held_out_pure_dp"]["mape"],
            summary["held_out_pure_dp"].get("bias"))]
    for title, key in (("GPU", "by_gpu"), ("framework", "by_framework"), ("parallelism", "by_parallelism"),
                       ("model size", "by_model_size"), ("precision", "by_precision"),
                       ("architecture", "by_architecture")):
        out += [(title, k, v["n"], v["mape"], v.get("bias")) for k, v in summary.get(key, {}).items()]
    return out


def print_table(rows: Sequence[dict[str, Any]], summary: dict[str, Any], console: Console) -> None:
    """Per-run table (measured vs predicted in the source's terms, signed error), then summaries."""
    table = Table(title="dtsim validate: measured vs predicted (error = predicted/measured − 1)")
    for col in ("run", "GPU", "framework", "kind", "split", "metric", "measured", "predicted", "error"):
        table.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
    for r in rows:
        if "error" not in r:
            continue
        metric, meas, pred = headline(r)
        table.add_row(r["id"], r["gpu"], r["framework"], r["parallelism"], r["split"] or "", metric,
                      _num(meas, metric), _num(pred, metric), f"{100 * r['error']:+.1f}%")
    console.print(table)
    groups = Table(title="MAPE (mean |error|) and bias (mean error; + = dtsim too fast)")
    for col in ("group", "value", "runs", "MAPE", "bias"):
        groups.add_column(col)
    for g, k, n, m, b in _groups(summary):
        groups.add_row(g, k, str(n), _pct(m), _signed(b))
    console.print(groups)
    check = summary.get("intervals") or {}
    if check.get("groups"):
        console.print(f"{100 * COVERAGE:.0f}% intervals built without each run's publication hold "
                      + ", ".join(f"{k} {_pct(g['covered'])} ({g['n']})" for k, g in _distinct(check["groups"]).items()),
                      highlight=False, soft_wrap=True)
    console.print("worst five: " + ", ".join(f"{w['id']} ({100 * w['error']:+.1f}%)" for w in summary["worst"]),
                  highlight=False, soft_wrap=True)
    tol = summary.get("tolerance", 0.15)
    misses = summary.get("misses", [])
    console.print(f"misses beyond ±{100 * tol:.0f}%: {len(misses)}", highlight=False)
    _print_items(console, [(f"{m['id']} ({100 * m['error']:+.1f}%)", m["cause"]) for m in misses], "shared cause")
    if summary.get("stale_causes"):
        console.print("stale cause entries (remove them from simulator/validation/misses.py): "
                      + ", ".join(summary["stale_causes"]), highlight=False)
    fit = summary.get("fit_check", {"runs": 0, "over": []})
    console.print(f"published runs simulated above their GPU's usable memory (they ran): {len(fit['over'])} of "
                  f"{fit['runs']}; {_does_not_fit(fit)} of them 'does not fit' (allocated peak above it too), the "
                  "rest fit tightly", highlight=False)
    _print_items(console, [(f"{o['id']} ({o['memory_of_usable']:.2f}x, {o.get('verdict', 'does not fit')})",
                            o["cause"]) for o in fit["over"]], "shared cause")
    console.print(f"skipped {summary['skipped']} of {summary['runs']} runs:", highlight=False)
    _print_items(console, [(s["id"], s["reason"]) for s in summary["skipped_runs"]], "shared reason")


def _print_items(console: Console, items: Sequence[tuple[str, str]], word: str) -> None:
    """``label: text`` lines, a text that several labels share printed once after them (``shared_texts``)."""
    shared = shared_texts([text for _, text in items])
    for label, text in items:
        console.print(f"  {label}: {_ref(text, shared, word)}", highlight=False, soft_wrap=True, markup=False)
    for text, i in shared.items():
        console.print(f"  {word} {i}: {text}", highlight=False, soft_wrap=True, markup=False)


#: A text shorter than this stays in its rows ("no named cause" reads better there than as a footnote).
SHARED_MIN_CHARS = 100


def shared_texts(texts: Sequence[str]) -> dict[str, int]:
    """Texts that stand for more than one row (a cause named by a glob, a skip reason) and run longer than
    ``SHARED_MIN_CHARS``, numbered from 1 in order of first use: the writers print each once, below its
    table, and the rows by number. Some causes run to pages and apply to nine runs; printed per row they
    made most of the report."""
    counts = Counter(texts)  # insertion-ordered: first use first
    shared = (t for t, n in counts.items() if n > 1 and len(t) >= SHARED_MIN_CHARS)
    return {t: i for i, t in enumerate(shared, start=1)}


def _ref(text: str, shared: dict[str, int], word: str) -> str:
    """The text, or the number it has among the ``shared`` ones."""
    return f"{word} {shared[text]} (below)" if text in shared else text


def _cell(text: str, shared: dict[str, int], word: str) -> str:
    """``_ref`` as a markdown table cell."""
    return _ref(text, shared, word).replace("|", "/")


def _shared_list(shared: dict[str, int], word: str) -> list[str]:
    """The numbered texts ``shared_texts`` found, as markdown paragraphs after their table."""
    return [line for t, i in shared.items() for line in ("", f"**{word.capitalize()} {i}.** {t}")]


def _does_not_fit(fit: dict[str, Any]) -> int:
    """Runs of the fit check whose dtsim verdict is 'does not fit' (the measurement says they ran)."""
    return sum(1 for o in fit["over"] if o.get("verdict", "does not fit") == "does not fit")


def _runs_table(rows: Sequence[dict[str, Any]], h: str) -> list[str]:
    """The per-run table of the markdown report: measured vs predicted in the source's terms."""
    lines = ["", f"{h}# Runs", "", "| run | GPU | framework | kind | split | metric | measured | predicted | error |",
             "|---|---|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            metric, meas, pred = headline(r)
            lines.append(f"| {r['id']} | {r['gpu']} | {r['framework']} | {r['parallelism']} | {r['split'] or ''} "
                         f"| {metric} | {_num(meas, metric)} | {_num(pred, metric)} | {100 * r['error']:+.1f}% |")
    return lines


def markdown(rows: Sequence[dict[str, Any]], summary: dict[str, Any], command: str,
             image: str = "validation.png", level: int = 1, runs_at: str | None = None) -> str:
    """The validation report as markdown, generated by ``command``: a document of its own
    (docs/validation.md, ``level`` 1) or a README section (``level`` 2, headings one deeper). With
    ``runs_at`` (the README's section) the per-run and skipped tables are left to that document and
    the section keeps the summary, the misses, the memory check and the folds."""
    h = "#" * level
    lines = [
        f"{h} dtsim validation report",
        "",
        f"Generated by `{command}`; do not edit by hand. Runs: the bundled suite "
        "`simulator/validation/runs.yaml` (the 72 runs of the calibration set), `runs_corpus.yaml` (further "
        "published runs, docs/validation-corpus.md) and 83 of vTrain's measured Megatron-DeepSpeed steps "
        "(`vtrain_*.csv`; all 1,549: `python benchmarks/vtrain.py`). Error = predicted / measured − 1 "
        "of throughput (tokens/s per GPU; TFLOP/s and MFU converted with the source's own FLOP convention). "
        "Every pure data-parallel run of a fitted publication is predicted with the parameters fitted without "
        "its publication (leave-one-source-out, docs/calibration.md), so its error is out of sample. `split`: "
        "the former fixed train/test split of the calibration set, kept as a named subset (\"held-out\").",
        "",
        f"**Headline:** pure data-parallel MAPE {_pct(summary['pure_dp']['mape'])} over {summary['pure_dp']['n']} "
        f"runs (held-out {_pct(summary['held_out_pure_dp']['mape'])} over {summary['held_out_pure_dp']['n']}, "
        f"worst held-out {_pct(summary['held_out_pure_dp']['max_abs_error'])}); all simulated runs "
        f"{_pct(summary['mape'])} over {summary['simulated']}; {summary['skipped']} of {summary['runs']} skipped.",
        "",
        f"![predicted vs measured]({image})",
        "",
        f"{h}# Summary",
        "",
        "MAPE = mean |error|; bias = mean error (+: dtsim predicts faster steps than measured, on average).",
        "",
        "| group | value | runs | MAPE | bias |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {g} | {k} | {n} | {_pct(m)} | {_signed(b)} |" for g, k, n, m, b in _groups(summary)]
    if runs_at is not None:
        lines += ["", f"Every run's measured and predicted figures, and the {summary['skipped']} skipped runs with "
                  f"their reasons: {runs_at}."]
    else:
        lines += _runs_table(rows, h)
    lines += _intervals_section(summary, h)
    tol = summary.get("tolerance", 0.15)
    misses = summary.get("misses", [])
    shared = shared_texts([m["cause"] for m in misses])
    lines += ["", f"{h}# Misses beyond ±{100 * tol:.0f}%", "", "| run | error | cause |", "|---|---:|---|"]
    lines += [f"| {m['id']} | {100 * m['error']:+.1f}% | {_cell(m['cause'], shared, 'shared cause')} |"
              for m in misses]
    lines += _shared_list(shared, "shared cause")
    if summary.get("stale_causes"):
        lines += ["", "Stale cause entries (they name the cause of no miss above; remove them from "
                  "simulator/validation/misses.py): " + ", ".join(f"`{e}`" for e in summary["stale_causes"]) + "."]
    fit = summary.get("fit_check", {"runs": 0, "over": []})
    lines += ["", f"{h}# Runs simulated above their GPU's memory", "",
              f"Every published run ran, so its peak memory fit the GPU: a simulated peak above the usable HBM is "
              f"an overestimate of the memory model (simulator/validation/fit_check.py). "
              f"{len(fit['over'])} of {fit['runs']} simulated runs; dtsim's verdict on {_does_not_fit(fit)} of them "
              "is 'does not fit' (the allocated peak, without the allocator's fragmentation allowance, is above "
              "the usable HBM too), on the rest 'fits tightly'.", "",
              "| run | simulated / usable memory | verdict | cause |", "|---|---:|---|---|"]
    shared = shared_texts([o["cause"] for o in fit["over"]])
    lines += [f"| {o['id']} | {o['memory_of_usable']:.2f} | {o.get('verdict', 'does not fit')} | "
              f"{_cell(o['cause'], shared, 'shared cause')} |" for o in fit["over"]]
    lines += _shared_list(shared, "shared cause")
    lines += ["", f"{h}# Leave-one-source-out folds", "",
              "Each publication of the calibration runs held out once: the parameters fitted without it "
              "(GEMM share of MAMF, attention share of the kernel benchmark, overlap slowdown: measured, not "
              "fitted) and the MAPE of its held-out runs (`python benchmarks/calibrate.py` prints the "
              "same folds).", "",
              "| architecture | held-out publication | runs | GEMM / attention / slowdown | MAPE |",
              "|---|---|---:|---|---:|"]
    for f in summary.get("folds", []):
        p = f["params"]
        params = (f"{p['gemm_sustained_of_mamf']:.2f} / {p['attention_sustained_of_bench']:.2f} / "
                  f"{p['compute_slowdown_during_comm']:.2f}")
        lines.append(f"| {f['arch']} | {f['source'].replace('|', '/')} | {f['runs']} | {params} | {_pct(f['mape'])} |")
    if runs_at is not None:
        return "\n".join(lines) + "\n"
    skipped = summary["skipped_runs"]
    shared = shared_texts([s["reason"] for s in skipped])
    lines += ["", f"{h}# Skipped", "", "| run | reason |", "|---|---|"]
    lines += [f"| {s['id']} | {_cell(s['reason'], shared, 'shared reason')} |" for s in skipped]
    lines += _shared_list(shared, "shared reason")
    return "\n".join(lines) + "\n"


def _intervals_section(summary: dict[str, Any], h: str) -> list[str]:
    """How often ``dtsim run``'s interval, built without a run's publication, holds its measured step."""
    check = summary.get("intervals") or {}
    groups = check.get("groups") or {}
    if not groups:
        return []
    pct = f"{100 * COVERAGE:.0f}%"
    lines = ["", f"{h}# Prediction intervals", "",
             f"`dtsim run` gives an {pct} interval of the real step time from the residuals of these runs "
             "(`simulator/validation/intervals.py`, table written by `dtsim validate --intervals`): per GPU "
             "architecture, framework and dense / MoE model, its width from leave-one-publication-out scores "
             f"(z = {check['z']:.3f} standard deviations, where a normal model would give "
             f"{NormalDist().inv_cdf((1 + COVERAGE) / 2):.3f}). Built without each run's own publication (its "
             "group's stats and z both), the interval holds the measured step time of these shares of the runs "
             "(`group` rows: the group `dtsim run` uses):", "",
             "| runs | count | covered |", "|---|---:|---:|"]
    lines += [f"| {k} | {g['n']} | {_pct(g['covered'])} |" for k, g in _distinct(groups).items()]
    return lines


def _distinct(groups: dict[str, Any]) -> dict[str, Any]:
    """Coverage groups without an ``arch/dense`` or ``arch/moe`` line that repeats its architecture's (all its
    runs); ``group …`` lines (the groups ``dtsim run`` uses) are kept."""
    def repeats(k: str, g: dict[str, Any]) -> bool:
        return not k.startswith("group ") and "/" in k and g["n"] == groups[k.split("/")[0]]["n"]

    return {k: g for k, g in groups.items() if not repeats(k, g)}


def scatter_png(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Predicted vs measured tokens/s per GPU (log-log), the y = x line and ±10 % / ±25 % bands.

    matplotlib is imported here only (an optional dependency of the writers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "error" in r]
    fig, ax = plt.subplots(figsize=(6.5, 6))
    styles = {"pure DP": "o", "TP/PP": "s"}
    colors = {"A100": "tab:blue", "H100": "tab:orange"}
    for r in done:
        ax.scatter(r["measured_tokens_per_s_per_gpu"], r["predicted_tokens_per_s_per_gpu"],
                   marker=styles.get(r["parallelism"], "^"), c=colors.get(r["gpu"], "tab:gray"),
                   edgecolors="black" if r["split"] == "test" else "none", s=36)
    values = [v for r in done for v in (r["measured_tokens_per_s_per_gpu"], r["predicted_tokens_per_s_per_gpu"])]
    lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (1, 10)
    ax.plot([lo, hi], [lo, hi], "k-", lw=1)
    for f, style in ((0.10, "--"), (0.25, ":")):
        ax.plot([lo, hi], [lo * (1 + f), hi * (1 + f)], "k" + style, lw=0.6)
        ax.plot([lo, hi], [lo * (1 - f), hi * (1 - f)], "k" + style, lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured tokens/s per GPU",
           ylabel="predicted tokens/s per GPU", title="dtsim vs published runs (--: ±10 %, ···: ±25 %)")
    handles = [plt.Line2D([], [], ls="", marker="o", c=c, label=g) for g, c in colors.items()]
    handles += [plt.Line2D([], [], ls="", marker=m, c="gray", label=k) for k, m in styles.items()]
    handles.append(plt.Line2D([], [], ls="", marker="o", mfc="white", mec="black", label="held-out (test)"))
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


README_START = "<!-- validation:start -->"
README_END = "<!-- validation:end -->"


def splice(document: str, section: str) -> str:
    """Replace what stands between the validation markers of ``document`` by ``section``."""
    if README_START not in document or README_END not in document:
        raise ValueError(f"the file has no {README_START} ... {README_END} markers")
    head, rest = document.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{section}{README_END}{tail}"
