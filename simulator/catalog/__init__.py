"""Catalogs as data: GPUs (``gpus.yaml``) and models (``models.yaml``), with loaders.

The YAML files are read once per process (they are package data and never change at run time).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources

from simulator import yamlio
from simulator.config.hardware import GPUSpec
from simulator.config.model import ModelConfig


def _read(name: str) -> list[dict]:
    return yamlio.safe_load(resources.files(__package__).joinpath(name).read_text())


@lru_cache(maxsize=1)
def gpus() -> dict[str, GPUSpec]:
    """All catalogued GPUs by name."""
    return {entry["name"]: GPUSpec.model_validate(entry) for entry in _read("gpus.yaml")}


@lru_cache(maxsize=1)
def models() -> dict[str, ModelConfig]:
    """All catalogued models by name."""
    return {entry["name"]: ModelConfig.model_validate(entry) for entry in _read("models.yaml")}


def unknown_name_message(kind: str, name: str, valid: list[str]) -> str:
    """One line naming the unknown value, the closest match and every valid name."""
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; valid: {', '.join(valid)}"


def get_gpu(name: str) -> GPUSpec:
    """Look up a GPU by catalog name; ``KeyError`` with the list of valid names otherwise."""
    table = gpus()
    if name not in table:
        raise KeyError(unknown_name_message("GPU", name, list(table)))
    return table[name]


def get_model(name: str) -> ModelConfig:
    """Look up a model by catalog name; ``KeyError`` with the list of valid names otherwise."""
    table = models()
    if name not in table:
        raise KeyError(unknown_name_message("model", name, list(table)))
    return table[name]
