"""Sweep files: the user's umask, resuming a truncated file, workers that die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.sweep.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
DDP = ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"


def _rows(n: int) -> list[dict]:
    return [{"point": i, "sweep_id": "abc", "step_time_s": 0.5 + i, "status": "ok"} for i in range(n)]


def test_results_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        store = ResultStore(tmp_path / "r.csv", "abc")
        for row in _rows(2):
            store.add(row)
        store.flush()
    finally:
        os.umask(old)
    assert (tmp_path / "r.csv").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_resume_drops_a_truncated_last_row(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    store = ResultStore(path, "abc")
    for row in _rows(3):
        store.add(row)
    store.flush()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 9])  # cut inside the last row
    resumed = ResultStore(path, "abc", resume=True)
    assert resumed.done() == {0, 1}  # point 2 is simulated again


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc (Linux)")
def test_sweep_workers_exit_when_the_parent_is_killed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "simulator", "sweep", str(DDP), "--workers", "2", "--set",
           "training.global_batch_size=64", "--grid",
           "training.seq_len=" + ",".join(str(64 * i) for i in range(1, 400))]
    parent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(children) < 2:
        time.sleep(0.2)
        try:
            text = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text()
        except OSError:
            break
        children = [int(c) for c in text.split()]
    if not children:
        parent.kill()
        parent.wait()
    assert children, "the sweep started no worker"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [c for c in children if Path(f"/proc/{c}").exists() and
                 "zombie" not in Path(f"/proc/{c}/status").read_text(errors="replace").lower()]
    for c in alive:
        os.kill(c, signal.SIGKILL)
    assert alive == []


def test_sweep_chart_lines_join_only_points_that_differ_in_x(tmp_path, monkeypatch):
    import matplotlib.axes

    from simulator.sweep.charts import write_sweep_png

    lines = []
    original = matplotlib.axes.Axes.plot

    def spy(self, xs, *args, **kwargs):
        lines.append((list(xs), kwargs.get("label")))
        return original(self, xs, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    grid = {"a": [1, 2, 3], "b": [1, 2], "c": ["x", "y"]}
    rows = [{"status": "ok", "a": a, "b": b, "c": c, "step_time_s": a + b} for a in grid["a"] for b in grid["b"]
            for c in grid["c"]]
    write_sweep_png(rows, grid, [], tmp_path / "s.png")
    step_lines = [ln for ln in lines if ln[1]]
    # 2 × 2 combinations of (b, c): four lines, each over x = 1, 2, 3 once (no sawtooth).
    assert len(step_lines) == 4 and all(xs == [1.0, 2.0, 3.0] for xs, _ in step_lines)
    write_sweep_png([{"status": "oom", "a": 1, "b": 1, "c": "x"}], grid, [], tmp_path / "none.png")
    assert (tmp_path / "none.png").read_bytes()[:4] == b"\x89PNG"


def test_an_interrupted_sweep_flushes_the_rows_it_finished(tmp_path, monkeypatch):
    """Ctrl-C between flushes (every FLUSH_EVERY_S) loses no finished row: the runner flushes on the way
    out, so --resume starts after them (found by a bug bash: an interrupt in the first second left no file)."""
    from simulator.sweep import runner

    def stream(*_args, **_kwargs):
        yield _rows(3)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_local", stream)
    store = ResultStore(tmp_path / "s.csv", "abc")
    with pytest.raises(KeyboardInterrupt):
        runner.run_sweep({}, tmp_path, [{} for _ in range(6)], store)
    assert ResultStore(tmp_path / "s.csv", "abc", resume=True).done() == {0, 1, 2}
