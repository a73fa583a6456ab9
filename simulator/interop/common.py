"""Shared pieces of the importers and exporters: the result types, dtype names, and the scenario
fragment → validated scenario → YAML path that every importer takes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from simulator.errors import InputError


@dataclass
class Imported:
    """What an importer read: a raw scenario fragment (``model``, ``training``, ``parallel``, maybe
    ``cluster``) and every input key it did not use, each with the reason."""

    raw: dict[str, Any] = field(default_factory=dict)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    #: GPUs the config implies (launcher or parallel degrees), checked against the cluster.
    world_size: int | None = None
    #: Sequences per data-parallel rank per step when the config gives no global batch
    #: (global = this × dp, known once the cluster is).
    batch_per_dp_rank: int | None = None
    #: Gradient-accumulation steps when the config gives them but no global batch
    #: (global = micro-batch × this × dp).
    accumulation: int | None = None

    def set(self, dotted: str, value: Any) -> None:
        """Set ``a.b.c`` in the fragment (creating the sections)."""
        node = self.raw
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.raw
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def ignore(self, key: str, reason: str) -> None:
        self.ignored.append((key, reason))


def set_recompute_layers(out: Imported, granularity: str | None, method: str | None, layers: int | None,
                         keys: str) -> None:
    """Megatron's recompute method and layer count (``--recompute-method`` / ``--recompute-num-layers``,
    NeMo's ``activations_checkpoint_method`` / ``_num_layers``, named ``keys``): under full granularity
    ``block`` recomputes the first N layers of each pipeline chunk and the others keep their activations
    (``training.recompute_layers``); ``uniform`` recomputes every layer in groups of N, which is dtsim's
    full recomputation, so it is listed as ignored."""
    if granularity == "full" and method == "block" and layers is not None:
        out.set("training.recompute_layers", layers)
    elif method is not None or layers is not None:
        out.ignore(keys, "uniform recomputes every layer (in groups of N); only full granularity's block method "
                         "recomputes some layers (training.recompute_layers)")


def set_wgrad_deferral(out: Imported, defer: bool, limit: int | None, pp: int, keys: tuple[str, str]) -> None:
    """Megatron-Core's ``defer_embedding_wgrad_compute`` and ``wgrad_deferral_limit`` (named ``keys``) as
    ``parallel.defer_embedding_wgrad_compute`` / ``wgrad_deferral_limit``: only under pipeline parallelism,
    which Megatron-Core requires for it; a limit without the switch has no effect."""
    if not defer:
        if limit is not None:
            out.ignore(keys[1], f"applies only with {keys[0]}")
        return
    if pp == 1:
        out.ignore(keys[0], "no pipeline (pipeline-model-parallel-size 1): Megatron-Core refuses the deferral")
        if limit is not None:
            out.ignore(keys[1], f"applies only with {keys[0]}, ignored here")
        return
    out.set("parallel.defer_embedding_wgrad_compute", True)
    if limit:
        out.set("parallel.wgrad_deferral_limit", limit)


@dataclass(frozen=True)
class Exported:
    """An exported config: the file ``text`` and what the target framework cannot express."""

    text: str
    notes: tuple[str, ...] = ()


#: Framework dtype spellings → dtsim precision names.
DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "bf16-mixed": "bf16", "bf16-true": "bf16",
          "fp16": "fp16", "float16": "fp16", "half": "fp16", "16": "fp16", "16-mixed": "fp16",
          "fp32": "fp32", "float32": "fp32", "32": "fp32", "32-true": "fp32", "float": "fp32"}
#: dtsim precision → torch dtype name.
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32", "fp8": "bfloat16"}


def merge(base: dict, fragment: dict) -> dict:
    """Deep merge: ``fragment`` wins, mappings merge recursively (``base`` is not modified)."""
    out = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def need(value: Any, what: str, field_: str, how: str) -> Any:
    """``value`` or an InputError saying which input key is missing and how to give it."""
    if value is None:
        raise InputError(f"{what} is not given; {how}", field_)
    return value


def as_int(value: Any, field_: str) -> int:
    """An integer flag value (``"8"``, ``8``, ``8.0``), else one error naming the flag."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {value!r}", field_) from None
    if number != int(number):
        raise InputError(f"expected an integer, got {value!r}", field_)
    return int(number)


def as_float(value: Any, field_: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {value!r}", field_) from None


def scenario_yaml(raw: dict, header: list[str]) -> str:
    """A scenario file: ``header`` lines as comments, then the mapping in the README's section order."""
    order = ["name", "model", "cluster", "training", "parallel", "memory", "cost", "reliability"]
    ordered = {k: raw[k] for k in order if k in raw}
    ordered.update({k: v for k, v in raw.items() if k not in ordered})
    body = yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, width=110)
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comments + body


def ignored_lines(source: str, ignored: list[tuple[str, str]]) -> list[str]:
    """``ignored (reason): key, key`` lines, one per reason, keys in input order."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in ignored:
        by_reason.setdefault(reason, []).append(key)
    return [f"ignored from {source} ({reason}): {', '.join(keys)}" for reason, keys in by_reason.items()]
