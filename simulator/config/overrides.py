"""``--set dotted.path=value`` overrides, applied to the raw scenario dict before validation.

``dotted.path=null`` removes the key (its default applies).

Values are parsed as YAML scalars/flow collections (``4``, ``5e8``, ``true``, ``[1, 2]``, ``dgx-h100``),
so an override gets exactly the checks the same value would get in the file.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from simulator import yamlio
from simulator.errors import InputError


def parse_value(text: str, field: str | None = None) -> Any:
    """Parse one override value as YAML; ``1e9`` and ``5.0e8`` become floats (YAML 1.1 would keep
    ``1e9`` a string, which no user means). A value that is not YAML is one line naming ``field``
    (PyYAML's own message spans several, with a caret under a copy of the text)."""
    try:
        value = yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        hint = ("give each key once" if isinstance(exc, yamlio.DuplicateKeyError)
                else "quote text, close brackets ([1, 2], {a: 1})")
        raise InputError(f"cannot parse the value {text!r} ({problem}); {hint}", field) from None
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in "eE.") else int(value)
        except ValueError:
            return value
    return value


def apply_override(raw: dict, assignment: str) -> dict:
    """Return a copy of ``raw`` with ``a.b.c=value`` set (intermediate mappings are created)."""
    if "=" not in assignment:
        raise InputError(f"override {assignment!r} must look like dotted.path=value (e.g. parallel.tp=2)", "--set")
    path, _, text = assignment.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise InputError(f"override {assignment!r} has an empty path", "--set")
    if not text.strip():
        # YAML reads an empty value as null, which would drop the key and quietly use its default.
        raise InputError(f"override {assignment!r} has no value; give one ({path.strip()}=2), or "
                         f"{path.strip()}=null to drop the key and use its default", f"--set {path.strip()}")
    out = copy.deepcopy(raw)
    node = out
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None or isinstance(child, str):
            # A catalog reference (model: llama-3-8b) cannot take a nested override.
            if isinstance(child, str):
                raise InputError(
                    f"{'.'.join(keys[: i + 1])} is {child!r}, not a mapping; "
                    f"override the whole key or write it out as a mapping",
                    "--set",
                )
            child = {}
            node[key] = child
        if not isinstance(child, dict):
            raise InputError(f"{'.'.join(keys[: i + 1])} is not a mapping", "--set")
        node = child
    value = parse_value(text, f"--set {path.strip()}")
    if value is None:
        # key=null removes the key, so its default applies (e.g. drop a DeepSpeed-only key before
        # switching parallel.framework to ddp).
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return out


def apply_overrides(raw: dict, assignments: list[str] | None) -> dict:
    for assignment in assignments or []:
        raw = apply_override(raw, assignment)
    return raw
