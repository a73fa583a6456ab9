"""YAML parsing through libyaml when PyYAML was built with it.

``yaml.CSafeLoader`` is PyYAML's SafeLoader with the scanner and parser in C (libyaml): the same
constructors and resolvers, so the same Python objects, about ten times faster than the pure-Python
parser (the catalogs alone took most of a ``dtsim run``'s start-up). Without libyaml it is the
pure-Python SafeLoader.
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, through libyaml where available."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader
