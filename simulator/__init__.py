"""dtsim: a distributed-training simulator for large language models.

The import package is ``simulator``; the distribution and console script are ``dtsim``.
``simulator.simulate`` and ``simulator.sweep`` are the Python API (``simulator.python_api``); they
are imported on first use, so ``import simulator`` stays light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["simulate", "sweep", "load", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("simulate", "load"):
        from simulator import python_api

        return getattr(python_api, name)
    if name == "sweep":  # the subpackage, made callable: simulator.sweep(...) is python_api.sweep
        import importlib

        return importlib.import_module("simulator.sweep")
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
