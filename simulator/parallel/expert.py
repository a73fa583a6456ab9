"""Expert parallelism: token dispatch / combine all-to-alls, expert GEMMs and expert gradients.

Mesh: ``simulator.parallel.expert_mesh`` (which GPUs form the ``ep`` / ``etp`` / ``edp`` groups and
DeepEP's two hops).

Per MoE block and micro-batch (Megatron-Core ``MoEAlltoAllTokenDispatcher``):

* forward: attention, router and permute → **dispatch** all-to-all over the EP group (each GPU
  sends its ``T·top_k`` token copies of ``h`` elements) → [with ``etp > 1`` an all-gather of the
  received tokens over the ETP group] → grouped GEMM → [reduce-scatter over ETP] → **combine**
  all-to-all (the same volume back) → unpermute;
* backward: the mirror image (combine's backward is a dispatch of output gradients, and so on);
  full recomputation repeats the forward's all-to-alls, and so does Megatron-Core's ``moe`` recompute
  module, which re-runs the MoE layer from its router (``backward_block``);
* bytes: ``T·top_k·h·bytes`` per GPU, ``× imbalance`` for the most-loaded receiver, which sets the
  pace (``MoEConfig.rank_imbalance``). With DeepEP (``moe_dispatcher: deepep``) the dispatch travels
  in FP8 and the combine in BF16 when training in FP8 (DeepSeek-V3 report §3.3.2); Megatron-Core's
  alltoall dispatcher sends both in the 16-bit training dtype (its experts cast their input to FP8
  after the permute);
* shared experts need no dispatch; with ``parallel.moe_shared_expert_overlap`` they run while the
  dispatch is in flight (Megatron-Core ``--moe-shared-expert-overlap``), otherwise after the
  routed experts;
* (``simulator.parallel.expert_sync``) expert gradients reduce over the expert-data-parallel group
  (not the DP group), after the last micro-batch's backward of each MoE block: an all-reduce, or a
  reduce-scatter when the optimizer states are sharded (ZeRO ≥ 1 / distributed optimizer)
  (Megatron-Core ``DistributedDataParallel`` keeps expert parameters in their own buckets reduced
  over the expert-DP group);
* ZeRO-3 / FSDP FULL_SHARD / HYBRID_SHARD shard the expert weights over the expert-DP group
  too (torchtitan shards experts over ``dp_shard`` / EP, DeepSpeed-MoE over the expert-DP group):
  each MoE block's expert shard is all-gathered before its forward and again before its backward
  (one block ahead, on its own stream), and its gradients are reduce-scattered every micro-batch.

DeepEP dispatcher (``parallel.moe_dispatcher: deepep``; DeepSeek-V3 report §3.2.2, DeepEP's
internode kernels): when an EP group spans ``N`` nodes, a token crosses the network once per
destination node (to the GPU with the same index there, over its own rail) and is forwarded over
NVLink to its experts. With ``top_k`` distinct experts drawn uniformly from ``E`` spread over the ``N``
nodes a given node is hit with probability ``p = 1 − C(E − E/N, top_k) / C(E, top_k)``
(``moe_ops.hit_probability``), so the network hop is an all-to-all over the
``ep_inter`` group (one GPU per node) of ``N·p·T·h`` bytes-per-element. DeepEP sends a token once to
each GPU that holds any of its experts, not once per expert (``get_dispatch_layout``'s
``is_token_in_rank``; the receiver gets one row per token with its local expert indices, and the
combine returns one summed row per token and GPU; the README's bandwidths count ``recv_x``): over an EP
group of ``R`` GPUs that is ``R·q·T·h``, ``q`` the same probability for one GPU's ``E/R`` experts
(DeepSeek-V3's top 8 of 256 at EP 8: 5.29 copies for 8): the NVLink hop's all-to-all over ``ep_intra``
(the group's GPUs in one node), and the whole dispatch inside one node. The hops run side by
side, each on its own stream (``EP_COMM`` the network, ``EP_NVL_COMM`` NVLink), and what follows
waits for both: DeepEP's internode kernels pipeline them in chunks, the RDMA senders putting one
chunk on the network while the NVLink forwarders pass on the chunks already arrived (DeepEP README,
"normal kernels"; the RDMA and NVLink channels run in separate warps), as HybridEP does (Megatron-Core
``moe_flex_dispatcher_backend: hybridep``), so a dispatch takes the slower hop's time, not the sum;
the pipeline's fill (one chunk) is left out. The combine mirrors them. Node-limited routing (at
most M nodes per token) is not modelled.

"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from simulator.parallel import context_parallel, tp_overlap
from simulator.parallel.expert_tp import placement, tp_placed
from simulator.parallel.ir import GraphBuilder
from simulator.units import DTYPE_BYTES

#: Stream of the token dispatch / combine all-to-alls (their own NCCL communicator), and of DeepEP's
#: network hop.
EP_COMM = "comm_ep"
#: Stream of DeepEP's NVLink hop, beside the network hop (module docstring).
EP_NVL_COMM = "comm_ep_nvl"
#: Stream of the ZeRO-3 / FSDP all-gathers of expert weights over the expert-DP group.
EDP_COMM = "comm_edp"


@dataclass(frozen=True)
class MoEWork:
    """What the graph builders need to know about the MoE blocks of one (virtual) stage."""

    #: Per local block: True for an MoE block.
    layers: tuple[bool, ...]
    pre: tuple
    experts: tuple
    shared: tuple
    post: tuple
    bwd_pre: tuple
    bwd_experts: tuple
    bwd_shared: tuple
    bwd_post: tuple
    #: Full activation recomputation re-runs the forward (and its all-to-alls) before the backward.
    recompute: bool
    dispatch_bytes: float
    combine_bytes: float
    grad_bytes: float
    etp: int
    shared_overlap: bool
    #: Expert parameters of one MoE block on one GPU (elements) and their gradient bytes per element.
    expert_params: float
    expert_grad_dtype_bytes: float
    sharded_optimizer: bool
    #: ZeRO-3 / FSDP: bytes of one MoE block's experts all-gathered before each use (0 = not sharded).
    gather_bytes: float = 0.0
    #: Sharded optimizer without sharded weights (Megatron's distributed optimizer, ZeRO-1/2): bytes of
    #: one MoE block's updated experts all-gathered over the expert-DP group after the step (0 = none).
    step_gather_bytes: float = 0.0
    #: Megatron ``--overlap-param-gather``: that gather is issued per block ahead of its first forward.
    overlap_step_gather: bool = False
    #: DeepEP two-hop dispatch: the network hop carries ``inter_fraction`` x the all-to-all's bytes
    #: (``N·p/top_k``, module docstring); 0 = one all-to-all over the EP group.
    inter_fraction: float = 0.0
    #: DeepEP: the NVLink hop (or the one all-to-all) carries ``intra_fraction`` x those bytes, one copy
    #: per GPU hit (``R·q/top_k``, module docstring); 1 = one copy per expert (Megatron-Core's alltoall).
    intra_fraction: float = 1.0
    #: Megatron-Core ``overlap_moe_expert_parallel_comm`` (``parallel.moe_a2a_overlap``): the forward
    #: of one micro-batch and the backward of another run together (``combined_block``).
    a2a_overlap: bool = False
    #: Index in ``experts`` where the forward synchronises the host with the GPU (0 = none;
    #: ``moe_ops.MoEBlockOps.sync_at``): the forward experts run as two compute tasks, split there, so
    #: that each stretch between two synchronisations is priced on its own (``moe_host.forward``).
    experts_sync: int = 0
    #: Whether the block places its attention's TP collectives beside their GEMMs in the forward and in
    #: the backward (``expert_tp.tp_placed``; decided once per work, not per block and micro-batch).
    tp_placed_fwd: bool = False
    tp_placed_bwd: bool = False
    #: Megatron-Core's ``moe`` recompute module: the MoE layer, from the router (``pre[router_at:]``) to
    #: the unpermute, re-run with its all-to-alls before the block's backward (``backward_block``).
    layer_recompute: bool = False
    router_at: int = 0
    #: How often the shared experts re-run before their backward, their tensor-parallel collectives with them
    #: (``expert_tp.plain_tp_calls``): once per ``moe`` / ``shared_experts`` recompute module (both: the
    #: checkpoints nest, and the inner one re-runs again inside the outer's backward).
    shared_reruns: int = 0

    #: Expert-DP ranks the optimizer step shards the experts over (1: every rank steps all of its experts).
    optimizer_divisor: int = 1

    @property
    def optimizer_params(self) -> float:
        """Expert parameters this (virtual) stage's GPU steps: its MoE blocks' experts over the optimizer's shards."""
        return self.expert_params * sum(self.layers) / self.optimizer_divisor

    def slice(self, start: int, n: int) -> MoEWork:
        return dataclasses.replace(self, layers=self.layers[start:start + n])


