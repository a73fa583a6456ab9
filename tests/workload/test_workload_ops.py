"""Per-kernel ops: FLOPs agree with the closed forms, bytes with hand-counted passes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config.scenario import KernelConfig
from simulator.workload import attention_core, bias, flops, ops
from simulator.workload.optimizer_ops import optimizer_ops

FLASH = KernelConfig(flash_attention=True, fused_norm_residual=True)
UNFUSED = KernelConfig(flash_attention=False, fused_norm_residual=False)


def _sum(op_list, *kinds):
    return sum(op.flops for op in op_list if op.kind in kinds)


def _bytes(op_list, kind):
    return sum(op.bytes for op in op_list if op.kind == kind)


@given(tp=st.sampled_from([1, 2, 4, 8]), b=st.integers(1, 4), s=st.sampled_from([256, 2048]))
def test_matrix_flops_match_layer_forward(llama3_8b, gpt3_175b, tp, b, s):
    for m in (llama3_8b, gpt3_175b):
        # FlashAttention computes the causal half; the unfused kernels compute the full s×s matrix.
        causal = flops.layer_forward(m, b, s, causal=True).total / tp
        full = flops.layer_forward(m, b, s, causal=False).total / tp
        assert _sum(ops.layer_ops(m, b, s, tp, 2, FLASH), "gemm", "attention") == pytest.approx(
            causal, rel=1e-12
        )
        assert _sum(ops.layer_ops(m, b, s, tp, 2, UNFUSED), "gemm", "attention") == pytest.approx(
            full, rel=1e-12
        )


def test_gemm_shapes_and_bytes(llama3_8b):
    b, s, tp, pb = 2, 4096, 4, 2
    by_name = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, tp, pb, FLASH)}
    qkv = by_name["qkv"]
    assert qkv.shape == (b * s, (4096 + 2 * 1024) // tp, 4096)
    assert qkv.bytes == pb * (b * s * 4096 + 4096 * 1536 + b * s * 1536)
    assert by_name["out_proj"].shape == (b * s, 4096, 4096 // tp)
    assert by_name["mlp_up"].shape == (b * s, 2 * 14336 // tp, 4096)  # gate and up fused
    assert by_name["mlp_down"].shape == (b * s, 4096, 14336 // tp)
    assert by_name["attention"].shape is None
    # FA forward: 4·b·s²·a·d_h / 2 (causal) over a/t heads; reads Q, K, V, writes O and fp32 LSE.
    att = by_name["attention"]
    assert att.flops == 4 * b * s**2 * (32 // tp) * 128 / 2
    assert att.bytes == pb * b * s * (2 * 4096 + 2 * 1024) / tp + 4 * b * (32 // tp) * s


def test_fused_norm_residual_saves_two_passes_per_block(gpt3_175b):
    b, s, pb = 1, 1024, 2
    fused = KernelConfig(fused_norm_residual=True)
    unfused = KernelConfig(fused_norm_residual=False)
    # LayerNorm (one native kernel either way), GELU, learned positions:
    # unfused: norm 2 + add 3 + norm 2 + add 3 = 10 passes of b·s·h; fused add+norm: 2 × 4 = 8.
    # GPT-3 has linear biases: Megatron's fused path adds the QKV bias with its own kernel (3 passes of
    # b·s·3h), eager nn.Linear fuses it into addmm.
    saved = _bytes(ops.layer_ops(gpt3_175b, b, s, 1, pb, unfused), "memory") - _bytes(
        ops.layer_ops(gpt3_175b, b, s, 1, pb, fused), "memory"
    )
    assert saved == 2 * b * s * 12288 * pb - 3 * b * s * 3 * 12288 * pb


def test_unfused_attention_dropout_bias_grads_and_context_copy_by_hand(gpt3_175b):
    """GPT-3 175B block (96 heads, biases) with dropout 0.1, b = 1, s = 1024, no FlashAttention: the
    attention dropout reads and writes the 16-bit scores plus a 1-byte mask, (2·2 + 1)·96·s² bytes
    forward and backward; the context copy 2 passes of s·h; each of the 4 biased linears one
    gradient-reduction kernel reading its output gradient (s·3h, s·h, s·4h, s·h) in the backward: the
    QKV one as the backward of Megatron's QKV bias add, an add whose gradient is the identity (no kernel
    of its own); PyTorch's nn.Linear (FSDP trainers) folds that add into addmm's epilogue; Transformer
    Engine's QKV linear also its gradient, into the weight-gradient GEMM's (cuBLASLt BGRADB)."""
    b, s, pb, h = 1, 1024, 2, 12288
    model = gpt3_175b.model_copy(update={"dropout": 0.1})
    fwd = ops.layer_ops(model, b, s, 1, pb, KernelConfig(flash_attention=False))
    by_name = {o.name: o for o in fwd}
    assert by_name["attn_dropout"].bytes == 5 * 96 * s * s
    assert by_name["attn_context_copy"].bytes == 2 * s * h * pb
    bwd = {o.name: o for o in ops.backward_ops(fwd)}
    assert bwd["attn_dropout.bwd"].bytes == 5 * 96 * s * s
    grads = sorted(o.bytes for n, o in bwd.items() if n.startswith(("bias_grad", "qkv_bias_add")))
    assert grads == sorted([s * 3 * h * pb, s * h * pb, s * 4 * h * pb, s * h * pb])
    assert bwd["qkv_bias_add.bwd"].launches == 1
    assert all(o.launches == 0 for o in fwd if o.name.startswith("bias_grad"))  # nothing forward
    torch_fwd = ops.layer_ops(model, b, s, 1, pb, KernelConfig(flash_attention=False), linear="torch")
    assert {o.name for o in fwd} - {o.name for o in torch_fwd} == {"qkv_bias_add"}
    assert sum(o.launches for o in torch_fwd) == sum(o.launches for o in fwd) - 1
    torch_grads = sorted(o.bytes for o in ops.backward_ops(torch_fwd) if o.name.startswith("bias_grad"))
    assert torch_grads == grads
    # Transformer Engine's QKV linear: its bias in the GEMM's epilogues both ways, no kernel of its own; the
    # output and MLP biases' reductions stay (Megatron-Core hands those biases to its fused kernels)
    te_fwd = ops.layer_ops(model, b, s, 1, pb, KernelConfig(flash_attention=False), linear="te")
    assert {o.name for o in torch_fwd} - {o.name for o in te_fwd} == {"bias_grad_0"}
    te_bwd = ops.backward_ops(te_fwd)
    te_grads = sorted(o.bytes for o in te_bwd if o.name.startswith("bias_grad"))
    assert te_grads == sorted([s * h * pb, s * 4 * h * pb, s * h * pb])
    assert sum(o.launches for o in te_bwd) == sum(o.launches for o in ops.backward_ops(torch_fwd)) - 1


def test_linear_modules_resolve_per_framework():
    """kernels.linear auto: PyTorch nn.Linear under FSDP; Transformer Engine's linears under Megatron-Core
    (Megatron-LM's --transformer-impl defaults to transformer_engine); Megatron-LM's own under
    Megatron-DeepSpeed; an explicit choice wins."""
    auto = KernelConfig()
    assert bias.linear_impl(auto, "fsdp") == "torch"
    assert bias.linear_impl(auto, "ddp") == "te"
    assert bias.linear_impl(auto, "deepspeed") == "megatron"
    assert bias.linear_impl(KernelConfig(linear="megatron"), "ddp") == "megatron"


def test_eager_llama_block_is_the_aten_chains(llama3_8b):
    """Eager PyTorch (no fused kernels, no compile): RMSNorm 8 kernels / 18 passes, rotary 3 kernels /
    14 passes per tensor, SwiGLU 2 kernels / 5 passes, separate q/k/v and gate/up GEMMs."""
    b, s, pb = 1, 1024, 2
    h, q, kv, f = 4096, 4096, 1024, 14336
    eager = ops.layer_ops(llama3_8b, b, s, 1, pb, KernelConfig(fused_norm_residual=False))
    compiled = ops.layer_ops(llama3_8b, b, s, 1, pb, KernelConfig(fused_norm_residual=False, compile=True))
    # eager: norm 18 + add 3 + norm 18 + add 3 = 42 passes of b·s·h, rotary 14 of b·s·(q+kv), SwiGLU 5 of b·s·f;
    # compiled (= fused): add+norm 4 + add+norm 4 = 8, rotary 2, SwiGLU 3.
    assert _bytes(eager, "memory") == pb * b * s * (42 * h + 14 * (q + kv) + 5 * f)
    assert _bytes(compiled, "memory") == pb * b * s * (8 * h + 2 * (q + kv) + 3 * f)
    launches = {op.name: op.launches for op in eager}
    # 2 norms × 8 + 2 adds + q,k,v + rotary 6 + attention + out + gate,up + silu,mul + down
    assert sum(launches.values()) == 16 + 2 + 3 + 6 + 1 + 1 + 2 + 2 + 1
    assert sum(op.launches for op in compiled) == 2 + 1 + 1 + 1 + 1 + 1 + 1 + 1
    # eager backward: GEMMs dgrad+wgrad, FlashAttention-2 3 kernels, memory ops as in autograd
    bwd = ops.backward_ops(eager)
    assert next(op for op in bwd if op.name == "attention.bwd").launches == 3
    assert next(op for op in bwd if op.name == "input_norm.bwd").launches == 16


def test_eager_qkv_is_one_gemm_when_the_model_has_one_projection(llama3_8b, gpt3_175b):
    """A checkpoint with one Q/K/V ``nn.Linear`` (GPT-2/3, MPT, BLOOM: ``ModelConfig.fused_qkv``) runs
    one GEMM in eager PyTorch too; Llama's q_proj, k_proj and v_proj are three."""
    eager = KernelConfig(fused_norm_residual=False)
    gpt = {op.name: op for op in ops.layer_ops(gpt3_175b, 1, 1024, 1, 2, eager)}
    llama = {op.name: op for op in ops.layer_ops(llama3_8b, 1, 1024, 1, 2, eager)}
    assert (gpt["qkv"].launches, llama["qkv"].launches) == (1, 3)


def test_fp8_casts_every_linear_gemm_and_nothing_else(llama3_8b):
    """FP8: a cast op before each of the 4 linear GEMMs over its input (m·k elements). Standalone cast
    = read 2 B + write FP8 1 B + transposed copy 1 B = 4 B/el (delayed), + 2 B amax read (current).
    Delayed scaling fuses the cast into the producing norm/activation (TE LayerNormLinear/MLP): only
    the transposed copy (1 B) is extra; current scaling re-reads (4 B). out_proj's input comes from
    attention: standalone. The backward casts the output gradient m·n standalone; attention has none."""
    b, s, pb = 2, 2048, 2
    m, h, f = b * s, 4096, 14336
    for recipe, standalone, fused in (("delayed", 4, 1), ("current", 6, 4)):
        fwd = ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, fp8=recipe)
        casts = {op.name: op for op in fwd if op.name.endswith(".fp8_cast")}
        assert set(casts) == {"qkv.fp8_cast", "out_proj.fp8_cast", "mlp_up.fp8_cast", "mlp_down.fp8_cast"}
        assert casts["mlp_down.fp8_cast"].bytes == fused * m * f
        assert casts["out_proj.fp8_cast"].bytes == standalone * m * h
        bwd = {op.name: op for op in ops.backward_ops(fwd)}
        assert bwd["mlp_down.fp8_cast.bwd"].bytes == standalone * m * h
        assert {op.name for op in fwd if op.linear} == {"qkv", "out_proj", "mlp_up", "mlp_down"}
    # the weights are cast once per step, with the optimizer: 4 B per parameter
    opt = optimizer_ops(1000, True, fp8_weight_cast=True)
    assert opt[-1].name == "fp8_weight_cast" and opt[-1].bytes == 4000
    # of which the transposed copy (1 B) for a per-tensor recipe, none for MXFP8's two scaled copies
    assert optimizer_ops(1000, True, fp8_weight_cast=True, fp8_recipe="current")[-1].transpose_bytes == 1000
    assert optimizer_ops(1000, True, fp8_weight_cast=True, fp8_recipe="mxfp8")[-1].transpose_bytes == 0


