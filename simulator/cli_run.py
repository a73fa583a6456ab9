"""``dtsim run SCENARIO [--set k=v ...] [--json] [--trace trace.json] [--allow-oom] [--deepspeed ds.json]
[--show-placement] [--kernels]``.

Exit codes: 0 ok; 2 bad input (message naming the field, nothing written); 3 the scenario does not
fit in GPU memory (the report is printed with the reason) unless ``--allow-oom``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape

from simulator.cli_common import handle_errors, print_json, stderr, stdout
from simulator.cli_output import check_output
from simulator.config.deepspeed_import import FIELD as DS_FIELD
from simulator.config.deepspeed_import import apply_deepspeed_config
from simulator.config.loader import format_validation_error, load_raw, prepare_raw, resolve_scenario_path
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.parallel.build import mesh_for
from simulator.parallel.checks import check_layout
from simulator.parallel.placement import placement_lines
from simulator.python_api import run_scenario
from simulator.report.chrome_trace import write_chrome_trace
from simulator.report.kernel_table import kernel_table, render_kernel_table
from simulator.report.step_png import write_step_png
from simulator.report.tables import render
from simulator.units import fmt_bytes, fmt_seconds
from simulator.workload.memory import allocated_bytes

EXIT_OOM = 3

SetOption = Annotated[
    list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a scenario key: dotted.path=value (repeatable)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]
TraceOption = Annotated[Path | None, typer.Option("--trace", help="write a Chrome trace (Perfetto) of the step")]
OomOption = Annotated[bool, typer.Option("--allow-oom", help="exit 0 even if the scenario does not fit in memory")]
PlacementOption = Annotated[bool, typer.Option(
    "--show-placement", help="print which GPUs form each TP / CP / PP / DP group (stderr with --json)")]
PngOption = Annotated[Path | None, typer.Option("--png", help="draw the step's per-stream timeline and breakdown")]
ExactOption = Annotated[bool, typer.Option(
    "--exact", help="simulate every micro-batch (default: long accumulation and 1F1B steady states are "
                    "extrapolated after an exactness check; --trace and --png imply --exact)")]
DsOption = Annotated[Path | None, typer.Option("--deepspeed", help="DeepSpeed JSON config to apply to the scenario")]
KernelsOption = Annotated[bool, typer.Option(
    "--kernels", help="also print one micro-batch's compute kernel by kernel: time, bound, rate (JSON: 'kernels')")]
EffOption = Annotated[Path | None, typer.Option(
    "--efficiency", help="efficiency profile from dtsim calibrate (your cluster's fitted efficiencies and intervals)")]


def _load_profile(path: Path):
    from simulator.user_calibration import load_profile

    return load_profile(path)


def load_run_scenario(path: Path, overrides: list[str] | None, deepspeed: Path | None) -> tuple[Scenario, list[str]]:
    """Scenario file → overrides → (DeepSpeed JSON) → validated Scenario, plus import warnings."""
    path = resolve_scenario_path(path)
    raw = prepare_raw(load_raw(path), path.parent, overrides or [])
    warnings: list[str] = []
    ds_ref = deepspeed or (raw.get("parallel", {}) or {}).get("deepspeed_config")
    if ds_ref:
        ds_path = Path(ds_ref)
        if deepspeed is None and not ds_path.is_absolute():
            ds_path = path.parent / ds_path
        raw, warnings = apply_deepspeed_config(raw, ds_path, "--deepspeed" if deepspeed else DS_FIELD)
    try:
        return Scenario.model_validate(raw), warnings
    except ValidationError as exc:
        raise InputError(format_validation_error(exc)) from None


def run_command(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    overrides: SetOption = None,
    json_out: JsonOption = False,
    trace: TraceOption = None,
    allow_oom: OomOption = False,
    deepspeed: DsOption = None,
    show_placement: PlacementOption = False,
    png: PngOption = None,
    efficiency: EffOption = None,
    exact: ExactOption = False,
    kernels: KernelsOption = False,
) -> None:
    """Simulate one optimizer step: step time, breakdown (exposed vs on-link comm), MFU, memory;
    then the whole run (duration, goodput, cost, energy) when the scenario has a token budget."""
    code = _run(scenario, overrides, json_out, trace, allow_oom, deepspeed, show_placement, png, efficiency, exact,
                kernels)
    if code:
        raise typer.Exit(code)


@handle_errors
def _run(path: Path, overrides, json_out: bool, trace: Path | None, allow_oom: bool, deepspeed: Path | None,
         show_placement: bool = False, png: Path | None = None, efficiency: Path | None = None,
         exact: bool = False, kernels: bool = False) -> int:
    # Outputs are checked first: bad input writes nothing and prints no half report.
    inputs = (resolve_scenario_path(path), deepspeed, efficiency)
    check_output(trace, "--trace", (".json",), inputs)
    check_output(png, "--png", (".png",), inputs)
    if trace is not None and png is not None and trace.resolve() == png.resolve():
        raise InputError("--trace and --png name the same file", "--png")
    scenario, warnings = load_run_scenario(path, overrides, deepspeed)
    profile = _load_profile(efficiency) if efficiency is not None else None  # a bad profile: nothing printed
    if show_placement:
        check_layout(scenario)
        out = stderr if json_out else stdout
        for line in placement_lines(mesh_for(scenario, scenario.cluster.topology.gpus_per_node)):
            out.print(line, highlight=False, soft_wrap=True, markup=False)
    # The trace and the timeline picture need every span: no steady-state extrapolation for them.
    result, profile_warnings = run_scenario(scenario, profile, exact=exact or trace is not None or png is not None)
    for line in [*warnings, *profile_warnings]:
        stderr.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    report, run, interval = result.step, result.run, result.interval
    for line in report.warnings:
        stderr.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    # Files first: a reader that stops early (``| head``) must not cost the trace or the picture.
    if trace is not None:
        write_chrome_trace(report.trace, trace, process_name=f"{scenario.name} rank 0")
    if png is not None:
        write_step_png(report, png)
    table = kernel_table(scenario, profile.efficiency(scenario) if profile is not None else None) if kernels else None
    if json_out:
        print_json({**result.to_dict(), **({"kernels": [row.as_dict() for row in table]} if kernels else {})})
    else:
        render(report, stdout, interval=interval)
        if kernels:
            render_kernel_table(table, stdout)
        if run is not None and not math.isfinite(run.wall_clock_s):
            stdout.print(
                f"run: {run.steps:,} steps, {fmt_seconds(run.duration_s)} of training; never finishes with failures: "
                f"the job MTBF ({fmt_seconds(run.mtbf_s)}) is too short for any progress between failures "
                "(goodput 0); raise reliability.gpu_mtbf_hours or use fewer GPUs",
                highlight=False, soft_wrap=True,
            )
        elif run is not None:
            mtbf = f"job MTBF {fmt_seconds(run.mtbf_s)}" if math.isfinite(run.mtbf_s) else "no failures modelled"
            cost = (f" at ${run.usd_per_gpu_hour:.2f}/GPU-h = ${run.cost_usd:,.0f} (${run.usd_per_million_tokens:.3f} "
                    "per 1M tokens)" if run.cost_usd is not None else
                    f" (no catalog price for {report.layout['gpu']}: set cost.usd_per_gpu_hour for the cost)")
            if run.checkpoint_interval_s:
                checkpoint = (f"checkpoint every {fmt_seconds(run.checkpoint_interval_s)} "
                              f"({fmt_bytes(run.checkpoint_bytes)}, {fmt_seconds(run.checkpoint_stall_s)} stall)")
            elif run.checkpoint_bytes:  # no failures to guard against: the run saves once, at its end
                checkpoint = (f"one checkpoint, at the end ({fmt_bytes(run.checkpoint_bytes)}, "
                              f"{fmt_seconds(run.checkpoint_stall_s)} stall)")
            else:
                checkpoint = "no checkpoints"
            stdout.print(
                f"run: {run.steps:,} steps, {fmt_seconds(run.duration_s)} of training, "
                f"{fmt_seconds(run.wall_clock_s)} expected wall clock with failures (goodput {100 * run.goodput:.1f}%, "
                f"{mtbf}, {checkpoint}); {run.gpu_hours:,.0f} GPU-hours{cost}; {run.energy_kwh / 1000:,.1f} MWh",
                highlight=False, soft_wrap=True,
            )
    if not report.fits:
        mem = report.memory
        stderr.print(
            f"[bold red]does not fit:[/] {fmt_bytes(allocated_bytes(mem))} per GPU "
            f"allocated at the peak, {fmt_bytes(mem['hbm_bytes'])} usable; "
            "try a higher ZeRO stage, activation_checkpointing, a smaller micro_batch_size or offload"
            + ("" if allow_oom else "; --allow-oom to accept"),
            highlight=False, soft_wrap=True,
        )
        return 0 if allow_oom else EXIT_OOM
    return 0
