"""Per-kernel ops: FLOPs agree with the closed forms, bytes with hand-counted passes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config.scenario import KernelConfig
from simulator.workload import flops, ops

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


def test_fused_norm_residual_saves_two_passes_per_block(llama3_8b):
    b, s, pb = 1, 1024, 2
    fused = KernelConfig(fused_norm_residual=True)
    unfused = KernelConfig(fused_norm_residual=False)
    # unfused: norm 2 + add 3 + norm 2 + add 3 = 10 passes of b·s·h; fused add+norm: 2 × 4 = 8.
    saved = _bytes(ops.layer_ops(llama3_8b, b, s, 1, pb, unfused), "memory") - _bytes(
        ops.layer_ops(llama3_8b, b, s, 1, pb, fused), "memory"
    )
    assert saved == 2 * b * s * 4096 * pb


def test_unfused_attention_ops(gpt3_175b):
    b, s, tp, pb = 1, 2048, 8, 2
    by_name = {op.name: op for op in ops.layer_ops(gpt3_175b, b, s, tp, pb, UNFUSED)}
    heads = 96 // tp
    assert by_name["attn_scores"].batch == b * heads and by_name["attn_scores"].shape == (s, s, 128)
    assert by_name["attn_softmax"].bytes == 2 * b * heads * s * s * pb  # read scores, write probabilities
    assert by_name["attn_v"].flops == 2 * b * heads * s * s * 128


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
    # selective: only the unfused attention core is recomputed; FlashAttention stores none of it
    sel = ops.layer_ops(llama3_8b, 1, 2048, 1, 2, UNFUSED, recompute="selective")
    assert {op.name for op in sel if op.recompute} == {"attn_scores", "attn_softmax", "attn_v"}
    assert not ops.recompute_ops(ops.layer_ops(llama3_8b, 1, 2048, 1, 2, FLASH, recompute="selective"))


def test_head_ops(llama3_8b):
    b, s, tp, pb = 2, 1024, 2, 2
    head = {op.name: op for op in ops.head_ops(llama3_8b, b, s, tp, pb)}
    assert head["logits"].flops == flops.logits_forward(llama3_8b, b, s) / tp
    assert head["logits"].shape == (b * s, 128256 // tp, 4096)
    assert head["embedding"].bytes == 2 * b * s * 4096 * pb
    assert head["cross_entropy"].bytes == 3 * b * s * 128256 / tp * pb


def test_optimizer_bytes_per_parameter():
    n = 1_000_000
    (fused,) = ops.optimizer_ops(n, fused_adam=True)
    # read master, m, v, grad (4 × 4 B), write master, m, v (3 × 4 B) and the bf16 copy (2 B)
    assert fused.bytes == 30 * n and fused.kind == "memory"
    unfused = ops.optimizer_ops(n, fused_adam=False)
    assert len(unfused) == 8
    # lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16, cast 6 bytes per parameter
    assert sum(op.bytes for op in unfused) == 78 * n
    assert sum(op.flops for op in unfused) == pytest.approx(fused.flops)
