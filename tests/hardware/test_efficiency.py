"""Efficiency catalog: the fitted block is what ``for_gpu`` returns, inside the physical bounds."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simulator.catalog import get_gpu
from simulator.hardware.efficiency import calibrated_archs, for_gpu, is_calibrated
from simulator.validation.calibration import PARAMS, STEP, bounds


def _table() -> dict:
    return yaml.safe_load(resources.files("simulator.hardware").joinpath("efficiency.yaml").read_text())


@pytest.mark.parametrize(("gpu", "arch"), [("a100-80gb", "ampere"), ("h100-sxm", "hopper")])
def test_for_gpu_applies_the_fitted_values(gpu, arch):
    spec, fitted = get_gpu(gpu), _table()[arch]
    eff = for_gpu(spec)
    assert is_calibrated(spec)
    assert eff.gemm_fraction == pytest.approx(spec.mamf_fraction * fitted["gemm_sustained_of_mamf"])
    for name in PARAMS[1:]:
        assert getattr(eff, name) == fitted[name]


@pytest.mark.parametrize("arch", ["ampere", "hopper"])
def test_fitted_values_lie_inside_the_physical_bounds(arch):
    fitted = _table()[arch]
    for name in PARAMS:
        lo, hi = bounds(arch)[name]
        assert lo * STEP - 1e-9 <= fitted[name] <= hi * STEP + 1e-9, name


def test_the_calibrated_architectures_are_the_three_fitted_ones():
    """benchmarks/calibrate.py fits Ampere, Hopper and Blackwell (docs/validation.md); the uncalibrated
    warning names them, not a stale list."""
    assert calibrated_archs() == ("ampere", "blackwell", "hopper")
    assert is_calibrated(get_gpu("gb200")) and not is_calibrated(get_gpu("rtx-4090"))


def test_uncalibrated_architecture_uses_defaults():
    spec = get_gpu("v100")
    assert not is_calibrated(spec)
    assert for_gpu(spec).compute_slowdown_during_comm == _table()["default"]["compute_slowdown_during_comm"]


@pytest.mark.parametrize(("gpu", "measured"), [("a100-80gb", 1.80 / 2.04), ("h100-sxm", 2.8 / 3.35)])
def test_hbm_fraction_is_the_measured_one_not_fitted(gpu, measured):
    """A100 80GB read kernel 1.80 of 2.04 TB/s [S56]; H100 coalesced loads 2.8 of 3.35 TB/s [S57]."""
    assert for_gpu(get_gpu(gpu)).hbm_fraction == pytest.approx(measured, abs=0.005)
    assert "hbm_fraction" not in PARAMS