def test_mxfp8_norm_outputs_pay_the_standalone_cast(llama3_8b):
    """MXFP8 with Transformer Engine: a norm is computed in 16-bit and quantized by a second kernel
    (normalization.cpp Impl::UNFUSED), an activation kernel quantizes directly (activation.cpp
    FULLY_FUSED). So the QKV and MLP-up inputs (norm outputs, m·h each) cost the standalone 4 B/el, the
    MLP-down input (the SwiGLU output, m·f) the fused 1 B/el, as under delayed scaling."""
    b, s, pb = 2, 2048, 2
    m, h, f = b * s, 4096, 14336
    mx = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, fp8="mxfp8")}
    delayed = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, fp8="delayed")}
    assert (mx["qkv.fp8_cast"].bytes, mx["mlp_up.fp8_cast"].bytes) == (4 * m * h, 4 * m * h)
    assert (delayed["qkv.fp8_cast"].bytes, delayed["mlp_up.fp8_cast"].bytes) == (1 * m * h, 1 * m * h)
    assert mx["mlp_down.fp8_cast"].bytes == delayed["mlp_down.fp8_cast"].bytes == 1 * m * f


def test_unfused_attention_ops(gpt3_175b):
    b, s, tp, pb = 1, 2048, 8, 2
    by_name = {op.name: op for op in ops.layer_ops(gpt3_175b, b, s, tp, pb, UNFUSED)}
    heads = 96 // tp
    assert by_name["attn_scores"].batch == b * heads and by_name["attn_scores"].shape == (s, s, 128)
    assert by_name["attn_softmax"].bytes == 2 * b * heads * s * s * pb  # read scores, write probabilities
    assert by_name["attn_v"].flops == 2 * b * heads * s * s * 128


