"""Attention kernels per framework and GPU: the ``auto`` rule, the published rates, bad values.

Expected times are hand arithmetic from the cited benchmark TFLOP/s (simulator/hardware/attention.py):
FlashAttention-3 paper (arXiv:2407.08608), H100 SXM5, head dim 128, sequence 16k: FlashAttention-2 370
forward / 322 backward TFLOP/s, cuDNN 595 / 516, FlashAttention-3 648 / 561; FlashAttention-2 paper
(arXiv:2307.08691): up to 230 TFLOP/s forward on A100, FlashAttention-2 about 2x FlashAttention.
"""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from simulator.catalog import get_gpu
from simulator.config.scenario import KernelConfig
from simulator.errors import InputError
from simulator.hardware import attention, kernels
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload.ops import Op, _backward

H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb")


def _model(gpu, impl):
    eff = dataclasses.replace(for_gpu(gpu), attention_sustained_of_bench=1.0)
    return RooflineComputeModel(gpu, "bf16", eff, launch=kernels.NONE, attention_impl=impl)


# One shape: b=1, s=16384, 16 heads of 128 (hidden 2048), causal forward FLOPs 4·s²·d·heads / 2.
FWD_FLOPS = 4 * 16384**2 * 128 * 16 / 2
FILL = 8192 / (8192 + 128)  # main-loop fill over s/2 keys, gemm_half_dim 128
BWD_FILL = 8192 / (8192 + 3 * 128)  # the backward's: three times the forward's k½ (attention.BACKWARD_FILL)


@pytest.mark.parametrize(("impl", "fwd_tflops", "bwd_tflops"), [
    ("fa2", 370, 322), ("cudnn", 595, 516), ("fa3", 648, 561),
    # FA1 at the FA2 paper's H100 causal head-dim-128 share: Fig. 7(d), FA1/FA2 at 2k, 4k, 8k tokens
    ("fa1", 370 * (106 / 265 + 104 / 294 + 135 / 308) / 3, 322 * (106 / 265 + 104 / 294 + 135 / 308) / 3),
])
def test_h100_attention_time_per_kernel_from_the_published_tflops(impl, fwd_tflops, bwd_tflops):
    model = _model(H100, impl)
    fwd = Op("attention", "attention", FWD_FLOPS, 1.0, k=16384)
    (bwd,) = _backward(fwd)
    assert model.op_time(fwd) == pytest.approx(FWD_FLOPS / (fwd_tflops * 1e12 * FILL), rel=1e-9)
    # backward: 2.5x the forward FLOPs (FA benchmark convention) at the backward rate
    assert model.op_time(bwd) == pytest.approx(2.5 * FWD_FLOPS / (bwd_tflops * 1e12 * BWD_FILL), rel=1e-9)


def test_a100_fa2_forward_is_230_tflops_and_fa3_has_no_a100_rate():
    model = _model(A100, "fa2")
    op = Op("attention", "attention", 1e12, 1.0)
    assert model.op_time(op) == pytest.approx(1e12 / 230e12, rel=1e-9)
    (bwd,) = _backward(op)
    # backward at the ratio cudnn-frontend's A100 sweep measures for FlashAttention-2: 179 / 204 TFLOP/s
    assert model.op_time(bwd) == pytest.approx(2.5e12 / (230e12 * 179 / 204), rel=1e-9)
    with pytest.raises(InputError, match="fa3 has no published rate on ampere"):
        _model(A100, "fa3")


def test_b200_fa2_and_cudnn_run_at_their_published_rates():
    # tritonbench PR #171: flash_v2 on B200, head dim 128, sequence 16k: 330.6 TFLOP/s forward; the
    # backward at flash-attention issue #1589's B200 ratio 334.0 / 379.4. Peak 2,250 TFLOP/s.
    b200 = get_gpu("b200")
    assert b200.arch == "blackwell"
    model = _model(b200, "fa2")
    op = Op("attention", "attention", 1e12, 1.0)
    assert model.op_time(op) == pytest.approx(1e12 / 330.6e12, rel=1e-9)
    (bwd,) = _backward(op)
    assert model.op_time(bwd) == pytest.approx(2.5e12 / (330.6e12 * 334.0 / 379.4), rel=1e-9)
    # cuDNN on Blackwell: cudnn-frontend's GB200 sweep, 1,662 forward / 1,322 backward of 2,500 TFLOP/s,
    # as fractions of the B200's 2,250 peak
    eff = dataclasses.replace(for_gpu(b200), attention_sustained_of_bench=1.0)
    cudnn = RooflineComputeModel(b200, "bf16", eff, launch=kernels.NONE, attention_impl="cudnn")
    assert cudnn.op_time(op) == pytest.approx(1e12 / (2250e12 * 1662 / 2500), rel=1e-9)
    assert cudnn.op_time(bwd) == pytest.approx(2.5e12 / (2250e12 * 1322 / 2500), rel=1e-9)
    with pytest.raises(InputError, match="FlashAttention-3 runs on Hopper only"):
        _model(b200, "fa3")


