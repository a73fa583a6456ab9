"""Expert parameters in the framework's gradient and parameter synchronisation.

Megatron-Core's ``DistributedDataParallel`` keeps expert parameters in their own buffers, reduced and
gathered over the expert-data-parallel group (``edp``) instead of the data-parallel group; DeepSpeed-MoE
and torchtitan likewise. ``ExpertGradHooks`` wraps a framework's hooks with that traffic:

* expert gradients reduce over ``edp`` after the last micro-batch's backward of each MoE block (an
  all-reduce, or a reduce-scatter when the optimizer states are sharded), every micro-batch under
  ZeRO-3 / FSDP, whose expert shards are also all-gathered before each forward and backward;
* a sharded optimizer without sharded weights (Megatron's distributed optimizer, ZeRO-1/2) all-gathers
  the updated experts over ``edp`` after the step (``wrap_finish``), or per block ahead of its first
  forward under ``overlap_param_gather``.

The MoE work itself (all-to-alls, expert blocks) is ``simulator.parallel.expert``.
"""

from __future__ import annotations

from typing import Any

from simulator.parallel.expert import EDP_COMM, MoEWork, is_moe
from simulator.parallel.ir import COMM, GraphBuilder
from simulator.parallel.schedule import WrappedHooks


class ExpertGradHooks(WrappedHooks):
    """Wraps a framework's hooks: after the last micro-batch's backward of an MoE block, its expert
    gradients reduce over the expert-data-parallel group (so it never ``repeats``: the reductions
    follow the last micro-batch only). Everything else goes to the framework."""

    def __init__(self, inner: Any, ctx: Any) -> None:
        super().__init__(inner, ctx)
        self._gathers: dict[tuple[str, int, int], int | None] = {}
        self._step_gathered: set = set()

    def _gather(self, b, phase: str, g: int, unit: Any) -> list:
        """ZeRO-3 / FSDP: the all-gather of ``unit``'s expert shard (issued if not yet) and, one
        block ahead, of the next MoE block's in this pass."""
        mw: MoEWork = self.ctx.work.moe
        if mw.gather_bytes <= 0 or self.ctx.mesh.size("edp") <= 1 or not is_moe(self.ctx.work, unit):
            return []
        n = len(mw.layers)
        order = range(n) if phase == "fwd" else range(n - 1, -1, -1)
        moe_units = [i for i in order if mw.layers[i]]
        pos = moe_units.index(unit)
        for u in moe_units[pos:pos + 2]:
            key = (phase, g, u)
            if key not in self._gathers:
                self._gathers[key] = b.collective(f"expert allgather {phase} {u} mb{g}", "param_allgather",
                                                  "all_gather", "edp", mw.gather_bytes, stream=EDP_COMM,
                                                  micro_batch=g, layer=u)
        return [self._gathers[(phase, g, unit)]]

    def _step_gather(self, b, unit: Any) -> list:
        """``overlap_step_gather``: the previous step's update of ``unit``'s experts, gathered over the
        expert-DP group before the block's first forward (Megatron's forward pre-hook waits for the
        bucket group, as for the dense parameters: ``ddp.DDPHooks.pre_forward``)."""
        mw: MoEWork = self.ctx.work.moe
        if not (mw.overlap_step_gather and mw.step_gather_bytes > 0) or unit in self._step_gathered:
            return []
        if self.ctx.mesh.size("edp") <= 1 or not is_moe(self.ctx.work, unit):
            return []
        self._step_gathered.add(unit)
        tid = b.collective(f"allgather expert params@{unit}", "post_step_gather", "all_gather", "edp",
                           mw.step_gather_bytes, stream=EDP_COMM, layer=unit)
        return [tid]

    def pre_forward(self, b, g, unit):
        return [*self.inner.pre_forward(b, g, unit), *self._gather(b, "fwd", g, unit), *self._step_gather(b, unit)]

    def pre_backward(self, b, g, unit):
        return [*self.inner.pre_backward(b, g, unit), *self._gather(b, "bwd", g, unit)]

    def grads_ready(self, b, g, key, task):
        self.inner.grads_ready(b, g, key, task)
        work, ctx = self.ctx.work, self.ctx
        # ZeRO-3 / FSDP reduce every micro-batch, unless FSDP syncs only the last one (fsdp_no_sync, or a
        # pipeline: FSDPHooks.sync_last_only), as it does for the dense units
        every_micro_batch = (work.moe is not None and work.moe.gather_bytes > 0
                             and not getattr(self.inner, "sync_last_only", False))
        if (g != ctx.n_micro - 1 and not every_micro_batch) or not is_moe(work, key) or ctx.mesh.size("edp") <= 1:
            return
        mw: MoEWork = work.moe
        op = "reduce_scatter" if mw.sharded_optimizer and not work.grads_all_reduced else "all_reduce"
        b.collective(f"expert grad {op} {key}", "grad_reduce", op, "edp",
                     mw.expert_params * mw.expert_grad_dtype_bytes, stream=COMM, deps=(task,), micro_batch=g,
                     layer=key)


def wrap_hooks(make_hooks):
    """``make_hooks`` whose hooks also reduce expert gradients (identity for dense models)."""

    def make(ctx):
        hooks = make_hooks(ctx)
        return ExpertGradHooks(hooks, ctx) if getattr(ctx.work, "moe", None) is not None else hooks

    return make


def wrap_finish(finish):
    """``finish`` (the framework's optimizer step) followed, for an MoE model whose optimizer shards
    the experts over the expert-DP group without sharding their weights, by the all-gather of the
    updated expert weights over that group (``gather_updated_experts``)."""

    def run(b: GraphBuilder, ctx: Any, hooks: Any) -> dict:
        start = len(b.tasks)
        meta = finish(b, ctx, hooks)
        gather_updated_experts(b, ctx, start)
        return meta

    return run


def gather_updated_experts(b: GraphBuilder, ctx: Any, start: int) -> None:
    """The post-step all-gather of this stage's updated expert weights over the expert-DP group.

    Megatron-Core's distributed optimizer keeps expert parameters in their own buffers sharded over the
    expert-data-parallel group (``DistributedDataParallel`` expert-parallel buffers, ``DistributedOptimizer``
    per buffer), so each rank steps ``1/edp`` of its experts and all-gathers the updated 16-bit (FP8 under
    ``fp8_param_gather``) weights back: ``φ·Ψ_e·bytes`` per rank, ``Ψ_e`` this GPU's expert weights, as the
    dense parameters' gather over DP (``ddp.finish``; DeepSpeed ZeRO-1/2 likewise over its expert-DP
    groups). It waits for the optimizer step (the first optimizer or host-copy task ``finish`` issued
    from task ``start`` on), and runs on the expert-DP stream beside the dense gather."""
    mw = getattr(ctx.work, "moe", None)
    if mw is None or mw.step_gather_bytes <= 0 or mw.overlap_step_gather or ctx.mesh.size("edp") <= 1:
        return
    n_blocks = sum(mw.layers)
    if n_blocks == 0:
        return
    done = next((t.id for t in b.tasks[start:] if t.device == b.device
                 and (getattr(t, "kind", "") == "optimizer" or getattr(t, "direction", "") == "h2d")), None)
    b.collective("allgather updated expert params", "post_step_gather", "all_gather", "edp",
                 n_blocks * mw.step_gather_bytes, stream=EDP_COMM, deps=(done,))
