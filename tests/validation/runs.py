"""Helpers shared by the validation tests: the bundled calibration set (``simulator/validation/runs.yaml``;
the larger ``runs_corpus.yaml`` has its own tests in test_corpus.py).

The conversion logic (run → scenario) lives in ``simulator.validation.suite``; this module only
selects the runs the tests use.
"""

from __future__ import annotations

from simulator.validation.suite import Run, load_runs


def pure_dp_runs() -> list[Run]:
    """Expressible pure data-parallel runs (FSDP / ZeRO / DDP without tensor or pipeline parallelism)."""
    return [r for r in load_runs(files=("runs.yaml",)) if r.parallelism == "pure_dp" and r.expressible]
