"""MoE block kernels and memory: FLOPs of the op lists against the closed forms, grouped-GEMM
shapes by tokens per expert, expert states sharded over EP and expert-DP (hand arithmetic)."""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.config.scenario import KernelConfig
from simulator.errors import InputError
from simulator.workload import memory, moe, moe_ops


def _gemm_attn_flops(ops) -> float:
    return sum(op.flops for op in ops if op.kind in ("gemm", "attention"))


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "gpt-oss-120b"])
def test_moe_block_ops_match_the_flop_count(name):
    """With ep = tp = 1 and no imbalance every token copy is computed once: the GEMM + attention
    FLOPs of the op list equal the closed-form causal block FLOPs (two independent code paths)."""
    m = catalog.get_model(name)
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})
    b, s = 1, 2048
    ops = moe_ops.moe_block_ops(m, b, s, 1, 2, KernelConfig(), "none")
    got = _gemm_attn_flops(ops.pre + ops.experts + ops.shared + ops.post)
    want = moe.layer_forward(m, b, s, causal=True, moe_layer=True).total
    assert got == pytest.approx(want, rel=1e-9)


def test_expert_tensor_parallelism_keeps_the_expert_flops_per_gpu():
    """Each ETP rank all-gathers its peers' tokens and runs them at 1/etp of the width: expert FLOPs per
    GPU are the same for any ep x etp of 8 (a bug bash found etp dividing the width but not multiplying
    the tokens: Mixtral at ep 1, etp 8 ran its experts at 133% of the H100's peak). By hand: Mixtral
    (h 4096, f 14336, top-2 of 8, SwiGLU), 4,096 tokens on every rank, balanced: the 8 ranks' 8 x 4,096 x 2
    token copies over 8 GPUs, 3 GEMMs of 2 * 4096 * 14336 FLOPs per copy: 4096 * 2 * 3 * 2 * 4096 * 14336
    per GPU."""
    m = catalog.get_model("mixtral-8x7b")
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})
    want = 4096 * 2 * 3 * 2 * 4096 * 14336
    for ep, etp in ((8, 1), (4, 2), (2, 4), (1, 8)):
        ops = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=ep, etp=etp)
        assert _gemm_attn_flops(ops.experts) == pytest.approx(want, rel=1e-6), (ep, etp)


def test_mla_dense_block_ops_match_the_flop_count():
    m = catalog.get_model("deepseek-v3")
    ops = moe_ops.dense_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none")
    assert _gemm_attn_flops(ops) == pytest.approx(moe.layer_forward(m, 1, 2048, True, False).total, rel=1e-9)


def test_sequence_parallel_norms_of_moe_and_mla_blocks_run_on_the_ranks_tokens():
    """Megatron-Core needs sequence parallelism with MoE and TP > 1: the blocks' add + norms run on
    b·s/tp tokens (4 passes of 2 B), as in the dense blocks (``workload.ops.layer_ops``)."""
    b, s, tp, h = 1, 4096, 2, 7168
    m = catalog.get_model("deepseek-v3")
    k = KernelConfig(flash_attention=True, fused_norm_residual=True)
    dense = {op.name: op for op in moe_ops.dense_block_ops(m, b, s, tp, 2, k, "none", sequence_parallel=True)}
    block = {op.name: op for op in moe_ops.moe_block_ops(m, b, s, tp, 2, k, "none", ep=8,
                                                         sequence_parallel=True).pre}
    for ops in (dense, block):
        assert ops["input_add_norm"].bytes == ops["post_attn_add_norm"].bytes == 4 * 2048 * h * 2


def test_grouped_gemm_rows_are_tokens_per_local_expert():
    m = catalog.get_model("mixtral-8x7b")  # 8 experts, top-2, default imbalance 1.25
    ops = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=4)
    up = next(op for op in ops.experts if op.name == "experts_up")
    # 4096 tokens x 2 copies x 1.25 on the busiest rank, over its 8/4 = 2 experts
    assert (up.m, up.batch, up.n, up.k) == (4096 * 2 * 1.25 / 2, 2, 2 * 14336, 4096)


