"""What the graph builders need to know about the model on one GPU: ops and parameter counts.

``StepWork`` is plain data so unit tests can hand-build a 2-layer model with round numbers. Units
of work ("units") are the modules a sharded framework gathers separately: the embedding ``E``, the
transformer blocks ``0..L-1`` and the head ``H`` (final norm + output projection + loss).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from simulator.hardware.kernels import sm_count
from simulator.units import DTYPE_BYTES
from simulator.workload import bias as wbias
from simulator.workload import flops as wflops
from simulator.workload import host as whost
from simulator.workload import hybrid_ops
from simulator.workload import lora as wlora
from simulator.workload import loss as wloss
from simulator.workload import mtp as wmtp
from simulator.workload import muon as wmuon
from simulator.workload import ops as wops
from simulator.workload import params as wparams
from simulator.workload import recompute as wrecompute
from simulator.workload.optimizer_ops import optimizer_ops


@dataclass(frozen=True)
class StepWork:
    """Per-micro-batch ops and per-unit parameter counts (elements) on one GPU.

    ``*_persistent`` counts tensors below DeepSpeed's persistence threshold (norm weights, biases):
    they stay replicated and are never gathered. ``optimizer`` maps a local parameter count to the
    optimizer-step ops.
    """

    n_layers: int
    layer_fwd: tuple[Any, ...]
    layer_bwd: tuple[Any, ...]
    layer_recompute: tuple[Any, ...]
    embed_fwd: tuple[Any, ...]
    embed_bwd: tuple[Any, ...]
    head_fwd: tuple[Any, ...]
    head_bwd: tuple[Any, ...]
    layer_params: float
    embed_params: float
    head_params: float
    #: The optimizer step's ops for ``(n, adam=0, experts=0)``: ``n`` parameters, of which ``adam`` stay on Adam
    #: under Muon (embedding, output layer) and ``experts`` are routed-expert weights (``optimizer_ops``).
    optimizer: Callable[..., tuple[Any, ...]]
    layer_persistent: float = 0.0
    head_persistent: float = 0.0
    #: A block's vector parameters on this rank (norm weights and biases, the QK-norms): what
    #: ``parallel.fp8_param_gather`` still gathers in the parameter dtype (``schedule.unit_gather_bytes``).
    layer_vector_params: float = 0.0
    #: Gathered elements of each ``nn.Linear`` of a block in forward order (``model.linear_modules``):
    #: DeepSpeed ZeRO-3 fetches each sub-module with its own all-gather. Shares follow the weight
    #: shapes; they sum to ``layer_params − layer_persistent`` (the one volume model).
    layer_module_params: tuple[float, ...] = ()
    #: Their names (``ModelConfig.linear_modules``), for task labels.
    layer_module_names: tuple[str, ...] = ()
    #: Megatron tensor parallelism: bytes of each of the 2 forward and 2 backward all-reduces of a
    #: block (``b·s·h`` activations; formulas.md §6), 0 without TP.
    tp_allreduce_bytes: float = 0.0
    #: Pipeline parallelism: bytes one rank sends for one micro-batch's activations crossing a stage
    #: boundary, each way: ``b·s·h/t`` elements (formulas.md §6; with TP each rank sends its 1/t slice
    #: and the receiver all-gathers over NVLink, Megatron's scatter/gather, SC'21 §4.1).
    p2p_bytes: float = 0.0
    #: Megatron sequence parallelism: each TP all-reduce becomes a reduce-scatter + all-gather of the
    #: same buffer (same bytes; Korthikanti et al. 2022, formulas.md §6).
    sequence_parallel: bool = False
    #: Megatron ``--tp-comm-overlap`` / PyTorch async-TP: TP collectives on their own stream,
    #: overlapped with the GEMMs next to them (``simulator.parallel.tp_overlap``).
    tp_comm_overlap: bool = False
    #: Tensor-parallel degree (chunks of an overlapped TP collective).
    tp_degree: int = 1
    #: Bytes of each sequence-parallel all-gather of a block (0: ``tp_allreduce_bytes``). FP8 training
    #: gathers the FP8-cast GEMM input (1 B/element): Transformer Engine casts before the gather
    #: (``fp8_buf`` of its all-gather overlaps; ``transformer_engine/pytorch/module/base.py``
    #: ``initialize_ub``), torchao's ``Float8ColwiseParallel`` likewise. Reduce-scatters stay 16-bit.
    tp_allgather_bytes: float = 0.0
    #: Megatron-LM's backward without ``--tp-comm-overlap``: a column-parallel layer's TP collectives
    #: launched asynchronously beside its GEMMs (``LinearWithGradAccumulationAndAsyncCommunication``;
    #: ``tp_overlap.async_backward_piece``). Framework ddp (Megatron) with TP.
    tp_async_backward: bool = False
    #: SMs of the GPU (``hardware.kernels.SM_COUNT``), for the share userbuffers' TP-overlap kernels
    #: hold (``tp_overlap``); 0 = unknown (then their cost is the generic NCCL slowdown).
    gpu_sms: int = 0
    #: Context parallelism: bytes of the sequence's K and V on one TP rank, ``2·b·s·kv_dim/t``
    #: elements, exchanged around the CP ring per block and pass (``simulator.parallel.context_parallel``);
    #: 0 without CP.
    cp_kv_bytes: float = 0.0
    #: A block's backward split where gradients become ready: ((name, ops, params), ...) in
    #: execution order; empty = one piece (``layer_bwd``, ``layer_params``).
    layer_bwd_pieces: tuple[tuple[str, tuple[Any, ...], float], ...] = ()
    #: The multi-token-prediction modules' share of ``head_params`` (weight matrices, which Muon steps; the
    #: embedding and output layer it leaves to Adam).
    head_mtp_params: float = 0.0
    #: Muon's layer-wise distributed optimizer (``simulator.workload.muon``): with the distributed optimizer the
    #: gradients are all-reduced, not reduce-scattered, each rank stepping whole matrices.
    grads_all_reduced: bool = False
    #: Mixture-of-experts blocks (``simulator.parallel.expert.MoEWork``); None for a dense model.
    moe: Any = None
    #: Of the ``n_layers`` block units, the multi-token-prediction blocks at the end (``model.mtp_layers``,
    #: ``simulator.workload.mtp``): placed on the last pipeline stage, their other work in the head.
    mtp_layers: int = 0
    #: Blocks whose saved activations go to host memory and back (``training.activation_offload_layers``,
    #: the first ones; ``simulator.parallel.activation_offload``), and the bytes one block saves per
    #: micro-batch (the memory model's ``per_layer``).
    offload_layers: int = 0
    offload_bytes: float = 0.0
    #: Blocks of each model chunk that run ``layer_recompute`` (the first ones: Megatron's ``block``
    #: method; ``training.recompute_layers``, ``simulator.workload.recompute``); None = every block.
    recompute_blocks: int | None = None
    #: Full recomputation (the whole block forward, or all of it up to early stop) rather than a
    #: selective policy: it re-runs the block's TP collectives and DeepSpeed's parameter fetches.
    recompute_full: bool = False
    #: Selective recomputation of the dense MLP (``mlp`` module): its recompute re-runs the MLP's TP
    #: collectives, one of a block's two (``tp_plain.block_tp``).
    recompute_mlp: bool = False

    def recomputes(self, block: int) -> bool:
        """Whether block ``block`` (index within its chunk) recomputes before its backward."""
        return bool(self.layer_recompute) and (self.recompute_blocks is None or block < self.recompute_blocks)

    @property
    def layer_modules(self) -> int:
        return max(1, len(self.layer_module_params))

    def step_ops(self, n: float, adam: float = 0.0) -> tuple[Any, ...]:
        """The optimizer step of this (virtual) stage on its GPU: ``n`` of its non-expert parameters (``adam`` of
        them left to Adam under Muon) and its MoE blocks' share of the routed experts (``MoEWork.optimizer_params``)."""
        experts = self.moe.optimizer_params if self.moe is not None else 0.0
        return self.optimizer(n + experts, adam, experts)

    @property
    def total_params(self) -> float:
        return self.n_layers * self.layer_params + self.embed_params + self.head_params


