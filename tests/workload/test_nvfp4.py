"""NVFP4 training (``training.kernels.fp8_recipe: nvfp4``): the linear GEMMs at Transformer Engine's measured
NVFP4 rate, NVFP4's casts, its saved inputs and the layouts it refuses. The figures are the GEMM profiling
guide's (TransformerEngine ``docs/examples/gemm_profiling``, B300 SXM6, the twelve GEMMs of a 4,096-wide layer
with a 16,384-wide MLP at 15,872 tokens, per layer): pre-quantized 3.764 ms NVFP4, 6.812 FP8 current scaling,
7.161 MXFP8; autocast (quantization included) 6.453 NVFP4, 8.984 MXFP8."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.catalog import get_gpu
from simulator.hardware import kernels
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload import activations
from simulator.workload.fp8_casts import fp8_cast, fp8_cast_backward
from simulator.workload.op import gemm


@pytest.mark.parametrize("gpu", ["b200", "gb200", "gb300"])
def test_nvfp4_gemms_run_at_the_guides_measured_rate_over_per_tensor_fp8(gpu):
    spec = get_gpu(gpu)
    per_tensor = RooflineComputeModel(spec, "fp8", for_gpu(spec), launch=kernels.NONE, fp8_recipe="current")
    nvfp4 = RooflineComputeModel(spec, "fp8", for_gpu(spec), launch=kernels.NONE, fp8_recipe="nvfp4")
    linear = dataclasses.replace(gemm("mlp_up", 8192, 8192, 8192, 2), linear=True)
    # 6.812 / 3.764 = 1.81x the per-tensor FP8 rate, whatever the part's FP4 / FP8 peak ratio
    assert per_tensor.op_time(linear) / nvfp4.op_time(linear) == pytest.approx(6.812 / 3.764, rel=1e-12)
    logits = gemm("logits", 8192, 8192, 8192, 2)  # not a linear layer: stays 16-bit
    assert nvfp4.op_time(logits) == per_tensor.op_time(logits)


def test_nvfp4_casts_cost_the_guides_quantization_share_over_mxfp8():
    """Autocast less pre-quantized time: NVFP4 6.453 - 3.764 = 2.689 ms, MXFP8 8.984 - 7.161 = 1.823 ms per layer,
    so NVFP4's cast moves 4 B x 2.689 / 1.823 = 5.90 B per element where MXFP8's standalone cast moves 4, in two
    kernels (the amax pass, then the quantize), never fused into the norm or activation that feeds it."""
    m, n, k = 8192, 3 * 8192, 8192
    per_el = 4 * 2.689 / 1.823
    for producer in ("", "norm", "act"):
        cast = fp8_cast("qkv", m, n, k, "nvfp4", producer=producer)
        assert cast.bytes == pytest.approx(per_el * m * k, rel=1e-12)
        assert (cast.launches, cast.transpose_bytes) == (2, 0.0)
    back = fp8_cast_backward(fp8_cast("qkv", m, n, k, "nvfp4"), 2)  # the output gradient, m x n
    assert back.bytes == pytest.approx(per_el * m * n, rel=1e-12)


def test_nvfp4_keeps_its_column_wise_input_copy_for_the_weight_gradient(new_scenario, shapes):
    """0.5 B of E2M1 data and a 1-byte E4M3 scale per 16 elements: 0.5625 B per element."""
    sc = new_scenario(shapes["llama3_8b"], training={"precision": "fp8", "kernels": {"fp8_recipe": "nvfp4"}},
                      cluster={"topology": {"name": "t", "gpu": "b200", "gpus_per_node": 8}})
    assert activations.linear_input_bytes(sc, 2) == 0.5625


def test_nvfp4_saved_inputs_in_a_llama3_8b_block(llama3_8b):
    """As test_fp8_saved_inputs' 1-byte case with 0.5625 B for the attention and MLP inputs, the out projection's
    copy of the attention output and the down projection's input (h 4,096, kv 1,024, f 14,336, 32 heads)."""
    lin = 0.5625
    per_token = (2 * 2 * 4096 + 2 * lin * 4096 + 2 * 4096 + 2 * 2 * 1024 + (2 + lin) * 4096 + 2 * 2 * 14336
                 + lin * 14336 + 4 * 32)
    got = activations.layer_activation_bytes(llama3_8b, 1, 4096, fp8_inputs=True, fp8_input_bytes=lin)
    assert got == pytest.approx(4096 * per_token)


@pytest.mark.parametrize(("gpu", "extra", "needle"), [
    ("h100-sxm", {}, "needs NVFP4 GEMMs"),
    ("b200", {"parallel": {"framework": "ddp", "fp8_param_gather": True}}, "gathers an NVFP4 model's weights in BF16"),
])
def test_nvfp4_refusals_name_the_field(new_scenario, shapes, gpu, extra, needle):
    with pytest.raises(ValueError, match=needle):
        new_scenario(shapes["llama3_8b"], training={"precision": "fp8", "kernels": {"fp8_recipe": "nvfp4"}},
                     cluster={"topology": {"name": "t", "gpu": gpu, "gpus_per_node": 8}}, **extra)
