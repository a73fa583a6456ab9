"""Scenario loading: YAML file → raw dict → ``--set`` overrides → resolved references → ``Scenario``.

References resolved here (so the validated Scenario is self-contained): ``model`` as a catalog name or
``{hf_config: path}``; ``cluster.topology`` as a bundled name or a path; ``cluster.gpu`` as a catalog
name, defaulting to the topology's GPU. Every failure becomes one ``InputError`` naming the dotted path.
"""

from __future__ import annotations

import copy
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from simulator import catalog
from simulator.bundled import bundled_dir
from simulator.catalog.hf import model_dict_from_hf
from simulator.config.overrides import apply_overrides
from simulator.config.scenario import Scenario
from simulator.config.topology import resolve_topology_path
from simulator.config.yamlio import read_yaml
from simulator.errors import InputError

#: Keys whose value is a name the loader resolves into a mapping.
_REFERENCE_KEYS = ("model", "cluster.topology", "cluster.gpu")


def _resolve_model(raw: Any, base_dir: Path) -> Any:
    if isinstance(raw, str):
        try:
            return catalog.get_model(raw).model_dump(exclude_defaults=True)
        except KeyError as exc:
            raise InputError(exc.args[0], "model") from None
    if isinstance(raw, dict) and "hf_config" in raw:
        extra = set(raw) - {"hf_config", "name"}
        if extra:
            raise InputError(f"unknown key(s) beside hf_config: {', '.join(sorted(extra))}", "model")
        if not isinstance(raw["hf_config"], str) or not raw["hf_config"].strip():
            raise InputError(f"must be the path of a Hugging Face config.json, got {raw['hf_config']!r}",
                             "model.hf_config")
        path = Path(raw["hf_config"])
        data = model_dict_from_hf(path if path.is_absolute() else base_dir / path)
        if "name" in raw:
            data["name"] = raw["name"]
        return data
    return raw


def _resolve_gpu(raw: Any, field: str) -> Any:
    if isinstance(raw, str):
        try:
            return catalog.get_gpu(raw).model_dump()
        except KeyError as exc:
            raise InputError(exc.args[0], field) from None
    return raw


