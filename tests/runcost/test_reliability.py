"""Checkpoint-interval mathematics against Young (1974) and Daly (2006)'s worked examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.runcost.reliability import daly_interval, expected_wall_clock, job_mtbf_s, young_interval

MIN = 60.0
HOUR = 3600.0


@pytest.mark.parametrize(("mtbf_h", "expected_min"), [(24, 117), (6, 57), (0.25, 9.1)])
def test_daly_worked_examples(mtbf_h, expected_min):
    # Daly 2006, δ = 5 min: M = 24 h → 117 min, 6 h → 57 min, 15 min → 9.1 min (formulas.md §7).
    tau = daly_interval(5 * MIN, mtbf_h * HOUR)
    assert tau / MIN == pytest.approx(expected_min, abs=0.5 if expected_min > 10 else 0.05)


def test_young_first_order():
    # √(2 · 60 s · 3.09 h) ≈ 19.3 min (hardware.md §6d: "M = 3.09 h and δ = 1 min → τ ≈ 19 min").
    assert young_interval(60.0, 3.09 * HOUR) / MIN == pytest.approx(19.3, abs=0.1)


def test_daly_degenerate():
    assert daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR  # δ ≥ 2M ⇒ τ = M
    assert math.isinf(daly_interval(0.0, HOUR))


def test_wall_clock_limits():
    # No failures and no checkpoint cost: exactly the solve time.
    assert expected_wall_clock(1000.0, 100.0, 0.0, 600.0, math.inf) == pytest.approx(1000.0)
    # No failures, checkpoints of 10 s every 100 s: 10 segments of 110 s.
    assert expected_wall_clock(1000.0, 100.0, 10.0, 600.0, math.inf) == pytest.approx(1100.0)
    # First order: waste ≈ δ/τ + (τ/2 + R)/M for M ≫ τ.
    solve, tau, delta, restart, mtbf = 1e6, 1000.0, 10.0, 100.0, 1e7
    approx = solve * (1 + delta / tau + (tau / 2 + restart) / mtbf)
    assert expected_wall_clock(solve, tau, delta, restart, mtbf) == pytest.approx(approx, rel=1e-3)


@given(st.floats(1e3, 1e7), st.floats(1.5, 10))
def test_wall_clock_grows_with_failure_rate(mtbf, factor):
    solve, delta, restart = 1e6, 30.0, 300.0
    slow = expected_wall_clock(solve, daly_interval(delta, mtbf / factor), delta, restart, mtbf / factor)
    fast = expected_wall_clock(solve, daly_interval(delta, mtbf), delta, restart, mtbf)
    assert slow > fast >= solve


def test_job_mtbf_adds_rates():
    # Llama 3: 16,384 GPUs at 50,700 h per GPU ⇒ ≈ 3.09 h for the job (hardware.md §6a).
    assert job_mtbf_s(16384, 50700.0, 2048, None, 0.0) / HOUR == pytest.approx(3.09, abs=0.01)
    # Adding 2,048 nodes at 20,000 h each: 1/M = 16384/50700 + 2048/20000 per hour.
    expected = HOUR / (16384 / 50700 + 2048 / 20000)
    assert job_mtbf_s(16384, 50700.0, 2048, 20000.0, 0.0) == pytest.approx(expected)
    assert math.isinf(job_mtbf_s(8, math.inf, 1, None, 0.0))
