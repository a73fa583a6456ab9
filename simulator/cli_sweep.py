"""``dtsim sweep``: a grid of what-ifs over a scenario, each a full simulation, with the best point,
the wall-clock/cost Pareto front and optional charts."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from simulator.cli_common import handle_errors, note_not_expressed, print_json, stdout
from simulator.cli_output import check_output
from simulator.config.loader import load_raw, prepare_raw, resolve_scenario_path, scenario_from_dict
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.parallel.layouts import enumerate_layouts
from simulator.sweep.analysis import OBJECTIVES, best, pareto_front
from simulator.sweep.grid import MAX_POINTS, combine, parse_grid, points, sweep_id
from simulator.sweep.runner import run_sweep
from simulator.sweep.store import ResultStore

GridOption = Annotated[
    list[str] | None,
    typer.Option("--grid", metavar="PATH=VALUES", help="dotted.path=v1,v2,... or dotted.path=start:stop:log|lin:count (repeatable)"),
]


def _progress(total: int, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:.1f} points/s"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=False,
    )


def sweep_command(
    scenario: Annotated[Path, typer.Argument(help="base scenario YAML (may hold a sweep: section)")],
    grid: GridOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="results file: .csv, .jsonl or .parquet")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="local worker processes")] = 1,
    backend: Annotated[str, typer.Option("--backend", help="local or ray")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster: auto or ray://host:port")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="skip points already in --out")] = False,
    objective: Annotated[str | None, typer.Option("--objective", help="step_time, cost, tokens_per_s, wall_clock")] = None,
    png: Annotated[Path | None, typer.Option("--png", help="write charts to this PNG")] = None,
    layouts: Annotated[str | None, typer.Option("--layouts", help="auto: every valid (tp, pp, micro-batch, "
                                                 "virtual stages) layout for the GPU count")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="dotted.path=value for every point")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    export_best: Annotated[Path | None, typer.Option(
        "--export-best", help="write the best point's scenario and DeepSpeed/Megatron/torchtitan/FSDP/Accelerate "
        "configs into this folder")] = None,
    max_points: Annotated[int, typer.Option("--max-points", min=1, help="refuse grids with more points "
                                            "than this")] = MAX_POINTS,
) -> None:
    """Simulate every point of a grid of overrides and report the best one and the Pareto front."""
    _sweep(scenario, grid, out, workers, backend, address, resume, objective, png, layouts, overrides or [],
           json_out, export_best, max_points)


@handle_errors
def _sweep(path: Path, grid_specs, out, workers, backend, address, resume, objective, png, layouts, overrides,
           json_out, export_best: Path | None = None, max_points: int = MAX_POINTS) -> None:
    if export_best is not None:  # created when the best point is written, inside an existing folder
        if export_best.exists() and not export_best.is_dir():
            raise InputError(f"{export_best} exists and is not a folder", "--export-best")
        if not export_best.exists() and not export_best.resolve().parent.is_dir():
            raise InputError(f"folder {export_best.resolve().parent} does not exist", "--export-best")
        from simulator.interop.pipeline import EXPORT_FILES

        if path.resolve() in {(export_best / n).resolve() for n in (*EXPORT_FILES.values(), "scenario.yaml")}:
            raise InputError(f"exporting into {export_best} would overwrite this sweep's input {path.name}; "
                             "give another folder", "--export-best")
    path = resolve_scenario_path(path)
    check_output(out, "--out", (".csv", ".jsonl", ".parquet"), (path,))
    check_output(png, "--png", (".png",), (path, out))
    # --set edits the base (references resolved) before anything else; the fingerprint includes it.
    base_raw = prepare_raw(load_raw(path), path.parent, overrides) if overrides else load_raw(path)
    file_sweep = base_raw.get("sweep") or {}
    if not isinstance(file_sweep, dict):
        raise InputError("the sweep section must be a mapping with grid and objective", "sweep")
    unknown = sorted(set(file_sweep) - {"grid", "objective"})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} in the sweep section; valid: grid, objective", "sweep")
    field = "--objective" if objective else "sweep.objective"
    objective = objective or file_sweep.get("objective", "step_time")
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}", field)
    if layouts not in (None, "auto"):
        raise InputError(f"unknown --layouts {layouts!r}; the only value is auto", "--layouts")
    grid = parse_grid(grid_specs, file_sweep.get("grid"), allow_empty=layouts == "auto", max_points=max_points)
    # The base scenario must itself be valid (a broken base would make every row invalid).
    base = scenario_from_dict(base_raw, path.parent)
    _check_grid_values(base_raw, path.parent, grid, [])
    layout_points = enumerate_layouts(base) if layouts == "auto" else []
    n_points = math.prod(len(v) for v in grid.values()) * max(1, len(layout_points))
    if n_points > max_points:
        raise InputError(f"the sweep has {n_points:,} points (grid x layouts), above the limit of {max_points:,}; "
                         "raise it with --max-points", "--max-points")
    all_points = combine(points(grid), layout_points)
    if resume and out is None:
        raise InputError("--resume needs --out (the file to continue)", "--resume")
    sid = sweep_id(base_raw, all_points)
    store = ResultStore(out, sid, resume)
    total, already = len(all_points), len(store.done())
    # Progress goes to stderr, and only to a terminal: quiet in --json mode and in pipes/CI logs.
    with _progress(total, not json_out and sys.stderr.isatty()) as progress:
        task = progress.add_task("sweep", total=total, completed=already, rate=0.0)
        start, count = progress.get_time(), [0]

        def tick(_row: dict) -> None:
            count[0] += 1
            progress.update(task, advance=1, rate=count[0] / max(progress.get_time() - start, 1e-9))

        try:
            rows = run_sweep(base_raw, path.parent, all_points, store, workers=workers, backend=backend,
                             address=address, extra={"sweep_id": sid}, on_row=tick)
        except KeyboardInterrupt:
            # the runner flushed every finished row on its way out (atomically): say how to continue
            saved = len(store.done())
            where = (f"{saved:,} of {total:,} points saved in {out}; run the same command with --resume to "
                     "continue") if out is not None else "nothing saved (no --out)"
            Console(stderr=True).print(f"sweep interrupted: {where}", highlight=False, soft_wrap=True)
            raise
    # What varied, for the tables and charts: the grid keys and the layout keys.
    varied = {k: sorted({p[k] for p in layout_points}, key=str) for k in (layout_points[0] if layout_points else {})}
    _report(rows, {**varied, **grid}, objective, out, png, json_out)
    top = best(rows, objective) if export_best is not None else None
    if top is not None:
        from simulator.interop.pipeline import export_point

        written, notes = export_point(load_raw(path), path.parent, all_points[int(top["point"])], export_best,
                                      overrides)
        Console(stderr=True).print(f"best point exported: {', '.join(str(p) for p in written)}", highlight=False,
                                   soft_wrap=True)
        for name, lines in notes.items():
            note_not_expressed(name, lines)


def _check_grid_values(base_raw: dict, base_dir: Path, grid: dict, overrides: list[str]) -> None:
    """A value of the wrong type or out of range for its own key (``zero_stage=a``, a zero bucket, an
    unknown GPU name) is bad input: refuse the sweep before it starts. Whether values fit *together*
    (batch divisibility, tp dividing the GPUs) is decided per point, and a bad combination is a row."""
    for path, values in grid.items():
        loc = tuple(path.split("."))
        for value in values:
            try:
                raw = prepare_raw(base_raw, base_dir, [*overrides, f"{path}={json.dumps(value)}"])
                Scenario.model_validate(raw)
            except InputError as exc:  # a reference that does not resolve (unknown name, missing file)
                raise InputError(f"grid value {value!r} is not valid: {exc}", "--grid") from None
            except ValidationError as exc:
                own = [e for e in exc.errors() if tuple(str(p) for p in e["loc"])[: len(loc)] == loc]
                if own:
                    raise InputError(
                        f"grid value {value!r} is not valid for {path}: {own[0]['msg'].removeprefix('Value error, ')}",
                        "--grid",
                    ) from None


def _report(rows: list[dict], grid: dict, objective: str, out: Path | None, png: Path | None, json_out: bool) -> None:
    top = best(rows, objective)
    front = pareto_front(rows)
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "infeasible", "invalid", "error")}
    summary = {"points": len(rows), "status_counts": counts, "objective": objective, "best": top,
               "pareto_front": front, "out": str(out) if out else None}
    if png:
        from simulator.sweep.charts import write_sweep_png

        write_sweep_png(rows, grid, front, png)
        summary["png"] = str(png)
    if json_out:
        print_json(summary)
        return
    stdout.print(f"{len(rows)} points: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if top is None:
        stdout.print("[bold red]no feasible point[/]")
    else:
        table = Table(title=f"best point for {objective}")
        table.add_column("key")
        table.add_column("value", justify="right")
        for key in [*grid, "step_time_s", "tokens_per_s", "mfu", "wall_clock_s", "cost_usd"]:
            value = top.get(key)
            table.add_row(escape(key), f"{float(value):.4g}" if isinstance(value, float) else escape(str(value)))
        stdout.print(table)
    if front:
        table = Table(title="Pareto front: expected wall-clock vs cost")
        for col in [*grid, "wall_clock_days", "cost_usd"]:
            table.add_column(escape(col), justify="right")
        for r in front:
            table.add_row(*[escape(str(r.get(k))) for k in grid], f"{float(r['wall_clock_s']) / 86400:.2f}",
                          f"{float(r['cost_usd']):,.0f}")
        stdout.print(table)
    if out:
        stdout.print(f"rows written to {escape(str(out))}")


tune_app = typer.Typer(help="Find the settings that minimise simulated step time.", no_args_is_help=True)


@tune_app.command("buckets")
def tune_buckets(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    overrides: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="dotted.path=value (repeatable)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Bucket size(s) that minimise step time for the scenario's framework, and the gain over its default."""
    _tune(scenario, overrides or [], json_out)


