"""Transformer architecture as a user or the model catalog writes it down."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from simulator.config.base import Frozen
from simulator.config.mamba import MambaConfig
from simulator.config.moe import MoEConfig

_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class ModelConfig(Frozen):
    """A dense decoder-only transformer.

    Attention is multi-head (``n_kv_heads == n_heads``), grouped-query or multi-query attention.
    ``mlp`` is ``gelu`` (2 matrices, GPT style; ``relu`` counts the same), or gated with 3 matrices:
    ``swiglu`` (LLaMA style, SiLU gate) or ``geglu`` (Gemma, tanh-approximated GELU gate: the same shapes
    and FLOPs; ``workload.ops`` prices Megatron-Core's unfused chain for it). ``ffn_hidden_size`` is the
    width of one branch (11008 for Llama 2 7B).
    """

    name: str = "custom"
    n_layers: PositiveInt
    hidden_size: PositiveInt
    n_heads: PositiveInt
    n_kv_heads: PositiveInt | None = Field(None, description="defaults to n_heads (MHA)")
    head_dim: PositiveInt | None = Field(None, description="defaults to hidden_size / n_heads")
    ffn_hidden_size: PositiveInt
    vocab_size: PositiveInt
    mlp: Literal["gelu", "relu", "swiglu", "geglu"] = "swiglu"
    #: Q, K and V as one ``nn.Linear`` (Megatron, GPT-2, GPT-NeoX, MPT, BLOOM) or three (Llama,
    #: Mistral, Qwen, OLMo). Changes no FLOP or byte count, only how many modules ZeRO-3 and FSDP
    #: per-parameter sharding fetch one by one. ``None``: fused for GELU/ReLU models, separate for
    #: gated-MLP (SwiGLU, GeGLU) models, which is how every catalogued family is written.
    fused_qkv: bool | None = None
    tied_embeddings: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    #: Biases on the attention and MLP linear layers (GPT-2/3, OPT, BLOOM, GPT-NeoX have them).
    linear_bias: bool = False
    #: Biases on the Q, K and V projections only (Qwen2 / Qwen2.5: ``Qwen2Attention`` builds ``q_proj``,
    #: ``k_proj`` and ``v_proj`` with ``bias=True``, ``o_proj`` and the MLP without; Megatron-LM
    #: ``--add-qkv-bias``). Implied by ``linear_bias``.
    qkv_bias: bool = False
    #: QK-norm (OLMo 2): a norm over the full query width and one over the key width.
    qk_norm: bool = False
    #: Learned absolute position embeddings (GPT-2/3, OPT) add max_position_embeddings x hidden params.
    position_embedding: Literal["rope", "learned", "alibi", "none"] = "rope"
    max_position_embeddings: PositiveInt | None = None
    #: Extra LayerNorm after the token embedding (BLOOM's word_embeddings_layernorm).
    embedding_norm: bool = False
    #: Sandwich norms (Gemma 2 / Gemma 3): besides the pre-attention and pre-MLP norms, a norm on the
    #: attention output and one on the MLP output before each residual add (``Gemma3DecoderLayer``'s
    #: ``post_attention_layernorm`` and ``post_feedforward_layernorm``): four norms a block.
    sandwich_norm: bool = False
    #: Dropout probability in training (hidden and attention). Dropout stores 1-byte masks
    #: (Korthikanti et al. 2022 Table 2 counts them); Llama/OLMo-style models train without it.
    dropout: float = Field(0.0, ge=0, lt=1)
    #: QK-norm over each head's ``d_h`` features, shared by the heads (Qwen3: ``RMSNorm(head_dim)``)
    #: instead of over the full query / key width (OLMo 2, OLMoE).
    qk_norm_per_head: bool = False
    #: Attention kind: ``mha`` / ``gqa`` (derived from n_kv_heads when omitted) or ``mla``
    #: (DeepSeek-V2/V3 multi-head latent attention, ``simulator.workload.mla``).
    attention: Literal["mha", "gqa", "mla"] | None = None
    #: MLA (DeepSeek-V2 §2.1, V3 config.json): query compression rank (null = no query
    #: compression), KV compression rank, per-head non-RoPE and RoPE query/key widths, value width.
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    #: Sliding-window (local) attention: a query attends to itself and the ``sliding_window − 1`` tokens
    #: before it (Hugging Face ``sliding_window``: GPT-OSS 128, Mistral 7B v0.1 4,096, Gemma 2 4,096;
    #: Megatron-Core ``window_size = (sliding_window − 1, 0)``). null = every block attends the whole
    #: causal context. Fused kernels skip the masked blocks, so a window shortens the attention core
    #: (``simulator.workload.flops.attention_span``); unfused attention computes the whole score matrix.
    sliding_window: PositiveInt | None = None
    #: With ``sliding_window``: every ``full_attention_interval``-th block (the k-th, 2k-th, ...) attends
    #: the whole causal context and the others the window (GPT-OSS and Gemma 2: 2, alternating from a
    #: windowed first block; Gemma 3: 6; Megatron-Core ``window_attn_skip_freq``). null = every block
    #: windowed (Mistral 7B v0.1).
    full_attention_interval: PositiveInt | None = None
    #: Clamped SwiGLU (Hugging Face ``swiglu_limit``: GPT-OSS 7.0): the gate is clamped to at most the
    #: limit and the linear half to ±limit before the gated product (OpenAI gpt-oss model card §2.1;
    #: Megatron-Core ``activation_func_clamp_value``). Megatron-Core clamps in eager PyTorch before its
    #: fused activation (``fused_bias_geglu.py``: ``chunk``, two ``clamp``, ``cat``): extra memory passes
    #: over the experts' fc1 output (``simulator.workload.moe_ops``). null = no clamp.
    swiglu_limit: PositiveFloat | None = None
    #: RoPE frequency scaling (Hugging Face ``rope_scaling.rope_type``): ``yarn`` (GPT-OSS). Megatron-Core
    #: applies a YaRN embedding in eager PyTorch, not in its fused RoPE kernel (``simulator.workload.ops``:
    #: ``MEGATRON_ROPE_*``). null = plain RoPE (or none).
    rope_scaling: Literal["yarn"] | None = None
    #: Mixture-of-experts MLPs (``simulator.config.moe``); null = dense.
    moe: MoEConfig | None = None
    #: Multi-token prediction modules trained with the model (DeepSeek-V3 §2.2; Megatron-Core
    #: ``mtp_num_layers``, Megatron-Bridge's DeepSeek-V3 recipe sets 1): each runs one more transformer
    #: block of the last block's kind after the last block, on the last pipeline stage (or where a
    #: ``pipeline_layout`` puts its ``m``), fed by the projection of two norms, then the shared output
    #: head and loss again (``simulator.workload.mtp``). A hybrid's MTP block is its average MoE block (the
    #: blocks with an ``E`` layer): Nemotron 3 Super's ``mtp_hybrid_override_pattern`` ``*E`` is an attention
    #: and an MoE layer, priced with the MoE blocks' average mixer (mostly Mamba). 0 = none.
    mtp_layers: NonNegativeInt = 0
    #: A hybrid model's layers in order, Megatron-Core's ``hybrid_override_pattern`` (Hugging Face
    #: ``nemotron_h``): ``M`` a Mamba-2 layer (``model.mamba``), ``*`` an attention layer, ``-`` an MLP layer,
    #: ``E`` an MoE layer (``model.moe``, Nemotron 3), each with its own pre-norm and residual add (Nemotron-H
    #: 56B: 54 ``M``, 10 ``*``, 54 ``-``). A block of dtsim is two consecutive layers of the pattern, so
    #: ``n_layers`` is half its length (filled in when omitted); a block holding an ``E`` is an MoE block
    #: (``is_moe_block``); the workload counts each layer kind exactly (``simulator.workload.hybrid``). null =
    #: every block is attention followed by an MLP.
    hybrid_pattern: str | None = None
    #: The Mamba-2 mixers of ``hybrid_pattern``'s ``M`` layers (``simulator.config.mamba``).
    mamba: MambaConfig | None = None
    #: Published total and active parameter counts (display only).
    reported_active_params: float | None = None
    #: Published parameter count, when the source gives one (used only in reports, never as a result).
    reported_params: float | None = None
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _hybrid_blocks(cls, data: object) -> object:
        """A hybrid model's ``n_layers`` defaults to half its pattern (two layers a block)."""
        if isinstance(data, dict) and isinstance(data.get("hybrid_pattern"), str) and data.get("n_layers") is None:
            data = {**data, "n_layers": max(1, len(data["hybrid_pattern"]) // 2)}
        return data

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        kv = self.kv_heads
        if self.n_heads % kv:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({kv})")
        if self.head_dim is None and self.hidden_size % self.n_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by n_heads ({self.n_heads}); set head_dim"
            )
        self._check_attention()
        if self.swiglu_limit is not None and (self.mlp != "swiglu" or self.moe is None):
            raise ValueError("model.swiglu_limit clamps the experts' SwiGLU (GPT-OSS): it needs model.mlp: swiglu "
                             "and model.moe; remove it")
        if self.sandwich_norm and (self.moe is not None or self.is_mla):
            raise ValueError("model.sandwich_norm (Gemma's four norms a block) is modelled for dense blocks only; "
                             "remove it or model.moe / attention: mla")
        if self.qk_norm_per_head and not self.qk_norm:
            raise ValueError("model.qk_norm_per_head needs model.qk_norm: true")
        if self.position_embedding == "learned" and self.max_position_embeddings is None:
            raise ValueError("position_embedding 'learned' needs max_position_embeddings")
        if self.full_attention_interval is not None and self.sliding_window is None:
            raise ValueError("model.full_attention_interval counts blocks between full-attention blocks of a "
                             "sliding-window model: set model.sliding_window or remove it")
        self._check_hybrid()
        return self

    def _check_hybrid(self) -> None:
        pattern = self.hybrid_pattern
        if pattern is None:
            if self.mamba is not None:
                raise ValueError("model.mamba describes the Mamba layers of a hybrid model: set model.hybrid_pattern "
                                 "(e.g. 'M-M*-') or remove model.mamba")
            return
        odd = sorted(set(pattern) - set("M*-E"))
        if odd:
            raise ValueError(f"model.hybrid_pattern: unknown layer kind(s) {', '.join(map(repr, odd))}; use M "
                             "(Mamba-2), * (attention), - (MLP) and E (MoE), as Megatron-Core's hybrid_override_pattern")
        if not pattern or len(pattern) % 2:
            raise ValueError(f"model.hybrid_pattern has {len(pattern)} layers: dtsim's block is two consecutive "
                             "layers of the pattern, so the pattern needs an even, non-zero length")
        if self.n_layers != len(pattern) // 2:
            raise ValueError(f"model.n_layers ({self.n_layers}) counts blocks of two layers of model.hybrid_pattern: "
                             f"set it to {len(pattern) // 2} ({len(pattern)} layers) or omit it")
        if "M" in pattern and self.mamba is None:
            raise ValueError("model.hybrid_pattern has Mamba layers (M): set model.mamba (at least n_heads)")
        if ("E" in pattern) != (self.moe is not None):
            raise ValueError("model.hybrid_pattern's MoE layers (E) take their experts from model.moe: set both or "
                             "neither")
        pairs = [pattern[i:i + 2] for i in range(0, len(pattern), 2)]
        if any("E" in p and sorted(p) not in (["E", "M"], ["*", "E"]) for p in pairs):
            raise ValueError("model.hybrid_pattern: an MoE layer (E) is modelled beside one Mamba (M) or attention "
                             "(*) layer in its block of two (Nemotron 3 alternates them); pairs such as EE or E- "
                             "are not simulated")
        if self.moe is not None and {"first_dense_layers", "layer_interval"} & self.moe.model_fields_set:
            raise ValueError("model.moe.first_dense_layers / layer_interval: a hybrid's MoE layers are where "
                             "model.hybrid_pattern puts its E layers; remove them")
        if self.is_mla or self.sandwich_norm or self.sliding_window:
            raise ValueError("model.hybrid_pattern (a Mamba hybrid) is modelled with GQA attention, MLP and MoE "
                             "layers only: remove attention: mla, sandwich_norm and sliding_window")

    @property
    def is_hybrid(self) -> bool:
        """Whether the model is a hybrid of Mamba, attention and MLP layers (``hybrid_pattern``)."""
        return self.hybrid_pattern is not None

    @property
    def hybrid_counts(self) -> tuple[int, int, int]:
        """Layers of each kind of ``hybrid_pattern``: (Mamba, attention, MLP); for a plain model every block
        is one attention and one MLP layer."""
        p = self.hybrid_pattern
        if p is None:
            return 0, self.n_layers, self.n_layers
        return p.count("M"), p.count("*"), p.count("-")

    def hybrid_class_counts(self, moe: bool | None = None) -> tuple[int, dict[str, int]]:
        """(blocks, layers of each kind ``M``, ``*``, ``-``, ``E`` in them) of a hybrid's blocks with an MoE layer
        (``moe`` True), without one (False) or all of them (None). A block is two consecutive layers of
        ``hybrid_pattern``."""
        p = self.hybrid_pattern
        assert p is not None  # a hybrid's (is_hybrid)
        pairs = [p[i:i + 2] for i in range(0, len(p), 2)]
        picked = [q for q in pairs if moe is None or ("E" in q) == moe]
        return len(picked), {k: sum(q.count(k) for q in picked) for k in "M*-E"}

    def is_moe_block(self, i: int) -> bool:
        """Whether block ``i`` (0-based) has routed experts: a hybrid's blocks holding an ``E`` layer of
        ``hybrid_pattern``, otherwise ``model.moe``'s placement (``MoEConfig.is_moe_layer``)."""
        if self.moe is None:
            return False
        if self.hybrid_pattern is not None:
            return "E" in self.hybrid_pattern[2 * i:2 * i + 2]
        return self.moe.is_moe_layer(i)

    @property
    def n_moe_blocks(self) -> int:
        """Blocks with routed experts (:meth:`is_moe_block`)."""
        return sum(1 for i in range(self.n_layers) if self.is_moe_block(i))

    @property
    def windowed_layers(self) -> int:
        """Blocks that attend a sliding window (``sliding_window``): all of them, or all but every
        ``full_attention_interval``-th; 0 without a window."""
        if self.sliding_window is None:
            return 0
        k = self.full_attention_interval
        return self.n_layers if k is None else self.n_layers - self.n_layers // k

    def _check_attention(self) -> None:
        kind = self.attention
        if kind == "mha" and self.kv_heads != self.n_heads:
            raise ValueError(f"model.attention is 'mha' but n_kv_heads ({self.kv_heads}) != n_heads ({self.n_heads}); "
                             "use attention: gqa")
        if kind == "gqa" and self.n_kv_heads is None:
            raise ValueError("model.attention 'gqa' needs model.n_kv_heads")
        given = [k for k in _MLA_KEYS if getattr(self, k) is not None]
        if kind != "mla" and given:
            raise ValueError(f"model.{given[0]} is an MLA key; set model.attention: mla or remove it")
        if kind == "mla":
            missing = [k for k in _MLA_KEYS[1:] if getattr(self, k) is None]
            if missing:
                raise ValueError(f"model.attention 'mla' needs model.{missing[0]} (and {', '.join(_MLA_KEYS[1:])})")
            if self.n_kv_heads not in (None, self.n_heads):
                raise ValueError("model.n_kv_heads must equal n_heads (or be omitted) with attention 'mla'")

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden_size // self.n_heads

    @property
    def has_qkv_bias(self) -> bool:
        """Whether the QKV projection carries a bias (``linear_bias`` or ``qkv_bias``)."""
        return self.linear_bias or self.qkv_bias

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads, a·d_h (equals hidden_size unless head_dim is set)."""
        return self.n_heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads, g_kv·d_h."""
        return self.kv_heads * self.d_head

    @property
    def qkv_fused(self) -> bool:
        """``fused_qkv``, or its family default (see the field)."""
        return not self.gated_mlp if self.fused_qkv is None else self.fused_qkv

    @property
    def linear_modules(self) -> tuple[str, ...]:
        """The ``nn.Linear`` modules of one block in forward order (e.g. HF Llama: q, k, v, o, gate,
        up, down; Megatron GPT: qkv, proj, fc1, fc2)."""
        attn = ("qkv",) if self.qkv_fused else ("q", "k", "v")
        mlp = ("gate", "up", "down") if self.gated_mlp else ("fc1", "fc2")
        return (*attn, "o", *mlp)

    @property
    def gated_mlp(self) -> bool:
        """Whether the MLP is gated (SwiGLU, GeGLU: gate, up and down projections)."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def mlp_matrices(self) -> int:
        """2 for a GELU/ReLU MLP, 3 for a gated one (gate, up, down)."""
        return 3 if self.gated_mlp else 2

    @property
    def block_norms(self) -> int:
        """Hidden-width norms of one block: 2 (pre-attention, pre-MLP), 4 with ``sandwich_norm``."""
        return 4 if self.sandwich_norm else 2