def test_fused_softmax_needs_attention_batches_divisible_by_four():
    # Megatron fused_softmax.py: 16 < sk <= 16384, sq % 4 == 0, b*np % 4 == 0
    assert attention_core.fused_softmax_available(1, 16, 1024)  # TP 1: 16 heads
    assert attention_core.fused_softmax_available(2, 2, 1024)  # TP 8, micro-batch 2: 4 attention batches
    assert not attention_core.fused_softmax_available(1, 2, 1024)  # TP 8, micro-batch 1: 2 attention batches
    assert not attention_core.fused_softmax_available(4, 4, 16)  # sk must exceed 16
    assert not attention_core.fused_softmax_available(4, 4, 1026)  # sq % 4
    assert not attention_core.fused_softmax_available(4, 4, 32768)  # beyond the kernel's 16,384


def test_softmax_fallback_is_the_fp32_torch_chain():
    # a 1,024-hidden, 16-head GPT (vTrain's small grid) at TP 8, micro-batch 1: b*np = 2
    from simulator.config.model import ModelConfig

    m = ModelConfig(name="g", n_layers=2, hidden_size=1024, n_heads=16, ffn_hidden_size=4096, vocab_size=50257,
                    mlp="gelu", norm="layernorm", linear_bias=True, position_embedding="learned",
                    max_position_embeddings=1024)
    b, s, tp, pb = 1, 1024, 8, 2
    fwd = ops.layer_ops(m, b, s, tp, pb, UNFUSED)
    by_name = {op.name: op for op in fwd}
    assert "attn_softmax" not in by_name
    sm = by_name["attn_softmax_fp32_fallback"]
    el = b * 2 * s * s
    # float() 2+4, *scale 4+4, masked_fill_ 4+1+4, softmax 4+4, half() 4+2 = 37 bytes per score
    assert sm.bytes == el * 37 and sm.launches == 5
    bwd = {op.name: op for op in ops.backward_ops(fwd)}["attn_softmax_fp32_fallback.bwd"]
    # half() 2+4, softmax 4+4+4, masked_fill 4+1+4, mul 4+4, float() 4+2 = 41 bytes per score
    assert bwd.bytes == el * 41 and bwd.launches == 5
    # micro-batch 2 fills the kernel's warps again
    assert "attn_softmax" in {op.name for op in ops.layer_ops(m, 2, s, tp, pb, UNFUSED)}


