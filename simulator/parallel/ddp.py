"""PyTorch DDP as a graph builder (torch/nn/parallel/distributed.py + c10d reducer; formulas.md §4.1).

* Buckets in gradient-ready order (per block: the MLP's weights, then the attention's and the
  norms'), the first ``first_bucket_mb`` MiB, the rest ``bucket_cap_mb`` MiB; a bucket is all-reduced as soon as its last gradient is ready, and buckets are launched
  strictly in order on the process group's NCCL stream (task order on one stream). Megatron-Core's
  DDP (``ParallelConfig.megatron_ddp``: the distributed optimizer) sizes its buckets in elements,
  ``max(4·10⁷, 10⁶·dp·cp)`` unless ``ddp_bucket_size`` is set (megatron/core/distributed/
  distributed_data_parallel.py: "larger DP sizes need larger buckets to ensure collectives do not
  become latency-bound"), with no small first bucket, and buckets only the first model chunk of an
  interleaved pipeline stage: the others reduce as one bucket each (Megatron-LM ``get_model``:
  ``disable_bucketing=(model_chunk_idx > 0)``).
* Gradients have the parameter dtype: fp32 under AMP (4 B), or 16-bit with an fp16/bf16
  compression comm hook.
* ``no_sync`` over the first G−1 micro-batches: only the last backward all-reduces, so a step moves
  ``2φΨ`` per rank instead of ``G·2φΨ`` (φ = (n−1)/n).
* The optimizer (every rank updates all Ψ) waits for the last bucket.
* ``overlap_grad_reduce: false`` (Megatron-LM's default; the PTD-P paper's data-parallel all-reduce
  after the pipeline flush, Narayanan et al. 2021 §2.2): no bucket is reduced during the backward; the
  whole gradient buffer is reduced in one call once the last gradient is ready.

Megatron's distributed optimizer (``parallel.distributed_optimizer``; Megatron-LM
``distrib_optimizer.py``, formulas.md §4.2 ZeRO-1 row): each bucket is reduce-scattered instead of
all-reduced (``φ·S``), each rank steps its ``Ψ/n`` shard, then the updated 16-bit parameters are
all-gathered (``φ·Ψ·2 B``): ``φΨ·4 + φΨ·2`` bytes per rank with fp32 gradients. With
``parallel.overlap_param_gather`` (Megatron ``--overlap-param-gather``: ``ParamAndGradBuffer``
buckets gathered ahead of the forward, each module's forward pre-hook waiting for its own bucket)
the gather of the previous step's update is issued per block at the start of the step on the DP
stream, and the first micro-batch's forward of each block waits for its block: the steady state of
a step whose gather hides behind the forward, the first block's exposed.
"""

from __future__ import annotations

from simulator.parallel.context import BuildContext
from simulator.parallel.ir import GraphBuilder, StepGraph
from simulator.parallel.schedule import (
    Hooks,
    model_gather_bytes,
    plan_buckets,
    ready_order,
    run_micro_batches,
    unit_gather_bytes,
)
from simulator.units import MiB


