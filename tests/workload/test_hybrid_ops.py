"""The step of a Mamba hybrid (Nemotron-H): the average block's weighted kernels, the SSD kernels' HBM traffic
and rate, the saved activations and the host time, each against arithmetic written out here."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from simulator.api import simulate
from simulator.catalog import get_gpu
from simulator.cli import app
from simulator.config.loader import scenario_from_dict
from simulator.config.mamba import MambaConfig
from simulator.errors import InputError
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.parallel.checks import check_supported
from simulator.parallel.work import from_scenario
from simulator.workload import host, hybrid_ops
from simulator.workload.activations import stage_activations
from simulator.workload.op import Op

# Nemotron-H 56B: 54 Mamba, 10 attention and 54 MLP layers in 59 blocks; h 8,192, Mamba d 16,384 (256 heads of
# 64), 8 groups of state 256, in_proj width 2 x 16,384 + 2 x 8 x 256 + 256 = 37,120; attention 64 heads of 128,
# 8 KV heads; MLP 32,768 (squared ReLU).
N_M, N_ATTN, N_MLP, BLOCKS = 54, 10, 54, 59
TOKENS, TP = 8192, 2


def _56b(**parallel):
    """Together AI's Nemotron-H 56B B200 preset (TP 2, sequence parallel, FP8 current scaling, one 8,192-token
    sequence per micro-batch, CUDA graphs of the Mamba and attention layers)."""
    return scenario_from_dict({
        "model": "nemotron-h-56b", "cluster": {"topology": "dgx-b200", "nodes": 8},
        "training": {"seq_len": TOKENS, "micro_batch_size": 1, "global_batch_size": 192, "precision": "fp8",
                     "activation_checkpointing": "none",
                     "kernels": {"fp8_recipe": "current", "cuda_graphs": ["mamba", "attn"]}},
        "parallel": {"framework": "ddp", "distributed_optimizer": True, "tp": TP, "sequence_parallel": True,
                     **parallel}})


def test_ssd_traffic_by_hand():
    """X: one 16-bit 8,192 x 8,192 tensor (d/t); S: 64 chunks x 128 heads x 64 x 256 states in 16 bits; B: 8,192
    tokens x 4 x 256 in 16 bits; K: 8,192 x 128 x 4 groups in fp32."""
    x, s, b, k = 2 * 8192 * 8192, 2 * 64 * 128 * 64 * 256, 2 * 8192 * 4 * 256, 4 * 8192 * 128 * 4
    assert (x, s, b, k) == (134_217_728, 268_435_456, 16_777_216, 16_777_216)
    model = _56b().model
    assert hybrid_ops.ssd_bytes(model, 1, TOKENS, TP, (5, 6, 4, 2)) == 5 * x + 6 * s + 4 * b + 2 * k == 2_382_364_672
    assert hybrid_ops.ssd_bytes(model, 1, TOKENS, TP, (16, 17, 11, 6)) == 6_996_099_072


def test_ssd_kernels_run_at_the_measured_rate_scaled_by_sms_times_clock():
    """2,382,364,672 B at H800's measured 1.37 TB/s times B200's SMs x clock over H800's: B200 issues
    2.25e15 / (2 x 4,096) = 2.747e11 SM-cycles a second (148 SMs at 1.856 GHz), H800 9.895e14 / (2 x 2,048) =
    2.416e11 (132 at 1.83 GHz): 1.137 x 1.37 = 1.558 TB/s, 1.529 ms; its 7.9e10 FLOP of matrix products
    (19,398,656 a token: 2 x 128 x 16,384 / 2 + 2 x 128 x 8 x 256 + 4 x 256 x 16,384, over 2 ranks) take
    under a twentieth of that."""
    b200 = get_gpu("b200")
    compute = RooflineComputeModel(b200, "fp8", for_gpu(b200))
    ssd = next(op for op in from_scenario(_56b()).layer_fwd if op.name == "mamba_ssd")
    assert ssd.flops == 8192 * (2 * 128 * 16384 / 2 + 2 * 128 * 8 * 256 + 4 * 256 * 16384) / 2
    assert ssd.weight == pytest.approx(N_M / BLOCKS)
    one = compute.op_time(replace(ssd, weight=1.0))
    assert one == pytest.approx(2_382_364_672 / (1.37e12 * (2.25e15 / 8192) / (989.5e12 / 4096)))
    assert one == pytest.approx(1.529e-3, rel=1e-3)
    assert compute.op_time(ssd) == pytest.approx(ssd.weight * one)
    # an H200 (the H800's SMs and clock, 4.8 TB/s of HBM) runs them at the H800's rate: HBM does not bound them
    h200 = get_gpu("h200")
    assert RooflineComputeModel(h200, "fp8", for_gpu(h200)).op_time(replace(ssd, weight=1.0)) == pytest.approx(
        2_382_364_672 / 1.37e12)


def _pure_mamba2_tokens_per_s(gpu: str) -> float:
    """A pure Mamba-2 model as state-spaces/mamba issue #904 trains it: d_model 2,048, 48 Mamba layers (64 heads
    of 64, state 128, one group), GPT-NeoX vocabulary padded to 50,288, tied embeddings, 4 x 4,096 tokens in
    BF16 on one GPU."""
    scenario = scenario_from_dict({
        "model": {"name": "mamba2-issue-904", "hidden_size": 2048, "n_heads": 16, "ffn_hidden_size": 8192,
                  "vocab_size": 50288, "tied_embeddings": True, "position_embedding": "none",
                  "max_position_embeddings": 4096, "hybrid_pattern": "M" * 48,
                  "mamba": {"n_heads": 64, "head_dim": 64, "state_size": 128, "n_groups": 1}},
        "cluster": {"topology": "hgx-h200", "nodes": 1, "gpus": 1, "gpu": gpu},
        "training": {"seq_len": 4096, "micro_batch_size": 4, "global_batch_size": 4, "precision": "bf16",
                     "activation_checkpointing": "none"},
        "parallel": {"framework": "ddp"}})
    return simulate(scenario).tokens_per_s_per_gpu


def test_pure_mamba2_across_gpus_as_measured():
    """The issue's throughputs (one FLOP count on all three GPUs): GB200 / H200 = 360.4 / 239.2 = 1.507 and
    A100 / H200 = 102.5 / 239.2 = 0.429. With the SSD kernels at a share of each GPU's HBM bandwidth dtsim gave
    1.90 and 0.40; scaled by SMs x clock both ratios come within 12%."""
    h200 = _pure_mamba2_tokens_per_s("h200")
    assert _pure_mamba2_tokens_per_s("gb200") / h200 == pytest.approx(360.4 / 239.2, rel=0.12)
    assert _pure_mamba2_tokens_per_s("a100-80gb") / h200 == pytest.approx(102.5 / 239.2, rel=0.12)


def test_weight_scales_gpu_and_host_time():
    h100 = get_gpu("h100-sxm")
    compute = RooflineComputeModel(h100, "bf16", for_gpu(h100))
    op = Op("norm", "memory", flops=1e6, bytes=1e8, launches=3)
    half = replace(op, weight=0.5)
    assert compute.op_time(half) == pytest.approx(0.5 * compute.op_time(op))
    assert compute.host_time((half,)) == pytest.approx(0.5 * compute.host_time((op,)))
    spread = host.spread((half, op), 3.0)  # the copies' host times sum to the block's: 0.5 x 1 + 1 x 2
    assert [o.host_s for o in spread] == pytest.approx([2.0, 2.0])


def test_average_block_holds_each_layer_kind_by_its_share():
    fwd = {op.name: op for op in from_scenario(_56b()).layer_fwd}
    assert fwd["input_add_norm"].weight == pytest.approx((N_M + N_ATTN) / BLOCKS)  # every mixer layer's pre-norm
    assert fwd["qkv"].weight == fwd["attention"].weight == pytest.approx(N_ATTN / BLOCKS)
    assert fwd["mamba_in_proj"].weight == fwd["mamba_out_proj"].weight == pytest.approx(N_M / BLOCKS)
    assert fwd["post_attn_add_norm"].weight == fwd["mlp_down"].weight == pytest.approx(N_MLP / BLOCKS)
    # one sequence per micro-batch: the rearranges are views, no copy
    assert "mamba_rearrange_in" not in fwd
    assert (fwd["mamba_in_proj"].m, fwd["mamba_in_proj"].n, fwd["mamba_in_proj"].k) == (8192, 37120 // 2, 8192)
    assert (fwd["mamba_out_proj"].m, fwd["mamba_out_proj"].n, fwd["mamba_out_proj"].k) == (8192, 8192, 16384 // 2)


def test_block_matrix_flops_by_hand():
    """Per token and layer: a Mamba layer's projections 2 x 8,192 x 37,120 + 2 x 16,384 x 8,192 and SSD
    19,398,656; an MLP layer 2 x 2 x 8,192 x 32,768; an attention layer QKV 2 x 8,192 x 10,240, output
    2 x 8,192 x 8,192 and the causal core 2 x 8,192 x 8,192 (scores and values, half the matrix each)."""
    mamba = 2 * 8192 * 37120 + 2 * 16384 * 8192 + 19_398_656
    mlp = 2 * 2 * 8192 * 32768
    attention = 2 * 8192 * 10240 + 2 * 8192 * 8192 + 2 * 8192 * 8192
    expected = (N_M * mamba + N_MLP * mlp + N_ATTN * attention) / BLOCKS * TOKENS / TP
    matrix = sum(op.weight * op.flops for op in from_scenario(_56b()).layer_fwd
                 if op.kind in ("gemm", "attention") or op.name == "mamba_ssd")
    assert matrix == pytest.approx(expected)


def test_saved_activations_by_hand():
    """Bytes per block (TP 2 with sequence parallelism, FP8 linear inputs at 1 B, 16-bit p = 2, no dropout):
    a Mamba layer its norm's input and FP8 input (3 x sbh / 2) and (2 x 37,120 + 2 x 2 x 16,384 + 16,384 + 4 x 8)
    bytes a token over 2 ranks; an MLP layer 3 x sbh / 2 and 8,192 x 32,768 x (2 + 1) / 2; an attention layer
    3 x sbh / 2, Q, K, V (2 x 10,240 B a token), the output kept in 16 bits for FlashAttention and in FP8 for the
    projection (3 x 8,192), the fp32 log-sum-exp of 64 heads, over 2 ranks."""
    sbh = 8192 * 8192
    mamba = 3 * sbh / 2 + 8192 * (2 * 37120 + 4 * 16384 + 16384 + 32) / 2
    mlp = 3 * sbh / 2 + 8192 * 32768 * 3 / 2
    attention = 3 * sbh / 2 + 8192 * (2 * 10240 + 3 * 8192 + 4 * 64) / 2
    assert (mamba, mlp, attention) == (740_425_728, 503_316_480, 286_261_248)
    per_block = stage_activations(_56b())[0].per_layer
    assert per_block == pytest.approx((N_M * mamba + N_ATTN * attention + N_MLP * mlp) / BLOCKS)


def test_host_time_of_the_layer_kinds_and_their_graphs():
    """The reference block's attention half (0.464 forward, 0.376 backward) for each mixer layer, the rest for
    each MLP layer; CUDA graphs of [mamba, attn] leave the MLP layers' share; a Mamba layer holds 9 parameter
    tensors (in_proj and its fused norm, conv weight and bias, dt_bias, A_log, D, gated norm, out_proj), the
    attention and MLP layers 3 each."""
    scenario = _56b()
    model, kernels = scenario.model, scenario.training.kernels
    assert host.eager_share(kernels, 0, model) == pytest.approx((1 - 0.464) * N_MLP / BLOCKS)
    assert host.eager_share(kernels, 1, model) == pytest.approx((1 - 0.376) * N_MLP / BLOCKS)
    eager = kernels.model_copy(update={"cuda_graphs": ()})
    assert host.eager_share(eager, 0, model) == pytest.approx(
        (0.464 * (N_M + N_ATTN) + 0.536 * N_MLP) / BLOCKS)
    assert host.block_param_tensors(model) == pytest.approx((9 * N_M + 3 * N_ATTN + 3 * N_MLP) / BLOCKS)


@pytest.mark.parametrize(("parallel", "field"), [
    ({"pp": 2}, "parallel.pp"),
    ({"tp_comm_overlap": True}, "parallel.tp_comm_overlap"),
])
def test_unsimulated_layouts_refused_naming_the_field(parallel, field):
    with pytest.raises(InputError) as err:
        check_supported(_56b(**parallel))
    assert err.value.field == field


def test_mamba_groups_must_split_over_tensor_parallel_ranks():
    scenario = _56b()
    one_group = scenario.model.model_copy(update={"mamba": MambaConfig(n_heads=256, n_groups=1, state_size=256)})
    with pytest.raises(InputError) as err:  # Megatron-Core splits the groups too: 1 group over 2 ranks
        check_supported(scenario.model_copy(update={"model": one_group}))
    assert err.value.field == "parallel.tp" and "n_groups (1)" in str(err.value)


def test_run_and_memory_work_end_to_end_and_export_is_refused(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: nemotron-h-8b\ncluster: {topology: dgx-h100, nodes: 1}\n"
                        "training: {seq_len: 8192, micro_batch_size: 1, global_batch_size: 64, precision: bf16,\n"
                        "  kernels: {cuda_graphs: [mamba]}}\n"
                        "parallel: {framework: ddp, tp: 2, sequence_parallel: true, distributed_optimizer: true}\n")
    for command in (["run"], ["memory"]):
        result = CliRunner().invoke(app, [*command, str(scenario)])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["export", "--to", "megatron", str(scenario)])
    assert result.exit_code == 2 and "model.hybrid_pattern" in result.output
    fsdp = scenario.read_text().replace("framework: ddp, tp: 2, sequence_parallel: true, distributed_optimizer: true", "framework: fsdp")
    scenario.write_text(fsdp)
    result = CliRunner().invoke(app, ["run", str(scenario)])
    assert result.exit_code == 2 and "parallel.framework" in result.output and "Traceback" not in result.output