def test_hf_eager_attention_is_the_transformers_chain():
    # Hugging Face eager_attention_forward on a 40-head, 2,048-token block in bf16 (Baichuan2-13B's shape),
    # micro-batch 1, TP 1: per score element, forward *scale 2+2, +mask 2+2, softmax(float32) 2+4,
    # .to(bf16) 4+2 = 20 bytes in 4 kernels; backward .to 2+4, softmax 4+4+2, *scale 2+2 = 20 in 3
    from simulator.catalog import get_model

    m = get_model("baichuan2-13b")
    el = 40 * 2048 * 2048
    fwd = ops.layer_ops(m, 1, 2048, 1, 2, KernelConfig(attention="hf_eager"))
    by_name = {op.name: op for op in fwd}
    assert "attn_softmax" not in by_name and "attn_softmax_fp32_fallback" not in by_name
    chain = by_name["attn_softmax_hf_eager"]
    assert chain.bytes == el * 20 and chain.launches == 4
    bwd = {op.name: op for op in ops.backward_ops(fwd)}["attn_softmax_hf_eager.bwd"]
    assert bwd.bytes == el * 20 and bwd.launches == 3
    # Megatron's fused scale-mask-softmax on the same scores: 2+2 forward
    assert {op.name: op for op in ops.layer_ops(m, 1, 2048, 1, 2, UNFUSED)}["attn_softmax"].bytes == el * 4


