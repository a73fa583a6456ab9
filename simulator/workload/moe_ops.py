"""Per-kernel workload of MoE and MLA blocks on one GPU (the counterpart of ``workload.ops``).

An MoE block is cut where its tokens leave and come back (the all-to-all dispatch and combine of
``simulator.parallel.expert``): ``pre`` (attention, router, permute), ``experts`` (the grouped GEMM
over this rank's experts), ``shared`` (shared experts, which need no dispatch) and ``post``
(unpermute and weighted sum). Conventions (each a reason, not a measurement):

* tokens per GPU entering the MoE part: ``T = b·s/tp`` (Megatron-Core requires sequence parallelism
  with MoE and TP > 1, so each TP rank routes its own ``1/tp`` of the tokens);
* router: a ``T × E × h`` GEMM plus a softmax / top-k pass over the ``T × E`` scores (memory-bound);
* permute / unpermute (Megatron ``moe_permute`` / ``moe_unpermute``): read the ``T·top_k`` token
  copies' hidden states and write them (2 passes each);
* DeepEP / HybridEP (``dispatcher`` ``deepep``, Megatron-Core ``MoEFlexTokenDispatcher``): no permute
  before the dispatch, whose kernel reads the ``T`` tokens and sends each once per GPU holding any of
  its experts (``hit_probability``); the receiver permutes those rows into expert order
  (``dispatch_postprocess``: read the received rows, write the ``top_k`` copies) and back before the
  combine (``combine_preprocess``: the probability-weighted sum of a token's local copies), and the
  combine kernel sums the GPUs' rows at the source, so no unpermute follows it and no "Permutation 2";
* with more than one local expert, the tokens an EP rank receives arrive grouped by source rank and
  are regrouped by local expert before the grouped GEMM, and back before the combine (Megatron-Core
  ``MoEAlltoAllTokenDispatcher``: "Permutation 2", ``sort_chunks_by_idxs`` with
  ``sort_input_by_local_experts`` in ``dispatch_postprocess`` and ``restore_output_by_local_experts``
  in ``combine_preprocess``): one read and one write of the received tokens each way (2 passes);
* FP8 padding (Megatron-Core ``TEGroupedMLP`` under FP8 without ``moe_router_padding_for_fp8``): each
  local expert's rows are padded to the FP8 GEMMs' multiple before fc1 and unpadded after fc2 by
  Transformer Engine's ``Fp8Padding`` / ``Fp8Unpadding`` (``fused_multi_row_padding``: one kernel over
  the experts, reading and writing the received tokens, ``FP8_PADDING_PASSES``). A profile of NVIDIA's
  Qwen3-235B-A22B MXFP8 recipe on 256 B200 (togethercomputer/together-dgxc-benchmarking
  ``tests/b200/scripts/qwen3_235b/qwen3_235b_fp8mx_256gpu_profiler_report.md``@d275be99: "TE
  padding/unpadding" 795 ms of a step's GPU time, 5.4%, against 1,189 ms for the routing permutations)
  shows them; with the router padding the routing map already holds the padded counts and neither runs;
* grouped GEMM (Megatron ``--moe-grouped-gemm``): ``E/ep`` GEMMs, each with ``m = tokens per local
  expert`` rows. This rank receives ``T·top_k`` token copies on average and ``imbalance ×`` that on
  the most-loaded rank, which sets the pace (``model.moe.imbalance``; ``MoEConfig.rank_imbalance``:
  at most ``ep ×``, so none without expert parallelism, where one rank holds every expert and computes
  every copy however the router spreads them). Small ``m`` runs at low
  efficiency through the compute model's GEMM shape factor applied per expert
  (``simulator.hardware.kernels.gemm_shape_factor`` with ``batch = E/ep``: each expert's rows padded
  to whole tiles, all experts' tiles in waves over the SMs, times the ``k`` main-loop fill): no
  separate parameter. Megatron-Core's ``TEGroupedMLP`` issues them through Transformer Engine's
  ``GroupedLinear``, whose default path is one cuBLAS GEMM per expert, expert ``i`` on compute stream
  ``i mod 4`` (TE ``multi_stream_cublas_gemm``; its CUTLASS grouped GEMM is opt-in,
  ``NVTE_USE_CUTLASS_GROUPED_GEMM``, Hopper BF16 only): at most four experts' GEMMs in flight
  (``Op.streams``, ``expert_streams``); torchtitan's ``torch._grouped_mm`` is one kernel over all;
* expert tensor parallelism splits each expert's width over ``etp`` ranks, which all process the
  tokens of their ETP group: after the all-to-all each rank all-gathers its ETP peers' received tokens
  (Megatron-Core's alltoall dispatcher, ``simulator.parallel.expert``), so a rank runs ``etp ×`` the
  tokens at ``1/etp`` of the width, the same expert FLOPs as ``ep·etp``-way expert parallelism;
* LatentMoE (``model.moe.latent_size`` ``l``, Megatron-Core ``MoELayer`` with ``moe_latent_size``): the
  ``T`` routed tokens go through ``fc1_latent_proj`` (a ``T × l × h`` GEMM) after the router and before the
  permute and dispatch, and the combined ones through ``fc2_latent_proj`` (``T × h × l``) after the
  unpermute (``postprocess``: ``combine_postprocess`` then ``fc2_latent_proj``), so the permutes, the
  experts' GEMMs and the all-to-alls carry ``l``-wide tokens;
* shared experts run on all ``b·s`` tokens with their width split over TP, like the dense MLP;
* MLA attention (``simulator.workload.mla``): the down projections and their norms are duplicated
  on every TP rank; up projections column-parallel, ``o_proj`` row-parallel; the FlashAttention
  kernel is causal with ``d_qk = d_n + d_r`` for QKᵀ and ``d_v`` for ·V.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.config.model import ModelConfig
from simulator.hardware.kernels import TE_GROUPED_STREAMS
from simulator.workload import fused_grouped_mlp
from simulator.workload import ops as wops
from simulator.workload.attention_core import LSE_BYTES, SOFTMAX_FLOPS, unfused_core_ops
from simulator.workload.fp8_casts import fp8_cast


def hit_probability(n_groups: int, n_experts: int, top_k: int) -> float:
    """Probability that a token's ``top_k`` distinct experts, drawn uniformly from ``n_experts`` spread
    evenly over ``n_groups`` GPUs or nodes, include one of a given group's: ``1 − C(E − E/n, k) / C(E, k)``."""
    e, miss = n_experts, 1.0
    for i in range(top_k):
        miss *= max(0.0, (e - e / n_groups - i) / (e - i))
    return 1.0 - miss


