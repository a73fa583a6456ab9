"""Output files are replaced whole: a writer that fails leaves the previous file and no temporary."""

from __future__ import annotations

import os

import pytest

from simulator.atomic import replacing, write_text


def test_a_failed_write_leaves_the_previous_file_and_nothing_else(tmp_path):
    target = tmp_path / "README.md"
    target.write_text("before")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".md"  # savefig infers the format from it
        tmp.write_text("half a rep")
        raise RuntimeError("interrupted")
    assert target.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]


def test_a_finished_write_replaces_the_file_with_the_umask_mode(tmp_path):
    target = tmp_path / "trace.json"
    write_text(target, "{}")
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["trace.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600