def is_moe(work: Any, unit: Any) -> bool:
    moe = getattr(work, "moe", None)
    return moe is not None and isinstance(unit, int) and moe.layers[unit]


def _a2a(b: GraphBuilder, name: str, nbytes: float, deps: tuple, g: int, layer: int, mw: MoEWork,
         gather: bool) -> tuple:
    """One all-to-all over EP, or DeepEP's two hops side by side (module docstring), plus the ETP
    all-gather after a dispatch or reduce-scatter before a combine; returns the tasks that what
    follows waits for. ``nbytes``: one copy per expert."""
    etp, inter = mw.etp, mw.inter_fraction
    nbytes, per_expert = nbytes * mw.intra_fraction, nbytes
    if etp > 1 and not gather:
        rs = b.collective(f"etp reduce_scatter {name}", "ep", "reduce_scatter", "etp", nbytes * etp,
                          stream=EP_COMM, deps=deps, micro_batch=g, layer=layer)
        deps = (rs,) if rs is not None else deps
    if inter > 0:
        hops = (("ep_inter", per_expert * inter, EP_COMM), ("ep_intra", nbytes, EP_NVL_COMM))
        done = tuple(b.collective(f"ep all_to_all {name} ({group})", "ep", "all_to_all", group, size,
                                  stream=stream, deps=deps, micro_batch=g, layer=layer)
                     for group, size, stream in hops)
    else:
        done = (b.collective(f"ep all_to_all {name}", "ep", "all_to_all", "ep", nbytes, stream=EP_COMM, deps=deps,
                             micro_batch=g, layer=layer),)
    done = tuple(t for t in done if t is not None) or deps
    if etp > 1 and gather:
        done = (b.collective(f"etp all_gather {name}", "ep", "all_gather", "etp", nbytes * etp,
                             stream=EP_COMM, deps=done, micro_batch=g, layer=layer),)
    return done


