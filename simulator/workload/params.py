"""Exact parameter counts of a dense decoder-only transformer.

Counts follow the module structure of the reference implementations (Hugging Face ``LlamaForCausalLM``,
``GPT2LMHeadModel``, ``OPTForCausalLM``, ``BloomForCausalLM``, Megatron-LM ``GPTModel``):

* attention: ``W_q (h × a·d_h)``, ``W_k, W_v (h × g_kv·d_h)``, ``W_o (a·d_h × h)``
  (formulas.md §1.1; Kaplan et al. 2020 Table 1 for the MHA case ``4h²``);
* MLP: ``k_mlp · h · f`` weights with ``k_mlp = 2`` (GELU/ReLU) or ``3`` (SwiGLU gate, up, down;
  Shazeer 2020 "GLU Variants Improve Transformer");
* biases on every linear layer when ``linear_bias`` (GPT-2/3, OPT, BLOOM);
* norms: ``h`` weights each (RMSNorm, Zhang & Sennrich 2019), ``2h`` for LayerNorm with a bias.
  The schema has no separate norm-bias flag, so a LayerNorm has a bias iff ``linear_bias`` is set
  (true of GPT-2/3, OPT, BLOOM; OLMo 1 and others without biases use bias-free norms);
* two norms per block (pre-attention, pre-MLP; four with Gemma's sandwich norms), one final norm,
  optional QK-norm (OLMo 2: one norm over the full query width, one over the key width; Qwen3 and
  Gemma 3: one over ``d_h`` for q and one for k) and an embedding norm (BLOOM);
* token embedding ``V · h``, learned positions ``max_position_embeddings · h``, and an output
  projection ``h · V`` unless tied to the token embedding.

Check: Llama 3 8B gives exactly 8,030,261,248 (the published safetensors total).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.model import ModelConfig


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts (elements, not bytes) of one model.

    ``total = embedding + lm_head + n_layers · per_layer + final_norm + embedding_norm``;
    ``non_embedding = total − embedding − lm_head`` (Kaplan's N also excludes position embeddings,
    which ``embedding`` includes). ``largest_layer`` is the biggest single module that ZeRO-3 gathers
    at once (an ``nn.Linear`` or ``nn.Embedding``'s direct parameters, as DeepSpeed's
    ``estimate_zero3_model_states_mem_needs_all_live`` takes it).
    """

    total: int
    embedding: int
    lm_head: int
    non_embedding: int
    per_layer: int
    final_norm: int
    embedding_norm: int
    largest_layer: int
    #: Parameters one token uses (total minus the routed experts it skips; MoE only, else total).
    active: int = 0

    def __post_init__(self) -> None:
        if self.active == 0:
            object.__setattr__(self, "active", self.total)


@dataclass(frozen=True)
class LayerParams:
    """One transformer block's parameters split by how Megatron tensor parallelism stores them.

    ``sharded`` is divided over the TP group (column-parallel QKV and MLP-up weights and biases,
    row-parallel output weights); ``replicated`` stays whole on every TP rank (norms, and the biases of
    row-parallel layers, which Megatron's ``RowParallelLinear`` adds after the all-reduce).
    """

    attention: int
    mlp: int
    norms: int
    sharded: int
    replicated: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms


def norm_params(model: ModelConfig, width: int) -> int:
    """Parameters of one norm over ``width`` features: ``width`` (RMSNorm) or ``2·width`` (LayerNorm
    with bias, i.e. when the model has ``linear_bias``)."""
    has_bias = model.norm == "layernorm" and model.linear_bias
    return width * (2 if has_bias else 1)


def _block_norms(model: ModelConfig) -> list[int]:
    """Parameters of each norm of a block: the two (sandwich: four) hidden-width norms, then the QK-norms over
    the full query and key widths (OLMo 2) or one head's ``d_h`` for q and for k (Qwen3, Gemma 3:
    ``RMSNorm(head_dim)`` shared by the heads)."""
    qk = () if not model.qk_norm else (
        (model.d_head, model.d_head) if model.qk_norm_per_head else (model.q_dim, model.kv_dim))
    return [norm_params(model, w) for w in (model.hidden_size,) * model.block_norms + qk]


