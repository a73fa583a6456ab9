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
    """The ceil((n + 1) c)-th smallest of n scores: n = 4, c = 0.5 -> 3rd; 0.8 -> 4th; 0.2 -> 1st; 0.9 -> the
    5th of 4: no finite z covers that much."""
    scores = [2.0, 0.5, 1.5, 1.0]
    assert conformal_z(scores, 0.5) == 1.5
    assert conformal_z(scores, 0.8) == 2.0
    assert conformal_z(scores, 0.2) == 0.5
    assert conformal_z(scores, 0.9) == math.inf
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
    """Built without a run's publication, z is the other publication's ceil(6 x 0.8) = 5th of 5 scores: for P's
    runs Q's largest, 0.1 / sqrt(0.1 / 4) = 3.79 (P's own scores, 0.3 / sqrt(0.005) = 4.24 up, all exceed it),
    for Q's runs P's largest, 9.90 (Q's at most 3.79): 5 of 10 covered. The reported z is that of all ten
    scores, the ceil(11 x 0.8) = 9th: 0.6 / sqrt(0.005) = 8.49."""
    check = coverage_check(RUNS)
    assert check["z"] == pytest.approx(0.6 / math.sqrt(0.02 / 4), rel=1e-5)
    assert check["groups"]["all"] == {"n": 10, "covered": 0.5}
    assert check["groups"]["hopper/dense"] == {"n": 10, "covered": 0.5}
    assert check["groups"]["group hopper/fsdp/dense"] == {"n": 10, "covered": 0.5}
    assert coverage_check(RUNS[:5]) == {"z": None, "groups": {}}  # one publication: nothing held out


def test_a_group_without_spread_scores_zero_on_its_mean_and_infinity_off_it():
    """B's runs against A's group (five 0.1s: mu 0.1, sigma 0): 0 four times, inf for 0.3; A's against B's
    (mu 0.14, sigma sqrt((4 x 0.04^2 + 0.16^2) / 4) = sqrt(0.008)): 0.04 / sqrt(0.008) each."""
    runs = ([Residual("A", "hopper", "fsdp", False, 0.1)] * 5
            + [Residual("B", "hopper", "fsdp", False, r) for r in (0.1, 0.1, 0.1, 0.1, 0.3)])
    assert held_out_scores(runs) == pytest.approx([0.04 / math.sqrt(0.008)] * 5 + [0, 0, 0, 0, math.inf], rel=1e-5)


def test_build_stores_each_group_and_the_sorted_scores():
    table = build(RUNS, "made up")
    assert table["groups"]["hopper/fsdp/dense"] == {**group_stats(P + Q), "residuals": P + Q}
    assert set(table["groups"]) == {"hopper/fsdp/dense", "hopper/fsdp", "hopper", "all"}
    assert table["scores"] == sorted(round(x, 6) for x in held_out_scores(RUNS))


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
    assert data["scores"] == sorted(data["scores"]) and len(data["scores"]) == data["groups"]["all"]["n"]
    iv = step_time_interval(1.42, "hopper", "fsdp")
    assert iv.low_s < iv.high_s


def test_run_uses_the_moe_group_for_an_moe_model():
    """Mixtral 8x7B under Megatron on H100 takes the hopper/ddp/moe group of the bundled table."""
    from simulator.python_api import simulate

    r = simulate("scenarios/mixtral-8x7b-ep8-16xh100.yaml", **{"training.global_batch_size": 32})
    assert r.interval.group == "hopper/ddp/moe"
    assert r.interval.n_runs == load_residuals()["groups"]["hopper/ddp/moe"]["n"]


def test_validation_rows_carry_their_interval_group_and_residual():
    from simulator.validation.suite import load_runs, try_run
    from simulator.validation.summary import residuals, row

    run = next(r for r in load_runs() if r.id == "megatron-sc21-t1-1.7B")
    r = row(try_run(run))
    assert (r["arch"], r["parallel_framework"], r["moe"], r["publication"]) == ("ampere", "ddp", False, run.publication)
    assert residuals([r]) == [Residual(run.publication, "ampere", "ddp", False, math.log1p(r["error"]))]


def test_the_written_table_and_the_report_section(tmp_path):
    """``dtsim validate --intervals`` writes ``build``'s table; the markdown lists each coverage group once."""
    from simulator.cli_validate import _write_intervals
    from simulator.validation.render import _intervals_section

    rows = [{"publication": r.publication, "arch": r.arch, "parallel_framework": r.framework, "moe": r.moe,
             "error": math.expm1(r.residual)} for r in RUNS]
    path = tmp_path / "i.yaml"
    _write_intervals(rows, path)
    table = load_residuals(path.read_text())
    assert table["groups"]["hopper/fsdp/dense"]["residuals"] == pytest.approx(P + Q, abs=1e-6)
    lines = _intervals_section({"intervals": coverage_check(RUNS)}, "#")
    assert "| all | 10 | 50.0% |" in lines and "| group hopper/fsdp/dense | 10 | 50.0% |" in lines
    assert not any(line.startswith("| hopper/dense |") for line in lines)  # all of hopper's runs: same line
