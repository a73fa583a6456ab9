"""Hybrid Mamba-Transformer models (Nemotron-H): parameters and FLOPs of each layer kind of
``model.hybrid_pattern``, and the average block the rest of the workload model works with.

A hybrid model is a sequence of residual layers, each with its own pre-norm: Mamba-2 mixers (``M``),
attention layers (``*``) and MLP layers (``-``) (Megatron-Core ``megatron/core/models/mamba``; NVIDIA,
"Nemotron-H", arXiv:2504.03624). dtsim's block is two consecutive layers, so ``n_layers`` blocks hold the
pattern's ``2·n_layers`` layers: a block has two pre-norms and two residual adds, like a transformer block,
and each layer kind is counted exactly once per layer it has (``ModelConfig.hybrid_counts``). The per-block
figures other modules read (``params.layer``, ``flops.layer_forward``) are the pattern's totals over
``n_layers``: exact for the whole model and for a stage that holds every layer.

One Mamba-2 layer (Megatron-Core ``MambaMixer``; Dao & Gu 2024, arXiv:2405.21060 §7), ``h`` the hidden width,
``d = n_heads·head_dim``, ``G`` groups, ``N`` the state width, ``H`` heads, ``k`` conv taps:

* parameters: input projection ``h·(2d + 2GN + H)`` (z, x, B, C, dt), depthwise convolution
  ``(d + 2GN)·(k + 1)`` (weights and bias), ``dt_bias``, ``A_log`` and ``D`` (``3H``), the gated RMSNorm
  ``d``, output projection ``d·h``; its pre-norm ``h`` (fused into the input projection's
  ``TELayerNormColumnParallelLinear``). All but the pre-norm are split over tensor-parallel ranks by heads and
  groups. Nemotron-H 56B: 438,432,512 a layer;
* forward FLOPs per token: the projections ``2·h·(2d + 2GN + H) + 2·d·h``, and the SSD algorithm's matrix
  products with chunks of ``Q`` tokens: the intra-chunk product ``(C·Bᵀ ∘ L)·X`` ``2·Q·d`` (half of it with
  ``causal``: ``_chunk_scan_fwd`` skips the tiles above the diagonal), ``C·Bᵀ`` ``2·Q·G·N``, the chunk states
  ``Bᵀ·X`` and the state-to-output ``C·S`` ``2·N·d`` each. This is NVIDIA's Nemotron-H model-FLOP count
  (NVIDIA/dgxc-benchmarking ``nemotron-h/README.md``: ``s·h·(3HP + 2GN + H) + s·h·expand·Q + 2·s·h·expand·N +
  s·Q·N·G`` multiply-adds a layer). The convolution (``2k`` FLOPs per channel and token) and the state passing
  between chunks are not matrix products and are left out, as elsewhere in ``simulator.workload.flops``.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.workload import params as wparams
from simulator.workload.flops import LayerFlops, dense_layer_forward


def mamba_mixer_params(model: ModelConfig) -> int:
    """Parameters of one Mamba-2 mixer without its pre-norm (module docstring), all tensor-parallel."""
    m, h = model.mamba, model.hidden_size
    assert m is not None  # ModelConfig: a pattern with M layers has model.mamba
    return (h * m.in_proj_dim + m.conv_dim * (m.conv_kernel + 1) + 3 * m.n_heads + m.d_inner
            + m.d_inner * h)


def layer_kinds(model: ModelConfig) -> dict[str, wparams.LayerParams]:
    """One layer of each kind of the pattern with its pre-norm: ``M`` (the Mamba mixer in the ``attention``
    field, the sequence mixer's slot), ``*`` (attention, QK-norms with it) and ``-`` (MLP), split as
    :func:`simulator.workload.params.dense_layer` splits a transformer block (row-parallel biases and
    norms replicated)."""
    d = wparams.dense_layer(model)
    n = wparams.norm_params(model, model.hidden_size)
    qk = d.norms - 2 * n  # QK-norms of the attention layer
    row_bias = model.hidden_size if model.linear_bias else 0
    mixer = mamba_mixer_params(model) if model.mamba is not None else 0
    lp = wparams.LayerParams
    return {
        "M": lp(attention=mixer, mlp=0, norms=n, sharded=mixer, replicated=n),
        "*": lp(attention=d.attention, mlp=0, norms=n + qk, sharded=d.attention - row_bias,
                replicated=row_bias + n + qk),
        "-": lp(attention=0, mlp=d.mlp, norms=n, sharded=d.mlp - row_bias, replicated=row_bias + n),
    }


def _summed(model: ModelConfig) -> wparams.LayerParams:
    """All the pattern's layers together (exact integers): each kind times its count."""
    kinds = layer_kinds(model)
    counts = dict(zip("M*-", model.hybrid_counts, strict=True))
    fields = ("attention", "mlp", "norms", "sharded", "replicated")
    return wparams.LayerParams(**{f: sum(c * getattr(kinds[k], f) for k, c in counts.items()) for f in fields})


def blocks_total(model: ModelConfig) -> int:
    """Parameters of all the pattern's layers (exact)."""
    return _summed(model).total


def average_block(model: ModelConfig) -> wparams.LayerParams:
    """The pattern's layers over ``n_layers`` blocks (fields are averages, not integers)."""
    s, n = _summed(model), model.n_layers
    return wparams.LayerParams(attention=s.attention / n, mlp=s.mlp / n, norms=s.norms / n, sharded=s.sharded / n,
                               replicated=s.replicated / n)


def mamba_forward(model: ModelConfig, b: int, s: int, causal: bool) -> LayerFlops:
    """Forward FLOPs of one Mamba-2 layer for ``b`` sequences of ``s`` tokens (module docstring): the
    projections in ``ssm``, the SSD products in ``scan``; chunks of ``min(chunk_size, s)`` tokens."""
    m, h, tokens = model.mamba, model.hidden_size, b * s
    assert m is not None
    q = min(m.chunk_size, s)
    intra = 2.0 * q * m.d_inner * (0.5 if causal else 1.0)
    scan = tokens * (intra + 2.0 * q * m.n_groups * m.state_size + 4.0 * m.state_size * m.d_inner)
    return LayerFlops(ssm=2.0 * tokens * (h * m.in_proj_dim + m.d_inner * h), scan=scan)


def layer_groups(model: ModelConfig, b: int, s: int, causal: bool) -> list[tuple[int, LayerFlops]]:
    """``[(layers, LayerFlops)]`` of the pattern: its attention layers (a block's attention part), MLP layers
    (its MLP) and Mamba layers (:func:`mamba_forward`)."""
    n_m, n_attn, n_mlp = model.hybrid_counts
    dense = dense_layer_forward(model, b, s, causal)
    groups = [(n_attn, replace(dense, mlp=0.0)), (n_mlp, LayerFlops(mlp=dense.mlp))]
    if n_m:
        groups.append((n_m, mamba_forward(model, b, s, causal)))
    return [(c, lay) for c, lay in groups if c]


def check_simulated(model: ModelConfig) -> None:
    """Refuse what needs a Mamba layer's kernels or saved activations, which are not modelled yet: the step
    (``dtsim run``, ``sweep``, ``validate``) and the activation memory (``dtsim memory``); ``dtsim export`` refuses a
    hybrid in ``interop.pipeline.export_scenario``. ``dtsim flops`` and the parameter counts work."""
    if model.is_hybrid:
        raise InputError("the step time and activation memory of a Mamba hybrid are not simulated yet (its Mamba "
                         "kernels and saved activations are not modelled); `dtsim flops` gives its parameters and "
                         "FLOPs", "model.hybrid_pattern")
