"""Grid specifications: ``--grid dotted.path=v1,v2,...`` or ``--grid path=start:stop:log|lin:count``.

A grid is an ordered mapping path → values; its points are the Cartesian product in the order the
paths were given (the last path varies fastest), so the same grid always yields the same points.
"""

from __future__ import annotations

import collections
import difflib
import hashlib
import itertools
import json
import math
import types
import typing
from typing import Any

from pydantic import BaseModel

from simulator.config.model import ModelConfig
from simulator.config.overrides import parse_value
from simulator.config.scenario import Scenario
from simulator.errors import InputError

Grid = dict[str, list[Any]]

#: Keys whose value is a reference resolved by the loader (a name), not a nested section.
_REFERENCE_PATHS = {"model", "cluster.topology", "cluster.gpu"}


def _submodel(annotation: Any) -> type[BaseModel] | None:
    pending = [annotation]
    while pending:
        ann = pending.pop()
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
        if isinstance(ann, types.UnionType) or typing.get_origin(ann) is not None:
            pending.extend(typing.get_args(ann))
    return None


def valid_paths() -> list[str]:
    """Every dotted path a grid may vary (leaf keys of the scenario schema, model shape included)."""
    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            path = f"{prefix}{name}"
            if path == "sweep":
                continue
            if path == "model":
                out.append(path)
                walk(ModelConfig, "model.")
                continue
            sub = _submodel(field.annotation)
            if path in _REFERENCE_PATHS or sub is None:
                out.append(path)
            else:
                walk(sub, f"{path}.")

    walk(Scenario, "")
    return out


def check_path(path: str, field: str = "--grid") -> None:
    """Refuse a dotted path the schema does not have: the closest match, then every valid one."""
    valid = valid_paths()
    if path not in valid:
        close = difflib.get_close_matches(path, valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"unknown dotted path {path!r}{hint}; valid paths: {', '.join(valid)}", field)


#: Most points a sweep expands to unless the user raises it (``dtsim sweep --max-points``): a
#: 10⁸-point grid would take gigabytes before the first simulation.
MAX_POINTS = 100_000


def parse_range(text: str, max_points: int = MAX_POINTS) -> list[float]:
    """``start:stop:log|lin:count`` → ``count`` values from start to stop inclusive.

    Log ranges are geometric (``1e6:1e9:log:4`` → 1e6, 1e7, 1e8, 1e9); values are rounded to 12
    significant digits so the same range prints the same numbers everywhere.
    """
    parts = text.split(":")
    if len(parts) != 4 or parts[2] not in ("log", "lin"):
        raise InputError(f"range {text!r} must look like start:stop:log|lin:count (e.g. 1e6:1e9:log:12)", "--grid")
    try:
        start, stop, count = float(parts[0]), float(parts[1]), int(parts[3])
    except ValueError:
        raise InputError(f"range {text!r}: start and stop must be numbers and count an integer", "--grid") from None
    if count < 1:
        raise InputError(f"range {text!r}: count must be at least 1", "--grid")
    if count > max_points:
        raise InputError(f"range {text!r}: {count:,} values exceed the sweep limit of {max_points:,} points; "
                         "use fewer or raise the limit with --max-points", "--grid")
    if parts[2] == "log" and (start <= 0 or stop <= 0):
        raise InputError(f"range {text!r}: a log range needs positive start and stop", "--grid")
    if count == 1:
        return [start]
    if parts[2] == "log":
        a, b = math.log10(start), math.log10(stop)
        values = [10 ** (a + (b - a) * i / (count - 1)) for i in range(count)]
    else:
        values = [start + (stop - start) * i / (count - 1) for i in range(count)]
    return [float(f"{v:.12g}") for v in values]


