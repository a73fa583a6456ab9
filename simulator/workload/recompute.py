"""Which transformer blocks run full recomputation (``training.recompute_layers``), and how much of
each (``training.kernels.checkpoint_early_stop``, :func:`early_stop`).

Full activation checkpointing need not cover every block. Frameworks checkpoint a number of blocks
and let the others keep their activations, trading memory for compute block by block:

* Megatron-LM ``--recompute-granularity full --recompute-method block --recompute-num-layers N``:
  the first ``N`` blocks of each pipeline model chunk recompute (``TransformerBlock._checkpointed_forward``;
  ``uniform`` recomputes every block, in groups of ``N``);
* torchtitan's per-layer selective checkpointing (``activation_checkpoint.mode = "selective"``,
  ``selective_ac_option = "k"``): every ``k``-th block of a rank is wrapped in a full checkpoint
  (``_apply_ac_to_transformer_block``), ``⌊L/k⌋`` of ``L`` blocks;
* IBM's fms-fsdp ``selective_checkpointing``: a share of the blocks, full checkpoint each.

Each model chunk of ``L_c`` blocks recomputes ``n_c = min(N, L_c)`` of them (``N`` =
``recompute_layers``; every block when it is unset). A recomputed block costs one more forward before
its backward and keeps only its input (``p·s·b·h``); the others keep what a block without
recomputation keeps. So the recompute FLOPs are ``Σ n_c / L`` of full recomputation's
(``flops.step``), and a stage's activations ``n·A_full + (L_s − n)·A_none`` per micro-batch in flight
(``activations.stage_activations``). Which blocks of a chunk recompute does not change either, nor the
step time: the engine recomputes the first ``n_c`` of each chunk, as Megatron's ``block`` method does.
"""

from __future__ import annotations

from typing import Any

FIELD = "training.recompute_layers"
MODULES_FIELD = "training.recompute_modules"
#: Megatron-Core's selective recomputation when ``--recompute-modules`` is not given.
DEFAULT_MODULES = ("core_attn",)


def modules(training: Any) -> frozenset[str]:
    """Modules selective recomputation re-runs (``training.recompute_modules``, default ``core_attn``);
    empty without selective recomputation.

    Megatron-Core (``TransformerConfig.recompute_modules``, ``transformer_layer.py``, ``moe/experts.py``):
    ``core_attn`` checkpoints the attention core; ``layernorm`` the norms built as modules of their own,
    which with Transformer Engine is an MoE block's ``pre_mlp_layernorm`` (``TENorm``; the input norm and a
    dense MLP's norm are fused into ``TELayerNormColumnParallelLinear``, nothing separate to drop);
    ``moe_act`` the experts' activation (``CheckpointWithoutOutput`` around ``activation_func``);
    ``mla_up_proj`` the MLA up projections and their rotary embedding (Q, K and V rebuilt from the stored
    compressed latents: ``MLASelfAttention`` ``recompute_up_proj``); ``mlp``
    a dense block's MLP (``TransformerLayer``: ``tensor_parallel.checkpoint(self.mlp, ...)`` when
    ``recompute_mlp``), Transformer Engine's ``linear_fc1`` with its fused pre-MLP norm, the activation
    and ``linear_fc2``, their tensor-parallel collectives included (an MoE block's experts are the
    ``moe`` module). ``moe`` an MoE block's whole MoE layer (``MoELayer.forward`` under
    ``tensor_parallel.checkpoint``: router and preprocessing, dispatch, experts, shared experts, combine),
    ``shared_experts`` its shared experts (``SharedExpertMLP``, its tensor-parallel collectives included).
    A module checkpointed this way stores no output: its output is
    rebuilt from its stored input just before the backward needs it, one more forward of that module
    per micro-batch."""
    if training.activation_checkpointing != "selective":
        return frozenset()
    given = training.recompute_modules
    return frozenset(DEFAULT_MODULES if given is None else given)


def mlp(training: Any) -> bool:
    """Whether selective recomputation re-runs the dense blocks' MLP (``mlp`` among the modules)."""
    return "mlp" in modules(training)