def test_received_tokens_are_regrouped_by_local_expert_and_back():
    # Megatron-Core's alltoall dispatcher: with 2 local experts the 10,240 received token copies (4096 x 2
    # x 1.25) of 4,096 bf16 elements are sorted by local expert after the dispatch and restored before the
    # combine, each a read and a write; with one local expert (ep 8) there is nothing to regroup
    m = catalog.get_model("mixtral-8x7b")
    ops = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=4)
    first, last = ops.experts[0], ops.experts[-1]
    assert (first.name, last.name) == ("sort_chunks", "restore_chunks")
    assert first.bytes == last.bytes == 2 * 10240 * 4096 * 2
    one = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=8)
    assert not [op for op in one.experts if "chunks" in op.name]


def test_deepep_permutes_only_the_received_rows():
    """DeepEP: no permute before the dispatch and no unpermute after the combine (its kernels read and sum
    the tokens themselves), no regrouping by local expert; the receiver permutes its rows into expert order
    and back. Mixtral at EP 4: a token's 2 of 8 experts miss a GPU's 2 with probability (6/8)(5/7) = 15/28,
    so 4 x 13/28 = 13/7 rows per token for its 2 copies; the receiver reads 10,240 x 13/14 rows and writes
    10,240 copies of 4,096 bf16 elements."""
    m = catalog.get_model("mixtral-8x7b")
    ops = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=4, dispatcher="deepep")
    assert "permute" not in [op.name for op in ops.pre] and ops.post == ()
    first, last = ops.experts[0], ops.experts[-1]
    assert (first.name, last.name) == ("permute", "unpermute")
    assert first.bytes == last.bytes == pytest.approx((1 + 13 / 14) * 10240 * 4096 * 2)


def test_fp8_experts_are_padded_and_unpadded_without_the_router_padding():
    """Megatron-Core's TEGroupedMLP under FP8: Fp8Padding before fc1 and Fp8Unpadding after fc2, each a read
    and a write of the 10,240 received token copies (4,096 x top-2 x 1.25) of 4,096 bf16 elements, inside
    the regrouping by local expert; none in 16-bit training or with moe_router_padding_for_fp8."""
    m = catalog.get_model("mixtral-8x7b")
    ops = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none", ep=4, fp8="current", fp8_padding=True)
    names = [op.name for op in ops.experts]
    assert names[:3] == ["sort_chunks", "fp8_padding", "experts_up.fp8_cast"]
    assert names[-3:] == ["experts_down", "fp8_unpadding", "restore_chunks"]
    pad = {op.name: op.bytes for op in ops.experts}
    assert pad["fp8_padding"] == pad["fp8_unpadding"] == 2 * 10240 * 4096 * 2
    assert moe_ops.fp8_padding(m, "ddp", "current")
    assert not moe_ops.fp8_padding(m, "ddp", None)
    assert not moe_ops.fp8_padding(m, "fsdp", "current")
    routed = m.model_copy(update={"moe": m.moe.model_copy(update={"router_padding_for_fp8": True})})
    assert not moe_ops.fp8_padding(routed, "ddp", "current")


def _mixtral(ep: int, stage: int) -> object:
    raw = {"name": "t", "model": "mixtral-8x7b", "cluster": {"topology": "dgx-h100", "nodes": 2},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64},
           "parallel": {"framework": "deepspeed", "zero_stage": stage, "ep": ep}}
    return scenario_from_dict(raw)


