"""LoRA fine-tuning (``training.lora``, ``simulator.workload.lora``): frozen base weights with no weight gradient,
adapters beside the targeted linears, adapter-only gradients and optimizer. Figures by hand for Llama 3 8B
(Meta's config.json: 32 blocks, h 4,096, 32 query and 8 KV heads of 128, f 14,336, vocab 128,256, untied)."""

from __future__ import annotations

import pytest

from simulator.interop.megatron_export import export_args
from simulator.parallel.work import from_scenario
from simulator.workload import flops, lora, memory

H, KV, F, V, L = 4096, 1024, 14336, 128256, 32
#: One block's weight matrices: QKV (h x (h + 2 kv)), output (h x h), gate and up (2 x h x f), down (f x h).
BLOCK_WEIGHTS = H * (H + 2 * KV) + H * H + 2 * H * F + F * H
#: The whole model: blocks with their two RMSNorm vectors, embedding and output layer, the final norm.
PSI = L * (BLOCK_WEIGHTS + 2 * H) + 2 * V * H + H
DDP = {"framework": "ddp"}


def _lora(new_scenario, shapes, lora_cfg, training=None, parallel=None):
    return new_scenario(shapes["llama3_8b"], training={"lora": lora_cfg, **(training or {})},
                        parallel={**DDP, **(parallel or {})})


def test_the_hand_count_is_llama3_8bs_published_size():
    assert PSI == 8_030_261_248  # Meta: 8.03B parameters


def test_adapter_parameters_by_hand(new_scenario, shapes):
    """r (k + n) per adapter: QKV 16 x (4,096 + 6,144), output 16 x 8,192, fc1 16 x (4,096 + 28,672), fc2
    16 x (14,336 + 4,096); halved over two TP ranks."""
    sc = _lora(new_scenario, shapes, {"rank": 16})
    by_hand = 16 * (4096 + 6144) + 16 * 8192 + 16 * (4096 + 28672) + 16 * (14336 + 4096)
    assert by_hand == 1_114_112
    assert lora.block_params(sc.model, sc.training.lora, 1) == by_hand
    assert lora.block_params(sc.model, sc.training.lora, 2) == by_hand / 2


def test_frozen_linears_run_no_weight_gradient_and_adapters_train(new_scenario, shapes):
    sc = _lora(new_scenario, shapes, {"rank": 16, "modules": ["qkv", "fc2"]})
    work = from_scenario(sc)
    names = [op.name for op in work.layer_bwd]
    for base in ("qkv", "out_proj", "mlp_up", "mlp_down"):
        assert f"{base}.dgrad" in names and f"{base}.wgrad" not in names
    for adapter in ("qkv.lora_a", "qkv.lora_b", "mlp_down.lora_a", "mlp_down.lora_b"):
        assert f"{adapter}.dgrad" in names and f"{adapter}.wgrad" in names
    assert not any("out_proj.lora" in n or "mlp_up.lora" in n for n in names)
    # the base GEMMs' backward is their data gradient alone: the forward's FLOPs (b 1, s 2,048)
    base = {"qkv.dgrad", "out_proj.dgrad", "mlp_up.dgrad", "mlp_down.dgrad"}
    assert sum(op.flops for op in work.layer_bwd if op.name in base) == 2 * 2048 * BLOCK_WEIGHTS
    assert work.embed_bwd == ()  # a frozen embedding has no gradient
    assert [op.name for op in work.head_bwd if op.kind == "gemm"] == ["logits.dgrad"]
    trained = 16 * (4096 + 6144) + 16 * (14336 + 4096)
    assert (work.layer_params, work.embed_params, work.head_params) == (trained, 0.0, 0.0)


