"""Power limits: the datasheet peak of the same silicon at lower board power (simulator.hardware.power)."""

from __future__ import annotations

import pytest

from simulator.catalog import get_gpu
from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.hardware import power
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload.op import gemm

B200 = get_gpu("b200")
GB200 = get_gpu("gb200")

BASE = {
    "model": "llama-3-8b",
    "cluster": {"topology": "dgx-b200", "nodes": 1},
    "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8},
    "parallel": {"framework": "fsdp"},
}


def test_b200_at_750_W_interpolates_the_b100_b200_datasheet_chord():
    # B100 700 W 1,750 TF, B200 1,000 W 2,250 TF dense BF16: 1,750 + 500 x 50 / 300 = 1,833.3 TF
    assert power.peak_fraction(B200, 750) == pytest.approx((1750 + 500 * 50 / 300) / 2250)
    assert power.peak_fraction(B200, 700) == pytest.approx(1750 / 2250)
    assert power.peak_fraction(B200, 1000) == pytest.approx(1.0)


def test_gb200_uses_the_segment_that_holds_the_limit():
    # 1,100 W lies between HGX B200 (1,000 W, 2,250 TF) and GB200 (1,200 W, 2,500 TF): 2,375 TF of 2,500
    assert power.peak_fraction(GB200, 1100) == pytest.approx(2375 / 2500)
    assert power.peak_fraction(GB200, 850) == pytest.approx(2000 / 2500)


def test_capped_gemm_takes_longer_by_the_peak_ratio_and_the_board_draws_the_cap():
    capped = power.capped(B200, 700)
    assert capped.tdp_W == 700
    assert power.capped(capped, 700) == capped  # idempotent
    op = gemm("big", 32768, 32768, 32768, 2)
    t_full = RooflineComputeModel(B200, "bf16", for_gpu(B200)).op_time(op)
    t_capped = RooflineComputeModel(capped, "bf16", for_gpu(capped)).op_time(op)
    assert t_capped / t_full == pytest.approx(2250 / 1750, rel=1e-3)


def test_scenario_field_caps_the_gpu_and_reports_mfu_against_the_datasheet():
    s = scenario_from_dict(BASE, overrides=["cluster.gpu_power_limit_W=750"])
    spec = s.cluster.gpu_spec
    assert spec.sustained_peak_flops("bf16") == pytest.approx((1750 + 500 * 50 / 300) * 1e12)
    assert spec.peak_flops("bf16") == pytest.approx(2250e12)
    assert s.cluster.gpu.tdp_W == 1000  # the rated part stays in the scenario


@pytest.mark.parametrize(
    ("limit", "needle"),
    [("1200", "above the b200's 1000 W"), ("500", "below 700 W"), ("0", "greater than 0")],
)
def test_impossible_limits_name_the_field(limit, needle):
    with pytest.raises(InputError, match="cluster.gpu_power_limit_W") as exc:
        scenario_from_dict(BASE, overrides=[f"cluster.gpu_power_limit_W={limit}"])
    assert needle in str(exc.value)


def test_gpu_without_datasheet_power_points_is_refused():
    with pytest.raises(InputError, match="cluster.gpu_power_limit_W.*no catalogued peaks at lower board power"):
        scenario_from_dict({**BASE, "cluster": {"topology": "dgx-h100", "gpu_power_limit_W": 500}})
