"""Per-GPU memory of a training step: model states, activations, buffers, and a fits verdict.

All results are bytes on the most-loaded GPU at the step's peak. Buffers live through forward and
backward are summed with the activations (a slightly conservative peak); the optimizer-step
transients are compared with the activations instead, as they are never live together. Sources: formulas.md §2 (ZeRO paper, DeepSpeed estimators, Korthikanti et al. 2022, framework code).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from simulator.config.scenario import Scenario
from simulator.workload import hybrid, moe_memory, params
from simulator.workload import lora as wlora
from simulator.workload.activations import (  # noqa: F401  (re-exported: one memory model, one import)
    LOGPROB_BYTES,
    MASK_BYTES,
    SOFTMAX_STAT_BYTES,
    ActivationBytes,
    activations,
    is_16bit,
    layer_activation_bytes,
    logits_activation_bytes,
    pipeline_blocks,
    stage_activations,
)
from simulator.workload.model_states import (  # noqa: F401  (model_states re-exported)
    local_params,
    megatron_mixed_precision,
    model_states,
    shard_degree,
)
from simulator.workload.zero_states import ModelStateBytes, zero_model_states  # noqa: F401  (re-exported)

#: DeepSpeed ZeRO-3 runs the optimizer step per sub-group of this many elements (``sub_group_size``
#: default, ``deepspeed/runtime/zero/config.py``), so its fp32 gradient buffer is capped by it.
DEEPSPEED_SUB_GROUP = 1e9
#: DeepSpeed stage 0 all-reduces flattened buckets of at most this many elements
#: (``deepspeed/runtime/constants.py`` MEMORY_OPT_ALLREDUCE_SIZE).
DEEPSPEED_ALLREDUCE_BUCKET = 5e8


@dataclass(frozen=True)
class BufferBytes:
    """Communication buckets, gathered parameters and NCCL's own buffers, live through forward and
    backward; ``optimizer_step`` is allocated only during the optimizer step, after the activations
    are freed, so the peak takes ``max(activations, optimizer_step)``."""

    communication: float
    gathered_params: float
    nccl: float
    optimizer_step: float = 0.0

    @property
    def total_bytes(self) -> float:
        """Bytes live through forward and backward (``optimizer_step`` excluded)."""
        return self.communication + self.gathered_params + self.nccl


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU memory at the step's peak against the GPU's usable HBM (formula in :func:`breakdown`).

    ``buffers_bytes`` excludes ``optimizer_step_bytes``, which is live only while the activations
    are not; ``offloaded_bytes`` are in host memory and not part of ``total_bytes``.
    """

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float
    optimizer_step_bytes: float
    cuda_context_bytes: float
    fragmentation_bytes: float
    total_bytes: float
    hbm_bytes: float
    #: The allocated peak (``total − fragmentation``) fits the usable HBM: the step runs.
    fits: bool
    #: It fits, but not with the fragmentation allowance: the caching allocator has to free its cache
    #: and retry ``cudaMalloc`` near the peak (slower; ``expandable_segments`` avoids most of it).
    tight: bool
    headroom_bytes: float
    offloaded_bytes: float
    #: With pipeline parallelism, one row per GPU stage: ``stage``, ``layers``, ``in_flight``,
    #: ``activations_bytes``, ``total_bytes``.
    stages: tuple[dict[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.stages:
            del out["stages"]
        else:
            out["stages"] = [dict(r) for r in self.stages]
        return out


# --- buffers -----------------------------------------------------------------------------------


def buffers(scenario: Scenario, psi: float | None = None, blocks: int | None = None,
            experts: float | None = None) -> BufferBytes:
    """Communication and gathering buffers per framework (formulas.md §2.5), on a GPU holding ``psi``
    parameters besides ``experts`` routed-expert ones (an MoE model's) in ``blocks`` transformer blocks
    (default: the most-loaded stage's).

    * DeepSpeed stage 0: one flattened all-reduce bucket of ≤ 5e8 elements (16-bit; fp32 through the
      ``BF16_Optimizer``).
    * DeepSpeed stages 1–2 (``contiguous_gradients``): ``reduce_bucket_size`` 16-bit "ipg" buffers,
      two with ``overlap_comm`` (``stage_1_and_2.py``).
    * DeepSpeed stage 3: one ipg buffer, gathered parameters ``min(max_live, largest + prefetch)``
      and the unsharded gradient of the largest module (DeepSpeed's ``largest_layer_memory = 4·L``).
    * DDP: bucket copies of all gradients (``gradient_as_bucket_view=False``, the default).
    * FSDP FULL/HYBRID: the root unit (embeddings, head) stays unsharded (no reshard after forward
      for the root), plus 2 block units with ``backward_prefetch=backward_pre`` (current + next,
      ``limit_all_gathers`` caps in-flight all-gathers at 2) else 1, plus one unit's unsharded
      gradients; SHARD_GRAD_OP keeps every unsharded parameter from forward to backward; NO_SHARD under
      a 16-bit ``param_dtype`` keeps the whole model's 16-bit copy (``_mp_shard``) from forward to
      post-backward.
    * FSDP under a pipeline (torchtitan): parameters gathered in micro-batch 0 stay unsharded for the
      step (``reshard_after_forward=False`` with PP) and gradients accumulate unsharded, in
      ``reduce_dtype``, until the last micro-batch's reduce-scatter (FSDP2
      ``set_requires_gradient_sync(False)``; ``unsharded_accumulated_grad``): the whole stage's
      parameters and gradients unsharded.
    * FSDP with ``parallel.fsdp_no_sync`` and gradient accumulation: the whole stage's gradients, its
      local experts' included, unsharded between micro-batches, in ``reduce_dtype`` under FSDP2
      (``to_accumulated_grad_if_needed`` upcasts the accumulated gradient) and in ``param_dtype`` under
      FSDP1 (``_post_backward_hook`` returns before its cast to the reduce dtype when not syncing);
      parameters resharded as without it.
    * Megatron's distributed optimizer: gradients live in the contiguous fp32 ``main_grad`` buffer
      counted in the model states (reduce-scattered in place), so no bucket copy.
    * ``parallel.fp8_param_gather`` (FSDP): a gathered block's linear weights are FP8, 1 byte each
      (torchao's float8 all-gather hands the gathered float8 data to the GEMMs); norms and biases,
      the embeddings and the output layer stay in ``param_dtype``.
    * NCCL communicator buffers: ``memory.nccl_buffers_bytes``.

    Optimizer-step transients: DeepSpeed stages 1–3 upcast the 16-bit gradient partition to fp32
    for the step (``4Ψ/N_d``, per sub-group of ≤ 1e9 elements in stage 3; the "4 fp32 grads" of
    DeepSpeed's 18 B/param estimate); an unfused (``foreach``) torch Adam allocates one fp32
    temporary per updated parameter (``_foreach_sqrt`` of the variance, ``torch/optim/adam.py``). Both
    run one parameter group at a time, and an MoE model's experts are a group of their own (DeepSpeed
    MoE's expert groups, Megatron-Core's chained expert optimizer), sharded over the expert-DP ranks:
    the larger group's share sets the transient.
    """
    m, par = scenario.model, scenario.parallel
    if psi is None:
        psi = local_params(scenario, experts=False)
    if experts is None:
        experts = local_params(scenario) - psi if m.moe is not None else 0.0
    if blocks is None:
        blocks = math.ceil(m.n_layers / par.pp)
    half = 2 if is_16bit(scenario) else 4
    stage = par.effective_zero_stage
    on_gpu_optimizer = par.offload_optimizer == "none"
    group = psi / (shard_degree(scenario) if stage >= 1 else 1)  # parameters of a group this GPU's Adam updates
    if experts:
        group = max(group, experts / (moe_memory.expert_dp(scenario) if stage >= 1 else 1))
    step = 0.0
    if on_gpu_optimizer and not scenario.training.kernels.fused_adam:
        step += 4 * group
    if on_gpu_optimizer and (megatron_mixed_precision(scenario) or scenario.training.optimizer == "muon"):
        # a 16-bit main_grad: the optimizer casts its (shard of the) gradients to fp32 for the step, freed by the
        # next iteration's zero_grad (Megatron's _copy_model_grads_to_main_grads: shard_model_grad.float())
        step += par.step_grad_copy_bytes(scenario.training.precision) * group
    if on_gpu_optimizer and par.framework == "deepspeed" and stage >= 1:
        step += 4 * (min(group, DEEPSPEED_SUB_GROUP) if stage == 3 else group)
    psi_all = psi + experts  # every gradient passes through the reduction buckets
    comm = gathered = 0.0
    if par.framework == "deepspeed":
        if stage == 0:  # BF16_Optimizer flattens its fp32 gradients into the same buffers
            width = 4 if par.bf16_optimizer(scenario.training.precision) else half
            comm = width * min(psi_all, DEEPSPEED_ALLREDUCE_BUCKET)
        elif stage in (1, 2):
            n_ipg = 2 if par.effective_overlap_comm else 1
            comm = half * min(psi_all, par.reduce_bucket_size) * n_ipg
        else:
            largest = params.count(m).largest_layer / par.tp
            live = min(par.stage3_max_live_parameters, largest + par.stage3_prefetch_bucket_size)
            gathered = half * live
            comm = half * min(psi_all, par.reduce_bucket_size) + half * largest
    elif par.framework == "ddp":
        # fp32 gradients under AMP are copied into flat buckets of the same total size, unless
        # gradient_as_bucket_view makes them views (PyTorch distributed.py docstring, formulas.md §2.5).
        grad = par.grad_buffer_bytes(scenario.training.precision)
        # Megatron's main_grad buffer is its bucket (no copy)
        bucket_view = par.gradient_as_bucket_view or megatron_mixed_precision(scenario)
        comm = 0.0 if bucket_view else grad * psi_all
    else:
        mp = 4 if par.param_dtype == "fp32" else half
        rd = {"fp32": 4, "fp16": 2, "bf16": 2}.get(par.reduce_dtype or "", mp)
        unit = params.layer_local(m, par.tp)
        root = psi - blocks * unit
        # parallel.fp8_param_gather: a block's linear weights arrive, and stay unsharded, in FP8
        saved = (mp - 1) * max(0.0, unit - sum(params.block_vectors(m))) if par.fp8_param_gather else 0.0
        strategy = par.sharding_strategy
        # parallel.fsdp_no_sync: the whole unsharded gradient accumulates between micro-batches, the
        # stage's experts' too, in param_dtype under FSDP1 and reduce_dtype under FSDP2 (docstring)
        no_sync = par.fsdp_no_sync and scenario.grad_accum_steps > 1 and strategy != "no_shard"
        held = (mp if par.fsdp_version == 1 else rd) * psi_all if no_sync else 0.0
        if par.pp > 1 and strategy != "no_shard":
            gathered = mp * psi - blocks * saved
            comm = rd * psi
        elif strategy in ("full_shard", "hybrid_shard"):
            units = 2 if par.backward_prefetch == "backward_pre" else 1
            gathered = mp * (root + units * unit) - units * saved
            comm = held or rd * unit
        elif strategy == "shard_grad_op" or mp < 4:
            # no_shard under a 16-bit param_dtype: every rank holds the whole fp32 model (a model state);
            # FSDP casts it to a 16-bit copy in the forward (_mp_shard, the low-precision "shard" of
            # NO_SHARD) that lives until the post-backward, the same as shard_grad_op's gathered model
            gathered = mp * psi - blocks * saved
            comm = held or rd * unit
    return BufferBytes(comm, gathered, scenario.memory.nccl_buffers_bytes, optimizer_step=step)


# --- the verdict -------------------------------------------------------------------------------


def allocated_bytes(mem: dict[str, float]) -> float:
    """The allocated peak of a memory breakdown (``total − fragmentation``: model states, the peak
    transient, buffers and the CUDA context), what the verdict tests against the usable HBM."""
    return mem["total_bytes"] - mem["fragmentation_bytes"]


def _verdict(scenario: Scenario, st: ModelStateBytes, buf: BufferBytes, act: float) -> dict[str, float]:
    allocated = st.total_bytes + max(act, buf.optimizer_step) + buf.total_bytes
    frag = scenario.memory.fragmentation * (allocated - buf.nccl)
    return {"activations_bytes": act, "fragmentation_bytes": frag,
            "total_bytes": allocated + frag + scenario.memory.cuda_context_bytes}


def breakdown(scenario: Scenario) -> MemoryBreakdown:
    """Everything on the most-loaded GPU and whether it fits its usable HBM. The one memory model:
    ``dtsim memory``, ``run``, ``compare`` and ``sweep`` all report this.

    Every GPU pipeline stage is evaluated with its own parameters (``params.stage_local``, blocks from
    ``pipeline_split``), model states, buffers and activations (:func:`stage_activations`); the
    stage with the largest total is reported, and with ``p > 1`` every stage's totals are listed
    under ``stages``. Under ``training.lora`` the gradients, buckets and optimizer states are the
    adapters' and the base weights are frozen (``workload.lora.model_states``). The activations and the
    optimizer-step transient (:class:`BufferBytes`) are never live together, so the peak counts the
    larger: ``peak_transient = max(activations,
    optimizer_step)``. ``fragmentation = memory.fragmentation × (states + peak_transient + buffers −
    NCCL)``: the caching allocator's reserve over what it hands out (formulas.md §2.6; NCCL allocates
    outside it). ``total = states + peak_transient + buffers + cuda_context + fragmentation``, what a
    framework's max-reserved figure reports; ``headroom = usable − total``.

    The verdict: the step fits iff ``total − fragmentation ≤ cluster.gpu.hbm_usable_bytes``. The
    fragmentation allowance is cached memory, not a demand: when an allocation fails, PyTorch's
    caching allocator frees its unused cached blocks and retries before it raises out-of-memory, and
    with ``expandable_segments:True`` (set by NVIDIA's Megatron-Bridge performance recipes) segments
    grow in place instead of splitting. Between the two (``tight``) the step runs with those retries:
    NVIDIA's published Megatron runs at 1.00-1.09 of usable HBM by ``total`` (dtsim validate, memory
    fit check) trained.
    """
    hybrid.check_simulated(scenario)
    m, par = scenario.model, scenario.parallel
    _, _, blocks = pipeline_blocks(scenario)
    acts = stage_activations(scenario)
    best = None
    rows = []
    for st in range(par.pp):
        experts = 0.0
        if m.moe is None:
            psi = params.stage_local(m, par.tp, par.pp, st, blocks[st])
        else:  # the stage's own blocks, dense and MoE (moe_memory.split)
            held = moe_memory.split(scenario, st)
            psi, experts = held.dense, held.experts
        outside = params.stage_local(m, par.tp, par.pp, st, 0)
        if scenario.training.lora is None:
            states, trained = model_states(scenario, psi, outside, st), psi
        else:  # frozen base weights; gradients, buckets and optimizer states for the adapters only
            trained = wlora.adapters_local(scenario, blocks[st])
            states = wlora.model_states(scenario, psi, outside, trained, model_states)
        buf = buffers(scenario, trained, blocks[st], experts if scenario.training.lora is None else 0.0)
        v = _verdict(scenario, states, buf, acts[st].total_bytes)
        rows.append({"stage": st, "layers": blocks[st], "in_flight": acts[st].in_flight,
                     "activations_bytes": acts[st].total_bytes, "total_bytes": v["total_bytes"]})
        if best is None or v["total_bytes"] > best[3]["total_bytes"]:
            best = (states, buf, acts[st], v)
    assert best is not None
    states, buf, _, v = best
    hbm = float(scenario.cluster.gpu_spec.hbm_usable_bytes)
    return MemoryBreakdown(
        params_bytes=states.params_bytes,
        grads_bytes=states.grads_bytes,
        optimizer_bytes=states.optimizer_bytes,
        activations_bytes=v["activations_bytes"],
        buffers_bytes=buf.total_bytes,
        optimizer_step_bytes=buf.optimizer_step,
        cuda_context_bytes=scenario.memory.cuda_context_bytes,
        fragmentation_bytes=v["fragmentation_bytes"],
        total_bytes=v["total_bytes"],
        hbm_bytes=hbm,
        fits=allocated_bytes(v) <= hbm,
        tight=allocated_bytes(v) <= hbm < v["total_bytes"],
        headroom_bytes=hbm - v["total_bytes"],
        offloaded_bytes=states.offloaded_bytes + best[2].offloaded,
        stages=tuple(rows) if par.pp > 1 else (),
    )