def _forward_experts(b: GraphBuilder, mw: MoEWork, kind: str, name: str, deps: tuple, g: int,
                     layer: int) -> int:
    """The forward experts as one compute task, or two split at the host synchronisation
    (``MoEWork.experts_sync``); returns the last."""
    cut = mw.experts_sync
    if not cut:
        return b.compute(f"{name} experts", kind, mw.experts, deps=deps, micro_batch=g, layer=layer)
    first = b.compute(f"{name} experts", kind, mw.experts[:cut], deps=deps, micro_batch=g, layer=layer)
    return b.compute(f"{name} experts (after sync)", kind, mw.experts[cut:], deps=(first,), micro_batch=g,
                     layer=layer)


def _attention_forward(b: GraphBuilder, work: Any, kind: str, name: str, deps, g: int, layer: int) -> tuple:
    """The block's attention and router piece; returns the tasks the dispatch waits for."""
    mw: MoEWork = work.moe
    if tp_placed(work, "fwd"):  # the SP collectives beside qkv and out_proj (and the K/V ring under CP)
        last, pending = tp_overlap.sp_forward_block(b, work, mw.pre, kind, f"{name} attn+router", list(deps), g,
                                                    layer)
        return (last, *pending)
    if work.cp_kv_bytes > 0:  # context parallel: the K/V ring beside the attention core
        return (context_parallel.forward_block(b, work, mw.pre, kind, f"{name} attn+router", deps, g, layer),)
    return (b.compute(f"{name} attn+router", kind, mw.pre, deps=deps, micro_batch=g, layer=layer),)