def test_hf_eager_attention_keeps_the_fp32_softmax_output():
    # the core keeps softmax's fp32 output (4 B) and its bf16 copy (2 B) per score, not the fused 2 B
    from simulator.catalog import get_model
    from simulator.workload.activations import layer_activation_bytes

    m = get_model("baichuan2-13b")
    fused = layer_activation_bytes(m, 1, 2048, flash_attention=False)
    chain = layer_activation_bytes(m, 1, 2048, flash_attention=False, hf_eager=True)
    assert chain - fused == 40 * 2048 * 2048 * (4 + 2 - 2)


def test_backward_flops(llama3_8b):
    fwd = ops.layer_ops(llama3_8b, 1, 4096, 2, 2, FLASH)
    bwd = ops.backward_ops(fwd)
    assert _sum(bwd, "gemm") == 2 * _sum(fwd, "gemm")  # dgrad + wgrad
    assert _sum(bwd, "attention") == 2.5 * _sum(fwd, "attention")  # FlashAttention backward
    assert _bytes(bwd, "memory") == 2 * _bytes(fwd, "memory")
    qkv_bwd = [op for op in bwd if op.name.startswith("qkv.")]
    m, n, k = 4096, (4096 + 2048) // 2, 4096
    assert [op.shape for op in qkv_bwd] == [(m, k, n), (k, n, m)]  # dX = dY·Wᵀ, dW = Xᵀ·dY
    assert not any(op.recompute for op in bwd)


def test_recompute_marks(llama3_8b):
    full = ops.layer_ops(llama3_8b, 1, 2048, 1, 2, FLASH, recompute="full")
    rec = ops.recompute_ops(full)
    assert [op.flops for op in rec] == [op.flops for op in full]
    assert ops.backward_ops(full)[: len(rec)] == rec
    # selective: the attention core is recomputed, unfused or not
    sel = ops.layer_ops(llama3_8b, 1, 2048, 1, 2, UNFUSED, recompute="selective")
    # (Megatron's CoreAttention, which selective recomputation checkpoints, ends with the context copy)
    assert {op.name for op in sel if op.recompute} == {"attn_scores", "attn_softmax", "attn_v", "attn_context_copy"}
    # FlashAttention: Megatron-Core's checkpoint re-runs the fused kernel too
    again = ops.recompute_ops(ops.layer_ops(llama3_8b, 1, 2048, 1, 2, FLASH, recompute="selective"))
    assert [op.name for op in again] == ["recompute.attention"]


def test_sequence_parallel_norms_and_casts_run_on_the_ranks_tokens(llama3_8b):
    """Megatron's sequence parallelism (Korthikanti et al. 2022, §4.2.2): the residual adds and norms
    run on the rank's b·s/t tokens; the GEMMs, attention and the GEMM-output casts keep all b·s."""
    b, s, tp, pb, h = 1, 8192, 4, 2, 4096
    m = b * s
    plain = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, tp, pb, FLASH, fp8="current")}
    sp = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, tp, pb, FLASH, fp8="current",
                                              sequence_parallel=True)}
    # fused add + norm: 4 passes of 2 B over 8,192 x 4,096 elements, or over 2,048 x 4,096 under SP
    assert plain["input_add_norm"].bytes == 4 * 8192 * 4096 * 2 == 268_435_456
    assert sp["input_add_norm"].bytes == sp["post_attn_add_norm"].bytes == 4 * 2048 * 4096 * 2 == 67_108_864
    # current scaling, norm-fed: 4 B per element without SP; with SP the shard's cast without its
    # transposed copy (3 B x 1/4) plus the transpose of the gathered FP8 tensor (read 1 + write 1 B)
    assert plain["qkv.fp8_cast"].bytes == 4 * m * h
    assert sp["qkv.fp8_cast"].bytes == sp["mlp_up.fp8_cast"].bytes == (3 / 4 + 2) * m * h
    assert sp["qkv.fp8_cast"].launches == plain["qkv.fp8_cast"].launches + 1
    for name in ("qkv", "attention", "mlp_down", "mlp_down.fp8_cast", "out_proj.fp8_cast"):
        assert sp[name].bytes == plain[name].bytes and sp[name].flops == plain[name].flops
    # MXFP8 quantizes both copies on the shard and gathers them: the standalone 4 B over 1/4 of the tokens
    mx = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, tp, pb, FLASH, fp8="mxfp8", sequence_parallel=True)}
    assert mx["qkv.fp8_cast"].bytes == 4 * m * h / 4
    # without TP there is nothing to split
    one = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, sequence_parallel=True)}
    assert one["input_add_norm"].bytes == 4 * m * h * pb
    head = {op.name: op for op in ops.head_ops(llama3_8b, b, s, tp, pb, sequence_parallel=True)}
    assert head["final_norm"].bytes == 2 * 2048 * 4096 * 2
    # the loss is not split by sequence parallelism: Megatron's fused loss reads the 16-bit logits
    # (2 B) and writes their fp32 copy (4), exp in place (8), row sum (4), division in place (8)
    assert head["cross_entropy"].bytes == (2 + 4 + 8 + 4 + 8) * m * 128256 / tp