def test_expert_states_shard_over_ep_and_expert_dp():
    h, f, L, V = 4096, 14336, 32, 32000
    expert = 3 * h * f
    dense_block = (2 * h * 4096 + 2 * h * 1024) + 8 * h + 2 * h  # attention, router, norms
    dense = L * dense_block + 2 * V * h + h
    # 16 GPUs, ep 8 -> each GPU holds 1 expert per block; expert-DP = 16 / 8 = 2; DP = 16.
    st = memory.model_states(_mixtral(8, 1))
    assert st.params_bytes == pytest.approx(2 * (dense + L * expert))
    assert st.grads_bytes == pytest.approx(2 * (dense + L * expert))
    assert st.optimizer_bytes == pytest.approx(12 * dense / 16 + 12 * L * expert / 2)
    # ZeRO-2 also shards the gradients, each over its own group.
    st2 = memory.model_states(_mixtral(8, 2))
    assert st2.grads_bytes == pytest.approx(2 * dense / 16 + 2 * L * expert / 2)


def test_moe_block_activations_by_hand():
    from simulator.workload import moe_memory

    sc = _mixtral(8, 1)  # b = 1, s = 4096, tp = 1, bf16, imbalance 1.25, no recomputation
    h, f = 4096, 14336
    dense = 2 * 4096 * (2 * f + f)  # gate and up outputs, SwiGLU product (the input stays: router)
    t = 4096 * 2 * 1.25  # routed token copies on the busiest rank
    routed = 2 * t * h + 2 * t * (2 * f + f)  # permuted copies, expert gate/up outputs, product
    assert moe_memory.moe_block_extra(sc, 2) == pytest.approx(routed - dense)
    # every Mixtral block is MoE, so the per-layer average is the same
    assert moe_memory.activation_delta_per_layer(sc, 2) == pytest.approx(routed - dense)


def test_mla_activations_by_hand():
    from simulator.workload import moe_memory

    raw = {"name": "t", "model": "deepseek-v3", "cluster": {"topology": "dgx-h100", "nodes": 32},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 256},
           "parallel": {"framework": "ddp", "ep": 32, "pp": 8}}
    sc = scenario_from_dict(raw)
    a = 128
    mla = 2 * 1536 + 2 * 512 + 64 + 2 * a * 192 + 2 * a * 128  # q latents, kv latents, rope key, Q, K, V, out input
    dense_estimate = 2 * 7168 + 2 * 7168  # 2·(a·d_h + g·d_h) with d_h = h/a = 56
    assert moe_memory.mla_block_extra(sc, 2) == pytest.approx(2 * 4096 * (mla - dense_estimate))


def test_mla_up_proj_recompute_drops_q_k_v_and_reruns_the_up_projections():
    from simulator.workload import moe_memory
    from simulator.workload import ops as wops

    raw = {"name": "t", "model": "deepseek-v3", "cluster": {"topology": "dgx-h100", "nodes": 32},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 256,
                        "activation_checkpointing": "selective", "recompute_modules": ["mla_up_proj"]},
           "parallel": {"framework": "ddp", "ep": 32, "pp": 8}}
    sc = scenario_from_dict(raw)
    a = 128
    kept = 2 * 1536 + 2 * 512 + 64 + a * 128  # the latents, the rope key and the out-projection input
    dense_estimate = 2 * 7168 + 2 * 7168
    assert moe_memory.mla_block_extra(sc, 2) == pytest.approx(2 * 4096 * (kept - dense_estimate))
    # before the backward the q_up (1,536 -> 128 x 192) and kv_up (512 -> 128 x 256) GEMMs and the rotary
    # embedding run again: 2 x 4,096 x (1,536 x 24,576 + 512 x 32,768) more FLOPs in the recompute
    blk = moe_ops.moe_block_ops(sc.model, 1, 4096, 1, 2, KernelConfig(), "none", modules=frozenset({"mla_up_proj"}))
    redo = [op for op in wops.backward_ops(list(blk.pre)) if op.name.startswith("recompute.")]
    assert {op.name for op in redo} == {"recompute.q_up", "recompute.kv_up", "recompute.rotary"}
    assert sum(op.flops for op in redo if op.kind == "gemm") == 2 * 4096 * (1536 * 24576 + 512 * 32768)
    with pytest.raises(InputError, match="mla_up_proj"):
        simulate(scenario_from_dict({**raw, "model": "llama-3-8b", "parallel": {"framework": "ddp"},
                                     "cluster": {"topology": "dgx-h100", "nodes": 1}}))


