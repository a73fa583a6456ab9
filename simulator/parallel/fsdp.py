"""PyTorch FSDP as a graph builder (torch/distributed/fsdp; formulas.md §4.3).

FSDP units: one per transformer block plus the root (embedding, final norm, head). Per micro-batch
(FSDP synchronises gradients every micro-batch unless the user wraps it in ``no_sync``,
``parallel.fsdp_no_sync``: then only the last micro-batch reduces, once per unit):

* FULL_SHARD: all-gather each unit before forward, reshard after forward (not the root, whose
  parameters the backward needs at once), all-gather again before backward, reshard after, and
  reduce-scatter its gradients: ``≈ G·3φΨ`` per rank (the root gathers once: ``2φ`` for its share);
* SHARD_GRAD_OP: no reshard after forward, so no backward all-gather: ``G·2φΨ``;
* HYBRID_SHARD: FULL_SHARD inside a node's shard group plus an all-reduce of each unit's gradient
  shard across replicas, ``2·((R−1)/R)·Ψ/g``, on that group's own NCCL stream;
* NO_SHARD: a DDP-like all-reduce of each unit's gradients.

``backward_prefetch``: BACKWARD_PRE issues the next unit's gather before the current unit's gradient
computation (ahead of its reduce-scatter on the shared NCCL stream); BACKWARD_POST issues it after
the current gradient computation but before the reduce-scatter; None issues it when the next unit's
backward begins (behind the reduce-scatter). ``limit_all_gathers`` allows two gathered units at a
time (gather ``q`` waits for unit ``q−2`` to be freed); without it the CPU runs ahead unbounded.
``forward_prefetch`` only changes the CPU issue order among forward gathers, which are alone on the
stream, so it does not change the timeline here. Mixed precision: gathers in ``param_dtype``,
reductions in ``reduce_dtype``.

Copies around the collectives (memory-bound kernels, HBM bytes read + written per unit of ``P``
parameters, ``b_p`` = param_dtype bytes, ``b_r`` = reduce_dtype bytes):

* gradient cast to ``reduce_dtype`` before the reduction when it is wider, both versions
  (FSDP1 ``_reduce_grad``: ``unsharded_grad.to(reduce_dtype)``; FSDP2 ``foreach_reduce``:
  ``_to_dtype_if_needed``): ``P·(b_p + b_r)``;
* FSDP2 only (``_fsdp_collectives.py``): ``foreach_all_gather_copy_out`` splits each gathered unit
  into its parameters (``torch.split_with_sizes_copy``, in ``wait_for_unshard`` on the compute
  stream, right before the unit runs): ``2·P·b_p``; ``foreach_reduce_scatter_copy_in``
  (``torch._chunk_cat`` of the gradients into the reduce-scatter input): ``2·P·b_r``. FSDP1's flat
  parameter gathers into and reduces from its own storage, so it has neither.

* gradient averaging around the reduction (``1/n`` of the sum over ``n`` ranks) where NCCL does not
  average: FSDP1 always (``_reduce_grad``: ``_div_if_needed(padded_unsharded_grad,
  _gradient_predivide_factor)`` before the reduce-scatter, ``_div_if_needed(new_sharded_grad,
  _gradient_postdivide_factor)`` after it; ``NO_SHARD`` likewise around its all-reduce), FSDP2 only
  for an fp16 ``reduce_dtype`` (``_get_gradient_divide_factors`` returns none for fp32/bf16, which
  reduce with ``ReduceOp.AVG``), Megatron-FSDP never (``parallel.gradient_reduce_div_fusion``). Both split ``n`` as ``f·(n/f)`` with ``f`` the first power of two
  with ``f ≥ n/f`` (``_get_gradient_predivide_factor``; n = 8: 4 and 2) and divide in place when the
  factor exceeds 1: ``2·P·b_r`` over the unsharded gradient before and ``2·(P/n)·b_r`` over the
  shard after (``gradient_divide_bytes``).

FSDP2 runs the gradient copies on its reduce-scatter stream; dtsim puts them on the compute stream
just before the reduction (they are HBM-bound and would share HBM bandwidth with the compute
kernels running beside them). The copy-in of the shard before the all-gather moves ``1/n`` of the
unit and is left out; the post-divide of the shard, which runs after the reduction, is costed with
the pre-divide before it (``2·(P/n)·b_r``, a ``1/n`` share of that op).
"""

