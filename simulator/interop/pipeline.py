"""Import and export end to end: a framework config (+ what it does not say: machines, model, base
scenario) → a validated scenario and the YAML to write; a scenario → the config text of a framework.

The cluster is never in a training config: it comes from ``topology`` / ``nodes`` (or a base
scenario). GPU counts a config implies (torchrun ``--nnodes`` × ``--nproc-per-node``, NeMo
``trainer.devices × num_nodes``, torchtitan's explicit degrees) are checked against it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.atomic import write_text
from simulator.config.loader import (
    apply_overrides_keeping_names,
    format_validation_error,
    prepare_raw,
    resolve_model,
)
from simulator.config.parallel import ParallelConfig
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.inputs import read_text
from simulator.interop import EXPORT_FORMATS, IMPORT_FORMATS
from simulator.interop.common import Exported, Imported, ignored_lines, merge, scenario_yaml

_TEXT_IMPORTERS: dict[str, Callable[[str], Imported]] = {}


def _text_importer(fmt: str) -> Callable[[str], Imported]:
    if fmt == "megatron":
        from simulator.interop.megatron import import_args
        return import_args
    if fmt == "torchtitan":
        from simulator.interop.torchtitan import import_toml
        return import_toml
    if fmt == "nemo":
        from simulator.interop.nemo import import_recipe
        return import_recipe
    if fmt == "accelerate":
        from simulator.interop.accelerate import import_yaml
        return import_yaml
    if fmt == "fsdp":
        from simulator.interop.fsdp_import import import_block
        return import_block
    raise InputError(f"unknown import format {fmt!r}; one of {', '.join(IMPORT_FORMATS)}")


def exporter(fmt: str) -> Callable[[Scenario], Exported]:
    """The export function of ``fmt`` (one of ``EXPORT_FORMATS``)."""
    if fmt == "deepspeed":
        from simulator.interop.deepspeed import export_config
        return export_config
    if fmt == "megatron":
        from simulator.interop.megatron_export import export_args
        return export_args
    if fmt == "torchtitan":
        from simulator.interop.torchtitan_export import export_toml
        return export_toml
    if fmt == "fsdp":
        from simulator.interop.fsdp import export_block
        return export_block
    if fmt == "accelerate":
        from simulator.interop.accelerate import export_yaml
        return export_yaml
    raise InputError(f"unknown export format {fmt!r}; one of {', '.join(EXPORT_FORMATS)}", "--to")


#: File name ``dtsim sweep --export-best`` gives each format.
EXPORT_FILES = {"deepspeed": "ds_config.json", "megatron": "megatron_args.txt", "torchtitan": "torchtitan.toml",
                "fsdp": "fsdp_kwargs.py", "accelerate": "accelerate.yaml"}


def _model_option(model: str) -> Any:
    """``--model``: a catalog name, or a Hugging Face config.json path."""
    if model.endswith(".json"):
        return {"hf_config": str(Path(model).resolve())}
    return model


#: ``model`` keys a training config sets for the run rather than for the architecture, as (section,
#: key): they stay when ``--model`` gives the architecture (Megatron's MTP modules, forced load
#: balancing, token dropping and router padding).
RUN_SETTINGS = (("", "mtp_layers"), ("moe", "imbalance"), ("moe", "capacity_factor"), ("moe", "router_padding_for_fp8"))


#: Shape keys a config always states when it states them at all (Megatron's required --num-layers,
#: --hidden-size, --num-attention-heads; --num-query-groups): ``--model`` must agree with them.
SHAPE_KEYS = ("n_layers", "hidden_size", "n_heads", "n_kv_heads")


def _with_run_settings(model: Any, frag: dict, base_dir: Path, label: str) -> Any:
    """``--model``'s architecture with the run settings the config gave (``RUN_SETTINGS``); the model is
    written out as a mapping only when there are any. A shape the config gives (``SHAPE_KEYS``) that
    ``--model`` contradicts is refused: one of the two is not the model trained, and dropping the
    config's silently would simulate the other."""
    out = resolve_model(model, base_dir)
    for key in SHAPE_KEYS:
        if key in frag and key in out and frag[key] != out[key]:
            raise InputError(f"model.{key} is {frag[key]} in {label} but {out[key]} in --model {model}: "
                             "drop --model (the config gives the shape) or give the model it trains", "--model")
    given = [(section, key) for section, key in RUN_SETTINGS
             if key in ((frag.get(section) or {}) if section else frag)]
    if not given:
        return model
    for section, key in given:
        if section and not isinstance(out.get(section), dict):
            raise InputError(f"the config sets model.{section}.{key} but --model {model} has no {section} section: "
                             "it is not the model the config trains; give the right --model", "model")
        (out[section] if section else out)[key] = frag[section][key] if section else frag[key]
    return out


