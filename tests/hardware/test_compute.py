"""Compute model: roofline with shape-dependent GEMM efficiency, flash attention, HBM-bound ops."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.catalog import get_gpu
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload.ops import Op, gemm, memory_op

H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb")


def test_efficiency_is_mamf_times_sustained_fraction():
    eff = for_gpu(A100)
    assert eff.gemm_fraction == pytest.approx(0.869 * eff.gemm_sustained_of_mamf)
    assert 0 < for_gpu(H100).attention_sustained_of_bench <= 1


def test_large_gemm_lands_near_peak_times_efficiency():
    model = RooflineComputeModel(H100, "bf16", for_gpu(H100))
    op = gemm("big", 32768, 32768, 32768, 2)
    achieved = op.flops / model.op_time(op)
    target = 989.4e12 * for_gpu(H100).gemm_fraction
    assert 0.98 * target < achieved <= target


def test_small_gemm_is_less_efficient_than_large():
    model = RooflineComputeModel(H100, "bf16", for_gpu(H100))
    small, large = gemm("s", 256, 256, 256, 2), gemm("l", 8192, 8192, 8192, 2)
    assert small.flops / model.op_time(small) < 0.5 * large.flops / model.op_time(large)


def test_memory_op_is_bandwidth_bound():
    eff = for_gpu(A100)
    model = RooflineComputeModel(A100, "bf16", eff)
    op = memory_op("norm", 1e9, 2, 2, 5.0)
    assert model.op_time(op) == pytest.approx(4e9 / (2039e9 * eff.hbm_fraction), rel=1e-3)


def test_attention_runs_at_the_16bit_kernel_rate_under_fp8():
    eff = dataclasses.replace(for_gpu(H100), attention_sustained_of_bench=1.0)
    model = RooflineComputeModel(H100, "fp8", eff, attention_impl="fa2")
    op = Op("attention", "attention", 1e15, 1.0)
    # FA3 paper, FlashAttention-2 forward on H100 at 16k: 370 TFLOP/s (BF16, not the FP8 peak)
    assert model.op_time(op) == pytest.approx(1e15 / 370e12, rel=1e-9)


@pytest.mark.parametrize("scale", [1.5, 2.0, 10.0])
def test_more_flops_or_bandwidth_is_never_slower(scale):
    eff = for_gpu(H100)
    ops = (gemm("a", 4096, 4096, 4096, 2), memory_op("m", 1e8, 3, 2, 1.0), Op("attn", "attention", 1e12, 1e8))
    base = RooflineComputeModel(H100, "bf16", eff).time(ops)
    assert RooflineComputeModel(H100, "bf16", eff, flops_scale=scale).time(ops) <= base
    assert RooflineComputeModel(H100, "bf16", eff, hbm_scale=scale).time(ops) <= base
    better = dataclasses.replace(eff, gemm_fraction=min(1.0, eff.gemm_fraction * scale))
    assert RooflineComputeModel(H100, "bf16", better).time(ops) <= base


def test_fp8_needs_a_gpu_with_fp8():
    with pytest.raises(ValueError, match="fp8"):
        RooflineComputeModel(A100, "fp8", for_gpu(A100))


def test_power_limited_part_runs_its_gemms_at_the_sustained_peak():
    # h100-sxm-96gb-hbm2e: same silicon and MAMF as h100-sxm, 912.5 / 989.5 of its clock (gpus.yaml)
    capped = get_gpu("h100-sxm-96gb-hbm2e")
    op = gemm("big", 32768, 32768, 32768, 2)
    t_sxm = RooflineComputeModel(H100, "bf16", for_gpu(H100)).op_time(op)
    t_capped = RooflineComputeModel(capped, "bf16", for_gpu(capped)).op_time(op)
    assert t_capped / t_sxm == pytest.approx(989.5 / 912.5, rel=1e-3)


def test_multi_stream_grouped_gemm_pays_a_fixed_cost_per_gemm():
    # Transformer Engine PR #2045 (H100, TE 2.7, BF16): 8 GEMMs of 4096x768x2048 at 627.903 TFLOP/s
    # against 16 of 2048x768x2048 (the same FLOPs, tiles and waves) at 553.945: the 8 extra GEMMs cost
    # 21.9 us, 2.74 us each
    flops = 2 * 8 * 4096 * 768 * 2048
    per_gemm = (flops / 553.945e12 - flops / 627.903e12) / 8
    assert per_gemm == pytest.approx(2.74e-6, rel=1e-3)
    model = RooflineComputeModel(H100, "bf16", for_gpu(H100))
    eight = dataclasses.replace(gemm("up", 4096, 768, 2048, 2, batch=8), streams=4)
    sixteen = dataclasses.replace(gemm("up", 2048, 768, 2048, 2, batch=16), streams=4)
    assert model.op_time(sixteen) - model.op_time(eight) == pytest.approx(8 * per_gemm, rel=1e-3)
    # one grouped kernel (torch._grouped_mm, streams 0): no per-GEMM cost, the two take the same time
    one = model.op_time(dataclasses.replace(eight, streams=0))
    assert model.op_time(dataclasses.replace(sixteen, streams=0)) == pytest.approx(one)
    assert model.op_time(eight) == pytest.approx(one + 8 * per_gemm, rel=1e-3)