@handle_errors
def _tune(path: Path, overrides: list[str], json_out: bool) -> None:
    from simulator.api import simulate
    from simulator.sweep.tune import tune

    path = resolve_scenario_path(path)
    raw = load_raw(path)
    base = scenario_from_dict(raw, path.parent, overrides)

    def step_time(settings: dict[str, float]) -> float | None:
        extra = [f"parallel.{k}={json.dumps(v)}" for k, v in settings.items()]
        report = simulate(scenario_from_dict(raw, path.parent, [*overrides, *extra]))
        return report.step_time_s if report.fits else None

    result = tune(base, step_time)
    data = {
        "framework": base.parallel.framework,
        "zero_stage": base.parallel.effective_zero_stage,
        "keys": [f"parallel.{k}" for k in result.keys],
        "default": {f"parallel.{k}": v for k, v in result.default.items()},
        "default_step_time_s": result.default_step_time_s,
        "best": {f"parallel.{k}": v for k, v in result.best.items()} if result.best is not None else None,
        "best_step_time_s": result.best_step_time_s,
        "gain": result.gain,
        "points_tried": len(result.tried),
    }
    if json_out:
        print_json(data)
        return
    tried = f"{len(result.tried)} points simulated"
    if result.best is None:  # a result, not an error: the model does not fit at any bucket size
        stdout.print(f"{escape(base.name)} does not fit in memory at any bucket size tried ({tried}): buckets "
                     "cannot make it fit; see dtsim memory for where the memory goes", highlight=False)
        return
    table = Table(title=f"bucket tuning: {escape(base.name)} ({base.parallel.framework}, ZeRO {data['zero_stage']})")
    for col in ("setting", "default", "best"):
        table.add_column(col, justify="right")
    for k in result.keys:
        table.add_row(f"parallel.{k}", f"{result.default[k]:.4g}", f"{result.best[k]:.4g}")
    default_s = "does not fit" if result.default_step_time_s is None else f"{result.default_step_time_s:.4f}"
    table.add_row("step time (s)", default_s, f"{result.best_step_time_s:.4f}")
    stdout.print(table)
    if result.gain is None:
        stdout.print(f"the default buckets do not fit in memory; the best setting above does ({tried})", highlight=False)
    else:
        stdout.print(f"gain over the default: {result.gain:.2%} of step time ({tried})", highlight=False)