def _resolve_cluster(raw: Any, base_dir: Path) -> Any:
    if not isinstance(raw, dict):
        return raw
    out = dict(raw)
    topo = out.get("topology")
    if isinstance(topo, str):
        try:
            path = resolve_topology_path(topo, base_dir)
        except FileNotFoundError as exc:
            raise InputError(str(exc), "cluster.topology") from None
        topo = read_yaml(path, "cluster.topology")
        if not isinstance(topo, dict):
            raise InputError(f"{path} does not hold a mapping", "cluster.topology")
        out["topology"] = topo
    if isinstance(topo, dict) and "gpu" in topo:
        # The GPU defaults to the topology's; cluster.gpu overrides it (a100-40gb in a dgx-a100).
        field = "cluster.gpu" if "gpu" in raw else "cluster.topology.gpu"
        out["gpu"] = _resolve_gpu(out.get("gpu", topo["gpu"]), field)
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through ``X | None``, unions, ``Annotated``, lists)."""
    out, stack = [], [annotation]
    while stack:
        ann = stack.pop()
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.append(ann)
        elif isinstance(ann, types.UnionType) or typing.get_origin(ann) is not None:
            stack.extend(typing.get_args(ann))
    return out


def _is_mapping(annotation: Any) -> bool:
    """Whether an annotation is a ``dict`` (possibly ``| None``)."""
    if typing.get_origin(annotation) is dict:
        return True
    return (isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union) and any(
        _is_mapping(a) for a in typing.get_args(annotation))


def _tags(model: type[BaseModel]) -> tuple:
    """The ``kind`` values that select ``model`` in a discriminated union (``nvswitch``, ``fat_tree``)."""
    kind = model.model_fields.get("kind")
    return typing.get_args(kind.annotation) if kind is not None and typing.get_origin(kind.annotation) is Literal else ()


def _walk(loc: tuple, root: type[BaseModel] = Scenario) -> tuple[type[BaseModel] | None, str]:
    """The pydantic model that owns the key at ``loc`` (for listing valid keys), and the dotted path as
    the user wrote it: pydantic puts a discriminated union's tag into the location
    (``cluster.topology.intra_node.nvswitch.latency_us``), which names no key of the file."""
    models: list[type[BaseModel]] = [root]
    shown: list[str] = []
    keyed = False  # whether the models are the values of a mapping (dict[str, Model]): a key names an item
    for key in loc[:-1]:
        tagged = [m for m in models if key in _tags(m)]
        if len(models) > 1 and tagged:
            models = tagged[:1]
            continue
        shown.append(str(key))
        if isinstance(key, int):  # an item of a list of models: the same models
            continue
        found = [f.annotation for model in models if (f := model.model_fields.get(str(key)))]
        if not found and keyed:
            keyed = False
            continue
        keyed = any(_is_mapping(a) for a in found)
        models = [m for a in found for m in _models_in(a)]
    shown.extend(str(k) for k in loc[-1:])
    return (models[0] if len(models) == 1 else None), ".".join(shown)


def format_validation_error(exc: ValidationError, root: type[BaseModel] = Scenario, prefix: str = "") -> str:
    """One line per problem: the dotted path and what to do about it. ``root`` is the model validated
    (a scenario, unless said otherwise); ``prefix`` is put before each path (``runs[2].``)."""
    lines = []
    suggested: set[tuple] = set()
    for err in exc.errors():
        if err["type"] == "extra_forbidden":
            owner, _ = _walk(tuple(err["loc"]), root)
            close = difflib.get_close_matches(str(err["loc"][-1]), sorted(owner.model_fields) if owner else [], n=1)
            if close:
                suggested.add((*tuple(err["loc"])[:-1], close[0]))
    for err in exc.errors():
        loc = tuple(err["loc"])
        owner, path = _walk(loc, root)
        path = prefix + path if path else prefix.rstrip(".")
        if err["type"] == "extra_forbidden":
            valid = sorted(owner.model_fields) if owner else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"{path}: unknown key{hint}; valid keys here: {', '.join(valid)}")
        elif err["type"] == "missing":
            if loc not in suggested:  # a misspelt key already points at it
                lines.append(f"{path}: required key is missing")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            # A section's validator that names the key inside it ("cluster.gpus (12) exceeds ...") is
            # not prefixed with the section again.
            lines.append(f"{path}: {msg}" if path and not msg.startswith(f"{path}.") else msg)
    return "\n".join(lines)


def prepare_raw(raw: Any, base_dir: Path | None = None, overrides: list[str] | None = None) -> dict:
    """Apply overrides and resolve references; the result is ready for ``Scenario.model_validate``."""
    if not isinstance(raw, dict):
        raise InputError("a scenario must be a YAML mapping with model, cluster, training, ... sections")
    for o in overrides or []:
        if o.partition("=")[0].strip() == "cluster.topology.gpu":
            raise InputError("to change the GPU of a topology set cluster.gpu=NAME", "--set cluster.topology.gpu")
    return _override(raw, overrides, base_dir, resolve_all=True)


def apply_overrides_keeping_names(raw: dict, overrides: list[str] | None, base_dir: Path | None = None) -> dict:
    """``prepare_raw``'s override order for a scenario that is written back out: a reference is resolved
    (its catalog model or topology file written out as a mapping) only where a nested override edits it
    (``model.moe.imbalance=1`` on ``model: deepseek-v3``); the others stay names."""
    return _override(raw, overrides, base_dir, resolve_all=False)


def _override(raw: dict, overrides: list[str] | None, base_dir: Path | None, resolve_all: bool) -> dict:
    """Overrides of a whole reference (model=..., cluster.topology=...) apply first; then references are
    resolved (all of them, or only those a nested override edits), so nested overrides
    (model.n_layers=2, cluster.topology.fabric.oversubscription=2) edit the resolved mapping even when
    the file names a catalog entry."""
    base_dir = base_dir or Path.cwd()
    overrides = overrides or []
    first = [o for o in overrides if o.partition("=")[0].strip() in _REFERENCE_KEYS]
    rest = [o for o in overrides if o not in first]
    raw = apply_overrides(copy.deepcopy(raw), first)
    paths = [o.partition("=")[0].strip() for o in rest]
    if "model" in raw and (resolve_all or any(p.startswith("model.") for p in paths)):
        raw["model"] = _resolve_model(raw["model"], base_dir)
    if "cluster" in raw and (resolve_all or any(p.startswith("cluster.topology.") for p in paths)):
        raw["cluster"] = _resolve_cluster(raw["cluster"], base_dir)
    return apply_overrides(raw, rest)


def resolve_model(raw: Any, base_dir: Path | None = None) -> Any:
    """A scenario's ``model`` value as a mapping (a catalog name or ``hf_config`` resolved)."""
    return _resolve_model(raw, base_dir or Path.cwd())


def scenario_from_dict(raw: Any, base_dir: Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Validate a raw scenario mapping (after applying overrides and resolving references)."""
    prepared = prepare_raw(raw, base_dir, overrides)
    try:
        return Scenario.model_validate(prepared)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc)) from None


def resolve_scenario_path(path: str | Path) -> Path:
    """``path`` if it exists, else the bundled scenario of that name (``olmo-2-7b-8xh100`` or
    ``scenarios/olmo-2-7b-8xh100.yaml`` from any folder, also in an installed package)."""
    path = Path(path)
    if path.exists():
        return path
    name = path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml"
    bundled = bundled_dir("scenarios") / name
    return bundled if bundled.is_file() else path


def _missing_scenario(path: Path, field: str) -> InputError:
    """A scenario file that does not exist, with the closest bundled name when it looks like a typo of
    one (``olmo-2-7b-8xh10``)."""
    names = sorted(p.stem for p in bundled_dir("scenarios").glob("*.yaml"))
    stem = path.stem if path.suffix in (".yaml", ".yml") else path.name
    close = difflib.get_close_matches(stem, names, n=1)
    hint = f"; did you mean the bundled scenario {close[0]!r}?" if close else ""
    return InputError(f"file not found: {path}{hint}", field)


def load_raw(path: str | Path, field: str = "SCENARIO") -> dict:
    """Read a scenario file as a raw dict (for sweeps and compare, which edit before validating);
    ``field`` names the argument or option that gave it in messages."""
    path = resolve_scenario_path(path)
    if not path.exists():
        raise _missing_scenario(path, field)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path} does not hold a YAML mapping")
    return raw


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Load, override, resolve and validate a scenario file."""
    path = resolve_scenario_path(path)
    return scenario_from_dict(load_raw(path), path.parent, overrides)