def test_mla_up_proj_recompute_counts_in_the_hardware_flops():
    """HFU's numerator counts what the kernels run: with ``mla_up_proj`` the q_up and kv_up GEMMs run again in
    every MLA block (DeepSeek-V3's 61; the catalogued model has no MTP module), 2 x 4,096 x (1,536 x 128 x 192 +
    512 x 128 x 256) FLOPs per block and sequence; model FLOPs unchanged. Global batch 256 of 4,096-token sequences."""
    from simulator.workload import flops

    def scenario(modules):
        return scenario_from_dict({
            "name": "t", "model": "deepseek-v3", "cluster": {"topology": "dgx-h100", "nodes": 32},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 256,
                         "activation_checkpointing": "selective", "recompute_modules": modules},
            "parallel": {"framework": "ddp", "ep": 32, "pp": 8}})

    with_up = flops.for_scenario(scenario(["core_attn", "mla_up_proj"]), executed=True)
    without = flops.for_scenario(scenario(["core_attn"]), executed=True)
    blocks = 61
    assert with_up.hardware_flops - without.hardware_flops == pytest.approx(
        256 * blocks * 2 * 4096 * (1536 * 128 * 192 + 512 * 128 * 256))
    assert with_up.model_flops == without.model_flops


@pytest.mark.parametrize("sp, share", [(True, 1 / 8), (False, 1.0)])
def test_mla_down_projections_run_on_the_ranks_tokens(sp, share):
    """Megatron-Core duplicates MLA's down projections on every TP rank and feeds them the block's input as it
    is: under sequence parallelism the rank's s/tp tokens ("q_compressed: [s / TP, b, q_lora_rank]",
    multi_latent_attention.py), without it all s. DeepSeek-V3 (h 7,168, q_lora_rank 1,536, kv_lora_rank 512,
    rope head 64) at TP 8, 4,096 tokens: 2 x 4,096 x 7,168 x (1,536 + 576) FLOPs per rank, times 1/8 under
    sequence parallelism; the up projections stay column-parallel on every token (128/8 heads)."""
    m = catalog.get_model("deepseek-v3")
    blk = moe_ops.moe_block_ops(m, 1, 4096, 8, 2, KernelConfig(), "none", sequence_parallel=sp)
    flops = {op.name: op.flops for op in blk.pre}
    assert flops["q_down"] + flops["kv_down"] == pytest.approx(share * 2 * 4096 * 7168 * (1536 + 576))
    assert flops["q_up"] == pytest.approx(2 * 4096 * 1536 * 16 * 192)


def test_zero3_shards_expert_weights_and_holds_two_gathered_blocks():
    h, f, L, V = 4096, 14336, 32, 32000
    expert = 3 * h * f
    dense = L * ((2 * h * 4096 + 2 * h * 1024) + 8 * h + 2 * h) + 2 * V * h + h
    st = memory.model_states(_mixtral(8, 3))
    # dense over DP 16, experts (1 per GPU per block) over expert-DP 2, plus 2 blocks' experts gathered
    assert st.params_bytes == pytest.approx(2 * dense / 16 + 2 * L * expert / 2 + 2 * expert * 2)


