"""Helpers shared by the validation tests: the bundled calibration set (``simulator/validation/runs.yaml``)
and the corpus (``runs_corpus.yaml``, tested in test_corpus.py and test_corpus_mlperf.py).

The conversion logic (run → scenario) lives in ``simulator.validation.suite``; this module only
selects the runs the tests use.
"""

from __future__ import annotations

from simulator.validation.suite import Run, load_runs


def pure_dp_runs() -> list[Run]:
    """Expressible pure data-parallel runs (FSDP / ZeRO / DDP without tensor or pipeline parallelism)."""
    return [r for r in load_runs(files=("runs.yaml",)) if r.parallelism == "pure_dp" and r.expressible]


#: Every run of the corpus, loaded once for the tests that read it.
CORPUS = load_runs(files=("runs_corpus.yaml",))


def corpus_run(run_id: str) -> Run:
    """The corpus run with this id."""
    return next(r for r in CORPUS if r.id == run_id)
