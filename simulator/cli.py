"""The ``dtsim`` command line (typer). Each command lives in a ``cli_*`` module; this file wires them.

Commands load lazily: ``dtsim --help`` lists them from ``COMMANDS`` without importing any, and
``dtsim run`` imports only ``cli_run`` and what it uses (not matplotlib, ray, pyarrow or the other
commands' modules), so starting the program costs little more than the command itself.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# typer >= 0.20 ships its own copy of click (``typer._click``) and no longer depends on the click
# package, so nothing here imports click: commands are typer's own classes, and click's UsageError is
# reached as the base of ``typer.BadParameter`` (exported by every typer release).
_USAGE_ERROR = typer.BadParameter.__mro__[1]

#: name → (module, attribute: a typer command function or a ``typer.Typer`` sub-app, one-line help).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("simulator.cli_run", "run_command",
            "Simulate one optimizer step and the whole run: step time, exposed vs on-link communication, "
            "MFU, memory, cost."),
    "flops": ("simulator.cli_workload", "flops_command",
              "Parameters and forward / training FLOPs per token and per sequence; with --mfu, the run length."),
    "memory": ("simulator.cli_workload", "memory_command",
               "Per-GPU memory breakdown and whether it fits in usable HBM."),
    "compare": ("simulator.cli_compare", "compare_command",
                "Compare clusters or settings side by side for the same model."),
    "sweep": ("simulator.cli_sweep", "sweep_command",
              "Simulate every point of a grid of overrides and report the best one and the Pareto front."),
    "collective": ("simulator.cli_network", "collective",
                   "Predict an nccl-tests run: time, algbw and busbw of one collective over a size sweep."),
    "validate": ("simulator.cli_validate", "validate_command",
                 "Simulate the published runs of the validation suite; measured vs predicted, MAPE by group."),
    "topology": ("simulator.cli_network", "topology_app", "Inspect cluster topologies (topologies/*.yaml)."),
    "tune": ("simulator.cli_sweep", "tune_app", "Find the settings that minimise simulated step time."),
    "catalog": ("simulator.cli_workload", "catalog_app", "List the catalogued GPUs and models."),
    "import": ("simulator.cli_interop", "import_app",
               "Import a training config as a dtsim scenario YAML (every ignored flag is named)."),
    "export": ("simulator.cli_interop", "export_command",
               "Write the launchable config of a framework for SCENARIO (what it cannot express is named)."),
    "calibrate": ("simulator.cli_calibrate", "calibrate_command",
                  "Fit the per-architecture compute efficiencies on your own measured runs."),
}


def load_command(name: str) -> Any:
    """Import the module of command ``name`` and turn its typer function or sub-app into a click command."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)  # plain help, as the root
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    holder.command("_")(lambda: None)  # two entries: typer builds a group and keeps ``name`` a sub-command
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class LazyGroup(TyperGroup):
    """A typer group whose sub-commands are imported when invoked; the top-level help lists them
    from ``COMMANDS`` (a stand-in with the one-line help), importing nothing."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        return load_command(cmd_name)

    def invoke(self, ctx: Any) -> Any:
        """Run the sub-command; a usage error of its options (``--workers 0``, a missing argument) is
        one ``error:`` line naming the option and where its help is, exit 2, as every other bad input."""
        try:
            return super().invoke(ctx)
        except _USAGE_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare ``dtsim tune``: its help, as click prints
                raise
            from simulator.cli_common import fail  # not at start-up: ``dtsim --help`` imports no command

            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            raise fail(f"{exc.format_message().rstrip('.')} (see: {where} --help)") from None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="dtsim",
    cls=LazyGroup,
    help="dtsim: simulate LLM training steps and runs on GPU clusters (step time, memory, cost).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no <bool> / <list[str]> placeholders
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"dtsim {version('dtsim')}")
        except PackageNotFoundError:  # running from a source tree without installing
            typer.echo("dtsim (not installed)")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """dtsim: simulate LLM training steps and runs on GPU clusters (step time, memory, cost)."""


#: BLAS thread pools: the simulator's arrays are small, and on large clusters OpenBLAS would start a
#: second thread per process that only contends with the sweep's worker processes for the cores.
#: Set before numpy loads (commands import it lazily) and inherited by sweep workers; a value the
#: user exported wins.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def main() -> None:
    for var in BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")
    app()
