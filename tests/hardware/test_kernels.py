"""Kernel-level costs: tile/wave quantisation by hand, launch floors, host-bound tasks, FP8 GEMM selection."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.catalog import get_gpu
from simulator.config.scenario import KernelConfig
from simulator.hardware import kernels
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload.ops import Op, gemm, memory_op

H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb")


def test_sm_counts_from_the_whitepapers():
    assert kernels.sm_count("a100-80gb") == 108 and kernels.sm_count("a100-40gb") == 108
    assert kernels.sm_count("h100-sxm") == 132 and kernels.sm_count("h100-pcie") == 114
    assert kernels.sm_count("mi300x") is None


def test_blackwell_sm_counts_as_the_devices_report_them():
    # multiProcessorCount in public logs: B200 and B300 SXM 148, GB200 and GB300 152 (kernels.SM_COUNT)
    assert kernels.sm_count("b200") == 148 and kernels.sm_count("b300") == 148
    assert kernels.sm_count("gb200") == 152 and kernels.sm_count("gb300") == 152


def test_blackwell_waves_over_its_sms():
    # a 2,048-token x 1,536 expert GEMM (fc1 of a 768-wide SwiGLU expert): 128x256 -> 16·6 = 96 tiles,
    # one wave of 148 SMs (96/148 = 0.649); 128x128 -> 16·12 = 192 tiles, 2 waves (192/296 = 0.649):
    # a tie, the first candidate kept
    bw = kernels.TILES["blackwell"]
    assert kernels.wave_efficiency(2048, 1536, 1, 148, bw) == pytest.approx(96 / 148)
    # the same GEMM for 16 local experts in one grouped kernel: 1,536 tiles of 128x256 in
    # ceil(1536/148) = 11 waves (1,628 slots, 0.943); 3,072 of 128x128 in 21 waves (3,108 slots): 0.988
    assert kernels.wave_efficiency(2048, 1536, 16, 148, bw) == pytest.approx(3072 / 3108)


def test_gemms_on_four_streams_fill_the_waves_with_at_most_four_in_flight():
    # Transformer Engine's grouped GEMM: one kernel per GEMM on 4 unsynchronised streams. 16 GEMMs of
    # 2048x1536 on 148 SMs: 4 in flight hold 4·96 = 384 tiles of 128x256 (4·192 of 128x128), more than the
    # SMs, so the tiles pool as in one grouped kernel: 3,072 of 128x128 in 21 waves (3,108 slots)
    bw = kernels.TILES["blackwell"]
    assert kernels.TE_GROUPED_STREAMS == 4
    assert kernels.wave_efficiency(2048, 1536, 16, 148, bw, streams=4) == pytest.approx(3072 / 3108)
    assert kernels.wave_efficiency(2048, 1536, 16, 148, bw, streams=4) == kernels.wave_efficiency(
        2048, 1536, 16, 148, bw)
    # 16 GEMMs of 256x256: 4 in flight hold 4·2 tiles of 128x256 or 4·4 of 128x128: 16 of 148 SMs busy,
    # 16/148 = 0.108, where one grouped kernel would run all 64 tiles in one wave (64/148 = 0.432)
    assert kernels.wave_efficiency(256, 256, 16, 148, bw, streams=4) == pytest.approx(16 / 148)
    assert kernels.wave_efficiency(256, 256, 16, 148, bw) == pytest.approx(64 / 148)
    # no more GEMMs than streams: all run at once, as one grouped kernel would
    assert kernels.wave_efficiency(2048, 1536, 4, 148, bw, streams=4) == kernels.wave_efficiency(
        2048, 1536, 4, 148, bw)


def test_wave_quantisation_by_hand_on_a100():
    # 1024 x 1024 output in 128 x 128 tiles: 64 tiles, one wave on 108 SMs -> 64/108 busy
    assert kernels.wave_efficiency(1024, 1024, 1, 108, ((128, 128),)) == pytest.approx(64 / 108)
    # 4096 x 4096: 1024 tiles in ceil(1024/108) = 10 waves -> 1024 / 1080
    assert kernels.wave_efficiency(4096, 4096, 1, 108, ((128, 128),)) == pytest.approx(1024 / 1080)
    # tile padding: 100 x 128 fills 100/128 of one tile; unknown SM count: padding only
    assert kernels.wave_efficiency(100, 128, 1, None, ((128, 128),)) == pytest.approx(100 / 128)
    # k fill: 1024 / (1024 + 128)
    assert kernels.gemm_shape_factor(1024, 1024, 1024, 1, 108, ((128, 128),), 128) == pytest.approx(
        64 / 108 * 1024 / 1152)


def test_hopper_picks_the_tile_that_fills_the_gpu_better():
    # 2048 x 2048: 128x256 -> 16·8 = 128 tiles on 132 SMs, 1 wave (128/132); 128x128 -> 256 tiles,
    # 2 waves (256/264): the same 0.9697, and 128x256 comes first
    both = ((128, 256), (128, 128))
    assert kernels.wave_efficiency(2048, 2048, 1, 132, both) == pytest.approx(128 / 132)
    # 1024 x 2560: 128x256 -> 8·10 = 80 tiles (80/132); 128x128 -> 160 tiles, 2 waves (160/264): 0.606
    assert kernels.wave_efficiency(1024, 2560, 1, 132, both) == pytest.approx(160 / 264)


def test_each_kernel_takes_at_least_the_launch_floor():
    # measured on an H200: 1.80, 1.55 and 1.80 µs per tiny kernel back to back (benchmarks/results), mean 1.72
    model = RooflineComputeModel(A100, "bf16", for_gpu(A100), launch=kernels.EAGER)
    tiny = dataclasses.replace(memory_op("tiny", 10, 2, 2, 1.0), launches=8)
    assert model.op_time(tiny) == pytest.approx(8 * 1.72e-6)


def test_a_gemm_adds_its_measured_fixed_time_to_its_work():
    # a cuBLAS GEMM costs 2.96 / 2.74 / 2.95 µs back to back with no work to speak of (64^3 on an H200,
    # benchmarks/results), mean 2.88 µs, on top of its work: 4096^3 on H100 (132 SMs) fills 128x256 tiles
    # in 512/528 slots (4 waves) at k fill 4096/4224 of the large-GEMM rate
    eff = for_gpu(H100)
    model = RooflineComputeModel(H100, "bf16", eff, launch=kernels.EAGER)
    op = gemm("g", 4096, 4096, 4096, 2)
    rate = H100.peak_flops("bf16") * eff.gemm_fraction * 512 / 528 * 4096 / 4224
    assert model.op_time(op) == pytest.approx(2 * 4096**3 / rate + 2.88e-6)
    # a GEMM of a few FLOPs costs about the fixed time alone (the model adds its padded 128-row tile's
    # work, a 64-deep main loop at 64/192 fill: 0.5 µs at the microbenchmark rate, 0.7 µs at the in-step
    # share, so 64^3 comes out 18-25 % above its measured 2.88 µs); without launch costs, none
    assert 2.88e-6 < model.op_time(gemm("tiny", 64, 64, 64, 2)) < 4e-6
    assert RooflineComputeModel(H100, "bf16", eff, launch=kernels.NONE).op_time(op) == pytest.approx(
        2 * 4096**3 / rate)


def test_hopper_gemms_too_small_for_large_tiles_take_128x64_ones():
    # 1024 x 384 on 132 SMs: 128x256 -> 8·2 = 16 tiles (393,216 / (132·32,768) = 0.091); 128x128 -> 24
    # tiles (0.182); 128x64 -> 8·6 = 48 tiles, one wave: 48/132 = 0.364, the best
    assert kernels.wave_efficiency(1024, 384, 1, 132, kernels.TILES["hopper"]) == pytest.approx(48 / 132)


def test_a_task_of_small_kernels_is_host_bound_and_large_kernels_hide_dispatch():
    model = RooflineComputeModel(A100, "bf16", for_gpu(A100), launch=kernels.EAGER)
    small = tuple(memory_op(f"m{i}", 1000, 2, 2, 1.0) for i in range(50))
    assert model.time(small) == pytest.approx(50 * 10e-6)  # 10 µs host dispatch each
    compiled = RooflineComputeModel(A100, "bf16", for_gpu(A100), launch=kernels.COMPILED)
    assert compiled.time(small) == pytest.approx(50 * 3e-6)
    big = (gemm("g", 8192, 8192, 8192, 2),) + small
    gpu = sum(model.op_time(op) for op in big)
    assert model.time(big) == pytest.approx(gpu) and gpu > 50 * 10e-6


def test_launch_costs_follow_the_compile_switch():
    assert kernels.launch_costs(KernelConfig()) is kernels.EAGER
    assert kernels.launch_costs(KernelConfig(compile=True)) is kernels.COMPILED


def test_fp8_runs_only_linear_gemms_at_the_fp8_rate():
    eff = for_gpu(H100)
    model = RooflineComputeModel(H100, "fp8", eff, launch=kernels.NONE)
    shape = (8192, 8192, 8192)
    linear = dataclasses.replace(gemm("mlp_up", *shape, 2), linear=True)
    logits = gemm("logits", *shape, 2)
    # datasheet dense peaks H100 SXM FP8 1,979 and BF16 989.5 TFLOP/s, at their measured max-achievable
    # matmul fractions (hardware.md §4 [S1]): FP8 1,402.6 TFLOP/s (70.9 %), BF16 794.5 (80.3 %): 1.765x
    # for the backward GEMMs (precise accumulation, as the FP8 MAMF is measured), less the longer main-loop
    # fill of the FP8 tiles: k / (k + 256) against k / (k + 128) at k = 8,192 ...
    fill = (8192 + 128) / (8192 + 256)
    wgrad = dataclasses.replace(linear, name="mlp_up.wgrad", backward=True)
    assert model.op_time(logits) / model.op_time(wgrad) == pytest.approx(
        1979 * 0.709 / (989.5 * 0.803) * fill, rel=1e-6)
    # ... and 1.15x that for the forward, which runs Hopper's fast accumulation (pytorch/ao #2377: 1.1-1.2x)
    assert model.op_time(logits) / model.op_time(linear) == pytest.approx(
        1.15 * 1979 * 0.709 / (989.5 * 0.803) * fill, rel=1e-6)


def test_fast_accumulation_is_hopper_only():
    b200 = get_gpu("b200")
    model = RooflineComputeModel(b200, "fp8", for_gpu(b200), launch=kernels.NONE)
    fwd = dataclasses.replace(gemm("mlp_up", 8192, 8192, 8192, 2), linear=True)
    assert model.op_time(fwd) == model.op_time(dataclasses.replace(fwd, backward=True))


def test_mxfp8_gemms_run_at_transformer_engines_measured_share_of_per_tensor_fp8():
    """TE's GEMM profiling guide (B300, twelve pre-quantized GEMMs of a 4,096 / 16,384 layer): 7.161 ms
    per layer in MXFP8 against 6.812 in FP8 current scaling; the 16-bit GEMMs (logits) are unaffected."""
    b200 = get_gpu("b200")
    per_tensor = RooflineComputeModel(b200, "fp8", for_gpu(b200), launch=kernels.NONE, fp8_recipe="current")
    block = RooflineComputeModel(b200, "fp8", for_gpu(b200), launch=kernels.NONE, fp8_recipe="mxfp8")
    linear = dataclasses.replace(gemm("mlp_up", 8192, 8192, 8192, 2), linear=True)
    assert block.op_time(linear) / per_tensor.op_time(linear) == pytest.approx(7.161 / 6.812, rel=1e-12)
    logits = gemm("logits", 8192, 8192, 8192, 2)
    assert block.op_time(logits) == per_tensor.op_time(logits)


def test_blackwell_fp8_casts_make_no_transposed_copy():
    """Per-tensor FP8 on Hopper writes a transposed copy beside the FP8 data (TN-only FP8 GEMMs); on
    Blackwell Transformer Engine makes none (nvte_is_non_tn_fp8_gemm_supported). A current-scaling cast
    fused behind a norm: read 2 B, write 1 B (+1 B transposed on Hopper) per element; a standalone
    MXFP8 cast writes its row- and column-wise copies (4 B) everywhere."""
    from simulator.workload.fp8_casts import fp8_cast

    m = k = 8192
    current = fp8_cast("qkv", m, 3 * k, k, "current", producer="norm")
    mx = fp8_cast("qkv", m, 3 * k, k, "mxfp8", producer="norm")
    for name, per_el_current in (("h100-sxm", 4), ("b200", 3)):
        gpu = get_gpu(name)
        model = RooflineComputeModel(gpu, "fp8", for_gpu(gpu), launch=kernels.NONE)
        assert model.op_time(current) * model.hbm_Bps == pytest.approx(per_el_current * m * k, rel=1e-12)
        assert model.op_time(mx) * model.hbm_Bps == pytest.approx(4 * m * k, rel=1e-12)
    # sequence parallel, TP 4: the shard's cast (3 B x 1/4) and, on Hopper only, a transpose kernel over
    # the gathered FP8 tensor (read 1 + write 1 B)
    sp = fp8_cast("qkv", m, 3 * k, k, "current", producer="norm", input_share=1 / 4)
    hopper, blackwell = (RooflineComputeModel(get_gpu(n), "fp8", for_gpu(get_gpu(n))) for n in ("h100-sxm", "b200"))
    assert sp.bytes == (3 / 4 + 2) * m * k and sp.transpose_bytes == 2 * m * k
    assert (hopper.launches(sp), blackwell.launches(sp)) == (2, 1)
    assert blackwell.op_time(sp) * blackwell.hbm_Bps == pytest.approx(3 / 4 * m * k, rel=1e-12)


def test_attention_fill_grows_with_sequence_length():
    eff = for_gpu(H100)
    model = RooflineComputeModel(H100, "bf16", eff, launch=kernels.NONE)
    # causal: s/2 keys per query tile on average; fill (s/2) / (s/2 + 128)
    assert model.attention_factor(2048) == pytest.approx(1024 / 1152)
    assert model.attention_factor(512) == pytest.approx(256 / 384)
    assert model.attention_factor(0) == 1.0
    # the backward's fill: k½ three times the forward's, 256 / (256 + 384) at 512 tokens
    assert model.attention_factor(512, backward=True) == pytest.approx(256 / 640)
    op = Op("attention", "attention", 1e12, 1.0, k=8192)
    # default kernel fa2: 370 TFLOP/s forward on H100 (FA3 paper), times the calibrated sustained share
    expected = 1e12 / (370e12 * eff.attention_sustained_of_bench * 4096 / 4224)
    assert model.op_time(op) == pytest.approx(expected, rel=1e-3)


def test_a_tiny_block_costs_its_kernel_count_times_the_dispatch():
    """A 64-wide Llama-style block: every kernel is far below 10 µs of GPU work, so the eager forward is
    host-bound: fused kernels 9 launches (add+norm, qkv, rotary, attention, out, add+norm, gate+up,
    SwiGLU, down) = 90 µs eager dispatch; eager PyTorch 34 launches = 340 µs. Compiled, the host issues
    the 9 kernels in 27 µs but the GPU needs longer: its 4 GEMMs at least 2.88 µs each plus their work,
    its 5 other kernels at least 1.72 µs each."""
    from simulator.config.model import ModelConfig
    from simulator.workload.ops import layer_ops

    tiny = ModelConfig(name="tiny", n_layers=2, hidden_size=64, n_heads=2, n_kv_heads=2, ffn_hidden_size=256,
                       vocab_size=1000, mlp="swiglu", norm="rmsnorm")
    eager_model = RooflineComputeModel(A100, "bf16", for_gpu(A100), launch=kernels.EAGER)
    compiled_model = RooflineComputeModel(A100, "bf16", for_gpu(A100), launch=kernels.COMPILED)
    fused = tuple(layer_ops(tiny, 1, 64, 1, 2, KernelConfig()))
    eager = tuple(layer_ops(tiny, 1, 64, 1, 2, KernelConfig(fused_norm_residual=False)))
    compiled = tuple(layer_ops(tiny, 1, 64, 1, 2, KernelConfig(fused_norm_residual=False, compile=True)))
    assert eager_model.time(fused) == pytest.approx(9 * 10e-6)
    assert eager_model.time(eager) == pytest.approx(34 * 10e-6)
    # compiled, the host issues 9 kernels at 3 µs (27 µs); the GPU needs 4 × 2.88 + 5 × 1.72 = 20.1 µs
    # of fixed times plus the GEMMs' work: one wave of padded 128x128 tiles on A100 (312 TFLOP/s x MAMF 0.869
    # x share 0.81 over 108 SMs: 2.03 TFLOP/s per SM), 2.1 MFLOP a tile at k = 64 and fill 64/192 -> 3.09 µs
    # (qkv 64x192x64, out 64x64x64, gate+up 64x512x64), 8.4 MFLOP at k = 256 and fill 256/384 -> 6.19 µs
    # (down 64x64x256): 4 x 2.88 + 3 x 3.09 + 6.19 = 27.0 µs of GEMMs + 8.6 of floors = 35.6 µs, so the
    # compiled block is GPU-bound
    assert for_gpu(A100).gemm_sustained_of_mamf == 0.81
    assert compiled_model.host_time(compiled) == pytest.approx(9 * 3e-6)
    assert compiled_model.host_bound(compiled) == 0.0
    assert compiled_model.time(compiled) == pytest.approx(35.6e-6, rel=0.01)
