"""DeepSpeed ZeRO stages 0-3 as graph builders (DS 0.16.5; formulas.md §4.2, §4.4, §5).

What is communicated, when (per rank, φ = (n−1)/n, Ψ parameters, G micro-batches):

* stage 0: at the accumulation boundary, after backward, bucketed all-reduce of all gradients
  (``MEMORY_OPT_ALLREDUCE_SIZE`` = 5e8 elements), not overlapped with backward: ``2φΨ``. In bf16 this is
  the ``BF16_Optimizer`` (``ParallelConfig.bf16_optimizer``): after every micro-batch's backward it adds
  the bf16 gradients into its fp32 buffer (``update_hp_grads``: ``hp_grad.add_(lp.grad.to(fp32))``, a
  cast and an add per parameter tensor, ``BF16_ACCUMULATE_BYTES`` per parameter), all-reduces that fp32
  buffer at the boundary, steps its 1/n slice and all-gathers the bf16 weights (its own ZeRO-1);
* stage 1: gradient reduction only in the boundary micro-batch's backward, then the optimizer on
  Ψ/n and an all-gather of the updated 16-bit parameters: ``2φΨ + φΨ``;
* stage 2: bucketed reduction in **every** micro-batch's backward, plus the post-step gather:
  ``G·2φΨ + φΨ``. Stages 1-2 reduce each ``reduce_bucket_size`` bucket with a full all-reduce and keep
  their slice (``use_multi_rank_bucket_allreduce=True``; no NCCL reduce-scatter in ZeRO-1/2); with it
  False, one reduce per rank slice, modelled as a reduce-scatter of the bucket (``φ`` per element);
* stage 3: every micro-batch all-gathers each module's parameters before forward and again before
  backward (persistent small tensors excepted; one all-gather per sub-module, so a block pays
  several collective latencies) and reduce-scatters gradients per bucket: ``G·3φΨ``; no post-step
  gather. Under full activation recomputation the recompute forward's gather serves the block's
  backward only for the modules ``stage3_max_reuse_distance`` keeps: after the recompute of module
  ``k`` of a block with modules ``s_0..s_{M−1}`` (forward order), the trace runs the rest of the
  recompute and then the backward in reverse, so DeepSpeed's release walk
  (``PartitionedParameterCoordinator.__params_to_release``: keep a parameter met before
  ``max_reuse_distance`` parameters of the following modules) keeps module ``k`` iff
  ``2·Σ_{j>k} s_j < max_reuse_distance``; the others are fetched again before the backward. A
  175B GPT block (1.8e9 parameters, 4 modules) keeps only its last module at the default 1e9.
  Without recomputation the forward-to-backward reuse of the last block is not modelled (every
  block is gathered again).

``overlap_comm`` (default True for stage 3, False otherwise) puts the reductions on a separate
stream; when False they are issued inside the gradient hook on the compute stream (interleaved
with, not overlapped with, backward). ZeRO++ qwZ/hpZ/qgZ and 1-bit Adam change byte widths or
groups (``simulator.parallel.context``). Offload: ``simulator.parallel.offload``.
``contiguous_gradients`` changes memory only; ``allgather_bucket_size`` is unused because DeepSpeed
gathers with ``all_gather_into_tensor`` (one call per parameter group) when it is available.

Prefetch (stage 3): a block's gathers may start once the block ``depth + 1`` places earlier has
run, with ``depth = max(1, ⌊stage3_prefetch_bucket_size / block⌋)`` limited by
``stage3_max_live_parameters`` (``simulator.parallel.prefetch``). Any bucket above 0 prefetches:
DeepSpeed's ``PartitionedParameterCoordinator.fetch_sub_module`` pops parameters from its trace queue
``while numel_prefetching < max_params_to_prefetch``, testing before it adds, so at least the next
parameter is gathered ahead however small the bucket; 0 switches prefetch off. Each block is fetched module by module
(``StepWork.layer_module_params``: 7 all-gathers for an HF Llama block, 4 for a Megatron GPT block),
each call paying its collective latency and ``stage3_fetch_overhead_s`` of host time.
"""

from __future__ import annotations

import math

from simulator.parallel import offload
from simulator.parallel.context import QGZ_BYTES, QWZ_BYTES, BuildContext
from simulator.parallel.ir import COMM, COMPUTE, GraphBuilder, StepGraph
from simulator.parallel.prefetch import Prefetcher
from simulator.parallel.schedule import (
    Hooks,
    backward_order,
    forward_order,
    plan_buckets,
    ready_order,
    run_micro_batches,
    unit_params,
    unit_persistent,
)
from simulator.workload.op import Op