def _routed(b: GraphBuilder, mw: MoEWork, kind: str, name: str, ready: tuple, pre: int, g: int, layer: int,
            post: tuple) -> int:
    """The MoE layer past its router: dispatch → experts (shared experts beside or after) → combine →
    ``post``; ``pre`` is the task the shared experts follow when they overlap the dispatch."""
    d = _a2a(b, f"dispatch {name}", mw.dispatch_bytes, ready, g, layer, mw, gather=True)
    if mw.shared and mw.shared_overlap:
        b.compute(f"{name} shared experts", kind, mw.shared, deps=(pre,), micro_batch=g, layer=layer)
    ex = _forward_experts(b, mw, kind, name, d, g, layer)
    if mw.shared and not mw.shared_overlap:
        b.compute(f"{name} shared experts", kind, mw.shared, deps=(ex,), micro_batch=g, layer=layer)
    c = _a2a(b, f"combine {name}", mw.combine_bytes, (ex,), g, layer, mw, gather=False)
    return b.compute(f"{name} unpermute", kind, post, deps=c, micro_batch=g, layer=layer)


def forward_block(b: GraphBuilder, work: Any, kind: str, name: str, deps, g: int, layer: int) -> int:
    """Forward (or full recompute) of one MoE block: pre → dispatch → experts → combine → post."""
    mw: MoEWork = work.moe
    ready = _attention_forward(b, work, kind, name, deps, g, layer)
    return _routed(b, mw, kind, name, ready, ready[0], g, layer, mw.post)


def _layer_recompute(b: GraphBuilder, mw: MoEWork, name: str, deps, g: int, layer: int) -> int:
    """Megatron-Core's ``moe`` recompute module (``MoELayer.forward`` under ``tensor_parallel.checkpoint``
    when ``"moe" in recompute_modules``): the whole MoE layer, router and preprocessing, dispatch, experts,
    shared experts, combine, re-run from its stored input before the block's backward. The residual add
    after the layer belongs to the transformer layer and is not re-run."""
    router = b.compute(f"{name} router", "recompute", mw.pre[mw.router_at:], deps=tuple(deps), micro_batch=g,
                       layer=layer)
    post = tuple(op for op in mw.post if op.name != "output_residual_add")
    return _routed(b, mw, "recompute", name, (router,), router, g, layer, post)


def backward_block(b: GraphBuilder, work: Any, name: str, deps, g: int, layer: int) -> tuple[int, list]:
    """Backward of one MoE block (mirror of the forward; gradients travel in the training dtype).
    Returns the last compute task and the collectives the next unit must wait for."""
    mw: MoEWork = work.moe
    if mw.recompute:
        deps = [forward_block(b, work, "recompute", f"recompute {layer} mb{g}", deps, g, layer)]
    elif mw.layer_recompute:
        deps = [_layer_recompute(b, mw, f"recompute {layer} mb{g}", deps, g, layer)]
    post = b.compute(f"{name} unpermute", "backward", mw.bwd_post, deps=deps, micro_batch=g, layer=layer)
    c = _a2a(b, f"combine-bwd {name}", mw.grad_bytes, (post,), g, layer, mw, gather=True)
    if mw.bwd_shared and mw.shared_overlap:
        b.compute(f"{name} shared experts", "backward", mw.bwd_shared, deps=(post,), micro_batch=g, layer=layer)
    ex = b.compute(f"{name} experts", "backward", mw.bwd_experts, deps=c, micro_batch=g, layer=layer)
    if mw.bwd_shared and not mw.shared_overlap:
        b.compute(f"{name} shared experts", "backward", mw.bwd_shared, deps=(ex,), micro_batch=g, layer=layer)
    d = _a2a(b, f"dispatch-bwd {name}", mw.grad_bytes, (ex,), g, layer, mw, gather=False)
    if tp_placed(work, "bwd"):
        piece = tp_overlap.sp_backward_piece if work.tp_comm_overlap else tp_overlap.async_backward_piece
        return piece(b, work, mw.bwd_pre, f"{name} attn+router", list(d), g, layer)
    if work.cp_kv_bytes > 0:
        return context_parallel.backward_piece(b, work, mw.bwd_pre, f"{name} attn+router", list(d), g, layer), []
    return b.compute(f"{name} attn+router", "backward", mw.bwd_pre, deps=d, micro_batch=g, layer=layer), []