def test_grouped_gemm_efficiency_is_the_gemm_shape_factor_per_expert():
    # A grouped GEMM on H100 (132 SMs, tiles 128x256 / 128x128): 8 local experts of m = 576 rows,
    # n = 2048, k = 2048 (compute-bound: ~370 FLOP per byte). Each expert pads its 576 rows to five
    # 128-row tiles (576/640 = 90% full); with 128x128 tiles the 5 x 16 x 8 = 640 tiles take
    # ceil(640 / 132) = 5 waves of 132 slots (660): wave quantisation 640/660; the 128x256 tiles do
    # worse (320 tiles in 3 waves of 132: 9,437,184 / (396 x 32,768) = 0.727). So the grouped GEMM runs
    # at 0.9 x 640/660 x k/(k + k_half) of the large-GEMM rate, plus one GEMM kernel's measured fixed time
    # (2.88 µs, simulator.hardware.kernels): no separate grouped-GEMM constant. (The 128x64 Hopper tile
    # gives the same: 1,280 tiles in 10 waves, 1,280/1,320.)
    from simulator.hardware.compute import RooflineComputeModel
    from simulator.hardware.efficiency import for_gpu
    from simulator.workload.ops import gemm

    gpu = catalog.get_gpu("h100-sxm")
    eff = for_gpu(gpu)
    model = RooflineComputeModel(gpu, "bf16", eff)
    op = gemm("experts_up", 576, 2048, 2048, 2, batch=8)
    k_fill = 2048 / (2048 + eff.gemm_half_dim)
    expected_rate = gpu.peak_flops("bf16") * eff.gemm_fraction * 0.9 * 640 / 660 * k_fill
    assert model.op_time(op) == pytest.approx(op.flops / expected_rate + 2.88e-6, rel=1e-9)


def test_megatron_issues_the_experts_on_transformer_engines_four_streams():
    # Megatron-Core (framework ddp) runs the experts through TE's GroupedLinear: one GEMM per expert
    # on 4 streams; other frameworks (torchtitan's torch._grouped_mm) as one grouped kernel
    assert moe_ops.expert_streams("ddp") == 4 and moe_ops.expert_streams("fsdp") == 0
    m = catalog.get_model("mixtral-8x7b")
    ops = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none", streams=4)
    gemms = [op for op in ops.experts if op.kind == "gemm"]
    assert [op.streams for op in gemms] == [4, 4]
    # and their backward GEMMs keep it (dgrad and wgrad are per-expert GEMMs too)
    from simulator.workload.ops import backward_ops
    assert {op.streams for op in backward_ops(gemms)} == {4}


def _mixtral_selective(modules, **training):
    raw = {"name": "t", "model": "mixtral-8x7b", "cluster": {"topology": "dgx-h100", "nodes": 2},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64,
                        "activation_checkpointing": "selective", **training},
           "parallel": {"framework": "ddp", "distributed_optimizer": True, "ep": 8, "pp": 2}}
    if modules is not None:
        raw["training"]["recompute_modules"] = modules
    return scenario_from_dict(raw, overrides=["model.moe.imbalance=1.0"])


def test_recompute_modules_drop_the_norm_and_expert_activation_outputs():
    # Mixtral 8x7B, micro-batch 1 x 4,096 tokens, no TP: the pre-MLP norm output is 2 B x 4,096 x 4,096
    # = 33,554,432 B; the experts' SwiGLU output 2 B x (4,096 tokens x top-2 = 8,192 copies) x 14,336
    # = 234,881,024 B. Per MoE block (all 32 are) and micro-batch, the recomputed modules free both.
    from simulator.workload import moe_memory

    base = moe_memory.moe_block_extra(_mixtral_selective(None), 2)
    both = moe_memory.moe_block_extra(_mixtral_selective(["layernorm", "moe_act"]), 2)
    act = moe_memory.moe_block_extra(_mixtral_selective(["moe_act"]), 2)
    assert base - act == 2 * 8192 * 14336
    assert base - both == 2 * 8192 * 14336 + 2 * 4096 * 4096