def copies_per_gpu(n_gpus: int, n_experts: int, top_k: int) -> float:
    """DeepEP's rows per token over an EP group of ``n_gpus`` as a fraction of the ``top_k`` expert copies:
    one row per GPU that holds any of the token's experts (``n·q/top_k``)."""
    return n_gpus * hit_probability(n_gpus, n_experts, top_k) / top_k


@dataclass(frozen=True)
class MoEBlockOps:
    """Forward ops of one MoE block on one GPU, cut at the dispatch and the combine."""

    pre: tuple
    experts: tuple
    shared: tuple
    post: tuple
    #: Token copies this GPU sends in the dispatch (and receives back in the combine): T·top_k.
    routed_tokens: float
    #: Experts held by this GPU (``E/ep``, at least 1).
    local_experts: int = 1
    #: Index in ``experts`` of the op before which the forward synchronises the host with the GPU (0 =
    #: none): the clamped SwiGLU's quick-GeGLU offset tensor (comment at ``CLAMP_PASSES``).
    sync_at: int = 0
    #: Index in ``pre`` of the MoE layer's first op (the router GEMM): ``pre[:router_at]`` is the attention
    #: part with the pre-MLP norm, ``pre[router_at:]`` the router and the permute, which the ``moe`` recompute
    #: module re-runs with the rest of the layer (``simulator.parallel.expert``).
    router_at: int = 0


