"""torchtitan's op-level selective checkpointing (``selective_op``) and the loss's memory by
``training.kernels.cross_entropy``: every number below is hand arithmetic from the policy and the
PyTorch autograd formulas quoted in ``simulator.workload.op_sac`` / ``loss.IMPLEMENTATIONS``."""

from __future__ import annotations

import pytest

from simulator.workload import flops, memory, op_sac
from simulator.workload.ops import layer_ops

MiB = 2**20


def test_policy_keeps_every_other_gemm_of_a_llama_block(llama3_8b):
    # torchtitan's Llama block runs wq, wk, wv, wo, w1 (gate), w3 (up), w2 (down) in that order; the
    # policy saves mm #1, #3, #5, #7 and recomputes #2, #4, #6.
    assert op_sac.saved_linears(llama3_8b) == ("q", "v", "gate", "down")
    assert op_sac.recomputed_linears(llama3_8b) == ("k", "o", "up")


def test_op_sac_layer_bytes_by_hand(llama3_8b):
    # Llama 3.1 8B, micro-batch 2 x 8,192 tokens, bf16, no TP: block input 4096, q 4096, v 1024,
    # gate 14336, down 4096, SDPA output 4096 features per token at 2 B, plus the fp32 LSE per head.
    tokens = 2 * 8192
    by_hand = 2 * tokens * (4096 + 4096 + 1024 + 14336 + 4096 + 4096) + 4 * 32 * tokens
    got = memory.layer_activation_bytes(llama3_8b, 2, 8192, recompute="selective_op")
    assert got == by_hand
    assert got / MiB == 994.0  # 128 + 128 + 32 + 448 + 128 + 128 + 2 MiB
    # Korthikanti's selective keeps more: 2,176 MiB per block for the same shape (norm inputs 2 x 64, the
    # attention and MLP inputs 2 x 64, Q 64, K and V 2 x 16, the attention output 64, gate and up 2 x 224,
    # the SwiGLU output 224 MiB; the checkpointed core keeps no log-sum-exp)
    assert memory.layer_activation_bytes(llama3_8b, 2, 8192, recompute="selective") / MiB == 2176.0


def test_op_sac_under_tp_keeps_row_parallel_partial_sums(llama3_8b):
    # TP 8 with SP: column-parallel outputs (q, v, gate) and SDPA are /8; the row-parallel w2 output is
    # the full 4096 partial sums per rank plus its saved reduce-scatter output 4096/8; block input /8.
    tokens = 8192
    t = 8
    by_hand = 2 * tokens * (4096 / t + 4096 / t + 1024 / t + 14336 / t + 4096 + 4096 / t + 4096 / t) \
        + 4 * (32 // t) * tokens
    got = memory.layer_activation_bytes(llama3_8b, 1, 8192, t, sequence_parallel=True, recompute="selective_op")
    assert got == pytest.approx(by_hand, rel=1e-12)


def test_op_sac_recompute_flops_are_the_skipped_gemms(llama3_8b):
    # re-run per token: wk 2·4096·1024 + wo 2·4096·4096 + w3 2·4096·14336 FLOPs, per block, 32 blocks
    b, s = 1, 8192
    per_token = 2 * 4096 * 1024 + 2 * 4096 * 4096 + 2 * 4096 * 14336
    none = flops.step(llama3_8b, b, s, recompute="none")
    op = flops.step(llama3_8b, b, s, recompute="selective_op")
    assert op.hardware_flops - none.hardware_flops == pytest.approx(32 * b * s * per_token, rel=1e-12)
    assert op.model_flops == none.model_flops


def test_op_sac_marks_the_recomputed_kernels(llama3_8b):
    ops = layer_ops(llama3_8b, 1, 8192, 1, 2, _Kernels(), recompute="selective_op")
    rerun = [op for op in ops if op.recompute]
    gemms = {op.name: op for op in rerun if op.kind == "gemm"}
    # k is split off the q, k, v GEMM (n = 1024 of 6144), o and the up half of gate+up (n = 14336)
    assert gemms["qkv.rerun"].n == 1024 and gemms["out_proj"].n == 4096 and gemms["mlp_up.rerun"].n == 14336
    assert "mlp_down" not in gemms and not any(op.kind == "attention" for op in rerun)
    assert all(op.recompute for op in ops if op.kind == "memory")
    # forward work is unchanged by the split
    plain = layer_ops(llama3_8b, 1, 8192, 1, 2, _Kernels(), recompute="none")
    assert sum(op.flops for op in ops) == pytest.approx(sum(op.flops for op in plain), rel=1e-12)


class _Kernels:
    flash_attention = True
    fused_norm_residual = False
    compile = True
    attention = "auto"


@pytest.mark.parametrize(("kind", "per_logit"), [("fused", 2 + 4), ("eager", 3 * 4), ("eager_no_upcast", 3 * 2),
                                               ("compiled", 2 * 2), ("flash", 2 * 2),
                                               ("te", 2)])
def test_loss_bytes_per_logit(new_scenario, shapes, kind, per_logit):
    # Megatron fused: bf16 logits + fp32 softmax; eager F.cross_entropy backward: fp32 log-probs, the
    # fp32 NLL gradient and the fp32 log-softmax gradient (without the upcast, the same three in bf16);
    # compiled: bf16 logits + bf16 gradient;
    # FlashAttention's xentropy kernel: the saved bf16 logits + the bf16 gradient it writes;
    # Transformer Engine's Triton loss: the bf16 logits, into which it writes the gradient in place.
    sc = new_scenario(shapes["llama3_8b"], training={"kernels": {"cross_entropy": kind}}, parallel={"framework": "fsdp"})
    s, b = sc.training.seq_len, sc.training.micro_batch_size
    assert memory.activations(sc).logits == 2 * 2 * s * b * 4096 + per_logit * s * b * 128256


def test_auto_loss_is_eager_under_fsdp_and_fused_otherwise(new_scenario, shapes):
    fsdp = new_scenario(shapes["llama3_8b"], parallel={"framework": "fsdp"})
    ddp = new_scenario(shapes["llama3_8b"], parallel={"framework": "ddp"})
    eager = new_scenario(shapes["llama3_8b"], training={"kernels": {"cross_entropy": "eager"}}, parallel={"framework": "ddp"})
    assert memory.activations(fsdp).logits == memory.activations(eager).logits
    assert memory.activations(fsdp).logits > memory.activations(ddp).logits


def test_selective_op_is_refused_for_moe(new_scenario):
    from simulator.config.loader import scenario_from_dict
    from simulator.errors import InputError

    with pytest.raises((InputError, ValueError), match="selective_op"):
        scenario_from_dict({"name": "x", "model": "qwen3-30b-a3b", "cluster": {"topology": "dgx-h100"},
                            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                                         "activation_checkpointing": "selective_op"},
                            "parallel": {"framework": "fsdp"}})


def test_torchtitan_op_option_imports_and_exports_as_selective_op():
    from simulator.interop import torchtitan

    op = torchtitan.import_toml('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n')
    assert op.get("training.activation_checkpointing") == "selective_op"