def test_recompute_modules_rerun_their_ops_before_the_backward():
    from simulator.parallel import work as pwork

    mw = pwork.from_scenario(_mixtral_selective(["layernorm", "moe_act"])).moe
    act = next(op for op in mw.experts if op.name == "experts_swiglu")
    again = [op for op in mw.bwd_experts if op.name.startswith("recompute.")]
    # the activation re-runs once, first in the experts' backward, with the forward's bytes
    assert [op.name for op in again] == ["recompute.experts_swiglu"] and mw.bwd_experts[0] is again[0]
    assert again[0].bytes == act.bytes
    assert [op.name for op in mw.bwd_pre if op.name.startswith("recompute.")] == ["recompute.post_attn_add_norm"]
    # the default (core_attn) re-runs the FlashAttention kernel (Megatron-Core checkpoints the fused core
    # too): causal QKᵀ and PV, 2·2·s²·q_dim / 2 = 2·4,096²·4,096 FLOPs per sequence for Mixtral's 32 x 128 heads
    plain = pwork.from_scenario(_mixtral_selective(None)).moe
    again = [op for op in plain.bwd_experts + plain.bwd_pre if op.name.startswith("recompute.")]
    assert [op.name for op in again] == ["recompute.attention"]
    assert again[0].flops == 2 * 4096**2 * 4096


def test_recompute_modules_without_core_attn_recompute_no_gemm():
    # Megatron's default selective recomputation re-runs the attention core (its GEMM FLOPs count in
    # HFU); a module list without core_attn re-runs only memory-bound ops: HFU = MFU.
    from simulator.workload import flops

    default = flops.for_scenario(_mixtral_selective(None))
    mods = flops.for_scenario(_mixtral_selective(["layernorm", "moe_act"]))
    assert default.hardware_flops > default.model_flops
    assert mods.hardware_flops == mods.model_flops == default.model_flops


def test_recompute_modules_need_selective():
    with pytest.raises(ValueError, match="needs training.activation_checkpointing: selective"):
        _mixtral_selective(["moe_act"], activation_checkpointing="full")
    with pytest.raises(ValueError):
        _mixtral_selective(["router"])  # not a Megatron-Core module (a fork's): refused by the schema
    raw = {"name": "t", "model": "mixtral-8x7b", "cluster": {"topology": "dgx-h100", "nodes": 2},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64,
                        "activation_checkpointing": "selective", "recompute_modules": ["moe_act"]},
           "parallel": {"framework": "deepspeed", "zero_stage": 1, "ep": 8}}
    with pytest.raises(ValueError, match="Megatron-Core's --recompute-modules"):
        scenario_from_dict(raw)
    # an empty list recomputes nothing (not Megatron's default core_attn)
    from simulator.workload import recompute

    assert recompute.modules(_mixtral_selective([]).training) == frozenset()
    assert recompute.modules(_mixtral_selective(None).training) == {"core_attn"}


def test_expert_biases_cost_their_per_expert_passes():
    # GPT-OSS (biased experts), 1 x 2,048 tokens, top-4, EP 64 of 128 experts: 2 local experts and
    # 8,192 routed copies of 2,880 elements. Megatron-Core adds the fc2 bias per expert outside the grouped
    # GEMM: 6 passes of 2 B forward (b·p, t + ·, cat), 6 backward (two products reduced), 2 kernels per expert
    # + the cat forward, 4 per expert backward. Mixtral has no expert biases: no such op.
    from simulator.workload import ops as wops

    m = catalog.get_model("gpt-oss-120b")
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})
    blk = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none", ep=64)
    bias = next(op for op in blk.experts if op.name == "experts_bias")
    elements = 2048 * 4 * 2880
    assert (bias.name, bias.bytes, bias.launches) == ("experts_bias", 6 * 2 * elements, 2 * 2 + 1)
    back = next(op for op in wops.backward_ops(list(blk.experts)) if op.name == "experts_bias.bwd")
    assert (back.bytes, back.launches) == (6 * 2 * elements, 4 * 2)
    mixtral = moe_ops.moe_block_ops(catalog.get_model("mixtral-8x7b"), 1, 2048, 1, 2, KernelConfig(), "none")
    assert not [op for op in mixtral.experts if op.name == "experts_bias"]


