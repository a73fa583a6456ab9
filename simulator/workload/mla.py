"""Multi-head latent attention (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1): parameters and FLOPs.

Module structure of Hugging Face ``DeepseekV3Attention`` (``modeling_deepseek_v3.py``) with
``a`` heads, ``d_c`` = ``kv_lora_rank``, ``d_c'`` = ``q_lora_rank``, ``d_n`` = ``qk_nope_head_dim``,
``d_r`` = ``qk_rope_head_dim``, ``d_v`` = ``v_head_dim``, ``d_qk = d_n + d_r``:

* ``q_a_proj`` ``h × d_c'``, ``q_a_layernorm`` ``d_c'``, ``q_b_proj`` ``d_c' × a·d_qk``
  (without query compression, ``q_proj`` ``h × a·d_qk``);
* ``kv_a_proj_with_mqa`` ``h × (d_c + d_r)`` (the compressed KV and the one shared RoPE key),
  ``kv_a_layernorm`` ``d_c``, ``kv_b_proj`` ``d_c × a·(d_n + d_v)``;
* ``o_proj`` ``a·d_v × h``.

Tensor parallelism follows Megatron-Core ``MLASelfAttention``: the down projections
(``linear_q_down_proj``, ``linear_kv_down_proj``) and their norms are duplicated on every TP rank,
the up projections are column-parallel and ``o_proj`` row-parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.model import ModelConfig


@dataclass(frozen=True)
class MLAParams:
    """One MLA block's attention parameters: ``sharded`` (÷ TP) and ``replicated`` (norms included)."""

    sharded: int
    replicated: int
    norms: int

    @property
    def total(self) -> int:
        return self.sharded + self.replicated


def _dims(model: ModelConfig) -> tuple[int, int | None, int, int, int, int]:
    assert model.kv_lora_rank and model.qk_nope_head_dim and model.qk_rope_head_dim and model.v_head_dim
    return (model.n_heads, model.q_lora_rank, model.kv_lora_rank, model.qk_nope_head_dim,
            model.qk_rope_head_dim, model.v_head_dim)


def params(model: ModelConfig) -> MLAParams:
    """Parameters of one MLA attention (formulas in the module docstring); the internal norms
    (``q_a_layernorm``, ``kv_a_layernorm``) are RMSNorms of ``d_c'`` and ``d_c`` weights."""
    h = model.hidden_size
    a, qr, kvr, dn, dr, dv = _dims(model)
    dqk = dn + dr
    q_down = h * qr if qr else 0
    q_up = (qr or h) * a * dqk
    kv_down = h * (kvr + dr)
    kv_up = kvr * a * (dn + dv)
    out = a * dv * h
    norms = (qr or 0) + kvr
    return MLAParams(sharded=q_up + kv_up + out, replicated=q_down + kv_down + norms, norms=norms)


@dataclass(frozen=True)
class MLAFlops:
    """Forward FLOPs of one MLA attention for ``b·s`` tokens (a multiply-add = 2 FLOPs)."""

    q: float
    kv: float
    scores: float
    attn_v: float
    out_proj: float


def forward(model: ModelConfig, b: int, s: int, causal: bool) -> MLAFlops:
    """q ``2·T·(h·d_c' + d_c'·a·d_qk)``; kv ``2·T·(h·(d_c + d_r) + d_c·a·(d_n + d_v))``;
    scores ``2·b·s²·a·d_qk·c``; attn_v ``2·b·s²·a·d_v·c`` (``c`` 1/2 causal); out ``2·T·a·d_v·h``
    with ``T = b·s`` (training-time MLA decompresses K and V: DeepSeek-V2 §2.1.2, the
    weight-absorption trick is an inference optimisation)."""
    h, t = model.hidden_size, b * s
    a, qr, kvr, dn, dr, dv = _dims(model)
    dqk = dn + dr
    c = 0.5 if causal else 1.0
    q = 2.0 * t * ((h * qr + qr * a * dqk) if qr else h * a * dqk)
    kv = 2.0 * t * (h * (kvr + dr) + kvr * a * (dn + dv))
    return MLAFlops(
        q=q,
        kv=kv,
        scores=2.0 * b * s * s * a * dqk * c,
        attn_v=2.0 * b * s * s * a * dv * c,
        out_proj=2.0 * t * a * dv * h,
    )


def up_forward(model: ModelConfig, b: int, s: int) -> float:
    """Forward FLOPs of the up projections alone, what Megatron-Core's ``mla_up_proj`` recompute module re-runs
    (``MLASelfAttention.recompute_up_proj``): ``2·T·(d_c'·a·d_qk + d_c·a·(d_n + d_v))``, ``h·a·d_qk`` in place of
    ``d_c'·a·d_qk`` without query compression (``q_proj`` re-runs then), ``T = b·s`` (the rotary embedding's
    FLOPs are not counted, as nowhere in the block counts)."""
    h, t = model.hidden_size, b * s
    a, qr, kvr, dn, dr, dv = _dims(model)
    return 2.0 * t * ((qr or h) * a * (dn + dr) + kvr * a * (dn + dv))

