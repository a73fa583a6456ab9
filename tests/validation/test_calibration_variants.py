"""benchmarks/calibration_variants.py: the publication-weighted objective of its ``source`` variant, by hand."""

from __future__ import annotations

import pytest

from simulator.validation import calibration as cal


@pytest.fixture(scope="module")
def study(benchmark_script):
    return benchmark_script("calibration_variants")


def test_every_publication_weighs_alike_where_the_stored_objective_weighs_every_run(study):
    # three runs of publication a at 10 %, one of b at 30 %, capped at CAP = 25 %
    errs, pubs = [0.1, -0.1, 0.1, 0.3], ["a", "a", "a", "b"]
    assert cal.objective(errs) == pytest.approx((0.1 + 0.1 + 0.1 + 0.25) / 4)  # 0.1375
    assert study.publication_weighted(errs, pubs) == pytest.approx((0.1 + 0.25) / 2)  # 0.175


def test_one_publication_reduces_to_the_mean_capped_error_of_its_runs(study):
    # 2 %, 40 % capped at 25 %, 7 %: (0.02 + 0.25 + 0.07) / 3
    errs = [0.02, -0.4, 0.07]
    assert study.publication_weighted(errs, ["x"] * 3) == pytest.approx(0.34 / 3)


def test_the_variant_names_are_checked(study, monkeypatch):
    monkeypatch.setattr("sys.argv", ["calibration_variants.py", "--variants", "stored,weighted"])
    with pytest.raises(SystemExit) as err:
        study.main()
    assert err.value.code == 2