class DDPHooks(Hooks):
    def __init__(self, ctx: BuildContext) -> None:
        p, work = ctx.parallel, ctx.work
        self.ctx = ctx
        self.grad_bytes = p.ddp_grad_bytes(ctx.precision)
        ready = ready_order(work)
        if p.megatron_ddp:  # no small first bucket; chunks after the first are one bucket each
            cap = p.megatron_bucket_elements(ctx.size("dp"))
            if ctx.model_chunk > 0:
                cap = max(cap, sum(n for _, n in ready))
            buckets = plan_buckets(ready, cap)
        else:
            buckets = plan_buckets(ready, p.bucket_cap_mb * MiB / self.grad_bytes,
                                   p.first_bucket_mb * MiB / self.grad_bytes)
        self.by_unit: dict = {}
        for bk in buckets:
            self.by_unit.setdefault(bk.ready_unit, []).append(bk)
        #: without overlap: the unit whose gradients complete the buffer, and the buffer's elements
        self.final_unit = ready[-1][0] if ready else None
        self.total_elements = sum(bk.elements * bk.count for bk in buckets)
        self.last: int | None = None
        # Muon's layer-wise distributed optimizer all-reduces: its ranks own whole matrices, not slices
        self.op = "reduce_scatter" if p.distributed_optimizer and not work.grads_all_reduced else "all_reduce"
        self.gathered: set = set()

    def pre_forward(self, b: GraphBuilder, g: int, unit):
        """Under ``overlap_param_gather``: the first forward of a unit waits for its parameters' gather."""
        p = self.ctx.parallel
        if not (p.distributed_optimizer and p.overlap_param_gather) or self.ctx.size("dp") == 1:
            return ()
        if unit in self.gathered:
            return ()
        self.gathered.add(unit)
        tid = b.collective(f"allgather params@{_label(unit)}", "post_step_gather", "all_gather", "dp",
                           unit_gather_bytes(self.ctx.work, unit, self.ctx.param_bytes, p.fp8_param_gather))
        return (tid,) if tid is not None else ()

    def _syncs(self, g: int) -> bool:
        return g == self.ctx.n_micro - 1 or not self.ctx.parallel.no_sync

    def grads_ready(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        if self.ctx.size("dp") == 1 or not self._syncs(g):
            return
        label = "allreduce" if self.op == "all_reduce" else "reducescatter"
        if not self.ctx.parallel.overlap_grad_reduce:
            if unit == self.final_unit:
                self.last = b.collective(f"{label} grads mb{g}", "grad_reduce", self.op, "dp",
                                         self.total_elements * self.grad_bytes, deps=(task,), micro_batch=g)
            return
        for i, bk in enumerate(self.by_unit.get(unit, [])):
            tid = b.collective(f"{label} grads@{_label(unit)}.{i} mb{g}", "grad_reduce", self.op, "dp",
                               bk.elements * self.grad_bytes, count=bk.count, deps=(task,), micro_batch=g)
            self.last = tid if tid is not None else self.last


def _label(key) -> str:
    return f"{key[0]}.{key[1]}" if isinstance(key, tuple) else str(key)


make_hooks = DDPHooks


def finish(b: GraphBuilder, ctx: BuildContext, hooks: DDPHooks) -> dict:
    """The optimizer step after the last bucket: on all local parameters, or on the ``1/dp`` shard
    followed by the parameter all-gather under the distributed optimizer (Megatron's, or Muon's layer-wise
    one: ``simulator.workload.muon``)."""
    n = ctx.work.total_params
    # Adam's share under Muon (workload.muon): the embedding and output layer, not the MTP modules' matrices
    adam = ctx.work.embed_params + ctx.work.head_params - ctx.work.head_mtp_params
    dp = ctx.size("dp")
    if ctx.parallel.distributed_optimizer and dp > 1:
        done = b.compute("optimizer", "optimizer", ctx.work.step_ops(n / dp, adam / dp), deps=(hooks.last,))
        if not ctx.parallel.overlap_param_gather:
            nbytes = model_gather_bytes(ctx.work, ctx.param_bytes, ctx.parallel.fp8_param_gather)
            b.collective("allgather updated params", "post_step_gather", "all_gather", "dp", nbytes, deps=(done,))
        return {"framework": "ddp", "distributed_optimizer": True, "n_micro": ctx.n_micro, "local_params": n / dp}
    b.compute("optimizer", "optimizer", ctx.work.step_ops(n, adam), deps=(hooks.last,))
    return {"framework": "ddp", "n_micro": ctx.n_micro, "local_params": n}


def build(ctx: BuildContext) -> StepGraph:
    b = GraphBuilder()
    hooks = DDPHooks(ctx)
    run_micro_batches(b, ctx.work, ctx.n_micro, hooks)
    return b.build(**finish(b, ctx, hooks))
