from __future__ import annotations

import json

import pytest

from simulator.errors import InputError
from simulator.sweep.store import ResultStore


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_round_trip_and_resume(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    store = ResultStore(path, "abc")
    store.add({"point": 1, "sweep_id": "abc", "x": 2.5, "status": "ok"})
    store.add({"point": 0, "sweep_id": "abc", "x": 1.5, "status": "ok"})
    store.flush()
    again = ResultStore(path, "abc", resume=True)
    assert again.done() == {0, 1}
    with pytest.raises(InputError, match="another sweep"):
        ResultStore(path, "zzz", resume=True)
    with pytest.raises(InputError, match="--resume"):
        ResultStore(path, "abc", resume=False)


def test_rows_sorted_and_no_temp_left(tmp_path):
    path = tmp_path / "r.jsonl"
    store = ResultStore(path, "s")
    for i in (2, 0, 1):
        store.add({"point": i, "sweep_id": "s"})
    store.flush()
    assert [json.loads(line)["point"] for line in path.read_text().splitlines()] == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_bad_suffix(tmp_path):
    with pytest.raises(InputError, match="--out"):
        ResultStore(tmp_path / "r.xlsx", "s")