def _topology_option(topology: str) -> str:
    path = Path(topology)
    return str(path.resolve()) if path.suffix in (".yaml", ".yml") and path.exists() else topology


def import_scenario(fmt: str, source: str | Path | None = None, *, text: str | None = None,
                    base_raw: dict | None = None, base_dir: Path | None = None, model: str | None = None,
                    topology: str | None = None, nodes: int | None = None, gpu: str | None = None,
                    name: str | None = None, overrides: list[str] | None = None) -> tuple[Scenario, str, Imported]:
    """Import a ``fmt`` config (file ``source`` or its ``text``) → (validated scenario, scenario YAML
    text with the ignored keys in its header, the importer's result)."""
    base_dir = base_dir or Path.cwd()
    raw = copy.deepcopy(base_raw or {})
    cluster = raw.setdefault("cluster", {})
    if topology:
        cluster["topology"] = _topology_option(topology)
    if nodes is not None:
        cluster["nodes"] = nodes
    if gpu:
        cluster["gpu"] = gpu
    label = str(source) if source is not None else f"the {fmt} arguments"
    if fmt == "deepspeed":
        if source is None:
            raise InputError("give the ds_config.json path", "deepspeed")
        _require_cluster(raw, fmt)
        if model:
            raw["model"] = _model_option(model)
        _keep_the_layout_only(raw)
        resolved = prepare_raw(raw, base_dir)
        imported = _deepspeed(resolved, Path(source))
        # Write the unresolved form (names, not expanded catalog entries) with the imported keys.
        for section in ("training", "parallel"):
            raw[section] = {**raw.get(section, {}), **imported.raw.get(section, {})}
    else:
        body = text if text is not None else read_text(source, fmt, f"{fmt} config")
        imported = _text_importer(fmt)(body)
        frag = copy.deepcopy(imported.raw)
        frag_nodes = frag.get("cluster", {}).pop("nodes", None)
        if nodes is None and frag_nodes is not None:
            cluster["nodes"] = frag_nodes
        frag.pop("cluster", None)
        raw = merge(_without_what_the_config_decides(raw, frag), frag)
        if model:
            raw["model"] = _with_run_settings(_model_option(model), frag.get("model") or {}, base_dir, label)
    raw["name"] = name or raw.get("name") or (Path(source).stem if source is not None else f"{fmt}-import")
    if not raw.get("cluster"):
        raw.pop("cluster")
    raw = apply_overrides_keeping_names(raw, overrides, base_dir)
    _require_cluster(raw, fmt)
    if "model" not in raw:
        raise InputError(f"{label} does not give the model shape; give --model NAME (dtsim catalog models) or "
                         "--model path/config.json", "model")
    if isinstance(raw["model"], dict) and "hf_config" not in raw["model"] and "vocab_size" not in raw["model"]:
        raise InputError(f"{label} does not give the vocabulary size (it comes from the tokenizer); give "
                         "--set model.vocab_size=N", "model.vocab_size")
    _fill_from_world(raw, base_dir, imported, label)
    try:
        scenario = Scenario.model_validate(prepare_raw(raw, base_dir))
    except ValidationError as exc:
        raise InputError(format_validation_error(exc)) from None
    header = [f"scenario imported by `dtsim import {fmt}` from {label}"]
    header += ignored_lines(label, imported.ignored)
    return scenario, scenario_yaml(raw, header), imported


def _keep_the_layout_only(raw: dict) -> None:
    """A ds_config.json decides the framework and its ZeRO keys but not the layout (tp, pp, ep, cp): the
    ``--base`` scenario keeps its layout and drops its framework and another framework's keys (an FSDP
    base's backward_prefetch, a Megatron base's distributed optimizer), in place."""
    par = raw.get("parallel")
    if isinstance(par, dict):
        foreign = ParallelConfig.foreign_keys("deepspeed")
        raw["parallel"] = {k: v for k, v in par.items() if k != "framework" and k not in foreign}


def _without_what_the_config_decides(base: dict, frag: dict) -> dict:
    """The ``--base`` scenario less what the imported config decides otherwise, so the two merge into a
    valid scenario: the whole ``parallel`` section when the config runs another framework (the base's
    keys belong to its own: DeepSpeed's buckets in a Megatron import), and the run length the config
    does not use (its ``steps`` replace the base's ``total_tokens`` and the other way round). ``base`` is
    the caller's own copy, changed in place."""
    out = base
    par, new_par = out.get("parallel"), frag.get("parallel") or {}
    if isinstance(par, dict) and new_par.get("framework", par.get("framework")) != par.get("framework"):
        out.pop("parallel")
    tr, new_tr = out.get("training"), frag.get("training") or {}
    if isinstance(tr, dict):
        for given, other in (("steps", "total_tokens"), ("total_tokens", "steps")):
            if given in new_tr:
                tr.pop(other, None)
    return out