def _largest_tensor_below(threshold: float, sizes: list[int]) -> int:
    return sum(s for s in sizes if s < threshold)


def from_scenario(scenario: Any, persistence_threshold: float = 1e5) -> StepWork:
    """Build ``StepWork`` for the scenario's model on one GPU (tp ranks split the blocks)."""
    model, tr, par = scenario.model, scenario.training, scenario.parallel
    cp = getattr(par, "cp", 1)
    # With context parallelism a rank holds s/cp tokens of each sequence; its attention core does
    # 1/cp of the full causal work, i.e. cp × that of an s/cp-token sequence.
    b, s, tp = tr.micro_batch_size, tr.seq_len // cp, par.tp
    pb = DTYPE_BYTES["bf16" if tr.precision == "fp8" else tr.precision]
    fp8 = tr.active_fp8_recipe
    mode = wrecompute.attention_mode(tr, par.framework)  # selective without core_attn stores the core
    sp = bool(getattr(par, "sequence_parallel", False))
    recompute_mlp = wrecompute.mlp(tr)  # Megatron-Core's mlp recompute module
    linear = wbias.linear_impl(tr.kernels, par.framework)
    if model.moe is not None or model.is_mla:  # MLA attention in the dense blocks
        from simulator.workload import moe_ops

        dense = moe_ops.dense_block_ops(model, b, s, tp, pb, tr.kernels, mode, fp8=fp8,
                                        modules=wrecompute.modules(tr), sequence_parallel=sp,
                                        linear=linear)
        fwd = [scale_attention(op, cp, model, tr) for op in dense]
    else:
        fwd = [scale_attention(op, cp, model, tr)
               for op in wops.layer_ops(model, b, s, tp, pb, tr.kernels, mode, fp8=fp8,
                                        early_stop=wrecompute.early_stop(scenario), sequence_parallel=sp,
                                        mlp_recompute=recompute_mlp, linear=linear)]
    if model.is_hybrid:  # the pattern's average block: its layer kinds' ops, weighted (workload.hybrid_ops)
        fwd = hybrid_ops.block_ops(model, fwd, b, s, tp, pb, fp8, mode, sp)
    lora = tr.lora
    if lora is not None:  # frozen linears, each targeted one with its adapter (workload.lora)
        fwd = wlora.block_ops(fwd, lora, pb)
    bwd_all = wops.backward_ops(fwd)
    recompute = tuple(op for op in bwd_all if op.name.startswith("recompute."))
    bwd = tuple(op for op in bwd_all if not op.name.startswith("recompute."))
    fwd, recompute, bwd = whost.attach(fwd, recompute, bwd, model, tr.kernels, par.framework,
                                       whost.pytorch_fsdp_version(par), tr.active_fp8_recipe,
                                       whost.te_share(scenario.cluster.topology.host))
    head_all = wops.head_ops(model, b, s, tp, pb, tr.kernels, sequence_parallel=sp,
                             cross_entropy=wloss.kind(scenario))
    n_embed = 2 if model.embedding_norm else 1
    embed_fwd, head_fwd = head_all[:n_embed], head_all[n_embed:]
    head_fwd = head_fwd + wmtp.head_ops(model, b, s, tp, pb, head_fwd)
    embed_bwd = tuple(wops.backward_ops(list(embed_fwd)))
    if lora is not None:  # frozen output layer; a frozen embedding has no backward
        head_fwd, embed_bwd = wlora.head_ops(head_fwd), ()
    counts = wparams.count(model)
    blk = wparams.layer(model)
    small = wparams.block_vectors(model)
    fused = tr.kernels.fused_adam
    muon = ((*wmuon.costs(model, tr.muon_ns_steps, tp, getattr(par, "etp", 1)), tr.muon_ns_steps)
            if tr.optimizer == "muon" else None)
    layer_local = float(wparams.layer_local(model, tp))
    embed_params = float((counts.embedding + counts.embedding_norm) / tp)
    head_params = float(counts.lm_head / tp + counts.final_norm) + wmtp.params(model, tp)
    cast_scale, vectors = 1.0, float(sum(small))
    if lora is not None:  # the adapters train (workload.lora); the FP8 weight cast covers the frozen weights,
        # and the 16-bit adapters are all a block gathers in the parameter dtype (layer_vector_params)
        trained = wlora.block_params(model, lora, tp)
        cast_scale = wlora.cast_scale(par, model.n_layers * layer_local + embed_params + head_params,
                                      model.n_layers * trained)
        layer_local, embed_params, head_params, vectors = trained, 0.0, 0.0, trained
    work = StepWork(
        n_layers=model.n_layers + model.mtp_layers,
        mtp_layers=model.mtp_layers,
        layer_fwd=tuple(fwd),
        layer_bwd=bwd,
        layer_recompute=recompute,
        embed_fwd=tuple(embed_fwd),
        embed_bwd=embed_bwd,
        head_fwd=tuple(head_fwd),
        head_bwd=tuple(wops.backward_ops(list(head_fwd))),
        layer_params=layer_local,
        embed_params=embed_params,
        head_params=head_params,
        head_mtp_params=wmtp.params(model, tp),
        # plain te.Linear modules cast their weights in every forward instead (workload.fp8_casts)
        # optimizer(n, adam, experts): of n parameters, those Muon leaves to Adam and the routed experts'
        optimizer=lambda n, adam=0.0, experts=0.0: tuple(optimizer_ops(
            n, fused, tr.grad_clipping,
            fp8_weight_cast=fp8 is not None and tr.kernels.fp8_te_modules == "fused",
            fp8_recipe=fp8 or "", muon=muon, adam_params=adam, expert_params=experts, cast_params=n * cast_scale)),
        layer_persistent=float(min(_largest_tensor_below(persistence_threshold, small), blk.total)),
        layer_vector_params=vectors,
        head_persistent=float(counts.final_norm if counts.final_norm < persistence_threshold else 0),
        layer_module_names=model.linear_modules,
        layer_module_params=_module_params(model, layer_local - min(_largest_tensor_below(persistence_threshold, small),
                                                                     blk.total)),
        tp_allreduce_bytes=float(b * s * model.hidden_size * pb) if tp > 1 else 0.0,
        p2p_bytes=float(b * s * model.hidden_size * pb / tp) if par.pp > 1 else 0.0,
        sequence_parallel=sp,
        tp_comm_overlap=bool(getattr(par, "tp_comm_overlap", False)) and tp > 1,
        tp_degree=tp,
        tp_allgather_bytes=float(b * s * model.hidden_size * (1 if fp8 else pb)) if tp > 1 else 0.0,
        gpu_sms=_sms(scenario),
        tp_async_backward=par.framework == "ddp" and tp > 1,
        cp_kv_bytes=float(2 * b * tr.seq_len * model.kv_dim / tp * pb) if cp > 1 else 0.0,
        layer_bwd_pieces=_split_backward(bwd, blk, layer_local),
        recompute_blocks=wrecompute.per_chunk(tr) or None,
        recompute_full=tr.activation_checkpointing == "full",
        recompute_mlp=recompute_mlp,
        grads_all_reduced=tr.optimizer == "muon",
    )
    if model.moe is not None or model.is_mla:
        from simulator.parallel import expert

        work = expert.attach(work, scenario, pb)
    if tr.activation_offload_layers:
        from simulator.workload.activations import activations

        work = replace(work, offload_layers=min(tr.activation_offload_layers, model.n_layers),
                       offload_bytes=activations(scenario).per_layer)
    return work