def test_head_ops(llama3_8b):
    b, s, tp, pb = 2, 1024, 2, 2
    head = {op.name: op for op in ops.head_ops(llama3_8b, b, s, tp, pb)}
    assert head["logits"].flops == flops.logits_forward(llama3_8b, b, s) / tp
    assert head["logits"].shape == (b * s, 128256 // tp, 4096)
    assert head["embedding"].bytes == 2 * b * s * 4096 * pb
    assert head["cross_entropy"].bytes == 26 * b * s * 128256 / tp  # Megatron's fused loss, forward


def test_optimizer_bytes_per_parameter():
    n = 1_000_000
    (fused,) = optimizer_ops(n, fused_adam=True)
    # read master, m, v, grad (4 × 4 B), write master, m, v (3 × 4 B) and the bf16 copy (2 B)
    assert fused.bytes == 30 * n and fused.kind == "memory"
    unfused = optimizer_ops(n, fused_adam=False)
    assert len(unfused) == 8
    # lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16, cast 6 bytes per parameter
    assert sum(op.bytes for op in unfused) == 78 * n
    assert sum(op.flops for op in unfused) == pytest.approx(fused.flops)


def test_optimizer_launches_and_grad_clipping():
    # multi_tensor_apply: 320 blocks × 65,536 elements per launch -> 7e9 params need ceil(333.8) = 334
    n = 7_000_000_000
    (adam,) = optimizer_ops(n, fused_adam=True)
    assert adam.launches == 334
    clip = optimizer_ops(n, fused_adam=True, grad_clipping=True)
    assert [op.name for op in clip] == ["grad_norm", "grad_clip_scale", "adam"]
    # norm reads fp32 grads (4 B), the scale reads and writes them (8 B)
    assert clip[0].bytes + clip[1].bytes == 12 * n
    assert clip[0].launches == 334 + 3


def test_torchao_rowwise_rescales_its_backward_gemm_outputs(llama3_8b):
    """torchao rowwise: the two backward GEMMs run tensorwise in cuBLAS and are rescaled afterwards
    (``output *= post_inverse_scale``), one kernel each reading and writing the 16-bit output, 4 B per
    element: for mlp_down (m × f input, m × h output, weight f × h) the data gradient is m·f and the
    weight gradient f·h. Its output-gradient cast stays 6 B/el over m·h (amax, cast, column copy);
    tensorwise has no rescale."""
    b, s, pb = 2, 2048, 2
    m, h, f = b * s, 4096, 14336
    row = {op.name: op for op in ops.backward_ops(ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, fp8="rowwise"))}
    tw = {op.name: op for op in ops.backward_ops(ops.layer_ops(llama3_8b, b, s, 1, pb, FLASH, fp8="tensorwise"))}
    assert tw["mlp_down.fp8_cast.bwd"].bytes == 6 * m * h
    assert row["mlp_down.fp8_cast.bwd"].bytes == 6 * m * h + 4 * (m * f + f * h)
    assert row["mlp_down.fp8_cast.bwd"].launches == tw["mlp_down.fp8_cast.bwd"].launches + 2