def test_clamped_swiglu_costs_its_eager_clamp_and_cat():
    # GPT-OSS (swiglu_limit 7), 1 x 2,048 tokens, top-4, EP 64: 8,192 routed copies; the fc1 output is
    # 2 x 2,880 wide. Megatron-Core clamps each half (read + write of 2,880 each) and concatenates them
    # (read + write of 5,760): 8 passes of 2,880 elements x 2 B forward, 3 kernels; backward the two clamp
    # gradients read the gradient and the input and write (3 passes of each half: 6), 2 kernels.
    # Under moe_act recomputation the clamp is re-run with the activation it belongs to.
    from simulator.workload import ops as wops

    m = catalog.get_model("gpt-oss-120b")
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})
    blk = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none", ep=64)
    elements = 2048 * 4 * 2880
    clamp = next(op for op in blk.experts if op.name == "experts_clamp")
    assert (clamp.bytes, clamp.launches, clamp.recompute) == (8 * 2 * elements, 3, False)
    back = next(op for op in wops.backward_ops(list(blk.experts)) if op.name == "experts_clamp.bwd")
    assert (back.bytes, back.launches) == (6 * 2 * elements, 2)
    names = [op.name for op in blk.experts]
    assert names.index("experts_up") < names.index("experts_clamp") < names.index("experts_swiglu")
    redo = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "selective", ep=64, modules=frozenset({"moe_act"}))
    assert next(op for op in redo.experts if op.name == "experts_clamp").recompute
    unclamped = m.model_copy(update={"swiglu_limit": None})
    plain = moe_ops.moe_block_ops(unclamped, 1, 2048, 1, 2, KernelConfig(), "none", ep=64)
    assert not [op for op in plain.experts if op.name == "experts_clamp"]


def test_fp8_runs_the_expert_and_mla_gemms_in_fp8():
    # Transformer Engine's GroupedLinear and Linear run in FP8 under fp8_autocast (Megatron-Core pads the
    # experts' tokens for it, Fp8Padding): the experts' and MLA's weight GEMMs are linear layers, each after
    # the standalone cast of its input (delayed scaling: 4 B per element, 1 kernel); the router stays 16-bit.
    m = catalog.get_model("deepseek-v3")
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})
    blk = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none", ep=32, fp8="delayed")
    ops = blk.pre + blk.experts + blk.shared
    gemms = {op.name: op for op in ops if op.kind == "gemm"}
    assert not gemms["router"].linear
    assert all(op.linear for name, op in gemms.items() if name != "router")
    up = gemms["experts_up"]
    cast = next(op for op in blk.experts if op.name == "experts_up.fp8_cast")
    assert cast.bytes == 4 * up.m * up.batch * up.k  # 2,048 x 8 routed copies over 8 local experts x 7,168
    assert up.m * up.batch == 2048 * 8
    assert {"q_down.fp8_cast", "kv_up.fp8_cast", "out_proj.fp8_cast"} <= {op.name for op in blk.pre}
    # without FP8 there is no cast and the GEMMs are still marked linear (the flag only matters in FP8)
    bf16 = moe_ops.moe_block_ops(m, 1, 2048, 1, 2, KernelConfig(), "none", ep=32)
    assert not [op for op in bf16.pre + bf16.experts if op.name.endswith(".fp8_cast")]