def parse_values(spec: str | list[Any], max_points: int = MAX_POINTS, path: str = "") -> list[Any]:
    """A list as given, a range, or comma-separated YAML scalars."""
    if isinstance(spec, list):
        values = spec
    elif not isinstance(spec, str):
        raise InputError(f"sweep.grid.{path} must be a list of values or a range 'start:stop:log|lin:count', "
                         f"got {spec!r}", "sweep.grid")
    elif spec.count(":") == 3:
        values = parse_range(spec, max_points)
    else:
        items = [v.strip() for v in spec.split(",")]
        if "" in items[:-1] or not any(items):  # a trailing comma is harmless; "1,,2" or "" is a typo
            raise InputError(f"grid {path or 'value'} {spec!r} has an empty value; list them as v1,v2,...",
                             "--grid")
        values = [parse_value(v, "--grid") for v in items if v]
    keys = [(type(v).__name__, repr(v)) for v in values]  # 1 and true are different values
    counts = collections.Counter(keys)
    repeated = sorted({str(v) for v, k in zip(values, keys, strict=True) if counts[k] > 1})
    if repeated:  # the same point would run twice
        raise InputError(f"grid {path or 'value'} lists {', '.join(repeated)} more than once", "--grid")
    return values


def parse_grid(specs: list[str] | None, from_file: Any = None, allow_empty: bool = False,
               max_points: int = MAX_POINTS) -> Grid:
    """Merge the scenario file's ``sweep.grid`` with ``--grid`` options (the options win per path; a
    path given twice on the command line is refused). The product may not exceed ``max_points``."""
    if from_file is not None and not isinstance(from_file, dict):
        raise InputError(f"sweep.grid must map dotted paths to lists of values, got {from_file!r}", "sweep.grid")
    grid: Grid = {}
    for path, spec in (from_file or {}).items():
        grid[str(path)] = parse_values(spec, max_points, str(path))
    seen: set[str] = set()
    for spec in specs or []:
        if "=" not in spec:
            raise InputError(f"grid {spec!r} must look like dotted.path=v1,v2,... or path=start:stop:log:count", "--grid")
        path, _, values = spec.partition("=")
        path = path.strip()
        if path in seen:
            raise InputError(f"--grid {path} is given twice; put all its values in one --grid {path}=v1,v2,...",
                             "--grid")
        seen.add(path)
        grid[path] = parse_values(values, max_points, path)
    size = math.prod(len(v) for v in grid.values())
    if size > max_points:
        raise InputError(f"the grid has {size:,} points, above the sweep limit of {max_points:,}; "
                         "use fewer values or raise the limit with --max-points", "--grid")
    if not grid and not allow_empty:
        raise InputError("the grid is empty: give --grid dotted.path=v1,v2 or a sweep.grid section", "--grid")
    for path, values in grid.items():
        check_path(path)
        if not values:
            raise InputError(f"grid for {path!r} has no values", "--grid")
    return grid


def points(grid: Grid) -> list[dict[str, Any]]:
    """The Cartesian product of the grid, in a fixed order."""
    paths = list(grid)
    return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*(grid[p] for p in paths))]


def assignments(point: dict[str, Any]) -> list[str]:
    """A point as ``--set`` strings (JSON spelling keeps types: 5e8 stays a number, true a bool)."""
    return [f"{path}={json.dumps(value)}" for path, value in point.items()]


def combine(grid_points: list[dict[str, Any]], layouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every grid point with every layout (layouts vary fastest). A grid key that the layouts also set
    is refused: the layout would repeat every point once per grid value."""
    if not layouts:
        return grid_points
    shared = sorted(set(grid_points[0]) & {k for layout in layouts for k in layout})
    if shared:
        raise InputError(f"--layouts auto already varies {', '.join(shared)}; drop it from the grid, or fix "
                         "it with --set and leave out --layouts", "--grid")
    return [{**layout, **point} for point in grid_points for layout in layouts]


def sweep_id(base_raw: dict, sweep_points: Grid | list[dict[str, Any]]) -> str:
    """A fingerprint of the base scenario and the points; resuming into another sweep's file is refused."""
    blob = json.dumps({"base": base_raw, "points": sweep_points}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