def test_megatron_runs_yarn_rope_unfused():
    """YaRN RoPE (GPT-OSS) under Megatron-Core's fused kernels runs as its eager PyTorch code: 12 passes
    over q and k forward (6 large and 6 small kernels per tensor), 10 backward (5 kernels per tensor),
    against the fused kernel's 2 passes and 1 kernel; torch.compile (Inductor) fuses it again. GPT-OSS:
    q and k per token (64 + 8) · 64 = 4,608 elements."""
    from simulator.catalog import get_model

    oss = get_model("gpt-oss-120b")
    b, s, pb = 1, 4096, 2
    qk = b * s * (64 + 8) * 64
    fwd = {op.name: op for op in ops.layer_ops(oss, b, s, 1, pb, FLASH)}
    assert fwd["rotary"].bytes == 12 * qk * pb and fwd["rotary"].launches == 2 * 12
    bwd = {op.name: op for op in ops.backward_ops(list(fwd.values()))}
    assert bwd["rotary.bwd"].bytes == 10 * qk * pb and bwd["rotary.bwd"].launches == 2 * 5
    plain = {op.name: op for op in ops.layer_ops(oss.model_copy(update={"rope_scaling": None}), b, s, 1, pb, FLASH)}
    assert plain["rotary"].bytes == 2 * qk * pb and plain["rotary"].launches == 1


def test_plain_te_linear_casts_its_input_and_weight_in_every_forward(llama3_8b):
    """``fp8_te_modules: linear`` (llm-foundry ``fc_type: te``): each te.Linear casts its own input in a
    standalone cast-transpose (delayed scaling: read 2 B, write 1 + 1 B = 4 B per element, 1 kernel)
    instead of the norm writing it (1 B, the transposed copy only), and its weight every forward (4 B
    per weight element, 1 kernel), so the once-per-step weight cast goes. QKV of Llama 3 8B: input
    m × 4,096, weight 4,096 × (4,096 + 2·1,024)."""
    b, s, pb = 2, 2048, 2
    m, h, qkv = b * s, 4096, 4096 + 2 * 1024
    te = KernelConfig(fp8_te_modules="linear")
    fused = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, 1, pb, KernelConfig(), fp8="delayed")}
    plain = {op.name: op for op in ops.layer_ops(llama3_8b, b, s, 1, pb, te, fp8="delayed")}
    assert fused["qkv.fp8_cast"].bytes == 1 * m * h
    assert plain["qkv.fp8_cast"].bytes == 4 * m * h + 4 * h * qkv
    assert plain["qkv.fp8_cast"].launches == 2
    assert plain["mlp_down.fp8_cast"].bytes == 4 * m * 14336 + 4 * 14336 * h


def test_fp8_te_modules_linear_needs_a_transformer_engine_recipe():
    """torchao float8 has no Transformer Engine modules: the combination is refused, naming the field."""
    with pytest.raises(ValueError, match="fp8_te_modules"):
        KernelConfig(fp8_te_modules="linear", fp8_recipe="tensorwise")


def test_gemm_epilogue_drops_the_bias_activation_and_bias_gradient_kernels(gpt3_175b, llama3_8b):
    """flash-attn's fused_dense (kernels.gemm_epilogue): the bias add and GELU run in the GEMM's epilogue
    forward and the bias and GELU gradients in the dgrad/wgrad epilogues backward. GPT-3 175B block (biases,
    GELU), b = 1, s = 1024: with fused kernels the forward has the QKV bias add (3 passes of s·3h) and the
    GELU (2 passes of s·4h), the backward 4 bias-gradient reductions (the QKV one as the bias add's
    backward) and the GELU gradient; with the epilogue none of them, the same GEMMs; a gated MLP (Llama's SwiGLU) keeps its
    activation kernel."""
    b, s, pb, h = 1, 1024, 2, 12288
    plain = ops.layer_ops(gpt3_175b, b, s, 1, pb, KernelConfig())
    fused = ops.layer_ops(gpt3_175b, b, s, 1, pb, KernelConfig(gemm_epilogue=True))
    names = {o.name for o in plain} - {o.name for o in fused}
    assert names == {"qkv_bias_add", "mlp_gelu", "bias_grad_1", "bias_grad_2", "bias_grad_3"}
    by_name = {o.name: o for o in plain}
    assert by_name["qkv_bias_add"].bytes == 3 * s * 3 * h * pb and by_name["mlp_gelu"].bytes == 2 * s * 4 * h * pb
    assert [o for o in plain if o.kind == "gemm"] == [o for o in fused if o.kind == "gemm"]
    assert not any(o.name.startswith(("bias_grad", "qkv_bias", "mlp_gelu")) for o in ops.backward_ops(fused))
    swiglu = ops.layer_ops(llama3_8b, b, s, 1, pb, KernelConfig(gemm_epilogue=True))
    assert "mlp_swiglu" in {o.name for o in swiglu}