#: Expert biases (``model.linear_bias``, GPT-OSS): Megatron-Core's ``TEGroupedMLP`` adds the fc2 bias
#: outside the grouped GEMM, whose cuBLAS kernel has no bias epilogue (TransformerEngine issue #2766, "We
#: need additional kernels for Bias/DBias"), one local expert at a time
#: (``TEGroupedMLP._apply_bias``: ``torch.cat([t + b * p for t, b, p in zip(split(out), biases,
#: split(probs))])``). Per element of the ``T·k × h`` output: ``b * p`` written (1 pass), ``t + ·`` two
#: reads and a write (3), the ``cat`` copy (2); two kernels per expert and one ``cat``. Backward: the
#: gradients of ``b`` and ``p`` are ``sum(grad·p)`` and ``sum(grad·b)``, each a product written and read
#: back by the reduction after reading the gradient (3 passes each); two kernels each per expert. The fc1
#: bias goes into the fused activation kernel (``weighted_bias_*_impl``): no extra pass counted.
EXPERT_BIAS_PASSES = 6
EXPERT_BIAS_BWD_PASSES = 6


#: Clamped SwiGLU (``model.swiglu_limit``): Megatron-Core's ``weighted_bias_quick_geglu_impl``
#: (megatron/core/fusions/fused_bias_geglu.py) clamps in eager PyTorch before its fused activation:
#: ``x_glu, x_linear = input.chunk(2, -1)`` (views), ``x_glu.clamp(min=None, max=limit)`` and
#: ``x_linear.clamp(min=-limit, max=limit)`` (each reads and writes its half), then ``torch.cat`` (reads
#: both halves, writes the whole): 8 passes over ``w`` elements per token copy, with ``w`` the expert
#: width (the fc1 output is ``2w``). Backward: each clamp's gradient reads the incoming gradient and its
#: input and writes the masked gradient (3 passes of each ``w``-wide half: 6); the ``cat``'s is views.
CLAMP_PASSES = 8
CLAMP_BWD_PASSES = 6
# The same function then builds its offset as ``torch.tensor(linear_offset, dtype=input.dtype,
# device=input.device)`` on every call (Megatron-LM megatron/core/fusions/fused_bias_geglu.py at 034fd2d
# and 1fb2a0c): a copy from pageable host memory without ``non_blocking``, which PyTorch runs as
# ``at::cuda::memcpy_and_sync`` (``cudaMemcpyAsync`` then ``cudaStreamSynchronize``), so the host waits
# for the GPU to drain before it issues the activation (a third-party patch removes it for that reason:
# "Megatron-LM's weighted quick-GeGLU builds a scalar offset tensor from a Python float on every call, a
# blocking host-to-device copy"). With the dropless dispatcher's own synchronisation that makes two per
# forward block (``MoEBlockOps.sync_at``, ``simulator.workload.moe_host``).


def _clamp(elements: float, pb: int) -> object:
    """The clamp and concatenation before a clamped SwiGLU (``CLAMP_*``): three kernels forward (two
    clamps, the ``cat``), two backward (the clamp gradients)."""
    op = wops.memory_op("experts_clamp", elements, CLAMP_PASSES, pb, 2.0)
    return replace(op, launches=3, bwd_launches=2, bwd_bytes=CLAMP_BWD_PASSES * pb * elements)


def _expert_bias(routed: float, h: int, local_experts: int, pb: int) -> object:
    """The fc2 bias op of the local experts (``EXPERT_BIAS_*``)."""
    op = wops.memory_op("experts_bias", routed * h, EXPERT_BIAS_PASSES, pb, wops.ADD_FLOPS)
    return replace(op, launches=2 * local_experts + 1, bwd_launches=4 * local_experts,
                   bwd_bytes=EXPERT_BIAS_BWD_PASSES * pb * routed * h)