def test_head_dim_64_runs_at_the_fa3_papers_head_dim_64_rates():
    # FA3 paper, H100, 16k, head dim 64: forward FA2 324, cuDNN 413, FA3 497 TFLOP/s; backward 291, 433, 474
    op = Op("attention", "attention", 1e12, 1.0)
    (bwd,) = _backward(op)
    for impl, fwd_tf, bwd_tf in (("fa2", 324, 291), ("cudnn", 413, 433), ("fa3", 497, 474)):
        eff = dataclasses.replace(for_gpu(H100), attention_sustained_of_bench=1.0)
        model = RooflineComputeModel(H100, "bf16", eff, launch=kernels.NONE, attention_impl=impl,
                                     attention_head_dim=64)
        assert model.op_time(op) == pytest.approx(1e12 / (fwd_tf * 1e12), rel=1e-9)
        assert model.op_time(bwd) == pytest.approx(2.5e12 / (bwd_tf * 1e12), rel=1e-9)
    # head dim 96 halfway: FA2 forward (324 + 370) / 2 = 347 TFLOP/s; 128 and 192 the head-dim-128 rate
    assert attention.head_dim_factor("fa2", 96)[0] * 370 == pytest.approx(347)
    assert attention.head_dim_factor("fa2", 192) == (1.0, 1.0)


def test_sustained_share_scales_the_rate():
    eff = dataclasses.replace(for_gpu(H100), attention_sustained_of_bench=0.5)
    model = RooflineComputeModel(H100, "bf16", eff, launch=kernels.NONE, attention_impl="cudnn")
    assert model.op_time(Op("a", "attention", 1e12, 1.0)) == pytest.approx(1e12 / (595e12 * 0.5), rel=1e-9)


@pytest.mark.parametrize(("framework", "arch", "flash", "expected"), [
    ("ddp", "hopper", True, "cudnn"),      # Megatron-LM / NeMo: Transformer Engine's cuDNN attention
    ("ddp", "blackwell", True, "cudnn"),
    ("ddp", "ampere", True, "fa2"),        # TE on A100 uses flash-attn
    ("fsdp", "hopper", True, "fa2"),       # torchtitan, HF, llm-foundry: SDPA flash / flash-attn 2
    ("deepspeed", "hopper", True, "fa2"),
    ("fsdp", "ampere", False, "eager"),    # flash_attention: false is the unfused path
])
def test_auto_rule(framework, arch, flash, expected):
    assert attention.resolve("auto", flash, framework, arch) == expected


def test_explicit_choice_wins_over_auto():
    assert attention.resolve("fa3", True, "fsdp", "hopper") == "fa3"


def test_unfused_choice_turns_flash_attention_off_and_contradictions_are_errors():
    assert KernelConfig(attention="eager").flash_attention is False
    assert KernelConfig(attention="sdpa_math").flash_attention is False
    with pytest.raises(ValidationError, match="flash_attention is true"):
        KernelConfig(attention="eager", flash_attention=True)
    with pytest.raises(ValidationError, match="flash_attention is false"):
        KernelConfig(attention="fa2", flash_attention=False)
    with pytest.raises(ValidationError):
        KernelConfig(attention="flash")


# --- through the CLI ------------------------------------------------------------------------------
from pathlib import Path  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from simulator.cli import app  # noqa: E402

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
runner = CliRunner()


@pytest.mark.parametrize(("scenario", "value", "needle"), [
    ("olmo-2-7b-8xh100.yaml", "flash", "training.kernels.attention"),
    ("olmo-2-7b-dgx-a100-zero2.yaml", "fa3", "fa3 has no published rate on ampere"),
])
def test_bad_attention_value_exits_2_without_traceback(scenario, value, needle):
    result = runner.invoke(app, ["run", str(SCENARIOS / scenario), "--set", f"training.kernels.attention={value}"])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_cudnn_on_a100_runs_at_its_measured_share_of_flashattention2():
    # cudnn-frontend's A100 sweep, 16k, no mask: cuDNN 182 / 144 against FlashAttention-2 204 / 179 TFLOP/s
    cudnn, fa2 = _model(A100, "cudnn").attn_rate, _model(A100, "fa2").attn_rate
    assert cudnn[0] / fa2[0] == pytest.approx(182 / 204)
    assert cudnn[1] / fa2[1] == pytest.approx(144 / 179)


