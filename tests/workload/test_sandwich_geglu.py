"""Gemma's block: the GeGLU MLP and the sandwich norms (``model.mlp: geglu``, ``model.sandwich_norm``),
each checked against hand counts of what the block adds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from simulator.config.model import ModelConfig
from simulator.config.scenario import KernelConfig
from simulator.workload import activations, host, ops, params

FUSED = KernelConfig(flash_attention=True, fused_norm_residual=True)
EAGER = KernelConfig(flash_attention=True, fused_norm_residual=False)
COMPILED = KernelConfig(flash_attention=True, fused_norm_residual=False, compile=True)

# A Gemma-3-like block in round numbers: hidden 1,024, 8 heads of 256 (q 2,048 wide), 4 KV heads, MLP 4,096.
BASE = dict(n_layers=4, hidden_size=1024, n_heads=8, n_kv_heads=4, head_dim=256, ffn_hidden_size=4096,
            vocab_size=32000, tied_embeddings=True, qk_norm=True, qk_norm_per_head=True)


def _model(**kw) -> ModelConfig:
    return ModelConfig(**{**BASE, **kw})


def test_geglu_counts_as_a_gated_mlp():
    swiglu, geglu = _model(mlp="swiglu"), _model(mlp="geglu")
    assert geglu.gated_mlp and geglu.mlp_matrices == 3 and not geglu.qkv_fused
    assert geglu.linear_modules == ("q", "k", "v", "o", "gate", "up", "down")
    h, f, q, kv = 1024, 4096, 8 * 256, 4 * 256
    # q, o: h x q; k, v: h x kv; gate, up, down: 3 h f; two RMSNorms of h; q and k norms of one head (256)
    assert params.count(geglu).per_layer == 2 * h * q + 2 * h * kv + 3 * h * f + 2 * h + 2 * 256
    assert params.count(geglu) == params.count(swiglu)
    # eager, and under Megatron-Core's fused kernels (which fuse a gated GELU only for erf's F.gelu): tanh-GELU of
    # the gate (read f, write f), then the product (read 2f, write f): 5 passes of 2 bytes, 2 kernels
    for kernels in (FUSED, EAGER):
        act = {op.name: op for op in ops.layer_ops(geglu, 2, 512, 1, 2, kernels)}["mlp_geglu"]
        assert (act.bytes, act.launches) == (5 * 2 * (2 * 512 * f), 2)
    # compiled: one kernel reading gate and up and writing the product, 3 passes, as a compiled SwiGLU
    act = {op.name: op for op in ops.layer_ops(geglu, 2, 512, 1, 2, COMPILED)}["mlp_geglu"]
    assert (act.bytes, act.launches) == (3 * 2 * (2 * 512 * f), 1)


def test_sandwich_norm_adds_two_norms_per_block():
    plain, gemma = _model(mlp="geglu"), _model(mlp="geglu", sandwich_norm=True)
    h = 1024
    assert gemma.block_norms == 4 and plain.block_norms == 2
    assert params.count(gemma).per_layer - params.count(plain).per_layer == 2 * h
    assert sum(params.block_vectors(gemma)) - sum(params.block_vectors(plain)) == 2 * h
    # the block's vector tensors: 4 norms and the per-head q and k norms, 256 each
    assert sorted(params.block_vectors(gemma)) == [256, 256, h, h, h, h]
    assert host.block_param_tensors(gemma) - host.block_param_tensors(plain) == 2
    b, s = 2, 512
    for kernels, passes in ((FUSED, 2), (EAGER, ops.EAGER_RMSNORM_PASSES)):
        extra = {op.name: op for op in ops.layer_ops(gemma, b, s, 1, 2, kernels)}
        assert set(extra) - {op.name for op in ops.layer_ops(plain, b, s, 1, 2, kernels)} == {
            "attn_out_norm", "mlp_out_norm"}
        for name in ("attn_out_norm", "mlp_out_norm"):  # a norm over the b·s·h block output
            assert extra[name].bytes == passes * 2 * b * s * h
            # the reference block's host time holds two norms: these calls come on top
            assert extra[name].extra_host_calls == extra[name].launches == (1 if kernels is FUSED else 8)
    # under sequence parallelism the norms run on the rank's b·s/t tokens
    sp = {op.name: op for op in ops.layer_ops(gemma, b, s, 4, 2, FUSED, sequence_parallel=True)}
    assert sp["mlp_out_norm"].bytes == 2 * 2 * b * s * h / 4


def test_sandwich_norm_keeps_two_more_norm_inputs():
    plain, gemma = _model(mlp="geglu"), _model(mlp="geglu", sandwich_norm=True)
    b, s, p, h = 2, 512, 2, 1024
    more = activations.layer_activation_bytes(gemma, b, s) - activations.layer_activation_bytes(plain, b, s)
    assert more == 2 * p * s * b * h  # the attention output and the MLP output, 2 bytes each
    sp = (activations.layer_activation_bytes(gemma, b, s, 4, sequence_parallel=True)
          - activations.layer_activation_bytes(plain, b, s, 4, sequence_parallel=True))
    assert sp == 2 * p * s * b * h / 4
    # Megatron-Core's mlp recompute module re-runs the norm on the MLP output: its input is not kept
    mlp = (activations.layer_activation_bytes(gemma, b, s, mlp_recompute=True)
           - activations.layer_activation_bytes(plain, b, s, mlp_recompute=True))
    assert mlp == p * s * b * h
    # full recomputation keeps the block input only, sandwich or not
    assert (activations.layer_activation_bytes(gemma, b, s, recompute="full")
            == activations.layer_activation_bytes(plain, b, s, recompute="full") == p * s * b * h)


def test_sandwich_norm_refused_on_moe_blocks():
    with pytest.raises(ValidationError, match="sandwich_norm"):
        _model(sandwich_norm=True, moe={"n_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 1024})