def attention_mode(training: Any, framework: str = "ddp") -> str:
    """The recomputation mode of a block's dense part: ``activation_checkpointing``, except that
    selective recomputation without ``core_attn`` among its modules keeps the attention core like no
    recomputation (what the FLOP counts, the dense activations and the dense ops read), and so does it
    with FlashAttention outside Megatron (``framework`` other than ``ddp``): Megatron-Core checkpoints
    whatever core attention runs (``Attention._checkpointed_attention_forward``), legacy Megatron-LM and
    Megatron-DeepSpeed skip the checkpoint with flash (``ParallelAttention``: ``if not
    self.use_flash_attn: if self.checkpoint_core_attention``), and torchtitan has no such policy."""
    mode = training.activation_checkpointing
    if mode == "selective" and "core_attn" not in modules(training):
        return "none"
    if mode == "selective" and framework != "ddp" and training.kernels.flash_attention:
        return "none"
    return mode


def chunk_layers(scenario: Any) -> list[int]:
    """Blocks of each pipeline model chunk (virtual stage; one chunk per stage without interleaving)."""
    from simulator.parallel import pipeline_split

    par = scenario.parallel
    v = par.virtual_stages if par.pp > 1 and par.pipeline_schedule == "interleaved" else 1
    return pipeline_split.virtual_stage_layers(scenario.model.n_layers, par.pp, v, par, scenario.model.mtp_layers)


def per_chunk(training: Any) -> int | None:
    """Blocks each model chunk recomputes under full checkpointing (``None``: all of them); 0 without
    full checkpointing."""
    if training.activation_checkpointing != "full":
        return 0
    return training.recompute_layers


def chunk_counts(scenario: Any) -> list[int]:
    """Recomputed blocks of each model chunk, ``min(N, L_c)``."""
    n = per_chunk(scenario.training)
    return [layers if n is None else min(n, layers) for layers in chunk_layers(scenario)]


def fraction(scenario: Any) -> float:
    """Share of all blocks that recompute: 1 under full checkpointing of every block, 0 without it."""
    return sum(chunk_counts(scenario)) / scenario.model.n_layers


