"""The calibration procedure: the grid descent by hand, and (quick form) that the stored parameters
are exactly what benchmarks/calibrate.py converges to from the same inputs.

The quick form checks the descent's stop condition at the stored point — no grid neighbour strictly
improves the training objective — and that the stored training objective is reproduced. The full form is
``python benchmarks/calibrate.py --check`` (refits from the start point; minutes).
If this fails after a change to the simulator, rerun ``python benchmarks/calibrate.py``.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simulator.validation import calibration as cal
from simulator.validation.suite import load_runs

pytestmark = pytest.mark.validation


def _stored() -> dict:
    return yaml.safe_load(resources.files("simulator.hardware").joinpath("efficiency.yaml").read_text())


def test_descent_reaches_the_minimum_of_a_separable_bowl_by_hand():
    target = (80, 40, 90, 10)
    point, best, evals, moves = cal.descend(lambda p: sum((a - b) ** 2 for a, b in zip(p, target, strict=True)),
                                            tuple(cal.START[p] for p in cal.PARAMS))
    assert point == target and best == 0
    assert moves == sum(abs(a - cal.START[p]) for a, p in zip(target, cal.PARAMS, strict=True))
    assert evals <= 1 + 8 * moves + 8


def test_neighbours_stay_inside_bounds():
    low = tuple(cal.BOUNDS[p][0] for p in cal.PARAMS)
    assert len(cal.neighbours(low)) == 4
    assert all(all(cal.BOUNDS[p][0] <= k <= cal.BOUNDS[p][1] for k, p in zip(n, cal.PARAMS, strict=True))
               for n in cal.neighbours(low))


def test_values_round_trip_on_the_grid():
    point = (77, 55, 86, 25)
    assert cal.point_of(cal.values(point)) == point
    assert cal.values(point)["gemm_sustained_of_mamf"] == 0.77


@pytest.mark.parametrize("arch", ["ampere", "hopper"])
def test_stored_parameters_are_the_fit_of_the_training_runs(arch):
    stored = _stored()
    params = stored[arch]
    provenance = stored["calibration"][arch]
    cases = cal.cases_by_arch(load_runs(), "train")[arch]
    assert [r.id for r, _ in cases] == provenance["fitted_on"]
    assert cal.values(cal.point_of(params)) == params, "stored values are not on the grid"
    minimum, objective = cal.is_local_minimum(cases, params)
    assert round(objective, 6) == provenance["train_objective"], "simulator changed: rerun benchmarks/calibrate.py"
    assert minimum, "a neighbour fits better: rerun benchmarks/calibrate.py"