def combined_block(b: GraphBuilder, fwork: Any, gf: int, f_unit: int, f_deps, bwork: Any, gb: int, b_unit: int,
                   b_deps) -> tuple[int, int]:
    """The forward of MoE block ``f_unit`` (micro-batch ``gf``) and the backward of MoE block ``b_unit``
    (micro-batch ``gb``) interleaved so that each all-to-all runs under the other pass's compute:
    DeepSeek-V3's DualPipe pairing of two micro-batches' chunks, attention(F) hides combine(B),
    MLP(B) hides dispatch(F), MLP(F) hides dispatch(B), attention(B) hides combine(F) (as described
    in Ascend MindSpeed ``docs/features/megatron_moe/megatron-moe-fb-overlap.md`` from DeepSeek's
    published profile data), which Megatron-Core's combined 1F1B runs
    (``pipeline_parallel/combined_1f1b.py``: "EP A2A in forward step is hidden by the attention/mlp
    computation in the backward step, and vice versa"). Issue order on the compute stream: backward unpermute, forward attention+router,
    backward experts, forward experts, backward attention+router, forward unpermute; on the EP
    stream: backward combine, forward dispatch, backward dispatch, forward combine. The compute
    stays serial (one stream): what is gained is the all-to-all time that other compute now covers.
    Shared experts follow the pass's attention (with ``moe_shared_expert_overlap``) or its experts.
    Returns (forward's last task, backward's last task)."""
    fm, bm = fwork.moe, bwork.moe
    fname, bname = f"fwd {f_unit} mb{gf}", f"bwd {b_unit} mb{gb}"
    b_post = b.compute(f"{bname} unpermute", "backward", bm.bwd_post, deps=b_deps, micro_batch=gb, layer=b_unit)
    b_comb = _a2a(b, f"combine-bwd {bname}", bm.grad_bytes, (b_post,), gb, b_unit, bm, gather=True)
    f_pre = b.compute(f"{fname} attn+router", "forward", fm.pre, deps=f_deps, micro_batch=gf, layer=f_unit)
    f_disp = _a2a(b, f"dispatch {fname}", fm.dispatch_bytes, (f_pre,), gf, f_unit, fm, gather=True)
    if fm.shared and fm.shared_overlap:
        b.compute(f"{fname} shared experts", "forward", fm.shared, deps=(f_pre,), micro_batch=gf, layer=f_unit)
    if bm.bwd_shared and bm.shared_overlap:
        b.compute(f"{bname} shared experts", "backward", bm.bwd_shared, deps=(b_post,), micro_batch=gb, layer=b_unit)
    b_ex = b.compute(f"{bname} experts", "backward", bm.bwd_experts, deps=b_comb, micro_batch=gb, layer=b_unit)
    if bm.bwd_shared and not bm.shared_overlap:
        b.compute(f"{bname} shared experts", "backward", bm.bwd_shared, deps=(b_ex,), micro_batch=gb, layer=b_unit)
    b_disp = _a2a(b, f"dispatch-bwd {bname}", bm.grad_bytes, (b_ex,), gb, b_unit, bm, gather=False)
    f_ex = _forward_experts(b, fm, "forward", fname, f_disp, gf, f_unit)
    if fm.shared and not fm.shared_overlap:
        b.compute(f"{fname} shared experts", "forward", fm.shared, deps=(f_ex,), micro_batch=gf, layer=f_unit)
    f_comb = _a2a(b, f"combine {fname}", fm.combine_bytes, (f_ex,), gf, f_unit, fm, gather=False)
    b_pre = b.compute(f"{bname} attn+router", "backward", bm.bwd_pre, deps=b_disp, micro_batch=gb, layer=b_unit)
    f_post = b.compute(f"{fname} unpermute", "forward", fm.post, deps=f_comb, micro_batch=gf, layer=f_unit)
    return f_post, b_pre