def block_vectors(model: ModelConfig) -> list[int]:
    """Sizes of a block's vector parameters (one tensor each): its two (sandwich: four) norms, the QK-norms, and with
    ``linear_bias`` the QKV, output, MLP-up and MLP-down biases (``qkv_bias``: the QKV bias; as in :func:`layer`). Small tensors
    DeepSpeed keeps persistent, and what FP8 parameter gathers leave in the parameter dtype."""
    out = _block_norms(model)
    if model.has_qkv_bias:
        out.append(model.q_dim + 2 * model.kv_dim)
    if model.linear_bias:
        out += [model.hidden_size, model.hidden_size, (model.mlp_matrices - 1) * model.ffn_hidden_size]
    return out


def layer(model: ModelConfig) -> LayerParams:
    """Parameters of one block: :func:`dense_layer`, or for a Mamba hybrid the average of its blocks
    (``simulator.workload.hybrid``; the Mamba mixers in ``attention``, the sequence mixer's slot)."""
    if model.is_hybrid:
        from simulator.workload import hybrid

        return hybrid.average_block(model)
    return dense_layer(model)


def dense_layer(model: ModelConfig) -> LayerParams:
    """Parameters of one transformer block, including its norms and biases.

    Attention ``h·(a·d_h) + 2·h·(g_kv·d_h) + (a·d_h)·h`` (+ biases ``a·d_h + 2·g_kv·d_h + h``; with
    ``qkv_bias`` alone ``a·d_h + 2·g_kv·d_h``);
    MLP ``k_mlp·h·f`` (+ biases ``(k_mlp − 1)·f + h``); norms ``2·norm(h)`` (``4·norm(h)`` with
    ``sandwich_norm``; + QK-norm ``norm(a·d_h) + norm(g_kv·d_h)``, or ``2·norm(d_h)`` per head).
    """
    h, f = model.hidden_size, model.ffn_hidden_size
    q, kv = model.q_dim, model.kv_dim
    bias = model.linear_bias
    attn_col = h * (q + 2 * kv) + (q + 2 * kv if model.has_qkv_bias else 0)
    attn_row_w, attn_row_b = q * h, (h if bias else 0)
    up = model.mlp_matrices - 1  # column-parallel up (and gate) projections
    mlp_col = up * h * f + (up * f if bias else 0)
    mlp_row_w, mlp_row_b = f * h, (h if bias else 0)
    norms = sum(_block_norms(model))
    return LayerParams(
        attention=attn_col + attn_row_w + attn_row_b,
        mlp=mlp_col + mlp_row_w + mlp_row_b,
        norms=norms,
        sharded=attn_col + attn_row_w + mlp_col + mlp_row_w,
        replicated=attn_row_b + mlp_row_b + norms,
    )


def _token_embedding(model: ModelConfig) -> int:
    return model.vocab_size * model.hidden_size


def _position_embedding(model: ModelConfig) -> int:
    if model.position_embedding != "learned":
        return 0  # RoPE and ALiBi have no parameters
    assert model.max_position_embeddings is not None  # enforced by ModelConfig
    return model.max_position_embeddings * model.hidden_size


def count(model: ModelConfig) -> ParamCounts:
    """Exact parameter counts of ``model`` (see the module docstring for the per-module formulas);
    mixture-of-experts and MLA models are counted by ``simulator.workload.moe``."""
    if model.moe is not None or model.is_mla:
        from simulator.workload import moe

        return moe.count(model)
    return dense_count(model)


def dense_count(model: ModelConfig) -> ParamCounts:
    """:func:`count` of a model whose blocks are all :func:`layer`."""
    per_layer = layer(model).total  # a hybrid's average block
    blocks = model.n_layers * per_layer
    if model.is_hybrid:  # its layers counted exactly, not the average times n_layers
        from simulator.workload import hybrid

        blocks = hybrid.blocks_total(model)
    embedding = _token_embedding(model) + _position_embedding(model)
    lm_head = 0 if model.tied_embeddings else model.hidden_size * model.vocab_size
    final_norm = norm_params(model, model.hidden_size)
    embedding_norm = norm_params(model, model.hidden_size) if model.embedding_norm else 0
    total = embedding + lm_head + blocks + final_norm + embedding_norm
    h, f = model.hidden_size, model.ffn_hidden_size
    largest_linear = max(h * model.q_dim, h * f, h * model.mamba.in_proj_dim if model.mamba else 0)
    largest = max(_token_embedding(model), largest_linear, _position_embedding(model))
    return ParamCounts(
        total=total,
        embedding=embedding,
        lm_head=lm_head,
        non_embedding=total - embedding - lm_head,
        per_layer=per_layer,
        final_norm=final_norm,
        embedding_norm=embedding_norm,
        largest_layer=largest,
    )


