"""``dtsim compare``: scenarios side by side — step time, MFU, tokens/s, memory headroom, run length,
cost and energy — with the best value of each row highlighted and the configurations ranked."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from simulator.atomic import replacing
from simulator.cli_common import handle_errors, print_json, stdout
from simulator.cli_output import check_output
from simulator.config.loader import load_raw, resolve_scenario_path, scenario_from_dict
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.study import evaluate, flat_summary
from simulator.sweep.grid import check_path, parse_values

#: (summary key, row label, larger is better, formatter)
ROWS: tuple[tuple[str, str, bool, Any], ...] = (
    ("n_gpus", "GPUs", None, lambda v: f"{v:d}"),
    ("step_time_s", "step time (s)", False, lambda v: f"{v:.3f}"),
    ("mfu", "MFU", True, lambda v: f"{v:.1%}"),
    ("tokens_per_s", "tokens/s", True, lambda v: f"{v:,.0f}"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", True, lambda v: f"{v:,.0f}"),
    ("memory_headroom_bytes", "memory headroom (GiB)", True, lambda v: f"{v / 2**30:.1f}"),
    ("wall_clock_s", "run wall-clock (days)", False, lambda v: f"{v / 86400:.1f}"),
    ("goodput", "goodput", True, lambda v: f"{v:.1%}"),
    ("gpu_hours", "GPU-hours", False, lambda v: f"{v:,.0f}"),
    ("cost_usd", "cost (USD)", False, lambda v: f"{v:,.0f}"),
    ("usd_per_million_tokens", "USD per 1M tokens", False, lambda v: f"{v:.3f}"),
    ("energy_kwh", "energy (MWh)", False, lambda v: f"{v / 1000:,.1f}"),
)

_IDENTITY_FIELDS = {"name", "source", "reported_params"}


def _same_model(a: Scenario, b: Scenario) -> bool:
    return a.model.model_dump(exclude=_IDENTITY_FIELDS) == b.model.model_dump(exclude=_IDENTITY_FIELDS)


def _variants(paths: list[Path], vary: list[str], overrides: list[str]) -> list[tuple[str, Scenario]]:
    """Scenarios to compare: several files; or one file with --vary (Cartesian product) or with its
    ``compare:`` section of variants."""
    if not paths:
        raise InputError("give at least one scenario", "SCENARIOS")
    if len(paths) > 1:
        if vary:
            raise InputError("--vary takes one base scenario, not several files", "--vary")
        paths = [resolve_scenario_path(p) for p in paths]
        return [(p.stem, scenario_from_dict(load_raw(p), p.parent, overrides)) for p in paths]
    base_path = resolve_scenario_path(paths[0])
    raw = load_raw(base_path)
    if vary:
        axes = []
        for spec in vary:
            if "=" not in spec:
                raise InputError(f"{spec!r} must look like dotted.path=v1,v2", "--vary")
            key, _, values = spec.partition("=")
            check_path(key.strip(), "--vary")
            if any(key.strip() == axis[0][0] for axis in axes):
                raise InputError(f"--vary {key.strip()} is given twice; put all its values in one "
                                 f"--vary {key.strip()}=v1,v2,...", "--vary")
            parsed = parse_values(values)
            if not parsed:
                raise InputError(f"{spec!r} has no values", "--vary")
            axes.append([(key.strip(), v) for v in parsed])
        combos = [list(c) for c in itertools.product(*axes)]
    elif raw.get("compare"):
        if not isinstance(raw["compare"], list):
            raise InputError(f"must be a list of variants (- {{label: ..., dotted.path: value}}), got "
                             f"{raw['compare']!r}", "compare")
        combos = []
        for i, variant in enumerate(raw["compare"]):
            if not isinstance(variant, dict):
                raise InputError(f"variant {i} must be a mapping of dotted.path: value", "compare")
            settings = [(k, v) for k, v in variant.items() if k != "label"]
            for key, _ in settings:
                check_path(key, "compare")
            combos.append([("label", variant.get("label", ""))] + settings)
    else:
        raise InputError("one scenario needs --vary dotted.path=v1,v2 or a compare: section", "--vary")
    out = []
    for combo in combos:
        label = dict(combo).get("label") or ", ".join(f"{k.split('.')[-1]}={v}" for k, v in combo if k != "label")
        sets = [f"{k}={json.dumps(v)}" for k, v in combo if k != "label"]
        out.append((label, scenario_from_dict(raw, base_path.parent, [*overrides, *sets])))
    return out


def order_by(columns: list[dict]) -> str:
    """What :func:`rank` orders by after fitting: cost when every configuration has one (a token budget
    and a price), else the run's wall clock when every one has a token budget, else throughput. Not
    step time: configurations with other global batches (or GPU counts) do other work per step."""
    if all(c["cost_usd"] is not None for c in columns):
        return "cost"
    return "wall clock" if all(c["wall_clock_s"] is not None for c in columns) else "tokens/s"


def rank(columns: list[dict]) -> list[int]:
    """Order: configurations that fit first; then by :func:`order_by`, then by tokens/s (higher first).
    A strictly faster and cheaper configuration ranks ahead."""
    by = {"cost": "cost_usd", "wall clock": "wall_clock_s", "tokens/s": None}[order_by(columns)]

    def key(i: int) -> tuple:
        c = columns[i]
        return (not c["fits"], c[by] if by else -c["tokens_per_s"], -c["tokens_per_s"], i)

    return sorted(range(len(columns)), key=key)


def compare_command(
    scenarios: Annotated[list[Path], typer.Argument(help="scenario YAML files (or one, with --vary)")],
    vary: Annotated[list[str] | None, typer.Option("--vary", metavar="PATH=V1,V2", help="dotted.path=v1,v2 (repeatable)")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="dotted.path=value for all")] = None,
    allow_different_models: Annotated[bool, typer.Option("--allow-different-models", help="compare scenarios of different models")] = False,
    png: Annotated[Path | None, typer.Option("--png", help="write a bar chart")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Compare clusters or settings side by side for the same model."""
    _compare(scenarios, vary or [], overrides or [], allow_different_models, png, json_out)