from __future__ import annotations

from simulator.parallel import offload
from simulator.parallel.context import BuildContext
from simulator.parallel.ir import COMM_REPLICA, GraphBuilder, StepGraph
from simulator.parallel.prefetch import Prefetcher
from simulator.parallel.schedule import Hooks, run_micro_batches, unit_gather_bytes
from simulator.workload.ops import memory_op

ROOT = "root"


def divide_factors(n: int) -> tuple[int, int]:
    """``(pre, post)`` factors of PyTorch FSDP's gradient averaging over ``n`` ranks
    (``torch.distributed.fsdp._init_utils._get_gradient_predivide_factor``, and FSDP2's
    ``_get_gradient_divide_factors``): ``pre`` doubles while it divides ``n`` and ``n/pre > pre``;
    ``pre · post = n``."""
    pre = 1
    while n % pre == 0 and n / pre > pre:
        pre *= 2
    return pre, n // pre


def gradient_divide_bytes(params: float, n: int, reduce_bytes: int) -> float:
    """HBM bytes of the in-place gradient divides around one reduction over ``n`` ranks (module
    docstring): ``2·P·b_r`` when the pre-divide factor exceeds 1, plus ``2·(P/n)·b_r`` for the shard
    when the post-divide factor does."""
    pre, post = divide_factors(n)
    return 2.0 * reduce_bytes * params * ((pre > 1) + (post > 1) / n)


