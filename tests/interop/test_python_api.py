"""The Python API: ``simulator.simulate`` / ``simulator.sweep`` give the CLI's numbers; light import."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

import simulator
from simulator.cli import app
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "olmo-2-7b-8xh100.yaml"
SMALL = {"training.global_batch_size": 64}


def test_simulate_equals_dtsim_run_json():
    r = simulator.simulate(SCENARIO, parallel__zero_stage=2, **SMALL)
    cli = CliRunner().invoke(app, ["run", str(SCENARIO), "--json", "--set", "parallel.zero_stage=2",
                                   "--set", "training.global_batch_size=64"])
    assert cli.exit_code == 0, cli.output
    expected = json.loads(cli.stdout)
    assert r.scenario.parallel.zero_stage == 2 and r.step_time_s == expected["step_time_s"]
    assert json.loads(json.dumps(r.to_dict(), default=float))["step_time_interval_s"] == \
        expected["step_time_interval_s"]
    # a mapping and a Scenario give the same result as the path
    assert simulator.simulate(r.scenario).step_time_s == r.step_time_s
    with pytest.raises(InputError, match="parallel.zero_stage"):
        simulator.simulate(SCENARIO, parallel__zero_stage=7)


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_a_loaded_scenario_takes_overrides_like_its_file(path):
    """load(load(path), **o) is load(path, **o): the overrides apply to what the scenario set, not to a
    dump of every framework's defaults (which carried DDP's bucket_cap_mb into DeepSpeed scenarios and
    failed validation; found by a bug bash)."""
    batch = simulator.load(path).training.global_batch_size * 2
    assert simulator.load(simulator.load(path), training__global_batch_size=batch) == \
        simulator.load(path, training__global_batch_size=batch)


def test_sweep_rows_sorted_by_objective_and_dataframe_when_pandas(monkeypatch):
    rows = simulator.sweep(SCENARIO, {"parallel.zero_stage": [2, 3]}, objective="step_time", **SMALL)
    if not isinstance(rows, list):  # pandas installed
        rows = rows.to_dict("records")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["step_time_s"] <= rows[1]["step_time_s"]
    one = simulator.simulate(SCENARIO, parallel__zero_stage=rows[0]["parallel.zero_stage"], **SMALL)
    assert rows[0]["step_time_s"] == pytest.approx(one.step_time_s, rel=1e-12)
    fake = types.ModuleType("pandas")
    fake.DataFrame = lambda data: ("frame", data)
    monkeypatch.setitem(sys.modules, "pandas", fake)
    frame = simulator.sweep(SCENARIO, {"parallel.zero_stage": [3]}, **SMALL)
    assert frame[0] == "frame" and frame[1][0]["parallel.zero_stage"] == 3


def test_import_simulator_is_light():
    code = "import sys, simulator; print(sorted(m for m in sys.modules if m.startswith(('simulator', 'simpy', " \
           "'networkx', 'pydantic'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "['simulator']"


def test_sweep_refuses_a_bad_objective_or_worker_count_before_running(monkeypatch):
    """Checked before any point runs (the grid runner is never reached)."""
    import simulator.sweep.runner as runner_mod

    monkeypatch.setattr(runner_mod, "run_sweep", lambda *a, **k: pytest.fail("the grid ran"))
    with pytest.raises(InputError, match="unknown objective 'speed'"):
        simulator.sweep(SCENARIO, {"parallel.zero_stage": [2, 3]}, objective="speed")
    with pytest.raises(InputError, match="workers must be a positive integer"):
        simulator.sweep(SCENARIO, {"parallel.zero_stage": [2, 3]}, workers=0)
