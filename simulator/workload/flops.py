"""Matrix-multiply FLOPs of a transformer: per block, logits, and a whole training step.

A multiply-add counts as 2 FLOPs. Only matrix products are counted, as Megatron-LM does
(``megatron/training/training.py::num_floating_point_operations``) and as the closed forms below
assume: norms, softmax (≈ ``3·b·a·s²``, Chinchilla App. F), activations, biases and the embedding
gather are memory-bound and left to ``simulator.workload.ops``.

Attention convention (formulas.md §1.1): ``causal=False`` counts the whole ``s × s`` score matrix
(Megatron-LM SC'21 Eq. 3, PaLM App. B, Chinchilla App. F); ``causal=True`` counts the unmasked half
(current Megatron-LM code, FlashAttention benchmarks). Only the attention core (QKᵀ and ·V) changes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, NamedTuple  # noqa: F401

from simulator.config.model import ModelConfig
from simulator.config.scenario import Recompute, Scenario, TrainingConfig  # noqa: F401  (Recompute re-exported)
from simulator.workload import lora, mla, op_sac
from simulator.workload import recompute as recompute_mod


@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs of one transformer block for ``b`` sequences of length ``s``.

    q ``2·b·s·h·(a·d_h)``; kv ``2·2·b·s·h·(g_kv·d_h)``; scores (QKᵀ) ``2·b·s²·(a·d_h)·c``;
    attn_v ``2·b·s²·(a·d_h)·c`` with ``c = 1/2`` causal else 1; out_proj ``2·b·s·(a·d_h)·h``;
    mlp ``k_mlp·2·b·s·h·f`` (``k_mlp`` 2 GELU, 3 SwiGLU). Source: formulas.md §1.1/§1.4;
    MHA + GELU-4h non-causal sums to ``24bsh² + 4bs²h`` (Narayanan et al. SC'21 Sec. 5.1).
    """

    q: float = 0.0
    kv: float = 0.0
    scores: float = 0.0
    attn_v: float = 0.0
    out_proj: float = 0.0
    mlp: float = 0.0
    #: A Mamba-2 layer's input and output projections (weight GEMMs) and its SSD scan's matrix products
    #: (data-dependent, like the attention core): ``simulator.workload.hybrid``; 0 in a transformer block.
    ssm: float = 0.0
    scan: float = 0.0

    @property
    def attention_core(self) -> float:
        """QKᵀ plus softmax·V: the part selective recomputation repeats and causal masking halves."""
        return self.scores + self.attn_v

    @property
    def dense(self) -> float:
        """FLOPs of the weight GEMMs (projections and MLP), ``2·b·s·(block weights)``."""
        return self.q + self.kv + self.out_proj + self.mlp + self.ssm

    @property
    def unwindowed(self) -> float:
        """What a sliding window or document packing does not shorten: the weight GEMMs and the SSD scan."""
        return self.dense + self.scan

    @property
    def total(self) -> float:
        return self.unwindowed + self.attention_core


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one training step over ``tokens = b·s·n_micro`` tokens (all micro-batches, all layers).

    ``model_flops`` = 3 × forward (forward + 2× backward: dgrad and wgrad; Kaplan et al. 2020 Sec. 2.1,
    Megatron's ×3 in ``num_floating_point_operations``) with no recomputation: the numerator of MFU
    (PaLM App. B). ``hardware_flops`` adds what recomputation re-executes: one more forward of every
    block with ``full``, the attention core with ``selective`` (Korthikanti et al. 2022 Sec. 5); the
    logits layer is never recomputed. The numerator of HFU.
    """

    tokens: int
    causal: bool
    recompute: Recompute
    forward_flops: float
    model_flops: float
    hardware_flops: float

    @property
    def train_flops_per_token(self) -> float:
        """Model (MFU) training FLOPs per token; ≈ ``6N`` plus the attention term."""
        return self.model_flops / self.tokens

    @property
    def hardware_flops_per_token(self) -> float:
        return self.hardware_flops / self.tokens

    @property
    def forward_flops_per_token(self) -> float:
        return self.forward_flops / self.tokens


def layer_forward(model: ModelConfig, b: int, s: int, causal: bool) -> LayerFlops:
    """Forward FLOPs of one block; formulas in :class:`LayerFlops`. For an MoE or MLA model, the
    average block (``simulator.workload.moe`` counts dense and MoE blocks apart); for a Mamba hybrid, the
    pattern's layers over its blocks (``simulator.workload.hybrid``)."""
    if model.moe is not None or model.is_mla or model.is_hybrid:
        return average(_groups(model, b, s, causal), model.n_layers)
    return dense_layer_forward(model, b, s, causal)


def average(groups: list, n: int) -> LayerFlops:
    """``[(count, LayerFlops)]`` summed field by field over ``n`` blocks: the average block."""
    return LayerFlops(**{f.name: sum(c * getattr(lay, f.name) for c, lay in groups) / n for f in fields(LayerFlops)})


def _groups(model: ModelConfig, b: int, s: int, causal: bool) -> list:
    if model.moe is not None or model.is_mla:
        from simulator.workload import moe

        return moe.layer_groups(model, b, s, causal)
    if model.is_hybrid:
        from simulator.workload import hybrid

        return hybrid.layer_groups(model, b, s, causal)
    return [(model.n_layers, dense_layer_forward(model, b, s, causal))]


def dense_layer_forward(model: ModelConfig, b: int, s: int, causal: bool) -> LayerFlops:
    """Forward FLOPs of one dense block; formulas in :class:`LayerFlops`."""
    h, f = model.hidden_size, model.ffn_hidden_size
    tokens = b * s
    core = 2.0 * b * s * s * model.q_dim * (0.5 if causal else 1.0)
    return LayerFlops(
        q=2.0 * tokens * h * model.q_dim,
        kv=2.0 * 2 * tokens * h * model.kv_dim,
        scores=core,
        attn_v=core,
        out_proj=2.0 * tokens * model.q_dim * h,
        mlp=2.0 * model.mlp_matrices * tokens * h * f,
    )


def logits_forward(model: ModelConfig, b: int, s: int) -> float:
    """Output-projection FLOPs ``2·b·s·h·V`` (once per model, not per layer; formulas.md §1.1)."""
    return 2.0 * b * s * model.hidden_size * model.vocab_size


def window_share(length: int, window: int | None) -> float:
    """Score pairs of causal attention over one ``L``-token sequence under a sliding window of ``w``
    keys, as a share of the whole causal ``L²/2``: query ``i`` sees ``min(i, w)`` keys (counted
    continuously, as ``L²/2`` is), ``w·L − w²/2`` pairs for ``w < L``, a share ``2w/L − (w/L)²``; 1
    without a window or with ``w ≥ L``."""
    if window is None or window >= length:
        return 1.0
    x = window / length
    return 2.0 * x - x * x


class AttentionSpan(NamedTuple):
    """What a fused attention kernel computes of a block's attention core, averaged over the blocks
    (:func:`attention_span`): shares of the full causal work of ``s``-token sequences."""

    #: Share in blocks that attend to the whole (document) prefix.
    full: float
    #: Share in sliding-window blocks.
    windowed: float
    #: The full blocks' key length: the document length ``d`` (``s`` without packing).
    keys: int
    #: The windowed blocks' window ``w`` (0: none).
    window: int

    @property
    def fraction(self) -> float:
        """The whole share, ``full + windowed``: what the step's attention FLOPs keep."""
        return self.full + self.windowed


def attention_span(model: ModelConfig, seq_len: int, document_tokens: int | None = None,
                   fused: bool = True) -> AttentionSpan:
    """What a fused attention kernel computes of the attention core, averaged over the blocks.

    Packed documents (``document_tokens = d``, ``training.document_tokens``) leave ``d/s`` of the full
    causal work of ``s``-token sequences (``s/d`` documents of ``d²`` pairs, per-document masking);
    sliding-window blocks (``model.windowed_layers = l_win`` of the ``l`` blocks) keep the
    :func:`window_share` ``r_w`` of each document. So ``full = (d/s)·(l − l_win)/l`` and ``windowed =
    (d/s)·l_win·r_w/l``: their sum makes the step's attention FLOPs exact whichever blocks are
    windowed. The two parts run different loops (every key of the document against a band of ``w``),
    which the compute model prices apart (``simulator.hardware.attention.band_half``). Unfused
    attention (``fused`` false, ``training.kernels.flash_attention: false``) computes the whole
    ``s × s`` matrix and masks it: ``(1, 0, s, 0)``.
    """
    s = seq_len
    if not fused:
        return AttentionSpan(1.0, 0.0, s, 0)
    d = document_tokens or s
    n, n_win, w = model.n_layers, model.windowed_layers, model.sliding_window
    r_w = window_share(d, w)
    if not n_win or r_w >= 1.0:
        return AttentionSpan(d / s, 0.0, d, 0)
    return AttentionSpan(d / s * (n - n_win) / n, d / s * n_win * r_w / n, d, int(w))


def step(
    model: ModelConfig,
    b: int,
    s: int,
    n_micro: int = 1,
    causal: bool = False,
    recompute: Recompute = "none",
    attention_fraction: float = 1.0,
    recompute_fraction: float = 1.0,
    recompute_skipped: float = 0.0,
    mlp_recompute_blocks: int = 0,
    moe_recompute_blocks: int = 0,
    shared_recompute_blocks: int = 0,
    mla_up_recompute_blocks: int = 0,
    lora_forward: float | None = None,
) -> StepFlops:
    """FLOPs of one optimizer step of ``n_micro`` micro-batches of ``b`` sequences of length ``s``.

    Per micro-batch: ``F = l·F_layer + F_logits``; ``model = 3F``;
    ``hardware = 3F + l·F_layer`` (full) or ``3F + l·F_core`` (selective) or ``3F`` (none);
    ``selective_op`` adds the forward FLOPs of the GEMMs torchtitan's op-level policy re-runs
    (``op_sac.recomputed_gemm_flops``: Llama's k, o and up projections). Full recomputation of only
    some blocks (``training.recompute_layers``) adds ``recompute_fraction`` of full recomputation's
    ``l·F_layer`` (``recompute.fraction``: the share of blocks that recompute); early stop leaves
    ``recompute_skipped`` FLOPs of each recomputed block out (``recompute.skipped_flops_per_block``).
    Megatron-Core's ``mlp`` recompute module adds the MLP forward ``k_mlp·2·b·s·h·f`` of each of its
    ``mlp_recompute_blocks`` dense blocks (``recompute.step_terms``), its ``moe`` module the MoE layer's
    (router, routed and shared experts: ``moe.layer_forward``) of each of ``moe_recompute_blocks``, its
    ``shared_experts`` module the shared experts' ``k_mlp·2·b·s·h·f_s·n_s`` of each of
    ``shared_recompute_blocks``, its ``mla_up_proj`` module MLA's up projections (``mla.up_forward``) of each
    of ``mla_up_recompute_blocks``.
    Non-causal, MHA, GELU-4h: ``model = 72·B·s·l·h²·(1 + s/6h + V/12lh)`` and full-recompute
    ``hardware = 96·B·s·l·h²·(1 + s/6h + V/16lh)`` with ``B = b·n_micro`` (Narayanan et al. SC'21
    Sec. 5.1 Eq. 3). Selective non-causal: ``72·B·s·l·h²·(1 + 2s/9h + V/12lh)`` (formulas.md §1.2).
    ``model.mtp_layers`` modules add ``3·(F_last + F_logits + 4·b·s·h²)`` each to the hardware FLOPs only
    (their block, ``eh_proj`` and the head again; model FLOPs count the main model, as DeepSeek-V3 does).
    ``lora_forward`` (``training.lora``, ``simulator.workload.lora``): the adapters' forward FLOPs per micro-batch,
    added to ``F``; the frozen weight GEMMs (``l·F_dense + F_logits``) run no weight gradient, so both counts
    drop one forward of them: ``model = 3F − l·F_dense − F_logits``.
    """
    groups = _groups(model, b, s, causal)  # [(blocks, LayerFlops)]: one group unless MoE/MLA
    f = attention_fraction  # packed documents and sliding windows (attention_span)
    forward = sum(c * (lay.unwindowed + f * lay.attention_core) for c, lay in groups) + logits_forward(model, b, s)
    if recompute == "selective_op":  # the re-run GEMMs of torchtitan's op-level policy (op_sac)
        extra = model.n_layers * op_sac.recomputed_gemm_flops(model, b * s)
    else:
        extra = sum(c * {"none": 0.0, "selective": f * lay.attention_core,
                         "full": recompute_fraction * (lay.unwindowed + f * lay.attention_core - recompute_skipped)}[recompute]
                    for c, lay in groups)
    if mlp_recompute_blocks:
        extra += mlp_recompute_blocks * dense_layer_forward(model, b, s, causal).mlp
    if moe_recompute_blocks or shared_recompute_blocks:
        from simulator.workload import moe

        extra += (moe_recompute_blocks * moe.layer_forward(model, b, s, causal, True).mlp
                  + shared_recompute_blocks * moe.shared_forward(model, b, s))
    if mla_up_recompute_blocks:
        extra += mla_up_recompute_blocks * mla.up_forward(model, b, s)
    if model.mtp_layers:  # MTP modules (workload.mtp): a block of the last kind, eh_proj, the head again
        # layer_groups lists the dense blocks' group first: the MoE group only if the last block is MoE
        moe_last = model.is_moe_block(model.n_layers - 1)
        last, h = groups[-1 if moe_last or len(groups) == 1 else 0][1], model.hidden_size
        extra += 3 * model.mtp_layers * (last.unwindowed + f * last.attention_core + logits_forward(model, b, s)
                                         + 2.0 * b * s * 2 * h * h)
    no_wgrad = 0.0
    if lora_forward is not None:
        no_wgrad = sum(c * lay.dense for c, lay in groups) + logits_forward(model, b, s)
        forward += lora_forward
    return StepFlops(
        tokens=b * s * n_micro,
        causal=causal,
        recompute=recompute,
        forward_flops=n_micro * forward,
        model_flops=n_micro * (3 * forward - no_wgrad),
        hardware_flops=n_micro * (3 * forward - no_wgrad + extra),
    )


def for_scenario(scenario: Scenario, executed: bool = False) -> StepFlops:
    """:func:`step` for a scenario's whole optimizer step (all data-parallel ranks): micro-batches of
    ``training.micro_batch_size`` sequences, ``global_batch_size / micro_batch_size`` of them, the
    attention the kernel computes (``attention_span``: packed documents, sliding windows; the whole
    matrix unfused) and the recompute mode of ``training.activation_checkpointing`` (selective without
    ``core_attn`` among ``training.recompute_modules`` re-runs no GEMM: ``recompute.attention_mode``).
    Divide by the GPU count for per-GPU work. The one count ``dtsim run``'s MFU and HFU read.

    ``executed`` false: the convention of ``training.attention_flops`` (MFU's numerator is
    ``model_flops``). True: the FLOPs the kernels run (HFU's numerator is ``hardware_flops``): attention
    causal with a fused kernel, which skips the masked half whatever the MFU convention, the whole matrix
    unfused, so HFU ≤ 100%; selective recomputation re-runs the attention core's forward with a fused
    kernel too (Megatron-Core checkpoints whatever core attention runs: ``workload.ops.layer_ops``)."""
    t = scenario.training
    flash = t.kernels.flash_attention
    recompute = recompute_mod.attention_mode(t, scenario.parallel.framework)
    return step(
        scenario.model,
        t.micro_batch_size,
        t.seq_len,
        t.global_batch_size // t.micro_batch_size,
        causal=flash if executed else t.attention_flops == "causal",
        recompute=recompute,
        attention_fraction=attention_span(scenario.model, t.seq_len, t.document_tokens, flash).fraction,
        lora_forward=(None if t.lora is None else scenario.model.n_layers
                      * lora.block_forward_flops(scenario.model, t.lora, t.micro_batch_size * t.seq_len)),
        **recompute_mod.step_terms(scenario),
    )
