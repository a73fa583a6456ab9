"""Prediction intervals: hand arithmetic on a made-up residual table, group fallback, the conformal ``z`` and
the held-out scores by hand, the stored table."""

from __future__ import annotations

import math

import pytest

from simulator.validation.intervals import (
    MIN_RUNS,
    Residual,
    build,
    choose_group,
    conformal_z,
    coverage_check,
    group_stats,
    held_out_scores,
    load_residuals,
    step_time_interval,
    z_for,
)

DATA = {"groups": {
    "all": {"n": 20, "mu": 0.0, "sigma": 0.1},
    "hopper": {"n": 6, "mu": 0.05, "sigma": 0.2},
    "hopper/fsdp": {"n": 5, "mu": -0.1, "sigma": 0.05},
    "ampere/fsdp": {"n": 2, "mu": 0.3, "sigma": 0.01},
    "hopper/ddp/moe": {"n": 5, "mu": 0.2, "sigma": 0.3},
    "hopper/ddp/dense": {"n": 4, "mu": 0.0, "sigma": 0.01},
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


def test_dense_and_moe_models_have_groups_of_their_own():
    assert choose_group(DATA, "hopper", "ddp", moe=True) == "hopper/ddp/moe"
    assert choose_group(DATA, "hopper", "ddp") == "hopper"  # dense: 4 runs, and no hopper/ddp group
    iv = step_time_interval(1.0, "hopper", "ddp", data=DATA, moe=True)
    z = 1.2815515655446004  # no held-out scores in the table: the normal quantile
    assert iv.high_s == pytest.approx(math.exp(0.2 + z * 0.3), rel=1e-12)


def test_conformal_z_by_hand():
    """The ceil((n + 1) c)-th smallest of n scores: n = 4, c = 0.5 -> 3rd; 0.8 -> 4th; 0.2 -> 1st; 0.9 -> past n."""
    scores = [2.0, 0.5, 1.5, 1.0]
    assert conformal_z(scores, 0.5) == 1.5
    assert conformal_z(scores, 0.8) == 2.0
    assert conformal_z(scores, 0.2) == 0.5
    assert conformal_z(scores, 0.9) == 2.0
    assert z_for({"scores": scores, "groups": {}}, 0.5) == 1.5
    assert z_for({"groups": {}}, 0.8) == pytest.approx(1.2815515655446004, rel=1e-12)


# Two publications of five hopper/fsdp dense runs each: P around 0, Q around 0.5.
P = [0.0, 0.1, -0.1, 0.2, -0.2]
Q = [0.5, 0.5, 0.5, 0.6, 0.4]
RUNS = [Residual("P", "hopper", "fsdp", False, r) for r in P] + [Residual("Q", "hopper", "fsdp", False, r) for r in Q]


def test_held_out_scores_by_hand():
    """P's runs against Q's group (mu 0.5, sigma sqrt(0.02 / 4)), Q's against P's (mu 0, sigma sqrt(0.1 / 4));
    the stored stats are rounded to 6 decimals (``group_stats``), hence the 1e-5 tolerance."""
    sq, sp = math.sqrt(0.02 / 4), math.sqrt(0.1 / 4)
    expected = [abs(r - 0.5) / sq for r in P] + [abs(r) / sp for r in Q]
    assert held_out_scores(RUNS) == pytest.approx(expected, rel=1e-5)


def test_coverage_check_by_hand():
    """Scores sorted: 2.53, 3.16 x3, 3.79, 4.24, 5.66, 7.07, 8.49, 9.90; at 80 % z is the ceil(11 x 0.8) = 9th,
    8.49 (P's −0.1), which leaves out only P's −0.2: 9 of 10 covered."""
    check = coverage_check(RUNS)
    assert check["z"] == pytest.approx(0.6 / math.sqrt(0.02 / 4), rel=1e-5)
    assert check["groups"]["all"] == {"n": 10, "covered": 0.9}
    assert check["groups"]["hopper/dense"] == {"n": 10, "covered": 0.9}
    assert coverage_check(RUNS[:5]) == {"z": None, "groups": {}}  # one publication: nothing held out


def test_build_stores_each_group_and_the_sorted_scores():
    table = build(RUNS, "made up")
    assert table["groups"]["hopper/fsdp/dense"] == {**group_stats(P + Q), "residuals": P + Q}
    assert set(table["groups"]) == {"hopper/fsdp/dense", "hopper/fsdp", "hopper", "all"}
    assert table["scores"] == sorted(table["scores"]) and len(table["scores"]) == 10


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
    archs = [k for k in data["groups"] if k != "all" and "/" not in k]
    assert sum(data["groups"][k]["n"] for k in archs) == data["groups"]["all"]["n"]
    assert data["scores"] == sorted(data["scores"]) and len(data["scores"]) <= data["groups"]["all"]["n"]
    iv = step_time_interval(1.42, "hopper", "fsdp")
    assert iv.low_s < iv.high_s