def _require_cluster(raw: dict, fmt: str) -> None:
    if not isinstance(raw.get("cluster"), dict) or "topology" not in raw["cluster"]:
        raise InputError(f"a {fmt} config does not say which machines run it; give --topology NAME (a file in "
                         "topologies/, e.g. dgx-h100) and --nodes N, or --base SCENARIO", "cluster.topology")


def _deepspeed(resolved: dict, path: Path) -> Imported:
    from simulator.interop.deepspeed import import_config

    return import_config(resolved, path)


def _fill_from_world(raw: dict, base_dir: Path, imported: Imported, label: str) -> None:
    """Nodes from the GPU count the config implies (or check them), and the global batch from the
    per-rank batch when the config leaves it to the data-parallel degree."""
    if imported.world_size is None and imported.batch_per_dp_rank is None and imported.accumulation is None:
        return
    topo = prepare_raw({"cluster": raw["cluster"]}, base_dir)["cluster"]["topology"]
    per_node = int(topo["gpus_per_node"])
    cluster = raw["cluster"]
    world = imported.world_size
    if world is not None:
        if "nodes" not in cluster and "gpus" not in cluster:
            cluster["nodes"] = -(-world // per_node)
            if world < per_node:
                cluster["gpus"] = world
        have = cluster.get("gpus") or cluster.get("nodes", 1) * per_node
        if have != world:
            raise InputError(f"{label} runs on {world} GPUs, but the cluster has {have} "
                             f"({cluster.get('nodes', 1)} nodes x {per_node}); fix --nodes", "cluster.nodes")
    if imported.batch_per_dp_rank is not None and "global_batch_size" not in raw.get("training", {}):
        n = cluster.get("gpus") or cluster.get("nodes", 1) * per_node
        par = raw.get("parallel", {})
        dp = n // (par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1))
        raw.setdefault("training", {})["global_batch_size"] = imported.batch_per_dp_rank * dp
    if imported.accumulation is not None:
        n = cluster.get("gpus") or cluster.get("nodes", 1) * per_node
        par, tr = raw.get("parallel", {}), raw.setdefault("training", {})
        dp = n // (par.get("tp", 1) * par.get("pp", 1))
        if "micro_batch_size" not in tr:
            raise InputError(f"{label} gives gradient_accumulation_steps but not the micro-batch; give --set "
                             "training.micro_batch_size=N or --base", "training.micro_batch_size")
        tr["global_batch_size"] = int(tr["micro_batch_size"]) * imported.accumulation * dp


def export_scenario(scenario: Scenario, fmt: str) -> Exported:
    """``scenario`` as the config text of ``fmt``. A Mamba hybrid is refused: the exporters write transformer
    blocks, and a launch config that silently drops the Mamba layers would train another model."""
    if scenario.model.is_hybrid:
        raise InputError("exporting a Mamba hybrid is not supported: the exported configs would describe a "
                         "transformer without its Mamba layers", "model.hybrid_pattern")
    return exporter(fmt)(scenario)


def write_exports(scenario: Scenario, folder: Path, raw: dict | None = None) -> tuple[list[Path], dict[str, tuple]]:
    """Every export format for ``scenario`` into ``folder`` (plus ``scenario.yaml`` when ``raw`` is
    given); each file is written whole, so a failure leaves no half file. Returns the paths and, per
    file name, what its framework cannot express (a ds_config.json has no room for comments)."""
    out = []
    exported = {EXPORT_FILES[f]: export_scenario(scenario, f) for f in EXPORT_FORMATS}
    files = {name: e.text for name, e in exported.items()}
    notes = {name: e.notes for name, e in exported.items() if e.notes}
    if raw is not None:
        files["scenario.yaml"] = scenario_yaml(raw, [f"best point of a dtsim sweep: {scenario.name}"])
    folder.mkdir(exist_ok=True)  # its parent was checked before the sweep ran
    for name, body in files.items():
        write_text(folder / name, body)
        out.append(folder / name)
    return out, notes


def export_point(base_raw: dict, base_dir: Path, point: dict[str, Any], folder: Path,
                 overrides: list[str] | None = None) -> tuple[list[Path], dict[str, tuple]]:
    """``dtsim sweep --export-best``: the sweep point ``point`` (dotted path → value) of ``base_raw``
    (with ``overrides``, the sweep's ``--set``) as a scenario file and every framework config, in
    ``folder``. The scenario file keeps catalog and topology names where the overrides allow."""
    from simulator.config.loader import scenario_from_dict
    from simulator.sweep.grid import assignments

    sets = [*(overrides or []), *assignments(point)]
    scenario = scenario_from_dict(base_raw, base_dir, sets)
    raw = apply_overrides_keeping_names(base_raw, sets, base_dir)
    raw.pop("sweep", None)
    return write_exports(scenario, folder, raw)