def _sms(scenario: Any) -> int:
    """SMs of the scenario's GPU; 0 when unknown (a hand-built scenario without a resolved GPU)."""
    gpu = getattr(getattr(scenario, "cluster", None), "gpu", None)
    return (sm_count(gpu.name) or 0) if gpu is not None else 0


def _module_params(model: Any, gathered: float) -> tuple[float, ...]:
    """``gathered`` elements split over the block's linear modules in proportion to their weights
    (``in × out`` elements: q ``h·q_dim``, k and v ``h·kv_dim``, o ``q_dim·h``, MLP ``h·ffn`` each)."""
    h, q, kv, f = model.hidden_size, model.q_dim, model.kv_dim, model.ffn_hidden_size
    size = {"qkv": h * (q + 2 * kv), "q": h * q, "k": h * kv, "v": h * kv, "o": q * h,
            "gate": h * f, "up": h * f, "down": f * h, "fc1": h * f, "fc2": f * h}
    weights = [size[m] for m in model.linear_modules]
    total = sum(weights)
    return tuple(gathered * w / total for w in weights)


def scale_attention(op: Any, cp: int, model: Any, training: Any) -> Any:
    """An attention-core op as one rank runs it: with ring attention (context parallelism) one kernel
    per KV chunk, ``cp`` chunks per pass; with packed documents (``training.document_tokens``) or
    sliding-window blocks (``model.sliding_window``) the fused kernel's share of the score pairs,
    averaged over the blocks, with the full blocks' key length and the windowed blocks' share and
    window for the compute model (``flops.attention_span``). Other ops unchanged."""
    if getattr(op, "kind", "") != "attention":
        return op
    span = wflops.attention_span(model, training.seq_len, training.document_tokens,
                                 training.kernels.flash_attention)
    return dataclasses.replace(op, flops=op.flops * cp * span.fraction, bytes=op.bytes * cp, launches=op.launches * cp,
                               bwd_launches=op.bwd_launches * cp, k=min(op.k, span.keys), window=span.window,
                               window_share=span.windowed / span.fraction)


def _split_backward(bwd: tuple, blk: wparams.LayerParams, layer_local: float) -> tuple:
    """Split a block's backward before the post-attention norm: the MLP piece yields the MLP's
    weight gradients, the rest the attention's and the norms' (autograd runs the block in reverse)."""
    cut = next((i for i, op in enumerate(bwd) if op.name.startswith("post_attn")), None)
    if cut is None or cut == 0:
        return ()
    mlp = layer_local * blk.mlp / blk.total
    return (("mlp", bwd[:cut], mlp), ("attn", bwd[cut:], layer_local - mlp))
