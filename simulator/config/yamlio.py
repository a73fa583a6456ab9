"""Reading YAML input files: every way a file can be unreadable becomes one ``InputError``.

Missing or unreadable files, text that is not UTF-8, malformed YAML, a key given twice in a mapping and structures nested deeper
than any scenario needs (``MAX_DEPTH``; a 5,000-level document would otherwise exhaust Python's
recursion limit) are refused with the file's name and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simulator import yamlio
from simulator.errors import InputError
from simulator.inputs import read_text

#: Deepest nesting accepted (a scenario nests about 5 levels; a topology about 4).
MAX_DEPTH = 32


def _depth_ok(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)
    return True


def parse_yaml(text: str, source: str, field: str | None = None) -> Any:
    """Parse YAML ``text`` from ``source`` (a file name for messages)."""
    try:
        data = yamlio.safe_load(text)  # libyaml where available, same SafeLoader semantics
    except yamlio.DuplicateKeyError as exc:
        key = exc.path or repr(exc.key)
        raise InputError(f"{source} line {exc.line}: key {key} is given twice (first at line "
                         f"{exc.first_line}); keep one (YAML would silently use the last)", field) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "nesting depth" in problem:  # libyaml's own limit (1,000 levels)
            raise InputError(f"{source} is nested more than {MAX_DEPTH} levels deep; a scenario needs about 5",
                             field) from None
        raise InputError(f"malformed YAML in {source}{where}: {problem}", field) from None
    except RecursionError:
        data = None
        ok = False
    else:
        ok = _depth_ok(data, MAX_DEPTH)
    if not ok:
        raise InputError(f"{source} is nested more than {MAX_DEPTH} levels deep; a scenario needs about 5", field)
    return data


def read_yaml(path: str | Path, field: str | None = None) -> Any:
    """Parse a YAML file; a missing, unreadable, non-UTF-8 or malformed file is an ``InputError``."""
    path = Path(path)
    return parse_yaml(read_text(path, field, "YAML file"), str(path), field)