def test_te_linear_modules_under_fp8_keep_every_bias_in_their_gemms(gpt3_175b):
    """llm-foundry's fc_type te (kernels.fp8_te_modules linear): a te.Linear in place of every nn.Linear, whose
    FP8 GEMM adds the bias in its epilogue and whose backward reduces the bias's gradient in the output
    gradient's cast (fp8_cast_transpose_bgrad_fused): no bias kernel for any of the 4 biased linears, which
    the same block in BF16 (nn.Linear) has one reduction each of."""
    b, s, pb = 1, 1024, 2
    te = KernelConfig(fp8_te_modules="linear", fused_norm_residual=False)
    fp8 = ops.backward_ops(ops.layer_ops(gpt3_175b, b, s, 1, pb, te, fp8="delayed", linear="torch"))
    assert not any(o.name.startswith(("bias_grad", "qkv_bias")) for o in fp8)
    bf16 = ops.backward_ops(ops.layer_ops(gpt3_175b, b, s, 1, pb, te, linear="torch"))
    assert sum(o.name.startswith("bias_grad") for o in bf16) == 4


def test_qkv_bias_alone_runs_one_bias_kernel_for_the_qkv_linear(llama3_8b):
    """Qwen2's biases on q, k and v only (model.qkv_bias): under PyTorch nn.Linear (torch) the QKV bias's gradient
    is one reduction kernel backward over the QKV output (s · (h + 2·kv) elements), and the output projection and
    MLP have none; Megatron-LM's own linears add the QKV bias forward (3 passes); Transformer Engine's keep it in
    the GEMM's epilogue (no kernel)."""
    b, s, pb = 1, 1024, 2
    m = llama3_8b.model_copy(update={"qkv_bias": True})
    torch_ops = ops.layer_ops(m, b, s, 1, pb, KernelConfig(), linear="torch")
    bias = [o for o in ops.backward_ops(torch_ops) if "bias" in o.name]
    assert [o.name for o in bias] == ["bias_grad_0.bwd"]
    assert bias[0].bytes == s * (4096 + 2 * 1024) * pb
    megatron = {o.name: o for o in ops.layer_ops(m, b, s, 1, pb, KernelConfig(), linear="megatron")}
    assert megatron["qkv_bias_add"].bytes == 3 * s * (4096 + 2 * 1024) * pb
    assert not any("bias" in o.name for o in ops.layer_ops(m, b, s, 1, pb, KernelConfig(), linear="te"))


def test_moe_blocks_carry_their_attention_biases():
    """GPT-OSS-120B has biased attention linears (q, k, v and output: model.linear_bias). Its MoE block's
    attention part carries them as a dense block's do, each right after its GEMM: Megatron's QKV bias add
    (3 passes of the QKV output forward, its bias's reduction backward) and the output projection's bias
    reduction; under PyTorch's nn.Linear (linear torch) no add, the QKV bias's reduction alone. The MLP's
    biases are the experts' (moe_ops), not the dense MLP's."""
    from simulator.catalog import get_model
    from simulator.workload import moe_ops

    model = get_model("gpt-oss-120b")
    b, s, pb = 1, 4096, 2
    qkv = model.q_dim + 2 * model.kv_dim
    for linear, first in (("megatron", "qkv_bias_add"), ("torch", "bias_grad_0"), ("te", None)):
        pre = moe_ops.moe_block_ops(model, b, s, 1, pb, KernelConfig(), "none", ep=8, linear=linear).pre
        names = [o.name for o in pre]
        assert names[names.index("out_proj") + 1] == "bias_grad_1"
        if first is None:  # Transformer Engine's QKV bias: in the GEMM's epilogues, no kernel
            assert not {"qkv_bias_add", "bias_grad_0"} & set(names)
            continue
        assert names[names.index("qkv") + 1] == first
        assert not any(n in names for n in ("bias_grad_2", "bias_grad_3"))
        bwd = {o.name: o for o in ops.backward_ops(list(pre))}
        assert bwd[f"{first}.bwd"].bytes == b * s * qkv * pb and bwd["bias_grad_1.bwd"].bytes == b * s * model.hidden_size * pb
    add = next(o for o in moe_ops.moe_block_ops(model, b, s, 1, pb, KernelConfig(), "none", ep=8).pre
               if o.name == "qkv_bias_add")
    assert add.bytes == 3 * b * s * qkv * pb