def test_megatron_attention_backend_flag_maps_to_the_kernel():
    from simulator.interop.megatron import import_args

    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16")
    for flag, impl in (("fused", "cudnn"), ("flash", "fa2"), ("unfused", "eager")):
        out = import_args(f"{base} --attention-backend {flag}")
        assert out.get("training.kernels.attention") == impl


def test_blackwell_ultra_runs_cudnn_at_its_measured_speedup():
    # cudnn-frontend's attention training sweep (cuDNN 9.27, 64/8 heads, head dim 128, batch 2, 16,384
    # tokens, no mask): GB300 2,112 forward and 1,494 backward TFLOP/s, GB200 1,662 and 1,322, the same
    # 2,500 TFLOP/s dense peak
    gb200, gb300 = get_gpu("gb200"), get_gpu("gb300")
    eff = for_gpu(gb200)
    old = RooflineComputeModel(gb200, "bf16", eff, attention_impl="cudnn")
    new = RooflineComputeModel(gb300, "bf16", eff, attention_impl="cudnn")
    assert new.attn_rate[0] / old.attn_rate[0] == pytest.approx(2112 / 1662)
    assert new.attn_rate[1] / old.attn_rate[1] == pytest.approx(1494 / 1322)
    # only the measured kernel: FlashAttention-2 on sm_103 keeps Blackwell's rate
    assert attention.sm_speedup("fa2", 103) == (1.0, 1.0) and attention.sm_speedup("cudnn", 100) == (1.0, 1.0)


def test_blackwell_cudnn_runs_at_the_measured_gb200_fractions():
    # the same sweep on GB200: 1,662 forward / 1,322 backward TFLOP/s of its 2,500 dense peak, so the rate
    # ratio is 1,322 / 1,662 whatever the fitted share, and the forward 1,662 x share on GB200
    gb200 = get_gpu("gb200")
    eff = for_gpu(gb200)
    m = RooflineComputeModel(gb200, "bf16", eff, attention_impl="cudnn")
    assert m.attn_rate[1] / m.attn_rate[0] == pytest.approx(1322 / 1662)
    share = eff.attention_sustained_of_bench
    assert m.attn_rate[0] == pytest.approx(1662e12 * share * gb200.sustained_peak_flops("bf16") / 2500e12)


@pytest.mark.parametrize(("gpu", "band", "full"), [
    ("gb200", (164, 183), (1662, 1322)), ("h200", (129, 92), (640, 549)),
])
def test_window_128_blocks_run_at_the_measured_band_rate(gpu, band, full):
    # cudnn-frontend's gpt_oss sweep (window 128, head dim 64, 4,096 tokens): GB200 cuDNN 164 forward /
    # 183 backward TFLOP/s, H200 129 / 92, against the same GPUs' full-length rates at head dim 128 (16k,
    # no mask) 1,662 / 1,322 and 640 / 549. A fully windowed op runs at that ratio of the model's
    # full-length rate (FRACTIONS x peak; attention share 1): the head-dim-64 factor cancels.
    spec = get_gpu(gpu)
    eff = dataclasses.replace(for_gpu(spec), attention_sustained_of_bench=1.0)
    m = RooflineComputeModel(spec, "bf16", eff, launch=kernels.NONE, attention_impl="cudnn", attention_head_dim=64)
    peak = spec.sustained_peak_flops("bf16")
    frac = attention.FRACTIONS[spec.arch]["cudnn"]
    op = Op("attention", "attention", 1e12, 1.0, k=4096, window=128, window_share=1.0)
    (bwd,) = _backward(op)
    assert m.op_time(op) == pytest.approx(1e12 / (peak * frac[0] * band[0] / full[0]), rel=1e-9)
    assert m.op_time(bwd) == pytest.approx(2.5e12 / (peak * frac[1] * band[1] / full[1]), rel=1e-9)
    # half the FLOPs windowed: the other half at the head-dim-64 rate (413/595 on every architecture)
    # and the full blocks' fill over 4,096 keys, 2,048 / (2,048 + 128)
    half = dataclasses.replace(op, window_share=0.5)
    assert m.op_time(half) == pytest.approx(0.5e12 / (peak * frac[0] * 413 / 595 * 2048 / 2176)
                                            + 0.5e12 / (peak * frac[0] * band[0] / full[0]), rel=1e-9)