def stage_counts(scenario: Any) -> list[int]:
    """Recomputed blocks of each GPU pipeline stage (its chunks summed)."""
    counts, pp = chunk_counts(scenario), scenario.parallel.pp
    return [sum(counts[c * pp + s] for c in range(len(counts) // pp)) for s in range(pp)]


def early_stop(scenario: Any) -> bool:
    """Whether full recomputation stops before the block's last GEMM (``training.kernels.
    checkpoint_early_stop``; default on with framework fsdp). PyTorch's non-reentrant checkpoint
    (``torch.utils.checkpoint``: "by default, non-reentrant checkpoint stops recomputation as soon as it
    has computed all needed Tensors", ``set_checkpoint_early_stop``) counts the tensors the original
    forward saved and stops the recompute when the last of them is packed again. In a transformer block
    that is the down projection's input, packed when that GEMM records its autograd node, before it
    runs: the down projection (``2·b·s·f·h`` FLOPs, 27% of a Llama 3 8B block's GEMM
    FLOPs, a third of a GELU-4h block's) and the residual add after it are not re-run. Megatron's and
    DeepSpeed's reentrant checkpoints re-run the whole block. Modelled for dense blocks without tensor
    or context parallelism (their collectives inside the block are re-run in full)."""
    tr, par, m = scenario.training, scenario.parallel, scenario.model
    if tr.activation_checkpointing != "full" or par.tp > 1 or par.cp > 1 or m.moe is not None or m.is_mla:
        return False
    on = tr.kernels.checkpoint_early_stop
    return par.framework == "fsdp" if on is None else on


def skipped_flops_per_block(scenario: Any) -> float:
    """Forward FLOPs early stop leaves out of one block's recompute: its down projection,
    ``2·b·s·f·h`` (``early_stop``); 0 without early stop."""
    if not early_stop(scenario):
        return 0.0
    tr, m = scenario.training, scenario.model
    return 2.0 * tr.micro_batch_size * tr.seq_len * m.ffn_hidden_size * m.hidden_size


def mlp_blocks(scenario: Any) -> int:
    """Blocks whose dense MLP the ``mlp`` module recomputes: every block of a dense model, the dense
    blocks of an MoE model; 0 without the module."""
    m = scenario.model
    if not mlp(scenario.training):
        return 0
    return m.n_layers - m.n_moe_blocks


def moe_blocks(scenario: Any, module: str) -> int:
    """MoE blocks whose MoE layer (``module`` ``moe``) or shared experts (``shared_experts``) selective
    recomputation re-runs: every MoE block with the module, the MTP modules' blocks included when the last
    block is an MoE block (an MTP block is of the last block's kind: ``flops.step``), 0 without it."""
    m = scenario.model
    if m.moe is None or module not in modules(scenario.training):
        return 0
    return m.n_moe_blocks + (m.mtp_layers if m.is_moe_block(m.n_layers - 1) else 0)


def mla_up_blocks(scenario: Any) -> int:
    """Blocks whose MLA up projections the ``mla_up_proj`` module re-runs: every block of an MLA model, the MTP
    modules' blocks included (MLA attention too), 0 without the module."""
    m = scenario.model
    if not m.is_mla or "mla_up_proj" not in modules(scenario.training):
        return 0
    return m.n_layers + m.mtp_layers


def step_terms(scenario: Any) -> dict[str, float]:
    """``flops.step``'s recompute arguments for the scenario: the share of blocks that recompute under
    full checkpointing (:func:`fraction`), the FLOPs early stop leaves out of each
    (:func:`skipped_flops_per_block`), the blocks whose MLP the ``mlp`` module re-runs
    (:func:`mlp_blocks`), the MoE blocks whose MoE layer or shared experts the ``moe`` and
    ``shared_experts`` modules re-run (:func:`moe_blocks`) and the MLA blocks whose up projections the
    ``mla_up_proj`` module re-runs (:func:`mla_up_blocks`)."""
    return {"recompute_fraction": fraction(scenario), "recompute_skipped": skipped_flops_per_block(scenario),
            "mlp_recompute_blocks": mlp_blocks(scenario), "moe_recompute_blocks": moe_blocks(scenario, "moe"),
            "shared_recompute_blocks": moe_blocks(scenario, "shared_experts"),
            "mla_up_recompute_blocks": mla_up_blocks(scenario)}


def check(scenario: Any) -> str | None:
    """Why ``training.recompute_layers`` or ``training.recompute_modules`` cannot apply, or None."""
    tr, m = scenario.training, scenario.model
    if tr.recompute_modules is not None and tr.activation_checkpointing != "selective":
        return (f"{MODULES_FIELD} lists what selective recomputation re-runs: it needs "
                f"training.activation_checkpointing: selective (got {tr.activation_checkpointing!r}); set it or "
                f"remove {MODULES_FIELD}")
    if tr.recompute_modules is not None and scenario.parallel.framework != "ddp":
        return (f"{MODULES_FIELD} is Megatron-Core's --recompute-modules (framework ddp); got framework "
                f"{scenario.parallel.framework!r}: remove it")
    if tr.recompute_layers is None:
        return None
    if tr.activation_checkpointing != "full":
        return (f"{FIELD} ({tr.recompute_layers}) counts fully recomputed blocks: it needs "
                f"training.activation_checkpointing: full (got {tr.activation_checkpointing!r}); set it or remove {FIELD}")
    if m.moe is not None or m.is_mla:
        return f"{FIELD} is modelled for dense blocks only; remove it (every block recomputes) for an MoE or MLA model"
    most = max(chunk_layers(scenario))
    if tr.recompute_layers > most:
        return (f"{FIELD} ({tr.recompute_layers}) exceeds the {most} blocks of a pipeline model chunk; give at "
                f"most {most}, or remove it to recompute every block")
    return None
