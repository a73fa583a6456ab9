"""YAML parsing through libyaml when PyYAML was built with it, refusing duplicate keys.

``yaml.CSafeLoader`` is PyYAML's SafeLoader with the scanner and parser in C (libyaml): the same
constructors and resolvers, so the same Python objects, about ten times faster than the pure-Python
parser (the catalogs alone took most of a ``dtsim run``'s start-up). Without libyaml it is the
pure-Python SafeLoader.

PyYAML keeps the last of two equal keys in a mapping (``name:`` twice in a scenario, ``topology:``
twice under ``cluster:``), so an edit below an older line silently wins or loses depending on order.
The loader here refuses them: ``DuplicateKeyError`` carries the dotted path of the key and both lines.
The check runs in the (Python) constructor, over keys it builds anyway; the path is worked out only
when a duplicate is found.
"""

from __future__ import annotations

from typing import Any

import yaml

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping gives one key twice. ``path`` is the key's dotted path (``cluster.topology``),
    ``line`` and ``first_line`` (1-based) where it appears the second and the first time."""

    path: str = ""

    def __init__(self, key: Any, mark: Any, first_line: int):
        super().__init__(problem=f"duplicate key {key!r} (first given at line {first_line})", problem_mark=mark)
        self.key, self.line, self.first_line = key, mark.line + 1, first_line


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:  # << merges are overridden by the mapping's own keys on purpose
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, key_node.start_mark, seen[key])
                    seen[key] = key_node.start_mark.line + 1
                except TypeError:  # an unhashable key: the base constructor says so
                    continue
        return super().construct_mapping(node, deep)


def _key_path(text: str, index: int) -> str:
    """The dotted path (``runs[0].split``) of the mapping key that starts at character ``index``."""
    # Composed by the same parser as the load, so the marks match.
    stack: list[tuple[Any, str]] = [(yaml.compose(text, Loader=_BASE), "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                here = f"{path}.{key_node.value}" if path else str(key_node.value)
                if key_node.start_mark.index == index:
                    return here
                stack.append((value, here))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return ""


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, through libyaml where available; a duplicate key raises
    ``DuplicateKeyError``."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except DuplicateKeyError as exc:
        exc.path = _key_path(text, exc.problem_mark.index)
        raise
