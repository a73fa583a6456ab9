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

MoE layers (``E``, Nemotron 3 Nano; NVIDIA, arXiv:2512.20848) alternate with the mixers, one per block of two
(``ModelConfig._check_hybrid``): a block holding one is an MoE block (``ModelConfig.is_moe_block``), whose router,
experts and shared experts are ``simulator.workload.moe``'s and whose other layer is the average mixer of the MoE
blocks (Nemotron 3 Nano: 20 Mamba and 3 attention layers over its 23 MoE blocks); the blocks without one average
their own layers (its three ``*M`` blocks). The functions here take that class (``moe``) where it matters.

The step's kernels of each layer kind are ``simulator.workload.hybrid_ops``'s; the activations each keeps for the
backward :func:`activation_bytes`'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.workload import params as wparams
from simulator.workload.flops import LayerFlops, average, dense_layer_forward


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


def _summed(model: ModelConfig, moe: bool | None = None) -> wparams.LayerParams:
    """The ``M``, ``*`` and ``-`` layers of the blocks with (``moe`` True), without (False) an MoE layer or of all
    (None) together (exact integers): each kind times its count. ``E`` layers are ``simulator.workload.moe``'s."""
    kinds = layer_kinds(model)
    counts = model.hybrid_class_counts(moe)[1]
    fields = ("attention", "mlp", "norms", "sharded", "replicated")
    return wparams.LayerParams(**{f: sum(counts[k] * getattr(kinds[k], f) for k in kinds) for f in fields})


def blocks_total(model: ModelConfig) -> int:
    """Parameters of all the pattern's ``M``, ``*`` and ``-`` layers (exact)."""
    return _summed(model).total


def average_block(model: ModelConfig, moe: bool = False) -> wparams.LayerParams:
    """The ``M``, ``*`` and ``-`` layers of the blocks without (``moe`` False) or with an MoE layer, over those
    blocks (fields are averages, not integers); all zero when there are none."""
    s, n = _summed(model, moe), max(1, model.hybrid_class_counts(moe)[0])
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


def layer_groups(model: ModelConfig, b: int, s: int, causal: bool,
                 moe: bool | None = None) -> list[tuple[int, LayerFlops]]:
    """``[(layers, LayerFlops)]`` of the blocks without (``moe`` False), with an MoE layer (True) or of all (None):
    their attention layers (a block's attention part), MLP layers (its MLP) and Mamba layers
    (:func:`mamba_forward`); ``E`` layers are ``simulator.workload.moe``'s."""
    c = model.hybrid_class_counts(moe)[1]
    dense = dense_layer_forward(model, b, s, causal)
    groups = [(c["*"], replace(dense, mlp=0.0)), (c["-"], LayerFlops(mlp=dense.mlp))]
    if c["M"]:
        groups.append((c["M"], mamba_forward(model, b, s, causal)))
    return [(n, lay) for n, lay in groups if n]


def class_forward(model: ModelConfig, b: int, s: int, causal: bool, moe: bool) -> LayerFlops:
    """Forward FLOPs of the average block without (``moe`` False) or with an MoE layer, its ``E`` layer's left
    out (:func:`layer_groups` over those blocks)."""
    return average(layer_groups(model, b, s, causal, moe), max(1, model.hybrid_class_counts(moe)[0]))


