"""Which publication a validation run comes from: the key leave-one-source-out cross-validation holds
out together (``simulator.validation.calibration``), read from the run's source text."""

from __future__ import annotations

import re

from simulator.validation.suite import Run

_ARXIV = re.compile(r"arXiv:\s*(\d{4}\.\d{4,5})", re.I)
#: a repository named before a path in it (MLCommons' result repositories: ``<submitter>/results/``)
_REPO = re.compile(r"\b([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)\s+(?:docs/|scripts/|README|src/|training/|tests/|worklog/|\w+/results/)")


def source_key(run: Run) -> str:
    """The publication ``run`` comes from (:func:`publication` of its source)."""
    return publication(run.source)


def publication(source: str) -> str:
    """The publication a source text names: its arXiv id, else the GitHub repository its table is in,
    else the text up to the first comma or parenthesis."""
    text = source.strip("'\" ")
    m = _ARXIV.search(text)
    if m:
        return f"arXiv:{m.group(1)}"
    m = _REPO.search(text)
    if m:
        return m.group(1)
    return re.split(r"[,(]", text, maxsplit=1)[0].strip()