class FSDPHooks(Hooks):
    def __init__(self, ctx: BuildContext) -> None:
        p, work = ctx.parallel, ctx.work
        self.ctx = ctx
        self.strategy = p.sharding_strategy
        self.hybrid = self.strategy == "hybrid_shard"
        self.shard_group = "dp_shard" if self.hybrid else "dp"
        self.n = ctx.size(self.shard_group)
        # With a pipeline, torchtitan keeps the parameters unsharded from the first micro-batch's
        # forward to the last backward (reshard_after_forward policy "default" = False under PP) and
        # torch.distributed.pipelining syncs gradients only in the last backward
        # (``set_requires_gradient_sync(last_backward)``, stage.py ``backward_maybe_with_nosync``).
        self.pipelined = ctx.mesh.pp > 1
        # parallel.fsdp_no_sync: one reduction per unit and step, in the last micro-batch, as under PP
        self.sync_last_only = self.pipelined or p.fsdp_no_sync
        default_reshard = self.strategy in ("full_shard", "hybrid_shard") and not self.pipelined
        reshard = p.reshard_after_forward if p.reshard_after_forward is not None else default_reshard
        self.sharded = self.strategy != "no_shard"
        self.reshard = reshard and self.sharded
        self.depth = 1 if p.limit_all_gathers else None
        self.gather_b = ctx.fsdp_dtype_bytes("param")
        self.reduce_b = ctx.fsdp_dtype_bytes("reduce")
        self.root_params = work.embed_params + work.head_params
        self.fsdp2 = p.fsdp_version == 2
        # FSDP2 averages fp32/bf16 gradients in NCCL (ReduceOp.AVG); FSDP1 and fp16 divide in place;
        # Megatron-FSDP fuses the division into the reduction (gradient_reduce_div_fusion).
        fused = p.gradient_reduce_div_fusion
        self.divides = not fused if fused is not None else (not self.fsdp2 or ctx.fsdp_dtype_name("reduce") == "fp16")
        self.tail: list[int | None] = []
        self.pf: Prefetcher | None = None

    # -- gathers -------------------------------------------------------------------------------
    def _params(self, unit) -> float:
        return self.root_params if unit == ROOT else self.ctx.work.layer_params

    def _gather_bytes(self, unit) -> float:
        """One gather of ``unit``: the root (embeddings, output layer) in ``param_dtype``; a block's
        linear weights in FP8 under ``parallel.fp8_param_gather`` (``schedule.unit_gather_bytes``)."""
        if unit == ROOT:
            return self.root_params * self.gather_b
        return unit_gather_bytes(self.ctx.work, unit, self.gather_b, self.ctx.parallel.fp8_param_gather)

    def _issuer(self, g: int, phase: str):
        def issue(b: GraphBuilder, unit, deps: list) -> int | None:
            if not self.sharded or self.n == 1:
                return None
            if self.pipelined and not self.reshard and g != 0:
                return None  # still gathered since micro-batch 0
            nbytes = self._gather_bytes(unit)
            return b.collective(f"allgather {phase} {unit} mb{g}", "param_allgather", "all_gather",
                                self.shard_group, nbytes, deps=deps, micro_batch=g)

        return issue

    def _copy_out(self, b: GraphBuilder, g: int, unit, gather: int | None, kind: str):
        """FSDP2: split the gathered unit into its parameters on the compute stream (module docstring)."""
        if gather is None or not self.fsdp2:
            return gather
        n = self._params(unit)
        op = memory_op("fsdp2_allgather_copy_out", n, 2, self._gather_bytes(unit) / n if n else self.gather_b, 0.0)
        return b.compute(f"copy-out {unit} mb{g}", kind, (op,), deps=(gather,), micro_batch=g)

    def pre_forward(self, b: GraphBuilder, g: int, unit):
        if unit == "E":
            order = [ROOT, *range(self.ctx.work.n_layers)]
            self.pf = Prefetcher(order, self.depth, self._issuer(g, "fwd"))
            return (self._copy_out(b, g, ROOT, self.pf.ensure(b, ROOT), "forward"),)
        if isinstance(unit, int):
            assert self.pf is not None
            return (self._copy_out(b, g, unit, self.pf.ensure(b, unit), "forward"),)
        return ()

    def post_forward(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        if isinstance(unit, int) and self.pf is not None:
            self.pf.computed(unit, task)

    def pre_backward(self, b: GraphBuilder, g: int, unit):
        if unit == "H":
            # The root stays gathered; blocks were resharded after forward (FULL_SHARD/HYBRID).
            self.pf = Prefetcher(list(range(self.ctx.work.n_layers - 1, -1, -1)), self.depth, self._issuer(g, "bwd"))
            if self.reshard and self.ctx.parallel.backward_prefetch == "backward_pre":
                self.pf.ensure(b, self.ctx.work.n_layers - 1, ahead=False)
            return ()
        if not isinstance(unit, int) or not self.reshard:
            return ()
        assert self.pf is not None
        ahead = self.ctx.parallel.backward_prefetch == "backward_pre"
        return (self._copy_out(b, g, unit, self.pf.ensure(b, unit, ahead=ahead), "backward"),)

    def repeats(self, g: int) -> bool:
        """Without a pipeline (or ``fsdp_no_sync``) every micro-batch issues the same tasks: the
        prefetchers are rebuilt at each pass's first unit and every micro-batch reduces; only the tail
        grows (``replicated``)."""
        return not self.sync_last_only

    def replicated(self, lo: int, hi: int, shift: int) -> None:
        self.tail.extend([t + shift for t in self.tail if t is not None and lo <= t < hi])

    # -- reductions ----------------------------------------------------------------------------
    def post_backward(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        if isinstance(unit, int) and self.reshard:
            assert self.pf is not None
            self.pf.computed(unit, task)
            nxt = unit - 1
            if self.ctx.parallel.backward_prefetch == "backward_post" and nxt >= 0:
                self.pf.ensure(b, nxt, ahead=False)
        if unit == "H":
            return
        if self.sync_last_only and g != self.ctx.n_micro - 1:
            return
        target = ROOT if unit == "E" else unit
        self._reduce(b, g, target, task)

    def _copy_in(self, b: GraphBuilder, g: int, unit, task: int) -> int:
        """Gradient cast to a wider ``reduce_dtype`` (both versions) and FSDP2's chunk-cat into the
        reduction's input (module docstring); returns the task the reduction waits for."""
        params = self._params(unit)
        ops = []
        if self.reduce_b > self.gather_b:
            ops.append(memory_op("fsdp_grad_cast_reduce_dtype", params, 1, self.gather_b + self.reduce_b, 0.0))
        if self.fsdp2 and self.sharded:
            ops.append(memory_op("fsdp2_reduce_scatter_copy_in", params, 2, self.reduce_b, 0.0))
        ranks = self.n if self.sharded else self.ctx.size("dp")
        divide = gradient_divide_bytes(params, ranks, self.reduce_b) if self.divides else 0.0
        if divide:
            ops.append(memory_op("fsdp_grad_divide", divide, 1, 1, 0.0))
        if not ops:
            return task
        return b.compute(f"copy-in grads {unit} mb{g}", "backward", tuple(ops), deps=(task,), micro_batch=g)

    def _reduce(self, b: GraphBuilder, g: int, unit, task: int) -> None:
        ctx = self.ctx
        if (self.n > 1 and self.sharded) or ctx.size("dp") > 1:
            task = self._copy_in(b, g, unit, task)
        nbytes = self._params(unit) * self.reduce_b
        if not self.sharded:
            tid = b.collective(f"allreduce grads {unit} mb{g}", "grad_reduce", "all_reduce", "dp", nbytes,
                               deps=(task,), micro_batch=g) if ctx.size("dp") > 1 else None
            self.tail.append(tid)
            return
        rs = b.collective(f"reducescatter grads {unit} mb{g}", "grad_reduce", "reduce_scatter", self.shard_group,
                          nbytes, deps=(task,), micro_batch=g) if self.n > 1 else None
        self.tail.append(rs)
        last = rs if rs is not None else task
        if self.hybrid and ctx.size("dp_replicate") > 1:
            last = b.collective(f"allreduce replicas {unit} mb{g}", "grad_reduce", "all_reduce", "dp_replicate",
                                nbytes / self.n, stream=COMM_REPLICA, deps=(last,), micro_batch=g)
            self.tail.append(last)
        if ctx.parallel.offload_optimizer != "none":
            self.tail.append(offload.grads_down(b, f"{unit} mb{g}", self._params(unit) / self.n * self.reduce_b,
                                                last, g))


make_hooks = FSDPHooks


def build(ctx: BuildContext) -> StepGraph:
    b = GraphBuilder()
    hooks = FSDPHooks(ctx)
    run_micro_batches(b, ctx.work, ctx.n_micro, hooks)
    return b.build(**finish(b, ctx, hooks))


def finish(b: GraphBuilder, ctx: BuildContext, hooks: FSDPHooks) -> dict:
    """Optimizer step on the local shard once every reduction stream has drained."""
    local = ctx.work.total_params / (hooks.n if hooks.sharded else 1)
    hooks.pf = None  # its issuer refers back to the hooks: drop the cycle
    tail = [t for t in hooks.tail if t is not None]
    # Every stream's last reduction must be done (the replica all-reduces run on their own stream).
    deps = list(tail[-3:])
    if ctx.parallel.offload_optimizer != "none":
        offload.cpu_step(b, local, ctx.param_bytes, deps, params_on_host=False,
                         nvme=ctx.parallel.offload_optimizer == "nvme")
    else:
        b.compute("optimizer", "optimizer", ctx.work.step_ops(local), deps=deps)
    return {"framework": "fsdp", "sharding_strategy": hooks.strategy, "n_micro": ctx.n_micro, "local_params": local}