#: deepspeed/runtime/engine.py: stage-0 all-reduce bucket, elements.
MEMORY_OPT_ALLREDUCE_SIZE = 5e8
#: ``BF16_Optimizer.update_hp_grads`` per parameter and micro-batch: ``lp.grad.to(fp32)`` reads 2 B and
#: writes 4 B, ``hp_grad.add_`` reads 4 + 4 B and writes 4 B; two kernels per parameter tensor (a Python
#: loop; the pipeline engine calls it after each micro-batch's backward, runtime/pipe/engine.py
#: ``_exec_backward_pass``).
BF16_ACCUMULATE_BYTES, BF16_ACCUMULATE_LAUNCHES = 18, 2


class _Reducer:
    """Bucketed gradient reduction shared by all stages."""

    def __init__(self, ctx: BuildContext, op: str, cap: float, stream: str) -> None:
        self.ctx = ctx
        self.op = op
        self.stream = stream
        work = ctx.work
        ready = ready_order(work)
        self.keys = [k for k, _ in ready]
        self.by_unit: dict = {}
        for bk in plan_buckets(ready, cap):
            self.by_unit.setdefault(bk.ready_unit, []).append(bk)
        p = ctx.parallel
        # ZeRO++ qgZ replaces the stage-3 gradient reduce-scatter (INT4 all-to-all).
        qgz = p.zero_quantized_gradients and p.zero_stage == 3
        self.elem_bytes = QGZ_BYTES if qgz else ctx.ds_comm_bytes
        self.offloading = p.offload_optimizer != "none"
        # ZeRO-3 reduce-scatters of list-based DeepSpeed (< 0.4) pay a host cost per rank.
        self.host_s = p.stage3_list_overhead_per_rank_s * ctx.size("dp") if p.zero_stage == 3 else 0.0
        self.tail: list[int | None] = []

    def reduce(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        n = self.ctx.size("dp")
        for i, bk in enumerate(self.by_unit.get(unit, [])):
            label = f"{unit[0]}.{unit[1]}" if isinstance(unit, tuple) else unit
            tid = b.collective(f"{self.op} grads@{label}.{i} mb{g}", "grad_reduce", self.op, "dp",
                               bk.elements * self.elem_bytes, count=bk.count, stream=self.stream,
                               deps=(task,), micro_batch=g, host_s=self.host_s) if n > 1 else None
            self.tail.append(tid)
            if self.offloading:
                # Each rank copies its own 1/n slice in the working dtype (DS upcasts on the host).
                cp = offload.grads_down(b, f"{label}.{i} mb{g}", bk.count * bk.elements / n * self.ctx.param_bytes,
                                        tid if tid is not None else task, g)
                self.tail.append(cp)


class Zero012Hooks(Hooks):
    def __init__(self, ctx: BuildContext) -> None:
        p = ctx.parallel
        self.ctx = ctx
        self.stage = p.zero_stage
        self.bf16_optimizer = p.bf16_optimizer(ctx.precision)
        #: one ops tuple per distinct accumulation, so the costing memo prices it once, not per task
        self._accumulations: dict[tuple[float, int], tuple[Op]] = {}
        stream = COMM if p.effective_overlap_comm else COMPUTE
        if self.stage == 0:
            self.reducer = _Reducer(ctx, "all_reduce", MEMORY_OPT_ALLREDUCE_SIZE, COMM)
        else:
            op = "all_reduce" if p.use_multi_rank_bucket_allreduce else "reduce_scatter"
            self.reducer = _Reducer(ctx, op, p.reduce_bucket_size, stream)

    def repeats(self, g: int) -> bool:
        """Stage 2 reduces in every micro-batch, stages 0-1 only in the boundary (last) one: the others
        issue the same tasks; the reducer's tail is the only state (``replicated``)."""
        return self.stage == 2 or g < self.ctx.n_micro - 1

    def replicated(self, lo: int, hi: int, shift: int) -> None:
        self.reducer.tail.extend([t + shift for t in self.reducer.tail if t is not None and lo <= t < hi])

    def grads_ready(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        boundary = g == self.ctx.n_micro - 1
        accumulate = self._accumulate(unit) if self.bf16_optimizer else None
        if accumulate is not None:
            task = b.compute(f"bf16 grad accumulate {unit} mb{g}", "backward", accumulate, deps=(task,),
                             micro_batch=g)
        if self.stage == 2 or (self.stage == 1 and boundary):
            self.reducer.reduce(b, g, unit, task)
        elif self.stage == 0 and boundary and unit == self.reducer.keys[-1]:
            # Stage 0 reduces after the whole backward: every bucket waits for the last gradient.
            for key in self.reducer.keys:
                self.reducer.reduce(b, g, key, task)

    def _accumulate(self, unit) -> tuple[Op] | None:
        """``BF16_Optimizer.update_hp_grads`` over ``unit``'s parameters (``BF16_ACCUMULATE_*``; a block's
        tensors counted as its linear modules' weights and biases), as a one-op tuple shared by every
        unit and micro-batch of the same size; ``None`` for a unit without any."""
        work = self.ctx.work
        n = unit_params(work, unit)
        if n <= 0:
            return None
        tensors = 2 * max(len(work.layer_module_names), 1) if isinstance(unit, int) else 1
        key = (n, tensors)
        if key not in self._accumulations:
            self._accumulations[key] = (Op("bf16_grad_accumulate", "memory", n, BF16_ACCUMULATE_BYTES * n,
                                           launches=BF16_ACCUMULATE_LAUNCHES * tensors),)
        return self._accumulations[key]


class Zero3Hooks(Hooks):
    def __init__(self, ctx: BuildContext) -> None:
        p, work = ctx.parallel, ctx.work
        self.ctx = ctx
        self.n = ctx.size("dp")
        stream = COMM if p.effective_overlap_comm else COMPUTE
        self.reducer = _Reducer(ctx, "reduce_scatter", p.reduce_bucket_size, stream)
        self.depth = self._depth(p, work)
        self.pf: Prefetcher | None = None
        self._fetches: dict[tuple, dict] = {}
        self._released = self._released_after_recompute()  # the same for every block and micro-batch
        self._refetch: tuple | None = None  # (micro-batch, its re-fetch issuer)

    @staticmethod
    def _depth(p, work) -> int:
        """Units gathered ahead: ``stage3_prefetch_bucket_size`` / unit size (at least one unit when the
        bucket is above 0, module docstring), and at most what ``stage3_max_live_parameters`` leaves besides the unit
        in use."""
        unit = max(work.layer_params, 1.0)
        if p.stage3_prefetch_bucket_size <= 0:
            return 0
        depth = max(1, math.floor(p.stage3_prefetch_bucket_size / unit))
        live = max(0, math.floor(p.stage3_max_live_parameters / unit) - 1)
        return min(depth, live)

    def _released_after_recompute(self) -> tuple[int, ...]:
        """Module indices (forward order) released between a block's recompute and its backward
        (module docstring: kept iff ``2·Σ_{j>k} s_j < stage3_max_reuse_distance``)."""
        shares = self.ctx.work.layer_module_params
        limit = self.ctx.parallel.stage3_max_reuse_distance
        return tuple(k for k in range(len(shares)) if 2 * sum(shares[k + 1:]) >= limit)

    def post_recompute(self, b: GraphBuilder, g: int, unit, task: int):
        if not self._released or not isinstance(unit, int):
            return ()
        if self._refetch is None or self._refetch[0] != g:
            self._refetch = (g, self._issuer(g, True, self._released))
        return (self._refetch[1](b, unit, [task]),)

    def _gather_bytes(self, unit, backward: bool) -> float:
        p = self.ctx.parallel
        elems = unit_params(self.ctx.work, unit) - unit_persistent(self.ctx.work, unit)
        width = QWZ_BYTES if p.zero_quantized_weights else self.ctx.param_bytes
        return elems * width

    def _issuer(self, g: int, backward: bool, modules: tuple[int, ...] | None = None):
        """Gathers of micro-batch ``g``; ``modules``: only these modules of a block (a re-fetch)."""
        p = self.ctx.parallel
        hpz = backward and p.zero_hpz_partition_size > 1
        group = "dp_shard" if hpz else "dp"
        phase = ("refetch" if modules is not None else "bwd") if backward else "fwd"
        skip = self.ctx.size(group) == 1
        host_s = p.stage3_fetch_overhead_s + p.stage3_list_overhead_per_rank_s * self.ctx.size(group)
        mb = f" mb{g}"
        cache = self._fetches.setdefault((backward, modules), {})

        def issue(b: GraphBuilder, unit, deps: list) -> int | None:
            if skip:
                return None
            hit = cache.get(unit)
            if hit is None:
                hit = cache[unit] = self._fetch(unit, backward, phase, modules)
            nbytes, parts = hit
            if p.offload_param != "none":  # read from NVMe through the host with offload_param: nvme
                up = b.copy(f"param h2d {unit}{mb}", "h2d", nbytes / self.n, deps=deps, micro_batch=g,
                            source="nvme" if p.offload_param == "nvme" else "host")
                deps = [up]
            if parts is None:
                return b.collective(f"allgather {phase} {unit}{mb}", "param_allgather", "all_gather", group,
                                    nbytes, deps=deps, micro_batch=g, host_s=host_s)
            parts = tuple([(prefix + mb, size) for prefix, size in parts])
            return b.collective(f"allgather {phase} {unit}{mb}", "param_allgather", "all_gather", group,
                                nbytes, deps=deps, micro_batch=g, host_s=host_s, parts=parts)

        return issue

    def _fetch(self, unit, backward: bool, phase: str,
               modules: tuple[int, ...] | None = None) -> tuple[float, tuple | None]:
        """A unit's gathered bytes and its per-module (label prefix, bytes), or ``None`` when it is
        fetched whole; the same for every micro-batch, so computed once per unit and pass.
        ``modules``: only these modules (a re-fetch after recomputation).

        DeepSpeed fetches each sub-module (nn.Linear) with its own all-gather, in trace order
        (reversed in backward): a block pays one collective latency and one fetch's host cost per
        module (e.g. 7 for an HF Llama block), not one per block."""
        nbytes = self._gather_bytes(unit, backward)
        work = self.ctx.work
        if not isinstance(unit, int) or not work.layer_module_params:
            return nbytes, None
        names = work.layer_module_names
        shares = work.layer_module_params
        order = range(len(shares) - 1, -1, -1) if backward else range(len(shares))
        scale = nbytes / sum(shares)
        parts = tuple((f"allgather {phase} {unit}.{names[i]}", shares[i] * scale) for i in order
                      if modules is None or i in modules)
        return (nbytes if modules is None else sum(x for _, x in parts)), parts

    def pre_forward(self, b: GraphBuilder, g: int, unit):
        if unit == "E":
            self.pf = Prefetcher(forward_order(self.ctx.work), self.depth, self._issuer(g, False))
        assert self.pf is not None
        return (self.pf.ensure(b, unit),)

    def post_forward(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        assert self.pf is not None
        self.pf.computed(unit, task)

    def pre_backward(self, b: GraphBuilder, g: int, unit):
        if unit == "H":
            self.pf = Prefetcher(backward_order(self.ctx.work), self.depth, self._issuer(g, True))
        assert self.pf is not None
        return (self.pf.ensure(b, unit),)

    def grads_ready(self, b: GraphBuilder, g: int, key, task: int) -> None:
        self.reducer.reduce(b, g, key, task)

    def repeats(self, g: int) -> bool:
        """Every micro-batch issues the same tasks: the prefetchers are rebuilt at each pass's first
        unit, the gathered bytes and bucket plan are the step's, and the reductions run in every
        micro-batch (no accumulation boundary); only the reducer's tail grows (``replicated``)."""
        return True

    def replicated(self, lo: int, hi: int, shift: int) -> None:
        self.reducer.tail.extend([t + shift for t in self.reducer.tail if t is not None and lo <= t < hi])

    def post_backward(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        assert self.pf is not None
        self.pf.computed(unit, task)


def make_hooks(ctx: BuildContext) -> Zero012Hooks | Zero3Hooks:
    return Zero3Hooks(ctx) if ctx.parallel.zero_stage == 3 else Zero012Hooks(ctx)


def build(ctx: BuildContext) -> StepGraph:
    b = GraphBuilder()
    hooks = make_hooks(ctx)
    run_micro_batches(b, ctx.work, ctx.n_micro, hooks)
    return b.build(**finish(b, ctx, hooks))


def finish(b: GraphBuilder, ctx: BuildContext, hooks: Zero012Hooks | Zero3Hooks) -> dict:
    """Optimizer step on the rank's partition (GPU or CPU offload), then the post-step gather."""
    p, work = ctx.parallel, ctx.work
    stage = p.zero_stage
    n = ctx.size("dp")
    if isinstance(hooks, Zero3Hooks):  # the prefetchers' issuers refer back to the hooks: drop the cycle
        hooks.pf = hooks._refetch = None
    sharded = stage >= 1 or p.bf16_optimizer(ctx.precision)  # BF16_Optimizer: its own ZeRO-1
    local = work.total_params / n if sharded else work.total_params
    tail = [t for t in hooks.reducer.tail if t is not None][-1:]
    if p.offload_optimizer != "none":
        done = offload.cpu_step(b, local, ctx.param_bytes, tail, params_on_host=p.offload_param != "none",
                                nvme=p.offload_optimizer == "nvme")
    else:
        done = b.compute("optimizer", "optimizer", work.step_ops(local), deps=tail)
    if sharded and stage < 3 and n > 1:
        b.collective("allgather updated params", "post_step_gather", "all_gather", "dp",
                     work.total_params * ctx.param_bytes, deps=(done,))
    return {"framework": "deepspeed", "zero_stage": stage, "n_micro": ctx.n_micro, "local_params": local,
            "prefetch_depth": getattr(hooks, "depth", None)}
