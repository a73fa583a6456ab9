"""``dtsim sweep`` and ``dtsim tune buckets`` end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()
GRID = ["--grid", "parallel.zero_stage=1,2,3", "--grid", "parallel.reduce_bucket_size=1e7:5e8:log:3"]


def _sweep(*args):
    result = runner.invoke(app, ["sweep", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_row_count_equals_grid_and_rerun_is_identical(small_scenario, tmp_path):
    out1, out2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    summary = _sweep(str(small_scenario), *GRID, "--out", str(out1))
    assert summary["points"] == 9 and len(_rows(out1)) == 9
    assert summary["best"]["status"] == "ok"
    _sweep(str(small_scenario), *GRID, "--out", str(out2), "--workers", "2")
    assert out1.read_text() == out2.read_text()  # same rows, bit for bit, whatever the worker count


def test_infeasible_and_invalid_points_are_rows(small_scenario, tmp_path):
    out = tmp_path / "r.csv"
    # ZeRO-0 replicates 16 B/param: 64 layers of width 8192 (~52B params) cannot fit in 80 GB.
    summary = _sweep(str(small_scenario), "--grid", "parallel.zero_stage=0,3", "--grid", "model.hidden_size=1024,8192",
                     "--grid", "model.n_layers=4,64", "--grid", "parallel.tp=1,3", "--out", str(out))
    assert summary["points"] == 16
    counts = summary["status_counts"]
    assert counts["invalid"] == 8  # tp = 3 does not divide 8 GPUs
    text = out.read_text()
    assert "infeasible" in text and "needs" in text and "does not divide" in text
    infeasible = [line for line in text.splitlines() if ",infeasible," in line]
    assert infeasible and all(",False," in line for line in infeasible)  # fits: false


def test_killed_sweep_resumes_to_the_same_rows(small_scenario, tmp_path):
    # 1,200 points, about 3 s of sweeping: several of the runner's 1 s flushes, so the kill after the
    # first one lands mid-sweep (with 400 points a quiet machine finished before the first flush)
    grid = ["--grid", "parallel.reduce_bucket_size=1e6:1e9:log:600", "--grid", "parallel.zero_stage=2,3"]
    full = tmp_path / "full.jsonl"
    _sweep(str(small_scenario), *grid, "--out", str(full))
    part = tmp_path / "part.jsonl"
    cmd = [sys.executable, "-m", "simulator", "sweep", str(small_scenario), *grid, "--out", str(part), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (part.exists() and part.read_text().count("\n") >= 2):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _rows(part)  # the killed sweep left a valid file
    assert 0 < len(partial) < 1200
    _sweep(str(small_scenario), *grid, "--out", str(part), "--resume")
    assert part.read_text() == full.read_text()


def test_ray_backend_matches_local(small_scenario, tmp_path):
    pytest.importorskip("ray")
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    _sweep(str(small_scenario), *GRID, "--out", str(local))
    # --address omitted: the backend starts a local Ray instance for the test.
    _sweep(str(small_scenario), *GRID, "--out", str(remote), "--backend", "ray")
    assert local.read_text() == remote.read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grid", "parallel.zero_stag=1"], "unknown dotted path"),
        ([], "grid is empty"),
        (["--grid", "parallel.zero_stage=a,b"], "grid value"),
        (["--grid", "parallel.reduce_bucket_size=0,5e8"], "grid value"),
        (["--grid", "parallel.zero_stage=1", "--objective", "speed"], "unknown objective"),
        (["--grid", "parallel.zero_stage=1", "--backend", "slurm"], "unknown backend"),
    ],
)
def test_bad_input(small_scenario, args, needle):
    result = runner.invoke(app, ["sweep", str(small_scenario), *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_resume_into_another_sweeps_file_is_refused(small_scenario, tmp_path):
    out = tmp_path / "r.jsonl"
    _sweep(str(small_scenario), "--grid", "parallel.zero_stage=1,2", "--out", str(out))
    before = out.read_text()
    result = runner.invoke(app, ["sweep", str(small_scenario), "--grid", "parallel.zero_stage=2,3",
                                 "--out", str(out), "--resume"])
    assert result.exit_code == 2 and "another sweep" in result.output
    assert out.read_text() == before  # existing results untouched


def test_unreachable_ray_address(small_scenario, tmp_path):
    pytest.importorskip("ray")
    result = runner.invoke(app, ["sweep", str(small_scenario), "--grid", "parallel.zero_stage=1",
                                 "--backend", "ray", "--address", "ray://127.0.0.1:1"])
    assert result.exit_code == 2 and "Ray cluster" in result.output


def test_tuner_optimum_is_no_worse_than_any_point_tried(small_scenario):
    from simulator.config.loader import load_scenario
    from simulator.sweep.tune import tune

    scenario = load_scenario(small_scenario)
    seen = []

    def step_time(settings):
        # A convex stand-in with its minimum at 3e7 elements, so the test knows the answer.
        import math

        t = 1.0 + (math.log10(settings["reduce_bucket_size"]) - math.log10(3e7)) ** 2
        seen.append(t)
        return t

    result = tune(scenario, step_time)
    assert result.best_step_time_s == min(seen)
    assert result.best["reduce_bucket_size"] == pytest.approx(3e7, rel=0.35)
    assert result.gain > 0


def test_tuner_reports_what_fits_when_the_default_does_not(small_scenario):
    """A model that does not fit is a result: buckets above 1e8 elements 'do not fit' here, so the
    default 5e8 does not, the best fitting point is found, and no gain over the default is claimed;
    where nothing fits, the result says so (no exception)."""
    import math

    from simulator.config.loader import load_scenario
    from simulator.sweep.tune import tune

    scenario = load_scenario(small_scenario)

    def step_time(settings):
        size = settings["reduce_bucket_size"]
        return None if size > 1e8 else 1.0 + (math.log10(size) - 7) ** 2  # the fitting optimum: 1e7

    result = tune(scenario, step_time)
    assert result.default_step_time_s is None and result.gain is None
    assert result.best["reduce_bucket_size"] == pytest.approx(1e7, rel=0.35) and result.best_step_time_s < 1.1
    nothing = tune(scenario, lambda settings: None)
    assert nothing.best is None and nothing.best_step_time_s is None and nothing.gain is None
    out = runner.invoke(app, ["tune", "buckets", str(small_scenario), "--set", "training.seq_len=131072",
                              "--set", "training.micro_batch_size=8"])  # 4 blocks x 8 x 131,072 tokens
    assert out.exit_code == 0 and "does not fit in memory at any bucket size tried" in " ".join(out.output.split())


def test_tune_cli(small_scenario):
    result = runner.invoke(app, ["tune", "buckets", str(small_scenario), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["best_step_time_s"] <= data["default_step_time_s"]
    fsdp = runner.invoke(app, ["tune", "buckets", str(small_scenario), "--set", "parallel.framework=fsdp",
                               "--set", "parallel.zero_stage=3"])
    assert fsdp.exit_code == 2 and "no bucket size" in fsdp.output


def test_tune_megatron_ddp_bucket(small_scenario):
    """Megatron-Core's DDP (the distributed optimizer) tunes its own bucket, in elements, from its default
    max(4e7, 1e6 x dp) (dp 8 in the small scenario: 4e7)."""
    result = runner.invoke(app, ["tune", "buckets", str(small_scenario), "--json", "--set", "parallel.framework=ddp",
                                 "--set", "parallel.zero_stage=0", "--set", "parallel.distributed_optimizer=true"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["default"] == {"parallel.ddp_bucket_size": 4e7}
    assert data["best_step_time_s"] <= data["default_step_time_s"]


def test_values_valid_only_together_become_rows(small_scenario, tmp_path):
    # global batch 24 is no multiple of micro-batch 2 × dp 8 — but it is with micro-batch 1... no:
    # 24 = 3 × 8, so (1, 24) and (1, 32), (2, 32) are valid and (2, 24) is an invalid row.
    summary = _sweep(str(small_scenario), "--grid", "training.micro_batch_size=1,2",
                     "--grid", "training.global_batch_size=24,32")
    assert summary["points"] == 4 and summary["status_counts"]["invalid"] == 1


def test_csv_resume_keeps_types_and_refuses_foreign_files(small_scenario, tmp_path):
    out = tmp_path / "r.csv"
    first = _sweep(str(small_scenario), "--grid", "parallel.zero_stage=1,2", "--out", str(out))
    again = _sweep(str(small_scenario), "--grid", "parallel.zero_stage=1,2", "--out", str(out), "--resume")
    assert again["best"] == first["best"] and isinstance(again["best"]["fits"], bool)
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("garbage\n")
    result = runner.invoke(app, ["sweep", str(small_scenario), "--grid", "parallel.zero_stage=1",
                                 "--out", str(foreign), "--resume"])
    assert result.exit_code == 2 and "not a dtsim sweep result" in result.output
    assert foreign.read_text() == "garbage\n"


def test_missing_output_folder_is_refused_before_simulating(small_scenario, tmp_path):
    result = runner.invoke(app, ["sweep", str(small_scenario), "--grid", "parallel.zero_stage=1",
                                 "--out", str(tmp_path / "nodir" / "r.csv")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_set_applies_to_every_point(small_scenario):
    summary = _sweep(str(small_scenario), "--grid", "parallel.zero_stage=1,2", "--set", "cluster.nodes=2")
    assert summary["best"]["n_gpus"] == 16


def test_layouts_auto_enumerates_and_ranks(small_scenario):
    # 8 heads on 8 GPUs, global batch 64: tp ∈ {1, 2, 4, 8}, pp up to 4 layers; ZeRO-2 forbids pp > 1.
    summary = _sweep(str(small_scenario), "--layouts", "auto", "--set", "parallel.zero_stage=1")
    assert summary["points"] > 4 and summary["best"]["status"] == "ok"
    assert {"parallel.tp", "parallel.pp"} <= set(summary["best"])
