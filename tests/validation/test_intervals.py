"""Prediction intervals: hand arithmetic on a made-up residual table, group fallback, the stored table."""

from __future__ import annotations

import math

import pytest

from simulator.validation.intervals import (
    MIN_RUNS,
    choose_group,
    group_stats,
    load_residuals,
    step_time_interval,
)

DATA = {"groups": {
    "all": {"n": 20, "mu": 0.0, "sigma": 0.1},
    "hopper": {"n": 6, "mu": 0.05, "sigma": 0.2},
    "hopper/fsdp": {"n": 5, "mu": -0.1, "sigma": 0.05},
    "ampere/fsdp": {"n": 2, "mu": 0.3, "sigma": 0.01},
}}


def test_interval_by_hand():
    """80 %: z = 1.28155; [T·e^(mu − zσ), T·e^(mu + zσ)]."""
    iv = step_time_interval(2.0, "hopper", "fsdp", data=DATA)
    z = 1.2815515655446004
    assert iv.group == "hopper/fsdp" and iv.n_runs == 5
    assert iv.low_s == pytest.approx(2.0 * math.exp(-0.1 - z * 0.05), rel=1e-12)
    assert iv.high_s == pytest.approx(2.0 * math.exp(-0.1 + z * 0.05), rel=1e-12)
    assert iv.as_list() == [iv.low_s, iv.high_s]


def test_small_groups_pool_into_the_next_level():
    assert choose_group(DATA, "hopper", "deepspeed") == "hopper"
    assert choose_group(DATA, "ampere", "fsdp") == "all"  # 2 < MIN_RUNS and no "ampere" group
    assert MIN_RUNS == 5


def test_wider_coverage_gives_a_wider_interval_containing_the_narrower():
    a = step_time_interval(1.0, "ampere", "ddp", coverage=0.5, data=DATA)
    b = step_time_interval(1.0, "ampere", "ddp", coverage=0.9, data=DATA)
    assert b.low_s < a.low_s < 1.0 < a.high_s < b.high_s
    with pytest.raises(ValueError):
        step_time_interval(1.0, "ampere", "ddp", coverage=1.0, data=DATA)


def test_group_stats_by_hand():
    assert group_stats([0.1, -0.1, 0.3]) == {"n": 3, "mu": 0.1, "sigma": 0.2}
    assert group_stats([0.2]) == {"n": 1, "mu": 0.2, "sigma": 0.0}


def test_stored_table_is_consistent_with_its_residuals():
    data = load_residuals()
    assert "all" in data["groups"]
    for key, g in data["groups"].items():
        assert g["n"] == len(g["residuals"]), key
        assert {**group_stats(g["residuals"]), "residuals": g["residuals"]} == g, key
    iv = step_time_interval(1.42, "hopper", "fsdp")
    assert iv.low_s < iv.high_s