def test_unfused_mla_core_computes_the_whole_score_matrix():
    """training.kernels.flash_attention false runs MLA's core as two batched GEMMs over the whole s×s matrix:
    scores over d_qk = 192 and the product with d_v = 128 values, 2·b·s²·a·(d_qk + d_v) FLOPs forward, twice
    the causal fused kernel's. DeepSeek-V3, TP 1, 4,096 tokens, 128 heads; selective recomputation re-runs them."""
    m = catalog.get_model("deepseek-v3")
    flash = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(), "none")
    eager = moe_ops.moe_block_ops(m, 1, 4096, 1, 2, KernelConfig(flash_attention=False), "selective")
    core = {op.name: op for op in eager.pre if op.name.startswith("attn_")}
    assert core["attn_scores"].flops + core["attn_v"].flops == pytest.approx(2 * 4096 ** 2 * 128 * (192 + 128))
    fused = next(op for op in flash.pre if op.kind == "attention")
    assert fused.flops == pytest.approx(4096 ** 2 * 128 * (192 + 128))
    assert all(op.recompute for op in core.values())


# Four blocks small enough to count by hand: h 64, 4 heads (MHA), SwiGLU (3 matrices), RMSNorm, vocabulary 128
# untied; block 0 dense (MLP width 256), blocks 1-3 MoE (4 experts of width 128, top 2, a 4 x 64 router).
_TINY_MOE = {"name": "tiny", "n_layers": 4, "hidden_size": 64, "n_heads": 4, "ffn_hidden_size": 256,
             "vocab_size": 128, "mlp": "swiglu", "norm": "rmsnorm", "linear_bias": False, "tied_embeddings": False,
             "max_position_embeddings": 128, "moe": {"n_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 128,
                                                     "first_dense_layers": 1, "imbalance": 1.0}}
_ATTN, _NORMS = 4 * 64 * 64, 2 * 64
_DENSE_BLOCK = _ATTN + _NORMS + 3 * 64 * 256
_MOE_BLOCK, _EXPERTS = _ATTN + _NORMS + 4 * 64, 4 * 3 * 64 * 128


def _tiny_moe_pp2(**parallel):
    return scenario_from_dict({
        "name": "t", "model": _TINY_MOE, "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus": 4},
        "training": {"seq_len": 128, "micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"},
        "parallel": {"framework": "ddp", "pp": 2, "decoder_first_pipeline_num_layers": 1, **parallel}})


def test_moe_states_follow_the_pipelines_own_split():
    """An uneven split (block 0 alone on stage 0, blocks 1-3 on stage 1) puts the experts of three MoE blocks on
    stage 1, which an even 2 + 2 split would not: stage 0 holds the dense block and the embedding (128 x 64),
    stage 1 three MoE blocks, the final norm (64) and the output layer (128 x 64). The most-loaded GPU is stage 1."""
    from simulator.workload import moe_memory

    sc = _tiny_moe_pp2()
    first, last = moe_memory.split(sc, 0), moe_memory.split(sc, 1)
    assert (first.dense, first.experts) == (_DENSE_BLOCK + 128 * 64, 0)
    assert (last.dense, last.experts) == (3 * _MOE_BLOCK + 64 + 128 * 64, 3 * _EXPERTS)
    assert moe_memory.split(sc) == last
    # each stage's states from its own blocks: bf16 weights 2 B, fp32 gradients 4 B and Adam + master 12 B
    stage0 = memory.model_states(sc, pipeline_stage=0)
    assert stage0.total_bytes == pytest.approx(18 * (_DENSE_BLOCK + 128 * 64))


def test_moe_optimizer_step_transient_counts_the_expert_group():
    """DeepSpeed ZeRO-2 upcasts each parameter group's 16-bit gradient partition to fp32 for the step, one
    group at a time; the experts are a group of their own, sharded over the expert-DP ranks. Stage 1 of the
    uneven split, dp 2 (4 GPUs / pp 2), ep 1 so expert-DP 2: the dense group 4 x 8,576 ... / 2, the expert
    group 4 x 3 x 98,304 / 2, the larger sets the transient."""
    sc = _tiny_moe_pp2(**{"framework": "deepspeed", "zero_stage": 2})
    row = memory.breakdown(sc)
    dense = 3 * _MOE_BLOCK + 64 + 128 * 64
    assert row.optimizer_step_bytes == pytest.approx(4 * max(dense, 3 * _EXPERTS) / 2)
