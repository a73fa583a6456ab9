"""Per-GPU memory of a training step: model states, activations, buffers, and a fits verdict.

All results are bytes on the most-loaded GPU at the step's peak. Buffers live through forward and
backward are summed with the activations (a slightly conservative peak); the optimizer-step
transients are compared with the activations instead, as they are never live together. Sources: formulas.md §2 (ZeRO paper, DeepSpeed estimators, Korthikanti et al. 2022, framework code).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from simulator.config.model import ModelConfig
from simulator.config.scenario import Scenario
from simulator.parallel import pipeline_order, pipeline_split
from simulator.workload import params
from simulator.workload.flops import Recompute

#: Bytes of a dropout mask element (Korthikanti et al. 2022 Sec. 4.1 store masks as 1-byte tensors).
MASK_BYTES = 1
#: Bytes of FlashAttention's per-row softmax statistic (fp32 log-sum-exp; Dao et al. 2022 Alg. 1).
SOFTMAX_STAT_BYTES = 4
#: Bytes per logit of the fp32 log-probabilities cross-entropy keeps for its backward (PyTorch
#: ``cross_entropy`` upcasts 16-bit logits; Megatron counts 4 B/logit in ``theoretical_memory_usage``).
LOGPROB_BYTES = 4
#: DeepSpeed ZeRO-3 runs the optimizer step per sub-group of this many elements (``sub_group_size``
#: default, ``deepspeed/runtime/zero/config.py``), so its fp32 gradient buffer is capped by it.
DEEPSPEED_SUB_GROUP = 1e9
#: DeepSpeed stage 0 all-reduces flattened buckets of at most this many elements
#: (``deepspeed/runtime/constants.py`` MEMORY_OPT_ALLREDUCE_SIZE).
DEEPSPEED_ALLREDUCE_BUCKET = 5e8


@dataclass(frozen=True)
class ModelStateBytes:
    """Per-GPU parameter, gradient and optimizer-state bytes; ``offloaded_bytes`` live in host memory."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    offloaded_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


@dataclass(frozen=True)
class ActivationBytes:
    """Activation memory of the in-flight micro-batches on the most-loaded pipeline stage.

    ``per_layer`` is what one block stores for one micro-batch under the recompute mode;
    ``layers = per_layer · blocks_on_stage · in_flight`` (``in_flight`` in whole-stage units); ``recompute_transient`` is one block's
    full activations, live while full recomputation rebuilds it; ``logits`` the output layer and
    cross-entropy buffers (last stage).
    """

    per_layer: float
    layers: float
    recompute_transient: float
    embedding: float
    logits: float
    in_flight: float
    total_bytes: float


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
    fits: bool
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


# --- model states ------------------------------------------------------------------------------


def zero_model_states(
    n_params: float,
    dp: int,
    zero_stage: int,
    param_bytes: float = 2,
    grad_bytes: float = 2,
    optimizer_bytes_per_param: float = 12,
) -> ModelStateBytes:
    """Model states per GPU under ZeRO (Rajbhandari et al. SC'20, Sec. 5.1 and Fig. 1).

    Mixed-precision Adam: ``2Ψ`` params + ``2Ψ`` grads + ``KΨ`` optimizer (K = 12: fp32 master,
    momentum, variance). Stage 1 divides the optimizer by ``N_d``, stage 2 also the gradients,
    stage 3 also the parameters: ``16Ψ``, ``4Ψ + 12Ψ/N_d``, ``2Ψ + 14Ψ/N_d``, ``16Ψ/N_d`` bytes.
    """
    return ModelStateBytes(
        params_bytes=param_bytes * n_params / (dp if zero_stage >= 3 else 1),
        grads_bytes=grad_bytes * n_params / (dp if zero_stage >= 2 else 1),
        optimizer_bytes=optimizer_bytes_per_param * n_params / (dp if zero_stage >= 1 else 1),
    )


def _local_params(scenario: Scenario, experts: bool = True) -> float:
    """Parameters on the most-loaded GPU; an MoE model's experts are split over EP x ETP
    (``experts=False``: without them, e.g. FSDP's root unit)."""
    m, p = scenario.model, scenario.parallel
    if m.moe is not None:
        from simulator.workload import moe

        split = moe.local(m, p.tp, p.pp, p.ep, p.etp)
        return split.total if experts else split.dense
    return params.local(m, p.tp, p.pp)


def _is_16bit(scenario: Scenario) -> bool:
    return scenario.training.precision in ("bf16", "fp16", "fp8")


