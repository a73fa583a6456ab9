"""The ``dtsim`` command line (typer). Each command lives in a ``cli_*`` module; this file wires them."""

from __future__ import annotations

import typer

from simulator.cli_calibrate import calibrate_command
from simulator.cli_compare import compare_command
from simulator.cli_interop import export_command, import_app
from simulator.cli_network import collective, topology_app
from simulator.cli_run import run_command
from simulator.cli_sweep import sweep_command, tune_app
from simulator.cli_validate import validate_command
from simulator.cli_workload import catalog_app, flops_command, memory_command

app = typer.Typer(
    name="dtsim",
    help="dtsim: simulate LLM training steps and runs on GPU clusters (step time, memory, cost).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run")(run_command)
app.command("flops")(flops_command)
app.command("memory")(memory_command)
app.command("compare")(compare_command)
app.command("sweep")(sweep_command)
app.command("collective")(collective)
app.command("validate")(validate_command)
app.add_typer(topology_app, name="topology")
app.add_typer(tune_app, name="tune")
app.add_typer(catalog_app, name="catalog")
app.add_typer(import_app, name="import")
app.command("export")(export_command)
app.command("calibrate")(calibrate_command)


def main() -> None:
    app()