def attach(work: Any, scenario: Any, pb: int) -> Any:
    """``work`` of an MoE / MLA model: per-block parameters without the experts (those reduce over
    the expert-DP group here), the MoE blocks' ops and all-to-all volumes, and the expert share the
    optimizer steps (``MoEWork.optimizer_params``, ``StepWork.step_ops``)."""
    from simulator.parallel.work import scale_attention
    from simulator.workload import bias as wbias
    from simulator.workload import host as whost
    from simulator.workload import moe as wmoe
    from simulator.workload import moe_host, moe_ops
    from simulator.workload import ops as wops

    model, tr, par = scenario.model, scenario.training, scenario.parallel
    cp = getattr(par, "cp", 1)
    b, s, tp = tr.micro_batch_size, tr.seq_len // cp, par.tp  # a CP rank holds s/cp tokens
    ep, etp = getattr(par, "ep", 1), getattr(par, "etp", 1)
    flags = tuple(model.is_moe_block(i) for i in range(model.n_layers))
    flags += flags[-1:] * model.mtp_layers  # an MTP block is of the last block's kind (simulator.workload.mtp)
    dense_local = sum(wmoe.block_local(model, f, tp, ep, etp).dense for f in flags) / len(flags)
    changes: dict[str, Any] = {"layer_params": float(dense_local), "layer_bwd_pieces": ()}
    mods = getattr(work, "layer_module_params", ())
    if mods and sum(mods) > 0:  # ZeRO-3 per-module gathers: the same shares of the non-expert block
        gathered = max(0.0, dense_local - work.layer_persistent)
        changes["layer_module_params"] = tuple(x * gathered / sum(mods) for x in mods)
    if model.is_mla and cp > 1:  # the ring carries the decompressed K (a·d_qk) and V (a·d_v)
        width = model.n_heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
        changes["cp_kv_bytes"] = float(b * tr.seq_len * width / tp * pb)
    if model.moe is None:
        return dataclasses.replace(work, **changes)
    from simulator.workload import recompute as wrecompute

    dispatcher = getattr(par, "moe_dispatcher", "alltoall")
    deepep = dispatcher == "deepep"
    modules = wrecompute.modules(tr)
    ops = moe_ops.moe_block_ops(model, b, s, tp, pb, tr.kernels, wrecompute.attention_mode(tr, par.framework), ep, etp,
                                modules=modules,
                                fp8=tr.active_fp8_recipe,
                                streams=moe_ops.expert_streams(par.framework),
                                sequence_parallel=bool(getattr(par, "sequence_parallel", False)),
                                fp8_padding=moe_ops.fp8_padding(model, par.framework, tr.active_fp8_recipe),
                                dispatcher=dispatcher,
                                linear=wbias.linear_impl(tr.kernels, par.framework))
    ops = dataclasses.replace(ops, pre=tuple(scale_attention(op, cp, model, tr) for op in ops.pre))
    local_experts, fp8_host = ops.local_experts, tr.active_fp8_recipe
    te_share = whost.te_share(scenario.cluster.topology.host)
    ops = moe_host.forward(ops, model, tr.kernels, par.framework, local_experts, fp8_host, te_share)
    imb = model.moe.rank_imbalance(ep)
    # a LatentMoE dispatches its tokens in the latent width (workload.moe_ops: fc1_latent_proj before the dispatch)
    act_bytes = ops.routed_tokens * model.moe.routed_width(model.hidden_size) * imb
    # FP8 dispatch is DeepEP's (DeepSeek-V3 report §3.3.2: activations quantized before the dispatch);
    # Megatron-Core's alltoall dispatcher sends the 16-bit norm output that the experts' GroupedLinear
    # casts after the permute (forks add FP8 all-to-alls: swiss-ai/Megatron-LM PR #127, AMD Primus PR #152)
    fp8_dispatch = tr.precision == "fp8" and deepep
    expert_local = wmoe.block_local(model, True, tp, ep, etp).experts
    stage = par.effective_zero_stage
    edp = scenario.n_gpus // (par.pp * ep * etp)
    full = tr.activation_checkpointing == "full"

    def bwd(fwd_ops: tuple) -> tuple:
        # full recomputation re-runs the pieces' forwards (MoEWork.recompute); selective recomputation's
        # modules (training.recompute_modules) open the backward of the piece that holds them
        return tuple(op for op in wops.backward_ops(list(fwd_ops)) if not (full and op.name.startswith("recompute.")))

    # expert weights are linear weights: FP8 under parallel.fp8_param_gather (schedule.unit_gather_bytes)
    weight_bytes = expert_local * (DTYPE_BYTES["fp8"] if par.fp8_param_gather else pb)
    bwd_pre, bwd_experts, bwd_shared, bwd_post = moe_host.backward(
        tuple(bwd(p) for p in (ops.pre, ops.experts, ops.shared, ops.post)), model, tr.kernels, par.framework,
        local_experts, fp8_host, te_share)
    placed = placement(work, ops.pre, bwd_pre)
    changes["moe"] = MoEWork(
        layers=flags,
        pre=ops.pre, experts=ops.experts, shared=ops.shared, post=ops.post,
        bwd_pre=bwd_pre, bwd_experts=bwd_experts, bwd_shared=bwd_shared, bwd_post=bwd_post,
        recompute=full,
        dispatch_bytes=act_bytes * (1 if fp8_dispatch else pb),
        combine_bytes=act_bytes * pb,
        grad_bytes=act_bytes * pb,
        etp=etp,
        shared_overlap=bool(getattr(par, "moe_shared_expert_overlap", False)),
        expert_params=expert_local,
        expert_grad_dtype_bytes=float(par.ddp_grad_bytes(tr.precision)) if par.framework == "ddp" else float(pb),
        sharded_optimizer=stage >= 1,
        optimizer_divisor=edp if stage >= 1 else 1,
        gather_bytes=weight_bytes if stage >= 3 else 0.0,
        step_gather_bytes=weight_bytes if stage in (1, 2) else 0.0,
        overlap_step_gather=bool(getattr(par, "overlap_param_gather", False)) and par.framework == "ddp",
        a2a_overlap=bool(getattr(par, "moe_a2a_overlap", False)),
        experts_sync=ops.sync_at,
        tp_placed_fwd=placed[0],
        tp_placed_bwd=placed[1],
        layer_recompute="moe" in modules,
        router_at=ops.router_at,
        shared_reruns=len({"moe", "shared_experts"} & modules) if ops.shared else 0,
    )
    per_node = scenario.cluster.topology.gpus_per_node
    n_nodes = (ep * etp) // per_node if ep * etp > per_node else 1
    if deepep:
        k, e = model.moe.top_k, model.moe.n_experts
        changes["moe"] = dataclasses.replace(
            changes["moe"], intra_fraction=moe_ops.copies_per_gpu(ep, e, k),
            inter_fraction=moe_ops.copies_per_gpu(n_nodes, e, k) if n_nodes > 1 else 0.0)
    return dataclasses.replace(work, **changes)
