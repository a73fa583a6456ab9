"""Per-GPU memory against the ZeRO paper, Korthikanti et al. Table 2 and DeepSpeed's estimators."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.workload import memory, params

GB = 1e9


def test_zero_paper_7_5b_on_64_gpus():
    # Rajbhandari et al. SC'20 Fig. 1: Ψ = 7.5B, N_d = 64, K = 12 ⇒ 120 / 31.4 / 16.6 / 1.9 GB.
    got = [memory.zero_model_states(7.5e9, 64, stage).total_bytes for stage in range(4)]
    assert got == [120e9, 30e9 + 90e9 / 64, 15e9 + 105e9 / 64, 120e9 / 64]
    assert [round(x / GB, 1) for x in got] == [120.0, 31.4, 16.6, 1.9]


def test_korthikanti_table2(gpt3_175b):
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    core = 5 * a * s / h

    def act(**kw):
        return memory.layer_activation_bytes(gpt3_175b, b, s, flash_attention=False, dropout=True, **kw)

    assert act() == pytest.approx(sbh * (34 + core), rel=1e-12)
    assert act(tp=t) == pytest.approx(sbh * (10 + 24 / t + core / t), rel=1e-12)
    assert act(tp=t, sequence_parallel=True) == pytest.approx(sbh / t * (34 + core), rel=1e-12)
    assert act(tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert act(tp=t, sequence_parallel=True, recompute="selective") == pytest.approx(34 * sbh / t, rel=1e-12)
    assert act(recompute="full") == 2 * sbh


def test_softmax_fallback_keeps_its_fp32_output(gpt3_175b):
    # 96 heads at TP 32 leave 3 per rank: b = 1 gives 3 attention batches, not a multiple of 4, so
    # Megatron runs the PyTorch softmax, which saves its fp32 output (4 B) besides the dropout mask
    # (1 B) and the dropout output (2 B): 7 B per score against the fused kernel's 2 + 1 + 2.
    s, a, t = 2048, 96, 32
    fused = memory.layer_activation_bytes(gpt3_175b, 4, s, t, flash_attention=False, dropout=True) / 4
    fallback = memory.layer_activation_bytes(gpt3_175b, 1, s, t, flash_attention=False, dropout=True)
    assert fallback - fused == pytest.approx(a * s * s * (7 - 5) / t, rel=1e-12)


def test_flash_attention_variant(gpt3_175b):
    s, b, h, a = 4096, 2, 12288, 96
    sbh = s * b * h
    # no s² terms; fp32 log-sum-exp per row per head instead
    flash = memory.layer_activation_bytes(gpt3_175b, b, s, flash_attention=True, dropout=True)
    assert flash == 34 * sbh + 4 * a * s * b
    no_dropout = memory.layer_activation_bytes(gpt3_175b, b, s, flash_attention=True, dropout=False)
    assert flash - no_dropout == 2 * sbh  # the two 1-byte residual dropout masks


def test_swiglu_gqa_variant(llama3_8b):
    s, b, h = 8192, 1, 4096
    sbh = s * b * h
    got = memory.layer_activation_bytes(llama3_8b, b, s, flash_attention=True)
    # per sbh at 2 B: norm inputs 4, attention/MLP inputs 4, Q 2, K 0.5, V 0.5, out-proj input 2,
    # gate + up outputs 2·2f/h, SwiGLU output 2f/h (f/h = 3.5); plus the fp32 LSE 4·a·s·b.
    per_sbh = 4 + 4 + 2 + 0.5 + 0.5 + 2 + 4 * 3.5 + 2 * 3.5
    assert got == per_sbh * sbh + 4 * 32 * s * b


def test_scenario_activations_match_korthikanti_with_tp(new_scenario, shapes):
    sc = new_scenario(
        {**shapes["gpt3_175b"], "dropout": 0.1},  # Korthikanti's table counts dropout masks
        training={"seq_len": 2048, "kernels": {"flash_attention": False}},
        parallel={"tp": 8},
    )
    s, h, a, t = 2048, 12288, 96, 8
    act = memory.activations(sc)
    assert act.per_layer == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert act.layers == 96 * act.per_layer
    assert act.in_flight == 1
    # logits buffers: final-norm input and output 2·2·sbh, bf16 logits + fp32 log-probs 6·s·V/t
    assert act.logits == 4 * s * h + 6 * s * 51200 / t
    assert act.total_bytes == act.layers + act.embedding + act.logits


def test_full_recompute_keeps_inputs_plus_one_layer(new_scenario, shapes):
    base = dict(seq_len=4096, micro_batch_size=2)
    full = memory.activations(
        new_scenario(shapes["llama3_8b"], training={**base, "activation_checkpointing": "full"})
    )
    none = memory.activations(new_scenario(shapes["llama3_8b"], training=base))
    sbh = 4096 * 2 * 4096
    assert full.per_layer == 2 * sbh
    assert full.recompute_transient == none.per_layer
    assert full.total_bytes == 32 * 2 * sbh + none.per_layer + none.embedding + none.logits


def test_pipeline_keeps_p_micro_batches_on_stage_one(new_scenario, shapes):
    sc = new_scenario(shapes["llama3_8b"], parallel={"pp": 4}, training={"global_batch_size": 64})
    act = memory.activations(sc)
    assert act.in_flight == 4  # 1F1B: min(p, G) with G = 64 / (1 · 2)
    assert act.layers == 4 * 8 * act.per_layer


def test_offload_and_deepspeed_estimator(new_scenario, shapes):
    # DeepSpeed estimate_zero2_model_states_mem_needs(cpu_offload=True): GPU = 2Ψ.
    sc = new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 2, "offload_optimizer": "cpu"})
    psi = params.count(sc.model).total
    st = memory.model_states(sc)
    assert (st.params_bytes, st.grads_bytes, st.optimizer_bytes) == (2 * psi, 0, 0)
    assert st.offloaded_bytes == 14 * psi / 8
    z3 = new_scenario(
        shapes["llama3_8b"], parallel={"zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}
    )
    assert memory.model_states(z3).total_bytes == 0


def test_frameworks(new_scenario, shapes):
    psi = 8_030_261_248
    ddp = memory.model_states(new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp"}))
    assert ddp.total_bytes == 16 * psi  # fp32 params 4 + fp32 grads 4 + Adam m, v 8
    assert (
        memory.buffers(new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp"})).communication
        == 4 * psi
    )
    fsdp = memory.model_states(new_scenario(shapes["llama3_8b"], parallel={"framework": "fsdp"}))
    assert fsdp.total_bytes == 16 * psi / 8


def test_overlap_comm_doubles_the_ipg_buffer(new_scenario, shapes):
    def comm(overlap):
        sc = new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 2, "overlap_comm": overlap})
        return memory.buffers(sc).communication

    assert comm(True) - comm(False) == 5e8 * 2  # one more reduce_bucket_size bf16 buffer


def test_breakdown_sums_and_verdict(new_scenario, shapes):
    sc = new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 3})
    bd = memory.breakdown(sc)
    d = bd.as_dict()
    for key in (
        "params_bytes",
        "grads_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "total_bytes",
        "hbm_bytes",
    ):
        assert key in d
    peak = max(bd.activations_bytes, bd.optimizer_step_bytes)
    states = bd.params_bytes + bd.grads_bytes + bd.optimizer_bytes
    assert bd.total_bytes == pytest.approx(
        states + peak + bd.buffers_bytes + bd.cuda_context_bytes + bd.fragmentation_bytes, rel=1e-12
    )
    assert bd.fragmentation_bytes == pytest.approx(
        0.10 * (states + peak + bd.buffers_bytes - 2.5e8), rel=1e-12
    )
    assert bd.hbm_bytes == sc.cluster.gpu_spec.hbm_usable_bytes
    assert bd.fits == (bd.headroom_bytes >= 0) and bd.fits
    assert not memory.breakdown(new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 0})).fits


@given(psi=st.floats(1e6, 1e12), dp=st.integers(1, 4096))
def test_model_states_decrease_with_zero_stage(psi, dp):
    totals = [memory.zero_model_states(psi, dp, stage).total_bytes for stage in range(4)]
    assert all(a >= b for a, b in zip(totals, totals[1:], strict=False))
    assert totals[0] == pytest.approx(16 * psi) and totals[3] == pytest.approx(16 * psi / dp)


def test_scenario_memory_decreases_with_zero_stage(new_scenario, shapes):
    totals = [
        memory.breakdown(new_scenario(shapes["llama3_8b"], parallel={"zero_stage": z})) for z in range(4)
    ]
    states = [bd.params_bytes + bd.grads_bytes + bd.optimizer_bytes for bd in totals]
    assert states == sorted(states, reverse=True)
    assert [bd.total_bytes for bd in totals] == sorted((bd.total_bytes for bd in totals), reverse=True)


def test_qk_norm_stores_its_inputs(new_model, shapes):
    plain = new_model(**shapes["llama3_8b"])
    qk = new_model(**shapes["llama3_8b"], qk_norm=True)
    s, b = 4096, 1
    diff = memory.layer_activation_bytes(qk, b, s) - memory.layer_activation_bytes(plain, b, s)
    assert diff == 2 * s * b * (4096 + 1024)


def test_deepspeed_buffers_by_hand(new_scenario, shapes):
    psi, largest = 8_030_261_248, 128256 * 4096
    z2 = memory.buffers(new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 2}))
    assert z2.communication == 2 * 5e8  # one bf16 ipg buffer (overlap_comm defaults to False below stage 3)
    assert z2.optimizer_step == 4 * psi / 8  # fp32 gradient partition for the step
    z3 = memory.buffers(new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 3}))
    assert z3.gathered_params == 2 * (largest + 5e7)  # largest module + stage3_prefetch_bucket_size
    assert z3.communication == 2 * 5e8 + 2 * largest  # ipg buffer + the largest module's gradient
    assert z3.optimizer_step == 4 * 1e9  # the 1.004e9-element partition, capped at one 1e9 sub-group
    unfused = new_scenario(
        shapes["llama3_8b"], parallel={"zero_stage": 2}, training={"kernels": {"fused_adam": False}}
    )
    assert memory.buffers(unfused).optimizer_step == 2 * 4 * psi / 8  # + foreach Adam's fp32 temporary


def test_ddp_bucket_view_saves_one_gradient_copy(new_scenario, shapes):
    # formulas.md §2.5: gradient_as_bucket_view=True saves memory equal to the total gradient size
    # (fp32 gradients under AMP: 4 bytes per parameter).
    copy = new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp"})
    view = new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp", "gradient_as_bucket_view": True})
    saved = memory.buffers(copy).communication - memory.buffers(view).communication
    assert saved == 4 * 8_030_261_248


def test_fsdp_fp8_param_gather_keeps_gathered_blocks_in_fp8(new_scenario, shapes):
    """Llama 3 8B block by hand: q, o 4096² each, k, v 4096·1024 each, MLP 3·4096·14336 = 218,103,808
    elements, plus two RMSNorm weights (2·4096). FULL_SHARD with backward_pre holds 2 gathered
    blocks; FP8 gathers save 1 byte on each linear weight element of both."""
    linear = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    training = {"precision": "fp8"}

    def gathered(fp8: bool) -> float:
        sc = new_scenario(shapes["llama3_8b"], training=training,
                          parallel={"framework": "fsdp", "fp8_param_gather": fp8})
        return memory.buffers(sc).gathered_params

    assert gathered(False) - gathered(True) == 2 * linear


def test_deepspeed_bf16_optimizer_keeps_fp32_gradients_and_shards_adam(new_scenario, shapes):
    """bf16 at stage 0 (BF16_Optimizer, BigScience tr11 README: "accumulates grads in fp32 ... consumes
    4 bytes * params of additional memory", "implements its own ZeRO Stage 1"): 2 B params, 2 + 4 B
    gradients unsharded, 12 B Adam states over the 8 data-parallel ranks; its all-reduce buffer is one
    5e8-element fp32 flat buffer."""
    psi = 8_030_261_248
    sc = new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 0})
    st = memory.model_states(sc)
    assert (st.params_bytes, st.grads_bytes, st.optimizer_bytes) == (2 * psi, 6 * psi, 12 * psi / 8)
    assert memory.buffers(sc).communication == 4 * 5e8
    fp16 = memory.model_states(new_scenario(shapes["llama3_8b"], parallel={"zero_stage": 0},
                                            training={"precision": "fp16"}))
    assert fp16.total_bytes == 16 * psi  # the plain stage 0: 2 + 2 + 12 B, nothing sharded


def test_the_verdict_reads_the_allocated_peak_and_flags_the_fragmentation_margin():
    """fits iff total − fragmentation ≤ usable; ``tight`` when only the fragmentation allowance
    (memory.fragmentation × allocated) crosses it. Llama 3 8B, FSDP on 8 H100 (84.8 GB usable), 10,240
    tokens per micro-batch: the allocated peak fits, the allowance does not; at fragmentation 0 the same
    step fits with room, at 11,264 tokens even the allocated peak does not."""
    from simulator.config.loader import scenario_from_dict

    def bd(seq, frag=0.10):
        return memory.breakdown(scenario_from_dict({
            "name": "v", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
            "training": {"seq_len": seq, "micro_batch_size": 1, "global_batch_size": 64},
            "parallel": {"framework": "fsdp"}, "memory": {"fragmentation": frag}}))

    tight = bd(10240)
    allocated = tight.total_bytes - tight.fragmentation_bytes
    assert allocated <= tight.hbm_bytes < tight.total_bytes
    assert tight.fits and tight.tight and tight.headroom_bytes < 0
    # the allowance is 10% of the allocated bytes less NCCL's buffers and the CUDA context
    assert tight.fragmentation_bytes == pytest.approx(
        0.10 * (allocated - tight.cuda_context_bytes - 250e6), rel=0.02)
    none = bd(10240, frag=0.0)
    assert none.fits and not none.tight and none.total_bytes == pytest.approx(allocated)
    assert not bd(11264).fits and not bd(11264).tight


def test_fsdp_no_shard_keeps_the_whole_16_bit_copy():
    """FSDP1 NO_SHARD with MixedPrecision(param_dtype=bf16): every rank holds the fp32 model (4 B per
    parameter, a model state) and, from the forward to the post-backward, its bf16 cast (_mp_shard): 2 B
    per parameter of buffers, as SHARD_GRAD_OP's unsharded copy. With fp32 param_dtype there is no cast.
    Found by a bug bash: no_shard came out cheaper than full_shard on one GPU."""
    from simulator.config.loader import scenario_from_dict

    def sc(strategy, dtype="bf16"):
        return scenario_from_dict({
            "name": "n", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus": 1},
            "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 8},
            "parallel": {"framework": "fsdp", "sharding_strategy": strategy, "param_dtype": dtype}})

    psi = params.local(sc("no_shard").model, 1, 1)
    assert memory.buffers(sc("no_shard")).gathered_params == pytest.approx(2 * psi, rel=1e-12)
    assert memory.buffers(sc("no_shard", "fp32")).gathered_params == 0
    assert memory.breakdown(sc("no_shard")).total_bytes >= memory.breakdown(sc("full_shard")).total_bytes


def test_fsdp_no_sync_holds_the_whole_unsharded_gradient():
    """With fsdp_no_sync the gradients accumulate unsharded between micro-batches: Llama 3 8B (8,030,261,248
    parameters) holds all of them instead of one block's (218,112,000) unsharded fp32 gradient, in
    reduce_dtype fp32 under FSDP2 (to_accumulated_grad_if_needed) and in param_dtype bf16 under FSDP1
    (_post_backward_hook returns before its cast); one micro-batch per step has nothing to accumulate."""
    from simulator.config.loader import load_scenario
    from simulator.workload import memory

    path = "scenarios/llama-3-8b-fsdp-8xdgx-h100.yaml"  # 4 micro-batches per step, bf16 params, fp32 reduce
    for version, held in ((2, 4), (1, 2)):
        sets = [f"parallel.fsdp_version={version}"]
        plain, no_sync = (memory.buffers(load_scenario(path, [*sets, f"parallel.fsdp_no_sync={v}"]))
                          for v in ("false", "true"))
        assert no_sync.communication - plain.communication == held * 8_030_261_248 - 4 * 218_112_000
    one = load_scenario(path, ["parallel.fsdp_no_sync=true", "training.global_batch_size=64"])
    assert memory.buffers(one).communication == memory.buffers(load_scenario(path)).communication


def test_megatron_fp8_parameters_keep_one_byte_per_linear_weight_on_blackwell(new_scenario, shapes):
    # Megatron-Core FP8 parameters (parallel.fp8_param_gather under the distributed optimizer) with a per-tensor
    # recipe: on a B200 each linear weight is its row-wise FP8 data, 1 byte, with no 16-bit copy and no transposed
    # one (FP8 GEMMs take any layout there). Llama 3 8B's linear weights: 32 x (4,096 x (4,096 + 2 x 1,024) +
    # 4,096 x 4,096 + 3 x 4,096 x 14,336) = 6,979,321,856 of its 8,030,261,248; embedding, output layer and norms
    # stay 16-bit.
    psi, linear = 8_030_261_248, 32 * (4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336)
    assert linear == 6_979_321_856

    def params_bytes(gpu: str, recipe: str = "current", gather: bool = True) -> float:
        sc = new_scenario(shapes["llama3_8b"], cluster={"topology": {"name": "t", "gpu": gpu, "gpus_per_node": 8}},
                          training={"precision": "fp8", "kernels": {"fp8_recipe": recipe}},
                          parallel={"framework": "ddp", "distributed_optimizer": True, "fp8_param_gather": gather})
        return memory.model_states(sc).params_bytes

    assert params_bytes("b200") == 2 * psi - linear
    assert params_bytes("b200", "delayed") == 2 * psi - linear
    # Hopper keeps the transposed copy (2 bytes), MXFP8 a column-wise copy with its scales; without FP8
    # parameters the weights are 16-bit
    assert params_bytes("h100-sxm") == params_bytes("b200", "mxfp8") == params_bytes("b200", gather=False) == 2 * psi


def test_precision_aware_optimizer_keeps_the_master_remainder_beside_bf16_weights(new_scenario, shapes):
    # Megatron-Core's distributed optimizer over 8 ranks holds 12 B per parameter of optimizer states (fp32 master,
    # exp_avg, exp_avg_sq), 12 / 8 each. Under the precision-aware optimizer a BF16 weight's master copy is its
    # 16-bit remainder (store_param_remainders): 2 + 4 + 4 = 10 B; BF16 moments: 2 + 2 + 2 = 6 B; FP8 weights
    # keep the 4-byte master: 4 + 4 + 4 = 12 B. Llama 3 8B: 8,030,261,248 parameters.
    psi = 8_030_261_248

    def optimizer_bytes(precision: str = "bf16", **par) -> float:
        sc = new_scenario(shapes["llama3_8b"], cluster={"gpus": 8},
                          training={"precision": precision},
                          parallel={"framework": "ddp", "distributed_optimizer": True, **par})
        return memory.model_states(sc).optimizer_bytes

    assert optimizer_bytes() == pytest.approx(psi * 12 / 8)
    assert optimizer_bytes(precision_aware_optimizer=True) == pytest.approx(psi * 10 / 8)
    assert optimizer_bytes(precision_aware_optimizer=True, optimizer_moments_dtype="bf16") == pytest.approx(psi * 6 / 8)
    assert optimizer_bytes("fp8", precision_aware_optimizer=True, fp8_param_gather=True) == pytest.approx(psi * 12 / 8)


def test_precision_aware_optimizer_needs_the_distributed_optimizer(new_scenario, shapes):
    with pytest.raises(ValueError, match="set parallel.distributed_optimizer: true"):
        new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp", "precision_aware_optimizer": True})
    with pytest.raises(ValueError, match="needs parallel.precision_aware_optimizer"):
        new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp", "distributed_optimizer": True,
                                                    "optimizer_moments_dtype": "bf16"})
