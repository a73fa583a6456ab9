"""Sweeps: grids of overrides over a base scenario, each point a full simulation, results written
incrementally and atomically, resumable, on a local process pool or a Ray cluster."""

import sys as _sys
import types as _types


class _CallableModule(_types.ModuleType):
    """``simulator.sweep`` is this package and also the Python API's sweep function: calling the
    package calls ``simulator.python_api.sweep`` (the subpackage owns the name ``simulator.sweep``)."""

    def __call__(self, *args, **kwargs):
        from simulator.python_api import sweep

        return sweep(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