def test_step_flops_drop_one_forward_of_the_frozen_weights(new_scenario, shapes):
    """model = 3F - (l F_dense + F_logits), F with the adapters: 64 micro-batches of 2,048 tokens, the whole
    4,096 x 2,048 score matrix per block (training.attention_flops full), LoRA on QKV at rank 16."""
    sc = _lora(new_scenario, shapes, {"rank": 16, "modules": ["qkv"]})
    t = 2048
    dense = 2 * t * BLOCK_WEIGHTS
    core = 2 * (2 * t * t * H)  # QK^T and softmax.V, non-causal
    logits = 2 * t * H * V
    adapters = 2 * t * 16 * (4096 + 6144)
    per_micro = 2 * (L * dense + logits) + 3 * L * (core + adapters)
    assert flops.for_scenario(sc).model_flops == pytest.approx(64 * per_micro, rel=1e-12)


def test_model_states_hold_adapter_gradients_and_optimizer_only(new_scenario, shapes):
    """Frozen weights stored in FP8 (parallel.fp8_param_gather): 1 B per block weight, 16-bit embedding, output
    layer and norms; the adapters keep AMP DDP's fp32 weights and gradients and Adam's 8 B."""
    sc = _lora(new_scenario, shapes, {"rank": 16}, training={"precision": "fp8"},
               parallel={"fp8_param_gather": True})
    adapters = L * 1_114_112
    outside = 2 * V * H + H
    mem = memory.breakdown(sc)
    assert mem.params_bytes == pytest.approx((PSI - outside) + 2 * outside + 4 * adapters, rel=1e-12)
    assert mem.grads_bytes == pytest.approx(4 * adapters, rel=1e-12)  # fp32 buffer: grad_reduce_in_fp32's default
    assert mem.optimizer_bytes == pytest.approx(8 * adapters, rel=1e-12)


def test_the_once_per_step_fp8_cast_covers_the_frozen_weights(new_scenario, shapes):
    """4 B per weight (read 2, write the FP8 copy and its transpose), over all 8.03B base weights; none when
    the frozen weights are stored in FP8."""
    training = {"precision": "fp8", "kernels": {"fp8_recipe": "delayed"}}
    sc = _lora(new_scenario, shapes, {"rank": 16}, training=training)
    work = from_scenario(sc)
    cast = [op for op in work.step_ops(work.total_params) if op.name == "fp8_weight_cast"]
    assert [op.bytes for op in cast] == [pytest.approx(4 * PSI, rel=1e-12)]
    stored = from_scenario(_lora(new_scenario, shapes, {"rank": 16}, training=training,
                                 parallel={"fp8_param_gather": True}))
    assert not [op for op in stored.step_ops(stored.total_params) if op.name == "fp8_weight_cast"]


@pytest.mark.parametrize(("parallel", "training", "needle"), [
    ({"framework": "fsdp"}, {}, "training.lora is modelled for parallel.framework ddp"),
    ({}, {"optimizer": "muon"}, "training.lora trains its adapters with Adam"),
])
def test_lora_refusals_name_the_field(new_scenario, shapes, parallel, training, needle):
    with pytest.raises(ValueError, match=needle):
        new_scenario(shapes["llama3_8b"], training={"lora": {}, **training}, parallel={**DDP, **parallel})


def test_lora_refuses_an_moe_model(new_scenario, shapes):
    moe = {**shapes["llama3_8b"], "moe": {"n_experts": 8, "top_k": 2, "expert_ffn_hidden_size": F}}
    with pytest.raises(ValueError, match="modelled for dense blocks"):
        new_scenario(moe, training={"lora": {}}, parallel=DDP)


def test_lora_keys_are_checked(new_scenario, shapes):
    with pytest.raises(ValueError, match="rank"):
        _lora(new_scenario, shapes, {"rank": 0})
    with pytest.raises(ValueError, match="modules"):
        _lora(new_scenario, shapes, {"modules": ["q_proj"]})


def test_megatron_export_says_lora_has_no_flag(new_scenario, shapes):
    notes = export_args(_lora(new_scenario, shapes, {"rank": 8})).notes
    assert any("training.lora (rank 8 on qkv, proj, fc1, fc2)" in n for n in notes)