def _shard_degree(scenario: Scenario) -> int:
    """GPUs a ZeRO/FSDP shard spans: the data × context parallel ranks (Megatron's distributed
    optimizer shards over ``dp·cp``, torchtitan's FSDP over ``dp_shard_cp``), or one node's DP ranks
    for FSDP HYBRID_SHARD."""
    p = scenario.parallel
    degree = scenario.dp * p.cp
    if p.framework == "fsdp" and p.sharding_strategy == "hybrid_shard":
        per_node_dp = max(1, scenario.cluster.topology.gpus_per_node // (p.tp * p.pp))
        return min(degree, per_node_dp)
    return degree


def model_states(scenario: Scenario, psi: float | None = None) -> ModelStateBytes:
    """Model states of a GPU holding ``psi`` parameters (default: the most-loaded stage's,
    ``params.local(model, tp, pp)``).

    * DeepSpeed: the ZeRO formulas with 2/2/12 B per parameter in 16-bit training, 4/4/8 in fp32
      (no master copy). ``offload_optimizer`` moves the optimizer states and, from stage 2, the
      gradient partition to the host (ZeRO-Offload; DeepSpeed's ``estimate_zero2`` gives GPU = 2Ψ);
      ``offload_param`` (stage 3) moves the parameter partition too (GPU = largest layer, in buffers).
    * DDP under AMP keeps fp32 parameters and fp32 gradients (formulas.md §4.1) and Adam's fp32 m, v:
      4/4/8 B, nothing sharded; the 16-bit autocast copies are transient.
    * FSDP shards fp32 flat parameters, fp32 gradients (upcast after the reduce-scatter) and Adam
      states: 4/4/8 B ÷ the shard degree (all three for FULL_SHARD, HYBRID_SHARD — within a node —
      and SHARD_GRAD_OP, nothing for NO_SHARD); the 16-bit unsharded copies are buffers.
      ``offload_optimizer`` = ``CPUOffload(offload_params=True)``, which keeps parameters,
      gradients and the optimizer step on the host.
    * Megatron's distributed optimizer (framework ddp, ``distributed_optimizer``) in 16-bit training:
      16-bit parameters, fp32 gradient buffer (``main_grad``), fp32 master + Adam m, v sharded over
      ``dp·cp``: ``6 + 12/d`` B per parameter (Megatron-LM ``theoretical_memory_usage.py``:
      ``num_bytes_per_parameter = 6 + 12 / data_parallel_size``).
    """
    p = scenario.parallel
    if psi is None:
        psi = params.local(scenario.model, p.tp, p.pp)
    if p.framework == "deepspeed" and _is_16bit(scenario):
        sizes = (2, 2, 12)
    elif p.framework == "ddp" and p.distributed_optimizer and _is_16bit(scenario):
        sizes = (2, 4, 12)
    else:
        sizes = (4, 4, 8)
    stage = p.effective_zero_stage
    if p.framework == "fsdp" and stage == 2:
        stage = 3  # SHARD_GRAD_OP also stores its fp32 flat parameters sharded; the 16-bit copy is a buffer
    if scenario.model.moe is not None:  # experts sharded over EP x ETP and expert-DP
        from simulator.workload import moe_memory

        st = moe_memory.model_states(scenario, zero_model_states, _shard_degree(scenario), stage, sizes)
    else:
        st = zero_model_states(psi, _shard_degree(scenario), stage, *sizes)
    pb, gb, ob, host = st.params_bytes, st.grads_bytes, st.optimizer_bytes, 0.0
    if p.framework == "fsdp" and p.offload_optimizer != "none":
        return ModelStateBytes(0.0, 0.0, 0.0, offloaded_bytes=st.total_bytes)
    if p.offload_optimizer != "none":
        host, ob = host + ob, 0.0
        if p.effective_zero_stage >= 2:
            host, gb = host + gb, 0.0
    if p.offload_param != "none":
        host, pb = host + pb, 0.0
    return ModelStateBytes(pb, gb, ob, offloaded_bytes=host)


# --- activations -------------------------------------------------------------------------------


def layer_activation_bytes(
    model: ModelConfig,
    b: int,
    s: int,
    tp: int = 1,
    *,
    sequence_parallel: bool = False,
    flash_attention: bool = True,
    recompute: Recompute = "none",
    precision_bytes: int = 2,
    dropout: bool = False,
) -> float:
    """Bytes one transformer block keeps for the backward, one micro-batch (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", Sec. 4 and Table 2).

    Generalised to GQA, any ``f``, SwiGLU and FlashAttention (``p`` = precision bytes, 2 in the paper):

    * norm/dropout region (÷t only with sequence parallelism): two norm inputs ``2p·sbh``, the
      attention and MLP inputs ``2p·sbh``, two dropout masks ``2·sbh`` → ``10·sbh`` at p = 2;
    * tensor-parallel region (÷t): Q, K, V ``p·sb·(a·d_h + 2·g_kv·d_h)``, out-proj input
      ``p·sb·a·d_h``, activation input ``p·sb·(k_mlp−1)·f`` and output ``p·sb·f`` → ``24·sbh`` for
      MHA + GELU-4h (SwiGLU stores gate and up: ``3f`` instead of ``2f``); QK-norm adds its
      inputs ``p·sb·(a·d_h + g_kv·d_h)`` (RoPE needs no input for its backward, only sin/cos);
    * attention core (÷t), unfused: softmax output ``p·a·s²b``, dropout mask ``a·s²b`` and output
      ``p·a·s²b`` → ``5·a·s²·b``; FlashAttention stores none of it, only the fp32 log-sum-exp
      ``4·a·s·b`` (dropout is regenerated from the RNG state); selective recomputation drops it.

    Total without parallelism, MHA, GELU-4h, dropout, p = 2: ``s·b·h·(34 + 5·a·s/h)``; with TP
    ``s·b·h·(10 + 24/t + 5as/(ht))``; selective ``s·b·h·(10 + 24/t)``. Full recomputation keeps only
    the block input, ``p·sbh`` (÷t with SP); see :func:`activations` for the transient.
    """
    p, t, mask = precision_bytes, tp, (MASK_BYTES if dropout else 0)
    sbh = s * b * model.hidden_size
    region_div = t if sequence_parallel else 1
    if recompute == "full":
        return p * sbh / region_div
    replicated = sbh * (4 * p + 2 * mask)
    qkv_out = p * s * b * (2 * model.q_dim + 2 * model.kv_dim)
    if model.qk_norm:
        qkv_out += p * s * b * (model.q_dim + model.kv_dim)
    mlp = p * s * b * model.ffn_hidden_size * model.mlp_matrices
    heads_s2b = model.n_heads * s * s * b
    if flash_attention:
        core = SOFTMAX_STAT_BYTES * model.n_heads * s * b
    elif recompute == "selective":
        core = 0.0
    else:
        core = heads_s2b * (p + (mask + p if dropout else 0))
    return replicated / region_div + (qkv_out + mlp + core) / t


def logits_activation_bytes(
    model: ModelConfig, b: int, s: int, tp: int = 1, precision_bytes: int = 2
) -> float:
    """Output-layer buffers of one micro-batch: the final-norm input and output ``2p·sbh``, the
    vocab-parallel logits ``p·sbV/t`` and the fp32 log-probabilities kept for the backward
    ``4·sbV/t`` (cf. Megatron ``theoretical_memory_usage.py``: ``4·sbh·(1 + V/h)`` with SP)."""
    p = precision_bytes
    return 2 * p * s * b * model.hidden_size + (p + LOGPROB_BYTES) * s * b * model.vocab_size / tp


def _pipeline(scenario: Scenario) -> tuple[str, int, list[int]]:
    """(schedule, virtual stages, blocks per GPU stage) of the scenario's pipeline."""
    par = scenario.parallel
    schedule = par.pipeline_schedule if par.pp > 1 else "1f1b"
    v = par.virtual_stages if schedule == "interleaved" else 1
    return schedule, v, pipeline_split.gpu_stage_layers(scenario.model.n_layers, par.pp, v, par)


def _in_flight(schedule: str, stage: int, pp: int, n_micro: int, v: int) -> float:
    """``pipeline_order.in_flight``, without walking millions of micro-batches: GPipe holds all
    ``m``; 1F1B and interleaved 1F1B reach their peak within the warm-up (fewer than ``2·p·v``
    chunk-forwards), so any ``m`` beyond ``4·p·v`` (kept a multiple of ``p``) gives the same peak."""
    if schedule == "gpipe":
        return float(n_micro)
    cap = 4 * pp * v
    return pipeline_order.in_flight(schedule, stage, pp, min(n_micro, cap), v)


def stage_activations(scenario: Scenario) -> list[ActivationBytes]:
    """Activation bytes on every GPU pipeline stage, per :func:`layer_activation_bytes`.

    A stage holding ``n_s`` blocks with ``k_s`` micro-batches in flight stores
    ``per_layer · n_s · k_s``; ``k_s`` is counted on the schedule's own order
    (``pipeline_order.in_flight``): GPipe ``m``; 1F1B ``min(p−s, m)`` (Narayanan et al. SC'21 §2.2;
    Megatron ``theoretical_memory_usage.py``); interleaved ``L·(1 + (p−1)/(p·v))`` layers on stage 0
    (Korthikanti et al. 2022 §4.2.3). Blocks per stage from ``pipeline_split`` (Megatron's
    placements). Sequence parallelism divides the norm/dropout region by ``t``; context parallelism
    makes every term one of the rank's ``s/cp`` tokens (Korthikanti's formulas with ``s → s/cp``).
    Full recomputation stores the block inputs and, while recomputing one block for its backward,
    that block's full activations (Korthikanti Table 2 note). The first stage adds the embedding's
    dropout mask ``sbh`` per in-flight micro-batch when dropout is on; the last stage the logits
    buffers of one micro-batch.
    """
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    b, s, t, pp = tr.micro_batch_size, tr.seq_len // par.cp, par.tp, par.pp
    pb = 2 if _is_16bit(scenario) else 4
    dropout = m.dropout > 0
    common = dict(flash_attention=tr.kernels.flash_attention, precision_bytes=pb, dropout=dropout,
                  sequence_parallel=par.sequence_parallel and t > 1)
    per_layer = layer_activation_bytes(m, b, s, t, recompute=tr.activation_checkpointing, **common)
    if m.moe is not None or m.is_mla:  # routed tokens / MLA tensors instead of the dense ones
        from simulator.workload import moe_memory

        per_layer += moe_memory.activation_delta_per_layer(scenario, pb)
    transient = 0.0
    if tr.activation_checkpointing == "full":
        transient = layer_activation_bytes(m, b, s, t, recompute="none", **common)
        if m.moe is not None or m.is_mla:  # the block being recomputed holds its routed tokens too
            from simulator.workload import moe_memory

            transient += max(0.0, moe_memory.moe_block_extra(scenario, pb) + moe_memory.mla_block_extra(scenario, pb))
    schedule, v, blocks = _pipeline(scenario)
    n_micro = scenario.grad_accum_steps
    logits = logits_activation_bytes(m, b, s, t, pb)
    rows = []
    for st in range(pp):
        k = _in_flight(schedule, st, pp, n_micro, v) if pp > 1 else 1
        layers = per_layer * blocks[st] * k
        embedding = MASK_BYTES * s * b * m.hidden_size * math.ceil(k) if (st == 0 and dropout) else 0.0
        head = logits if st == pp - 1 else 0.0
        rows.append(ActivationBytes(per_layer=per_layer, layers=layers, recompute_transient=transient,
                                    embedding=embedding, logits=head, in_flight=k,
                                    total_bytes=layers + transient + embedding + head))
    return rows


def activations(scenario: Scenario) -> ActivationBytes:
    """Activations of the pipeline stage that stores the most (:func:`stage_activations`)."""
    return max(stage_activations(scenario), key=lambda a: a.total_bytes)


# --- buffers -----------------------------------------------------------------------------------


def buffers(scenario: Scenario, psi: float | None = None, blocks: int | None = None) -> BufferBytes:
    """Communication and gathering buffers per framework (formulas.md §2.5), on a GPU holding
    ``psi`` parameters in ``blocks`` transformer blocks (default: the most-loaded stage's).

    * DeepSpeed stage 0: one flattened all-reduce bucket of ≤ 5e8 elements (16-bit).
    * DeepSpeed stages 1–2 (``contiguous_gradients``): ``reduce_bucket_size`` 16-bit "ipg" buffers,
      two with ``overlap_comm`` (``stage_1_and_2.py``).
    * DeepSpeed stage 3: one ipg buffer, gathered parameters ``min(max_live, largest + prefetch)``
      and the unsharded gradient of the largest module (DeepSpeed's ``largest_layer_memory = 4·L``).
    * DDP: bucket copies of all gradients (``gradient_as_bucket_view=False``, the default).
    * FSDP FULL/HYBRID: the root unit (embeddings, head) stays unsharded (no reshard after forward
      for the root), plus 2 block units with ``backward_prefetch=backward_pre`` (current + next,
      ``limit_all_gathers`` caps in-flight all-gathers at 2) else 1, plus one unit's unsharded
      gradients; SHARD_GRAD_OP keeps every unsharded parameter from forward to backward.
    * FSDP under a pipeline (torchtitan): parameters gathered in micro-batch 0 stay unsharded for the
      step (``reshard_after_forward=False`` with PP) and gradients accumulate unsharded, in
      ``reduce_dtype``, until the last micro-batch's reduce-scatter (FSDP2
      ``set_requires_gradient_sync(False)``; ``unsharded_accumulated_grad``): the whole stage's
      parameters and gradients unsharded.
    * Megatron's distributed optimizer: gradients live in the contiguous fp32 ``main_grad`` buffer
      counted in the model states (reduce-scattered in place), so no bucket copy.
    * NCCL communicator buffers: ``memory.nccl_buffers_bytes``.

    Optimizer-step transients: DeepSpeed stages 1–3 upcast the 16-bit gradient partition to fp32
    for the step (``4Ψ/N_d``, per sub-group of ≤ 1e9 elements in stage 3; the "4 fp32 grads" of
    DeepSpeed's 18 B/param estimate); an unfused (``foreach``) torch Adam allocates one fp32
    temporary per updated parameter (``_foreach_sqrt`` of the variance, ``torch/optim/adam.py``).
    """
    m, par = scenario.model, scenario.parallel
    if psi is None:
        psi = _local_params(scenario)
    if blocks is None:
        blocks = math.ceil(m.n_layers / par.pp)
    half = 2 if _is_16bit(scenario) else 4
    stage = par.effective_zero_stage
    on_gpu_optimizer = par.offload_optimizer == "none"
    updated = psi / (_shard_degree(scenario) if stage >= 1 else 1)  # parameters this GPU's Adam updates
    step = 0.0
    if on_gpu_optimizer and not scenario.training.kernels.fused_adam:
        step += 4 * updated
    if on_gpu_optimizer and par.framework == "deepspeed" and stage >= 1:
        step += 4 * (min(updated, DEEPSPEED_SUB_GROUP) if stage == 3 else updated)
    comm = gathered = 0.0
    if par.framework == "deepspeed":
        if stage == 0:
            comm = half * min(psi, DEEPSPEED_ALLREDUCE_BUCKET)
        elif stage in (1, 2):
            n_ipg = 2 if par.effective_overlap_comm else 1
            comm = half * min(psi, par.reduce_bucket_size) * n_ipg
        else:
            largest = params.count(m).largest_layer / par.tp
            live = min(par.stage3_max_live_parameters, largest + par.stage3_prefetch_bucket_size)
            gathered = half * live
            comm = half * min(psi, par.reduce_bucket_size) + half * largest
    elif par.framework == "ddp":
        # fp32 gradients under AMP are copied into flat buckets of the same total size, unless
        # gradient_as_bucket_view makes them views (PyTorch distributed.py docstring, formulas.md §2.5).
        comm = 0.0 if (par.gradient_as_bucket_view or par.distributed_optimizer) else 4 * psi
    else:
        mp = 4 if par.param_dtype == "fp32" else half
        rd = {"fp32": 4, "fp16": 2, "bf16": 2}.get(par.reduce_dtype or "", mp)
        unit = params.layer_local(m, par.tp)
        dense = psi if m.moe is None else _local_params(scenario, experts=False)
        root = dense - blocks * unit
        strategy = par.sharding_strategy
        if par.pp > 1 and strategy != "no_shard":
            gathered = mp * psi
            comm = rd * psi
        elif strategy in ("full_shard", "hybrid_shard"):
            units = 2 if par.backward_prefetch == "backward_pre" else 1
            gathered = mp * (root + units * unit)
            comm = rd * unit
        elif strategy == "shard_grad_op":
            gathered = mp * psi
            comm = rd * unit
    return BufferBytes(comm, gathered, scenario.memory.nccl_buffers_bytes, optimizer_step=step)


# --- the verdict -------------------------------------------------------------------------------


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
    under ``stages``. The activations and the optimizer-step transient (:class:`BufferBytes`) are
    never live together, so the peak counts the larger: ``peak_transient = max(activations,
    optimizer_step)``. ``fragmentation = memory.fragmentation × (states + peak_transient + buffers −
    NCCL)``: the caching allocator's reserve over what it hands out (formulas.md §2.6; NCCL allocates
    outside it). ``total = states + peak_transient + buffers + cuda_context + fragmentation``; fits
    iff ``total ≤ cluster.gpu.hbm_usable_bytes``.
    """
    m, par = scenario.model, scenario.parallel
    _, _, blocks = _pipeline(scenario)
    acts = stage_activations(scenario)
    best = None
    rows = []
    for st in range(par.pp):
        psi = params.stage_local(m, par.tp, par.pp, st, blocks[st])
        states = model_states(scenario, psi)
        buf = buffers(scenario, psi, blocks[st])
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
        fits=v["total_bytes"] <= hbm,
        headroom_bytes=hbm - v["total_bytes"],
        offloaded_bytes=states.offloaded_bytes,
        stages=tuple(rows) if par.pp > 1 else (),
    )