def test_band_half_width_by_hand():
    # GB200 forward: 164/1,662 of the head-dim-128 rate at head dim 64, i.e. (164/1,662)/(413/595) of the
    # head-dim-64 rate = 128 / (128 + w_half): w_half = 128 · ((413/595) / (164/1662) − 1) = 772.4
    assert attention.band_half("blackwell")[0] == pytest.approx(128 * ((413 / 595) / (164 / 1662) - 1))
    assert attention.band_half("blackwell")[0] == pytest.approx(772.39, abs=0.01)
    # no sweep on Ada: the compute model keeps the main-loop fill's constant (a 2w-key causal loop)
    assert attention.band_half("ada") is None
    ada = get_gpu("l40s")
    m = RooflineComputeModel(ada, "bf16", for_gpu(ada), launch=kernels.NONE, attention_impl="fa2")
    assert m.band_half == (m.eff.gemm_half_dim, m.eff.gemm_half_dim)


def test_fa1_share_of_fa2_follows_the_fa2_papers_bars_per_architecture_and_head_dim():
    """FA2 paper (arXiv:2307.08691) causal forward + backward bars, mean of FA1/FA2 over 2k, 4k, 8k:
    A100 head dim 128 (81/155 + 87/182 + 91/189)/3 = 0.494, head dim 64 (77/140 + 87/158 + 92/165)/3 =
    0.553; H100 head dim 64 (136/232 + 138/257 + 149/273)/3 = 0.556; head dim 96 halfway; other
    architectures the abstract's "around 2x"."""
    assert attention.fa1_of_fa2("ampere", 128) == pytest.approx(0.494, abs=5e-4)
    assert attention.fa1_of_fa2("ampere", 64) == pytest.approx(0.553, abs=5e-4)
    assert attention.fa1_of_fa2("hopper", 64) == pytest.approx(0.556, abs=5e-4)
    assert attention.fa1_of_fa2("hopper", 96) == pytest.approx((0.5563 + 0.3974) / 2, abs=5e-4)
    assert attention.fa1_of_fa2("blackwell", 128) == 0.5
    # at head dim 64 on H100, FA1 runs at FA2's head-dim-64 forward rate (324 TFLOP/s) times 0.556
    eff = dataclasses.replace(for_gpu(H100), attention_sustained_of_bench=1.0)
    model = RooflineComputeModel(H100, "bf16", eff, launch=kernels.NONE, attention_impl="fa1", attention_head_dim=64)
    assert model.op_time(Op("attention", "attention", 1e12, 1.0)) == pytest.approx(1e12 / (324e12 * 0.5563), rel=1e-3)


def test_triton_flash_attention_at_the_fa2_papers_ratios_on_a100_and_its_measured_share_on_h100():
    """FA2 paper §4.1 (A100): FlashAttention-2 "1.3-1.5x faster than FlashAttention in Triton in the
    forward pass and around 2x faster in the backward pass": 230 / 1.4 = 164.3 TFLOP/s forward and
    230 x 179 / 204 / 2 = 100.9 backward on A100. H100 has no published rate: 0.84 of FlashAttention-2's
    370 / 322 both ways, 310.8 / 270.5 (measured from llm-foundry's sequence sweeps,
    benchmarks/triton_rate.py); elsewhere (no Triton rate) FlashAttention-2's own: on B200 330.6 / 2,250
    forward and 330.6 / 2,250 x 334.0 / 379.4 backward (tritonbench PR #171, flash-attention issue #1589)."""
    a100 = dataclasses.replace(for_gpu(A100), attention_sustained_of_bench=1.0)
    model = RooflineComputeModel(A100, "bf16", a100, launch=kernels.NONE, attention_impl="triton")
    op = Op("attention", "attention", 1e12, 1.0)
    (bwd,) = _backward(op)
    assert model.op_time(op) == pytest.approx(1e12 / 164.29e12, rel=1e-3)
    assert model.op_time(bwd) == pytest.approx(2.5e12 / 100.91e12, rel=1e-3)
    h100 = dataclasses.replace(for_gpu(H100), attention_sustained_of_bench=1.0)
    on_h100 = RooflineComputeModel(H100, "bf16", h100, launch=kernels.NONE, attention_impl="triton")
    assert on_h100.op_time(op) == pytest.approx(1e12 / 310.8e12, rel=1e-9)
    assert on_h100.op_time(bwd) == pytest.approx(2.5e12 / 270.48e12, rel=1e-9)
    fwd, bwd = attention.fractions("triton", "blackwell", 0.5)
    assert fwd == pytest.approx(330.6 / 2250, rel=1e-9)
    assert bwd == pytest.approx(330.6 / 2250 * 334.0 / 379.4, rel=1e-9)