@handle_errors
def _compare(paths, vary, overrides, allow_different, png, json_out) -> None:
    check_output(png, "--png", (".png",), [resolve_scenario_path(p) for p in paths])
    variants = _variants(paths, vary, overrides)
    first = variants[0][1]
    for label, scenario in variants[1:]:
        if not _same_model(first, scenario) and not allow_different:
            raise InputError(
                f"{label!r} simulates another model ({scenario.model.name}) than {variants[0][0]!r} "
                f"({first.model.name}); pass --allow-different-models to compare them anyway",
                "model",
            )
    columns = []
    for label, scenario in variants:
        ev = evaluate(scenario)
        columns.append({"label": label, "scenario": scenario.name, **flat_summary(ev), "oom_reason": ev.oom_reason})
    order = rank(columns)
    ranked = [columns[i] for i in order]
    for position, col in enumerate(ranked, start=1):
        col["rank"] = position
    if png:
        write_compare_png(ranked, png)
    if json_out:
        print_json({"configurations": ranked})
        return
    table = Table(title=f"{escape(first.model.name)}: comparison (ranked: fits, then {order_by(columns)})")
    table.add_column("")
    for col in ranked:
        table.add_column(f"#{col['rank']} {escape(str(col['label']))}", justify="right")
    for key, label, larger, fmt in ROWS:
        values = [col.get(key) for col in ranked]
        present = [v for v in values if v is not None]
        best = (max(present) if larger else min(present)) if present and larger is not None else None
        cells = []
        for v in values:
            text = "-" if v is None else ("never" if isinstance(v, float) and math.isinf(v) else fmt(v))
            cells.append(f"[bold green]{text}[/]" if best is not None and v == best and len(present) > 1 else text)
        table.add_row(label, *cells)
    stdout.print(table)
    for col in ranked:
        if col["oom_reason"]:
            stdout.print(f"[bold red]{escape(str(col['label']))} does not fit:[/] {escape(str(col['oom_reason']))}")
        elif col.get("memory_tight"):
            stdout.print(f"[yellow]{escape(str(col['label']))} fits tightly:[/] its allocated peak fits, not the "
                         "allocator's fragmentation allowance (negative headroom): expect cudaMalloc retries")


def write_compare_png(columns: list[dict], path: Path) -> None:
    """Bars per configuration: step time, tokens/s per GPU, run wall-clock, cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("step_time_s", "step time (s)", 1.0), ("tokens_per_s_per_gpu", "tokens/s per GPU", 1.0),
              ("wall_clock_s", "run wall-clock (days)", 1 / 86400), ("cost_usd", "cost (USD)", 1.0)]
    labels = [c["label"] for c in columns]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4))
    for ax, (key, title, scale) in zip(axes, panels, strict=True):
        vals = [(c[key] or 0.0) * scale for c in columns]
        ax.bar(range(len(vals)), vals, color=["tab:green" if c["fits"] else "tab:red" for c in columns])
        ax.set_xticks(range(len(vals)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