def layer_local(model: ModelConfig, tp: int = 1) -> int:
    """Parameters of one block held by one tensor-parallel rank: ``sharded/tp + replicated``
    (Megatron-LM ``ColumnParallelLinear``/``RowParallelLinear``; Shoeybi et al. 2019 Sec. 3). For an
    MoE / MLA model: the average block without its routed experts (those are sharded over EP and
    gathered apart, ``simulator.parallel.expert``)."""
    if model.moe is not None or model.is_mla:
        from simulator.workload import moe

        flags = [model.is_moe_block(i) for i in range(model.n_layers)]
        return int(sum(moe.block_local(model, f, tp).dense for f in flags) / model.n_layers)
    blk = layer(model)
    if model.is_hybrid:  # an average block (hybrid.average_block)
        return int(blk.sharded / tp + blk.replicated)
    return blk.sharded // tp + blk.replicated


def local(model: ModelConfig, tp: int = 1, pp: int = 1) -> int:
    """Parameters held by the most-loaded GPU of a ``tp × pp`` model-parallel group.

    Each pipeline stage holds ``⌈l/p⌉`` blocks; the first stage adds the token (vocab-parallel, ÷t)
    and learned position embeddings (replicated), the last adds the final norm and the output
    projection (÷t). With tied embeddings and ``p > 1`` the last stage keeps its own copy of the word
    embedding for the logits, as Megatron-LM does (``shared_embedding_or_output_weight``). This is
    Megatron's ``theoretical_memory_usage.py`` "most loaded shard" with the replicated pieces kept exact.
    """
    if model.moe is not None or model.is_mla:
        from simulator.workload import moe

        return int(moe.local(model, tp, pp).total)
    from simulator.workload import mtp

    per_stage = math.ceil(model.n_layers / pp)
    # the last stage's blocks plus the MTP modules (model.mtp_layers: a block and eh_proj each)
    last = model.n_layers - (pp - 1) * per_stage + model.mtp_layers
    blocks = max(per_stage, last) if pp > 1 else model.n_layers + model.mtp_layers
    own = mtp.params(model, tp) if blocks == last or pp == 1 else 0.0
    return int(blocks * layer_local(model, tp) + own) + outside_local(model, tp, pp)


def outside_local(model: ModelConfig, tp: int = 1, pp: int = 1) -> int:
    """The embedding / head share of :func:`local` (everything but the blocks)."""
    c = dense_count(model)
    blocks = 0
    word = _token_embedding(model) // tp
    first = word + _position_embedding(model) + c.embedding_norm
    head = c.lm_head // tp
    if pp == 1:
        return blocks + first + head + c.final_norm
    last_head = head if head else word  # tied: the last stage holds a copy of the word embedding
    return blocks + max(first, last_head + c.final_norm)


def stage_local(model: ModelConfig, tp: int, pp: int, stage: int, blocks: int) -> int:
    """Parameters one tensor-parallel rank of GPU pipeline stage ``stage`` holds with ``blocks``
    transformer blocks: the blocks, plus the embeddings on the first stage and the final norm and
    output projection on the last (with tied embeddings and ``p > 1`` the last stage keeps its own
    copy of the word embedding, Megatron ``shared_embedding_or_output_weight``); cf. :func:`local`."""
    c = count(model)
    total = blocks * layer_local(model, tp)
    word = _token_embedding(model) // tp
    if stage == 0:
        total += word + _position_embedding(model) + c.embedding_norm
    if stage == pp - 1:
        head = c.lm_head // tp
        total += (head if (head or pp == 1) else word) + c.final_norm
    return total