def activation_bytes(model: ModelConfig, dense: float, b: int, s: int, tp: int, *, region_div: int, p: int,
                     lin: float, mask: int, recompute: str, mlp_recompute: bool) -> float:
    """Bytes the average hybrid block keeps for its backward, one micro-batch, from ``dense``, what
    ``workload.activations.layer_activation_bytes`` gives a transformer block of the model's attention and MLP
    layers (``region_div``, ``p``, ``lin``, ``mask`` as there). An MLP layer keeps its norm's input ``p·sbh``, its
    mask and its input ``lin·sbh`` (÷``region_div``), and its tensor-parallel tensors ``sb·f·(p·(k−1) + lin)/t``
    (neither with the ``mlp`` recompute module), and so does an MoE layer (``E``: what its routed and shared experts
    keep beyond a dense MLP's is ``moe_memory``'s); an attention layer the rest of ``dense``. A Mamba layer
    (``mamba_split_conv1d_scan_combined`` saves the whole input projection output and the pre-gate scan output;
    the gated norm its input and fp32 ``1/rms`` per group; the output projection its input): its norm's input,
    mask and input, ``(p + lin)·sbh + mask·sbh`` (÷``region_div``), and ``sb·(p·(2d + 2GN + H) + 2p·d + lin·d +
    4G)/t``. Full recomputation checkpoints each of a block's two layers (Megatron-Core's ``MambaStack`` recomputes
    per layer): ``2p·sbh`` ÷ ``region_div``."""
    sb, h = s * b, model.hidden_size
    if recompute == "full":
        return 2 * p * sb * h / region_div
    c = model.hybrid_class_counts()[1]
    n_m, n_attn, n_mlp = c["M"], c["*"], c["-"] + c["E"]
    tensors = 0.0 if mlp_recompute else sb * model.ffn_hidden_size * (p * (model.mlp_matrices - 1) + lin) / tp
    mlp = sb * h * (p + mask + (0 if mlp_recompute else lin)) / region_div + tensors
    total = n_attn * (dense - mlp) + n_mlp * mlp
    if n_m:
        m = model.mamba
        assert m is not None
        own = p * m.in_proj_dim + 2 * p * m.d_inner + lin * m.d_inner + 4 * m.n_groups
        total += n_m * (sb * h * (p + lin + mask) / region_div + sb * own / tp)
    return total / model.n_layers


def check_simulated(scenario: Any) -> None:
    """Refuse a hybrid layout the step does not simulate, naming the key and its fix. The step is Megatron-Core's
    ``MambaModel`` (the framework that trains one) with its fused kernels; the average block
    (``workload.hybrid_ops``) is exact only when a stage holds the whole pattern (``parallel.pp`` 1); Megatron-Core
    splits Mamba heads and groups over tensor-parallel ranks; its Mamba layers have no context-parallel,
    TP-overlap, LoRA, Muon or op-level recompute path here. ``dtsim export`` refuses a hybrid (``interop.pipeline``)."""
    model = scenario.model
    if not model.is_hybrid:
        return
    par, tr = scenario.parallel, scenario.training
    m = model.mamba
    checks = [
        (par.framework != "ddp", "a Mamba hybrid trains under Megatron-Core: set parallel.framework: ddp",
         "parallel.framework"),
        (par.pp > 1, f"pp={par.pp} with a Mamba hybrid is not simulated (a stage would hold part of the pattern, "
                     "whose layer kinds differ in cost); use pp: 1", "parallel.pp"),
        (par.cp > 1, f"cp={par.cp} with a Mamba hybrid is not simulated; use cp: 1", "parallel.cp"),
        (bool(par.tp_comm_overlap) and par.tp > 1, "tp_comm_overlap with a Mamba hybrid is not simulated; set "
         "parallel.tp_comm_overlap: false", "parallel.tp_comm_overlap"),
        (tr.lora is not None, "LoRA on a Mamba hybrid is not simulated; remove training.lora", "training.lora"),
        (tr.optimizer == "muon", "Muon on a Mamba hybrid is not simulated (its Newton-Schulz matrices are a "
         "transformer block's); use training.optimizer: adam", "training.optimizer"),
        (tr.activation_checkpointing == "selective_op", "selective_op recomputation is torchtitan's; use none, "
         "selective or full with a Mamba hybrid", "training.activation_checkpointing"),
        (not tr.kernels.fused_norm_residual or tr.kernels.compile or not tr.kernels.flash_attention,
         "a Mamba hybrid runs Megatron-Core's fused kernels: set training.kernels.fused_norm_residual: true, "
         "flash_attention: true and compile: false", "training.kernels"),
    ]
    if m is not None:
        checks.append((m.n_heads % par.tp or m.n_groups % par.tp,
                       f"tp={par.tp} must divide model.mamba.n_heads ({m.n_heads}) and model.mamba.n_groups "
                       f"({m.n_groups}): Megatron-Core splits Mamba heads and groups over tensor-parallel ranks",
                       "parallel.tp"))
    for bad, message, field in checks:
        if bad:
            raise InputError(message, field)
