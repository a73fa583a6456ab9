"""``dtsim import megatron|torchtitan|nemo|deepspeed`` (framework config → scenario YAML) and
``dtsim export SCENARIO --to deepspeed|megatron|torchtitan|fsdp|accelerate`` (scenario → launchable
config). Bad input: one ``error:`` line naming the flag or key, exit 2, nothing written."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from simulator.atomic import write_text
from simulator.cli_common import handle_errors, note_not_expressed, stderr
from simulator.cli_output import check_output

OutOption = Annotated[Path | None, typer.Option("--out", help="write here instead of stdout")]
BaseOption = Annotated[Path | None, typer.Option(
    "--base", help="scenario YAML giving what the config does not (cluster, model, cost); the config wins")]
ModelOption = Annotated[str | None, typer.Option("--model", help="catalog model name or a config.json path")]
TopologyOption = Annotated[str | None, typer.Option("--topology", help="topology name (topologies/) or YAML path")]
NodesOption = Annotated[int | None, typer.Option("--nodes", min=1, help="number of nodes")]
GpuOption = Annotated[str | None, typer.Option("--gpu", help="catalog GPU name, overriding the topology's")]
NameOption = Annotated[str | None, typer.Option("--name", help="scenario name (default: the file's stem)")]
SetOption = Annotated[list[str] | None, typer.Option("--set", metavar="PATH=VALUE",
                                                     help="dotted.path=value on the imported scenario (repeatable)")]
ExportSetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="PATH=VALUE", help="dotted.path=value on the scenario before it is exported (repeatable)")]

import_app = typer.Typer(help="Import a training config as a dtsim scenario YAML (every ignored flag is named).",
                         no_args_is_help=True)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    write_text(out, text)
    stderr.print(f"wrote {out}", highlight=False, soft_wrap=True)


@handle_errors
def _import(fmt: str, source: Path | None, text: str | None, out, base, model, topology, nodes, gpu, name,
            overrides) -> None:
    from simulator.config.loader import load_raw
    from simulator.interop.common import ignored_lines
    from simulator.interop.pipeline import import_scenario

    check_output(out, "--out", inputs=(source, base))  # before any work: nothing half written
    base_raw = load_raw(base, "--base") if base is not None else None
    base_dir = base.parent if base is not None else Path.cwd()
    _scenario, yaml_text, imported = import_scenario(
        fmt, source, text=text, base_raw=base_raw, base_dir=base_dir, model=model, topology=topology, nodes=nodes,
        gpu=gpu, name=name, overrides=overrides or [])
    for line in ignored_lines(str(source) if source else f"the {fmt} arguments", imported.ignored):
        stderr.print(f"[yellow]note:[/] {escape(line)}", highlight=False, soft_wrap=True)
    _write(yaml_text, out)


@import_app.command("megatron")
def import_megatron(
    args_file: Annotated[Path | None, typer.Argument(help="file holding the Megatron-LM arguments")] = None,
    args: Annotated[str | None, typer.Option("--args", help="the arguments as one string")] = None,
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """Megatron-LM arguments (pretrain_gpt.py flags, optionally with the torchrun line) → scenario."""
    if (args_file is None) == (args is None):
        raise _fail_one("give ARGS_FILE or --args \"...\" (one of them)", "megatron")
    _import("megatron", args_file, args, out, base, model, topology, nodes, gpu, name, overrides)


@import_app.command("torchtitan")
def import_torchtitan(
    job: Annotated[Path, typer.Argument(help="torchtitan job config TOML")],
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """torchtitan job TOML → scenario."""
    _import("torchtitan", job, None, out, base, model, topology, nodes, gpu, name, overrides)


@import_app.command("nemo")
def import_nemo(
    recipe: Annotated[Path, typer.Argument(help="NeMo recipe YAML (megatron_gpt_config.yaml layout)")],
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """NeMo recipe YAML → scenario."""
    _import("nemo", recipe, None, out, base, model, topology, nodes, gpu, name, overrides)


@import_app.command("deepspeed")
def import_deepspeed(
    config: Annotated[Path, typer.Argument(help="ds_config.json")],
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """DeepSpeed ds_config.json (ZeRO block, batch, precision) on a base scenario or --model/--topology → scenario."""
    _import("deepspeed", config, None, out, base, model, topology, nodes, gpu, name, overrides)


@import_app.command("accelerate")
def import_accelerate(
    config: Annotated[Path, typer.Argument(help="Accelerate config YAML (accelerate launch --config_file)")],
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """Accelerate config YAML (FSDP / DeepSpeed / multi-GPU settings, processes) → scenario."""
    _import("accelerate", config, None, out, base, model, topology, nodes, gpu, name, overrides)


@import_app.command("fsdp")
def import_fsdp(
    block: Annotated[Path, typer.Argument(help="Python file with the FSDP keyword block (read, never run)")],
    out: OutOption = None, base: BaseOption = None, model: ModelOption = None, topology: TopologyOption = None,
    nodes: NodesOption = None, gpu: GpuOption = None, name: NameOption = None, overrides: SetOption = None,
) -> None:
    """FullyShardedDataParallel keyword block → scenario (the training settings come from --base/--set)."""
    _import("fsdp", block, None, out, base, model, topology, nodes, gpu, name, overrides)


def _fail_one(message: str, field: str) -> typer.Exit:
    from simulator.cli_common import fail

    return fail(f"{field}: {message}")


def export_command(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    to: Annotated[str, typer.Option("--to", help="deepspeed, megatron, torchtitan, fsdp or accelerate")],
    out: OutOption = None,
    overrides: ExportSetOption = None,
) -> None:
    """Write the launchable config of a framework for SCENARIO (what it cannot express is named)."""
    _export(scenario, to, out, overrides or [])


@handle_errors
def _export(path: Path, to: str, out: Path | None, overrides: list[str]) -> None:
    from simulator.config.loader import load_scenario, resolve_scenario_path
    from simulator.interop.pipeline import export_scenario, exporter

    check_output(out, "--out", inputs=(resolve_scenario_path(path),))
    exporter(to)  # an unknown --to fails before the scenario is read
    result = export_scenario(load_scenario(path, overrides), to)
    note_not_expressed(to, result.notes)
    _write(result.text, out)