def _linearize(ops: list, fp8: str | None) -> list:
    """The block's weight GEMMs as linear layers (``Op.linear``: the FP8 rate when training in FP8,
    Transformer Engine's ``Linear`` / ``GroupedLinear`` under ``fp8_autocast``; Megatron-Core pads each
    expert's tokens for it, ``Fp8Padding``), each after the standalone cast of its input under ``fp8``
    (the permute, Megatron's own activation kernels and the MLA norms produce 16-bit tensors). Not
    applied to the router GEMM, which Megatron-Core keeps 16-bit."""
    out: list = []
    for op in ops:
        if op.kind != "gemm":
            out.append(op)
            continue
        if fp8 is not None:  # the cast is re-run with a recomputed GEMM (its input is what is stored)
            out.append(replace(fp8_cast(op.name, op.m * op.batch, op.n, op.k, fp8), recompute=op.recompute))
        out.append(replace(op, linear=True))
    return out


def _mark(ops: list, recompute: str) -> list:
    return [replace(op, recompute=True) for op in ops] if recompute == "full" else ops


#: MLA ops selective recomputation re-runs with ``mla_up_proj`` (Megatron-Core ``MLASelfAttention``
#: ``recompute_up_proj``: the up projections and the rotary embedding run under
#: ``CheckpointWithoutOutput``, so Q, K and V are rebuilt from the stored compressed latents).
MLA_UP_PROJ_OPS = ("q_up", "q_proj", "kv_up", "rotary")


def _mla_attention(model: ModelConfig, b: int, s: int, tp: int, pb: int, fused: bool,
                   up_proj_recompute: bool = False, sequence_parallel: bool = False, flash: bool = True) -> list:
    """Input norm through the post-attention add+norm of an MLA block (module docstring); the up
    projections marked for recomputation under ``up_proj_recompute`` (``MLA_UP_PROJ_OPS``); the block's
    norms on the rank's ``1/tp`` of the tokens under ``sequence_parallel`` (``workload.ops.layer_ops``);
    the core fused, or unfused without ``flash`` (``training.kernels.flash_attention: false``: the whole
    s×s matrix, ``attention_core.unfused_core_ops`` over ``d_qk``-wide scores and ``d_v``-wide values)."""
    a, t = model.n_heads // tp, b * s
    region = wops.region_tokens(t, tp, sequence_parallel)
    h = model.hidden_size
    qr, kvr = model.q_lora_rank, model.kv_lora_rank
    dn, dr, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    assert kvr and dn and dr and dv
    dqk = dn + dr
    out: list = []
    if fused:
        out += wops._add_norm("input", region * h, True, pb)
    else:
        out.append(wops.memory_op("input_norm", region * h, 2, pb, wops._NORM_FLOPS))
    # The down projections and their norms are duplicated on every TP rank (Megatron-Core's MLA spec:
    # backend.linear()) and take the block's input as it is: the rank's 1/tp of the tokens under sequence
    # parallelism (multi_latent_attention.py: "q_compressed: [s / TP, b, q_lora_rank]"), every token without.
    if qr:
        out += [wops.gemm("q_down", region, qr, h, pb),
                wops.memory_op("q_down_norm", region * qr, 2, pb, wops._NORM_FLOPS),
                wops.gemm("q_up", t, a * dqk, qr, pb)]
    else:
        out.append(wops.gemm("q_proj", t, a * dqk, h, pb))
    out += [wops.gemm("kv_down", region, kvr + dr, h, pb),
            wops.memory_op("kv_down_norm", region * kvr, 2, pb, wops._NORM_FLOPS),
            wops.gemm("kv_up", t, a * (dn + dv), kvr, pb),
            wops.memory_op("rotary", t * (a + 1) * dr, 2, pb, wops._ROPE_FLOPS)]
    if flash:
        # FlashAttention, causal: QKᵀ 2·b·s²·a·d_qk/2 and ·V 2·b·s²·a·d_v/2; reads Q, K, V, writes O + LSE.
        flops = 2.0 * b * s * s * a * (dqk + dv) / 2
        io = (t * a * (2 * dqk + 2 * dv)) * pb + b * a * s * LSE_BYTES
        out.append(wops.Op("attention", "attention", flops, float(io)))
    else:
        out += unfused_core_ops(model, b, s, a, dqk, dv, pb)
    out.append(wops.gemm("out_proj", t, h, a * dv, pb))
    out += wops._add_norm("post_attn", region * h, fused, pb)
    if up_proj_recompute:
        out = [replace(op, recompute=True) if op.name in MLA_UP_PROJ_OPS else op for op in out]
    return out


