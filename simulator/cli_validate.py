"""``dtsim validate [--only GLOB] [--kind pure_dp|tp_pp] [--json] [--max-mape PCT] [--png F] [--markdown F]
[--readme F] [--intervals F]``.

Simulates every run of the bundled validation suite (``simulator/validation/runs.yaml``,
``runs_corpus.yaml`` and the vTrain runs of ``simulator.validation.vtrain``), prints measured vs predicted in the source's own terms with the signed error,
and MAPE overall, for the pure data-parallel runs and their held-out part, by GPU, framework,
parallelism kind, model size and precision, plus the worst five, and how often ``dtsim run``'s 80 % interval
built without a run's publication holds it. Runs without a scenario, or that dtsim refuses (``InputError``), are
listed as skipped. ``--intervals`` writes the prediction-interval table of ``dtsim run``
(``simulator/validation/intervals.yaml``) from the residuals of the whole suite.

Exit codes: 0 ok; 1 MAPE of the simulated runs above ``--max-mape``, or no run simulated (every
selected run skipped: nothing was validated); 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from simulator.atomic import write_text
from simulator.cli_common import finite, handle_errors, print_json, stderr, stdout
from simulator.cli_output import check_output
from simulator.errors import InputError
from simulator.validation.render import README_END, README_START, markdown, print_table, scatter_png, splice
from simulator.validation.suite import load_runs, select, try_run
from simulator.validation.summary import row, summarize

#: Exit code when the MAPE exceeds ``--max-mape``.
EXIT_MAPE = 1

OnlyOption = Annotated[str | None, typer.Option("--only", help="run ids matching this glob (comma-separated globs)")]
KindOption = Annotated[str | None, typer.Option("--kind", help="only 'pure_dp' or 'tp_pp' runs")]
JsonOption = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]
MaxOption = Annotated[float | None, typer.Option("--max-mape", min=0, callback=finite,
                                                 help="exit 1 when the MAPE (percent) exceeds this")]
PngOption = Annotated[Path | None, typer.Option("--png", help="write a predicted-vs-measured scatter plot (PNG)")]
MdOption = Annotated[Path | None, typer.Option("--markdown", help="write the markdown report (docs/validation.md)")]
MemoryOption = Annotated[bool, typer.Option("--memory", help="validate the memory model against measured peak "
                                             "memory per GPU (simulator/validation/memory_runs.yaml)")]
IntervalsOption = Annotated[Path | None, typer.Option("--intervals", help="write the prediction-interval table "
                                                        "of dtsim run (simulator/validation/intervals.yaml) from "
                                                        "this pass's residuals; needs the whole suite")]
ReadmeOption = Annotated[Path | None, typer.Option("--readme", help="replace the report between the "
                                                     "validation markers of this file (README.md)")]


def validate_command(only: OnlyOption = None, kind: KindOption = None, json_out: JsonOption = False,
                     max_mape: MaxOption = None, png: PngOption = None, markdown_out: MdOption = None,
                     readme: ReadmeOption = None, memory_runs: MemoryOption = False,
                     intervals_out: IntervalsOption = None) -> None:
    """Simulate the published runs of the validation suite; measured vs predicted, MAPE by group."""
    if memory_runs:
        code = _validate_memory(only, json_out, max_mape)
    else:
        code = _validate(only, kind, json_out, max_mape, png, markdown_out, readme, intervals_out)
    if code:
        raise typer.Exit(code)


def _command_line(only: str | None, kind: str | None, png: Path | None, md: Path | None,
                  readme: Path | None = None, intervals_out: Path | None = None) -> str:
    parts = ["dtsim validate"]
    parts += [f"--only '{only}'"] if only else []
    parts += [f"--kind {kind}"] if kind else []
    parts += [f"--png {png}"] if png else []
    parts += [f"--markdown {md}"] if md else []
    parts += [f"--readme {readme}"] if readme else []
    parts += [f"--intervals {intervals_out}"] if intervals_out else []
    return " ".join(parts)


@handle_errors
def _validate_memory(only: str | None, json_out: bool, max_mape: float | None) -> int:
    """``--memory``: measured peak memory per GPU vs ``workload.memory.breakdown``."""
    from rich.markup import escape
    from rich.table import Table

    from simulator.validation import memory_suite

    sources, runs = memory_suite.load()
    runs = tuple(select(runs, only))
    if not runs and not select(memory_suite.load_boundaries(), only):
        raise InputError(f"no memory validation run matches --only {only!r}", "--only")
    rows = [memory_suite.row(r, sources) for r in runs]
    bounds = [memory_suite.boundary_row(b, sources) for b in select(memory_suite.load_boundaries(), only)]
    summary = memory_suite.summarize(rows, bounds)
    if json_out:
        print_json({"rows": rows, "boundaries": bounds, "summary": summary})
    else:
        console = stdout if stdout.is_terminal else Console(width=150)
        table = Table(title="memory per GPU: measured vs dtsim")
        for col in ("run", "source detail", "measured GiB", "dtsim GiB", "error"):
            table.add_column(col, justify="left" if col in ("run", "source detail") else "right")
        for r in rows:
            cells = ((f"{r['predicted_GiB']:.1f}", f"{100 * r['error']:+.1f}%") if "error" in r else ("-", "skipped"))
            table.add_row(escape(r["id"]), escape(r["detail"]), f"{r['measured_GiB']:.1f}", *cells)
        console.print(table)
        mape = summary["mape"]
        console.print(f"MAPE {'-' if mape is None else f'{100 * mape:.1f}%'} over {summary['simulated']} runs; "
                      f"misses beyond ±{100 * summary['tolerance']:.0f}%: {len(summary['misses'])}", highlight=False)
        for m in summary["misses"]:
            console.print(f"  {m['id']} ({100 * m['error']:+.1f}%): {m['cause']}", markup=False, highlight=False,
                          soft_wrap=True)
        b = summary["boundaries"]
        if b["n"]:
            console.print(f"fit boundaries: {b['agree']} of {b['n']} fits/OOM verdicts agree", highlight=False)
            for d in b["disagree"]:
                console.print(f"  {d['id']}: reported {d['outcome']}, dtsim {d['predicted']}: {d['cause']}",
                              markup=False, highlight=False, soft_wrap=True)
        for s in summary["skipped_runs"]:
            console.print(f"  skipped {s['id']}: {s['reason']}", markup=False, highlight=False, soft_wrap=True)
        for key, text in sources.items():
            console.print(f"source {key}: {text}", markup=False, highlight=False, soft_wrap=True)
    nothing = summary["simulated"] == 0 and summary["boundaries"]["n"] == 0
    return _exit_code(nothing, "no memory run was simulated", "memory MAPE", summary["mape"], max_mape)


def _simulate_all(runs: list, show: bool) -> list[dict]:
    """Every run simulated in order; a progress bar on a terminal's stderr (the full suite takes minutes)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    rows = []
    with Progress(TextColumn("validate {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=not show, transient=True) as progress:
        task = progress.add_task("", total=len(runs))
        for run in runs:
            progress.update(task, description=run.id)
            rows.append(row(try_run(run)))
            progress.advance(task)
    return rows


@handle_errors
def _validate(only: str | None, kind: str | None, json_out: bool, max_mape: float | None, png: Path | None,
              md: Path | None, readme: Path | None = None, intervals_out: Path | None = None) -> int:
    check_output(png, "--png", (".png",))
    check_output(md, "--markdown", (".md", ".markdown"), (png,))
    check_output(intervals_out, "--intervals", (".yaml", ".yml"), (png, md, readme))
    if intervals_out is not None and (only or kind):
        raise InputError("--intervals writes the table dtsim run uses from the whole suite; drop --only / --kind",
                         "--intervals")
    if readme is not None:
        if not readme.is_file():
            raise InputError(f"file not found: {readme}", "--readme")
        check_output(readme, "--readme", (), (png, md))
        if README_START not in readme.read_text(encoding="utf-8", errors="replace"):
            raise InputError(f"{readme} has no {README_START} ... {README_END} markers", "--readme")
    if kind not in (None, "pure_dp", "tp_pp"):
        raise InputError(f"--kind must be pure_dp or tp_pp, got {kind!r}")
    runs = [r for r in select(load_runs(), only) if kind is None or r.parallelism == kind]
    if not runs:
        raise InputError(f"no validation run matches --only {only!r}" + (f" and --kind {kind}" if kind else ""))
    rows = _simulate_all(runs, show=not json_out and sys.stderr.isatty())
    summary = summarize(rows, intervals=not (only or kind))
    if json_out:
        print_json({"rows": rows, "summary": summary})
    else:
        # A pipe gets a wide table (run ids are long); a terminal keeps its own width.
        print_table(rows, summary, stdout if stdout.is_terminal else Console(width=170))
    if png is not None:
        scatter_png(rows, png)
    if intervals_out is not None:
        _write_intervals(rows, intervals_out)
    command = _command_line(only, kind, png, md, readme, intervals_out)
    if md is not None:
        write_text(md, markdown(rows, summary, command))
    if readme is not None:
        # The README sits at the root; the scatter plot is written beside the markdown report.
        image = (png.as_posix() if png else "docs/validation.png")
        runs_at = f"[{md.as_posix()}]({md.as_posix()})" if md else "the report `--markdown` writes"
        section = markdown(rows, summary, command, image=image, level=2, runs_at=runs_at)
        write_text(readme, splice(readme.read_text(), section))
    return _exit_code(summary["simulated"] == 0,
                      f"no run was simulated ({summary['skipped']} of {summary['runs']} skipped)", "MAPE",
                      summary["mape"], max_mape)


def _write_intervals(rows: list[dict], path: Path) -> None:
    """``intervals.build`` of the simulated rows' residuals, as YAML."""
    import yaml

    from simulator.validation.intervals import build
    from simulator.validation.summary import residuals

    table = build(residuals([r for r in rows if "error" in r]),
                  "dtsim validate --intervals: out-of-sample residuals ln(predicted/measured tokens/s) of every "
                  "simulated run of the suite")
    write_text(path, "# written by dtsim validate --intervals; do not edit\n"
               + yaml.safe_dump(table, sort_keys=False, width=110, default_flow_style=None))


def _exit_code(nothing: bool, nothing_text: str, label: str, mape: float | None, max_mape: float | None) -> int:
    """``EXIT_MAPE`` when nothing was simulated or the MAPE exceeds ``--max-mape`` (with the reason on
    stderr), else 0."""
    if nothing:
        stderr.print(f"[bold red]error: {nothing_text}: nothing was validated[/]", highlight=False)
        return EXIT_MAPE
    if max_mape is not None and mape is not None and 100 * mape > max_mape:
        stderr.print(f"[bold red]{label} {100 * mape:.1f}% exceeds --max-mape {max_mape:g}%[/]", highlight=False)
        return EXIT_MAPE
    return 0