def _attention_part(model, b, s, tp, pb, kernels, recompute, fp8: str | None = None,
                    modules: frozenset[str] = frozenset(), sequence_parallel: bool = False,
                    linear: str = "megatron") -> tuple[list, list]:
    """(ops through the post-attention norm, the dense MLP ops after it) of one block; their linear
    GEMMs in FP8 under ``fp8`` (``_linearize``; the dense blocks' through ``workload.ops.layer_ops``).
    ``recompute`` selective (``core_attn`` among the modules: ``recompute.attention_mode``) marks the
    attention core, MLA's included, as ``layer_ops`` does; full recomputation is marked by ``_mark``."""
    if model.is_mla:
        att = _mla_attention(model, b, s, tp, pb, kernels.fused_norm_residual, "mla_up_proj" in modules,
                             sequence_parallel, kernels.flash_attention)
        if recompute == "selective":  # the core, fused or unfused (attention_core's ops are named attn_*)
            att = [replace(op, recompute=True) if op.kind == "attention" or op.name.startswith("attn_") else op
                   for op in att]
        h, f, t = model.hidden_size, model.ffn_hidden_size, b * s
        up = (model.mlp_matrices - 1) * f // tp
        mlp = [wops.gemm("mlp_up", t, up, h, pb),
               wops.memory_op(f"mlp_{model.mlp}", t * f / tp, model.mlp_matrices, pb, wops._ACT_FLOPS),
               wops.gemm("mlp_down", t, h, f // tp, pb)]
        if not kernels.fused_norm_residual:
            mlp.append(wops.memory_op("output_residual_add", wops.region_tokens(t, tp, sequence_parallel) * h, 3, pb,
                                      wops.ADD_FLOPS))
        return _linearize(att, fp8), _linearize(mlp, fp8)
    full = wops.layer_ops(model, b, s, tp, pb, kernels, "selective" if recompute == "selective" else "none", fp8=fp8,
                          sequence_parallel=sequence_parallel, linear=linear)
    if model.is_hybrid:  # an MoE block's mixer layer (Mamba or attention, averaged) and the MoE layer's pre-norm
        from simulator.workload import hybrid_ops

        return hybrid_ops.block_ops(model, full, b, s, tp, pb, fp8, recompute, sequence_parallel, moe=True), []
    cut = max(i for i, op in enumerate(full) if op.name.startswith("post_attn")) + 1
    return full[:cut], full[cut:]


def dense_block_ops(model: ModelConfig, b: int, s: int, tp: int, pb: int, kernels, recompute: str,
                    fp8: str | None = None, modules: frozenset[str] = frozenset(),
                    sequence_parallel: bool = False, linear: str = "megatron") -> list:
    """Forward ops of a dense block of an MoE / MLA model (MLA attention when the model has it);
    ``modules`` as in ``moe_block_ops``, ``mlp`` among them marking the dense MLP (``workload.ops.mark_mlp``)."""
    if not model.is_mla:
        return wops.layer_ops(model, b, s, tp, pb, kernels, recompute, fp8=fp8, sequence_parallel=sequence_parallel,
                              mlp_recompute="mlp" in modules, linear=linear)
    att, mlp = _attention_part(model, b, s, tp, pb, kernels, recompute, fp8, modules, sequence_parallel, linear)
    ops = _mark(att + mlp, recompute)
    return wops.mark_mlp(ops) if "mlp" in modules else ops


def te_grouped_mlp(framework: str) -> bool:
    """Whether the experts run as Megatron-Core's ``TEGroupedMLP`` (the ``ddp`` engine): Transformer
    Engine's ``GroupedLinear``, whose streams (``expert_streams``) and FP8 row padding (``fp8_padding``)
    follow from it."""
    return framework == "ddp"


def fp8_padding(model: ModelConfig, framework: str, fp8: str | None) -> bool:
    """Whether the experts' FP8 row padding runs as kernels: ``TEGroupedMLP`` training in FP8 without the
    router's padding (``model.moe.router_padding_for_fp8``)."""
    return fp8 is not None and te_grouped_mlp(framework) and not model.moe.router_padding_for_fp8


def expert_streams(framework: str) -> int:
    """How a framework issues the experts' GEMMs (``Op.streams``): ``TEGroupedMLP`` through Transformer
    Engine's ``GroupedLinear``, one GEMM per expert on its streams (``kernels.TE_GROUPED_STREAMS``); the
    others (torchtitan's ``torch._grouped_mm``) as one grouped kernel (0)."""
    return TE_GROUPED_STREAMS if te_grouped_mlp(framework) else 0


#: Passes over the received tokens (``per_expert · local_experts · h`` elements) of each of Transformer
#: Engine's ``Fp8Padding`` and ``Fp8Unpadding``: one read and one write (module docstring).
FP8_PADDING_PASSES = 2


def moe_block_ops(model: ModelConfig, b: int, s: int, tp: int, pb: int, kernels, recompute: str,
                  ep: int = 1, etp: int = 1, modules: frozenset[str] = frozenset(),
                  fp8: str | None = None, streams: int = 0, sequence_parallel: bool = False,
                  fp8_padding: bool = False, dispatcher: str = "alltoall", linear: str = "megatron") -> MoEBlockOps:
    """Forward ops of one MoE block on one GPU (conventions: module docstring). ``modules``: what
    selective recomputation re-runs before the backward (``simulator.workload.recompute.modules``):
    ``layernorm`` the pre-MLP norm (the post-attention add + norm op, whose add is re-run with it when
    the two are one fused op), ``moe_act`` the experts' activation, ``mla_up_proj`` the MLA up
    projections (``MLA_UP_PROJ_OPS``), ``shared_experts`` the shared experts (``moe``, the whole layer
    with its all-to-alls, is placed by ``simulator.parallel.expert``, not marked here). ``fp8``: the
    training's FP8 recipe (the linear GEMMs, experts included, in FP8: ``_linearize``). ``streams``: how the experts' GEMMs run (``expert_streams``).
    ``sequence_parallel``: the attention part's norms on the rank's tokens (``workload.ops.layer_ops``).
    ``fp8_padding``: the experts' FP8 row padding and unpadding run as kernels (module docstring).
    ``dispatcher``: ``alltoall`` (Megatron-Core's permutes around the all-to-alls) or ``deepep`` (the
    receiver's permutes only, module docstring). ``linear``: as ``workload.ops.layer_ops``."""
    m = model.moe
    assert m is not None
    h, k_mlp = model.hidden_size, model.mlp_matrices
    att, _ = _attention_part(model, b, s, tp, pb, kernels, recompute, fp8, modules, sequence_parallel, linear)
    if "layernorm" in modules:
        att = [replace(op, recompute=True) if op.name.startswith("post_attn") and "norm" in op.name else op
               for op in att]
    t = b * s / tp
    routed = t * m.top_k
    local_experts = max(1, m.n_experts // ep)
    # the ETP group's tokens: each rank's received copies, all-gathered over its etp peers
    per_expert = max(1, round(routed * etp * m.rank_imbalance(ep) / local_experts))
    width = m.expert_ffn_hidden_size // etp
    deepep = dispatcher == "deepep"
    w = m.routed_width(h)  # what the dispatch carries and the experts take (the latent width of a LatentMoE)
    down = [wops.gemm("latent_down", int(t), w, h, pb)] if m.latent_size else []
    pre = att + [
        wops.gemm("router", int(t), m.n_experts, h, pb),
        wops.memory_op("router_topk", t * m.n_experts, 3, pb, SOFTMAX_FLOPS),
        *_linearize(down, fp8),
    ] + ([] if deepep else [wops.memory_op("permute", routed * w, 2, pb, 0.0)])
    act = wops.memory_op(f"experts_{model.mlp}", per_expert * local_experts * width, k_mlp, pb, wops._ACT_FLOPS)
    # the clamp runs inside the activation function moe_act recomputes (module docstring, CLAMP_PASSES)
    act_ops = ([_clamp(per_expert * local_experts * width, pb)] if model.swiglu_limit else []) + [act]
    experts = [
        replace(wops.gemm("experts_up", per_expert, (k_mlp - 1) * width, w, pb, batch=local_experts),
                streams=streams),
        *(replace(op, recompute=True) if "moe_act" in modules else op for op in act_ops),
        replace(wops.gemm("experts_down", per_expert, w, width, pb, batch=local_experts), streams=streams),
    ]
    experts = _linearize(experts, fp8)
    if model.linear_bias:
        experts.append(_expert_bias(per_expert * local_experts, w, local_experts, pb))
    fused = kernels.fused_grouped_mlp
    if fused:  # Transformer Engine's fused grouped MLP (simulator.workload.fused_grouped_mlp)
        experts = fused_grouped_mlp.fuse(experts, act.name)
    received = per_expert * local_experts * w

    def bracket(ops: list, before: str, after: str, passes: int) -> list:
        """``ops`` between two memory passes over the received tokens (a copy in, its inverse out)."""
        return [wops.memory_op(before, received, passes, pb, 0.0), *ops,
                wops.memory_op(after, received, passes, pb, 0.0)]

    if fp8_padding:  # Fp8Padding before fc1's cast, Fp8Unpadding after fc2 (module docstring)
        experts = bracket(experts, "fp8_padding", "fp8_unpadding", FP8_PADDING_PASSES)
    if deepep:  # the received rows into expert order and back (module docstring)
        rows = 1 + copies_per_gpu(ep, m.n_experts, m.top_k)
        experts = bracket(experts, "permute", "unpermute", rows)
    elif local_experts > 1:  # Permutation 2 and its inverse (module docstring)
        experts = bracket(experts, "sort_chunks", "restore_chunks", 2)
    shared: list = []
    if m.n_shared_experts:
        fs = m.n_shared_experts * m.shared_width // tp
        shared = [
            wops.gemm("shared_up", b * s, (k_mlp - 1) * fs, h, pb),
            wops.memory_op(f"shared_{model.mlp}", b * s * fs, k_mlp, pb, wops._ACT_FLOPS),
            wops.gemm("shared_down", b * s, h, fs, pb),
        ]
        shared = _linearize(shared, fp8)
        if "shared_experts" in modules:  # checkpointed: re-run from their stored input before their backward
            shared = [replace(op, recompute=True) for op in shared]
    post = [] if deepep else [wops.memory_op("unpermute", routed * w, 2 + 1, pb, wops.ADD_FLOPS)]
    if m.latent_size:
        post += _linearize([wops.gemm("latent_up", int(t), h, w, pb)], fp8)
    if not kernels.fused_norm_residual:
        post.append(wops.memory_op("output_residual_add", b * s * h, 3, pb, wops.ADD_FLOPS))
    # the fused kernels take the clamp's limits as arguments: no offset tensor, no second synchronisation
    sync_at = (next(i for i, op in enumerate(experts) if op.name == act.name)
               if model.swiglu_limit and not fused else 0)
    return MoEBlockOps(tuple(_mark(pre, recompute)), tuple(_mark(experts, recompute)),
                       tuple(_mark(shared, recompute)), tuple(_mark(post, recompute)), routed, local_experts,
                       sync_at, router_at=len(att))
