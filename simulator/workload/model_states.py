"""Model states of a GPU (weights, gradients, optimizer states) per framework and precision: the ZeRO / FSDP /
Megatron byte counts of ``zero_states`` applied to the parameters a GPU holds (formulas.md §2; the one memory
model's states, ``workload.memory``)."""

from __future__ import annotations

from simulator.config.scenario import Scenario
from simulator.hardware.compute import NON_TN_FP8_ARCHS
from simulator.workload import moe_memory, params
from simulator.workload import muon as wmuon
from simulator.workload.activations import is_16bit
from simulator.workload.fp8_casts import TRANSPOSED_RECIPES
from simulator.workload.zero_states import ModelStateBytes, zero_model_states


def local_params(scenario: Scenario, experts: bool = True) -> float:
    """Parameters on the most-loaded GPU; an MoE model's experts are split over EP x ETP
    (``experts=False``: without them, e.g. FSDP's root unit)."""
    m, p = scenario.model, scenario.parallel
    if m.moe is not None:
        split = moe_memory.split(scenario)
        return split.total if experts else split.dense
    return params.local(m, p.tp, p.pp)


def megatron_mixed_precision(scenario: Scenario) -> bool:
    """Whether the ddp engine is Megatron's in 16-bit training: its distributed optimizer or bucket size named
    (``ParallelConfig.megatron_ddp``), or tensor or pipeline parallelism, which only Megatron runs under framework
    ddp. Its optimizer keeps 16-bit weights, an fp32 ``main_grad`` buffer that is also the reduction bucket, and
    an fp32 master copy with Adam's states: 2 + 4 + 12 = 18 B per parameter (Megatron-LM
    ``theoretical_memory_usage.py``: ``num_bytes_per_parameter = 18`` without the distributed optimizer)."""
    p = scenario.parallel
    return p.framework == "ddp" and (p.megatron_ddp or p.tp > 1 or p.pp > 1) and is_16bit(scenario)


#: Bytes of a linear weight held as a Megatron-Core FP8 parameter: row-wise FP8 data only where a per-tensor
#: recipe runs on a GPU whose FP8 GEMMs take any layout (``fp8_param_savings``).
FP8_PARAM_BYTES = 1


def fp8_param_savings(scenario: Scenario, psi: float, outside: float, pipeline_stage: int | None = None) -> float:
    """Bytes the GPU's 16-bit weights shrink by as Megatron-Core FP8 parameters: ``(2 − FP8_PARAM_BYTES)`` per
    linear weight (the blocks' ``psi − outside`` less their norms and biases; for an MoE model its stage's dense
    part, ``moe_memory.split``, and its local experts).

    With ``parallel.fp8_param_gather`` under the Megatron engine (``--fp8-param-gather``, Megatron-Bridge's
    ``fp8_param``) Transformer Engine builds its modules' weights as FP8 tensors (``fp8_model_init``) and keeps no
    16-bit copy: the distributed optimizer's fp32 shard is cast into them after each step and gathered in FP8. A
    per-tensor FP8 weight (``fp8_casts.TRANSPOSED_RECIPES``) is its row-wise data, 1 byte, plus a transposed copy
    only where FP8 GEMMs need the TN layout, which ``fp8_casts`` cites from Transformer Engine: none on
    ``hardware.compute.NON_TN_FP8_ARCHS`` (Blackwell). On Hopper the transpose makes it 2 bytes, and MXFP8 keeps a
    column-wise copy with its own scales on every GPU: no saving there. The embedding, the output layer
    (Megatron-Core's own ``ColumnParallelLinear``) and the norms stay 16-bit. Measured: Together AI's DGX-B200
    Llama 3.1 8B logs (Megatron-Bridge, one node) hold 50.804 GB allocated after the first iteration in BF16 and
    43.823 GB in FP8 current scaling with FP8 parameters, 6.98 GB apart: the model's 6.98e9 linear weights at one
    byte each (docs/accuracy-history.md item 78)."""
    p, t = scenario.parallel, scenario.training
    if not (p.fp8_param_gather and megatron_mixed_precision(scenario)
            and t.active_fp8_recipe in TRANSPOSED_RECIPES and scenario.cluster.gpu_spec.arch in NON_TN_FP8_ARCHS):
        return 0.0
    m, experts = scenario.model, 0.0
    if m.moe is not None:  # psi is not an MoE model's own count here (its states come from the split)
        held = moe_memory.split(scenario, pipeline_stage)
        psi, experts = held.dense, held.experts
    per_block = params.layer_local(m, p.tp)
    blocks = round((psi - outside) / per_block) if per_block else 0
    return (2 - FP8_PARAM_BYTES) * (max(0.0, psi - outside - blocks * sum(params.block_vectors(m))) + experts)


def optimizer_state_bytes(scenario: Scenario, saved: bool = False) -> int:
    """Bytes per parameter of Megatron-Core's optimizer states in 16-bit training: an fp32 master copy and Adam's
    fp32 ``exp_avg`` and ``exp_avg_sq``, 4 + 4 + 4 = 12. Under the precision-aware optimizer
    (``parallel.precision_aware_optimizer``) BF16 weights keep only the master's 16 low bits
    (Megatron-Core ``OptimizerConfig.store_param_remainders``, default True: "store the 16-bit FP32 parameter
    remainders in the optimizer state, excluding the 16 bits shared with the BF16 parameters"; Transformer
    Engine's ``FusedAdam`` holds them as int16), 2 + 4 + 4 = 10, and ``optimizer_moments_dtype`` bf16 halves
    the moments, 2 + 2 + 2 = 6. fp16 and FP8 weights (``fp8_param_gather``) keep the 4-byte master.

    ``saved``: as a checkpoint holds them. Megatron-Core reads each state for saving through ``FusedAdam``'s
    ``get_unscaled_state`` (``DistributedOptimizer._get_main_param_and_optimizer_states``), which returns the
    int16 remainder as it is and upcasts 16-bit moments (``.float()``), and its default ``dp_reshardable``
    format writes each tensor in its own dtype: 2 + 4 + 4 = 10 with remainders whatever the moments' dtype."""
    p = scenario.parallel
    if not p.precision_aware_optimizer:
        return 12
    remainders = scenario.training.precision in ("bf16", "fp8") and not p.fp8_param_gather
    moments = 2 if p.optimizer_moments_dtype == "bf16" and not saved else 4
    return (2 if remainders else 4) + 2 * moments


def state_sizes(scenario: Scenario, dense: float, outside: float | None,
                saved: bool = False) -> tuple[tuple, tuple | None]:
    """Bytes per parameter ``(weight, gradient, optimizer states)`` by framework and precision (the bullets of
    ``model_states``), and under Muon those of the routed experts apart (else None: as the others). Muon's
    depend on the share of Adam-trained parameters: ``outside`` (embedding and output layer; None: the
    most-loaded GPU's) of ``dense`` non-expert ones (``workload.muon.state_sizes``). ``saved``: the optimizer
    states as a checkpoint holds them (``optimizer_state_bytes``)."""
    p, precision = scenario.parallel, scenario.training.precision
    if scenario.training.optimizer == "muon":  # fp32 master and one momentum (workload.muon)
        return wmuon.state_sizes(scenario, dense, outside)
    if p.bf16_optimizer(precision):
        return (2, 2 + 4, 12), None  # the bf16 gradients and BF16_Optimizer's unsharded fp32 accumulation buffer
    if p.framework == "deepspeed" and is_16bit(scenario):
        return (2, 2, 12), None
    if megatron_mixed_precision(scenario):
        # 16-bit weights, the main_grad buffer, an fp32 master copy and Adam's m, v (the step's fp32 copy of a
        # 16-bit main_grad is a transient: buffers)
        return (2, p.grad_buffer_bytes(precision), optimizer_state_bytes(scenario, saved)), None
    if p.framework == "ddp":
        return (4, p.grad_buffer_bytes(precision), 8), None
    return (4, 4, 8), None


def shard_degree(scenario: Scenario) -> int:
    """GPUs a ZeRO/FSDP shard spans: the data × context parallel ranks (Megatron's distributed
    optimizer shards over ``dp·cp``, torchtitan's FSDP over ``dp_shard_cp``), or one node's DP ranks
    for FSDP HYBRID_SHARD."""
    p = scenario.parallel
    degree = scenario.dp * p.cp
    if p.framework == "fsdp" and p.sharding_strategy == "hybrid_shard":
        per_node_dp = max(1, scenario.cluster.topology.gpus_per_node // (p.tp * p.pp))
        return min(degree, per_node_dp)
    return degree


def model_states(scenario: Scenario, psi: float | None = None, outside: float | None = None,
                 pipeline_stage: int | None = None) -> ModelStateBytes:
    """Model states of a GPU holding ``psi`` parameters (default: the most-loaded stage's,
    ``params.local(model, tp, pp)``), ``outside`` of them embedding and output layer (default: the most-loaded
    stage's; Muon leaves them to Adam). An MoE model's come from the blocks of pipeline stage
    ``pipeline_stage`` (None: the most-loaded stage; ``moe_memory.split``).

    * DeepSpeed: the ZeRO formulas with 2/2/12 B per parameter in 16-bit training, 4/4/8 in fp32
      (no master copy). ``offload_optimizer`` moves the optimizer states and, from stage 2, the
      gradient partition to the host (ZeRO-Offload; DeepSpeed's ``estimate_zero2`` gives GPU = 2Ψ);
      ``offload_param`` (stage 3) moves the parameter partition too (GPU = largest layer, in buffers).
      bf16 at stage 0 runs DeepSpeed's ``BF16_Optimizer`` (``ParallelConfig.bf16_optimizer``): 2 B
      parameters, 2 + 4 B gradients (its fp32 accumulation buffer, "which consumes 4 bytes * params of
      additional memory" unsharded, BigScience tr11 README) and the 12 B optimizer states sharded as in
      stage 1.
    * DDP under AMP keeps fp32 parameters and fp32 gradients (formulas.md §4.1) and Adam's fp32 m, v:
      4/4/8 B, nothing sharded; the 16-bit autocast copies are transient; 16-bit gradients (2 B) with
      ``grad_reduce_in_fp32`` False.
    * FSDP shards fp32 flat parameters, fp32 gradients (upcast after the reduce-scatter) and Adam
      states: 4/4/8 B ÷ the shard degree (all three for FULL_SHARD, HYBRID_SHARD — within a node —
      and SHARD_GRAD_OP, nothing for NO_SHARD); the 16-bit unsharded copies are buffers.
      ``offload_optimizer`` = ``CPUOffload(offload_params=True)``, which keeps parameters,
      gradients and the optimizer step on the host.
    * Megatron's distributed optimizer (framework ddp, ``distributed_optimizer``) in 16-bit training:
      16-bit parameters, fp32 gradient buffer (``main_grad``), fp32 master + Adam m, v sharded over
      ``dp·cp``: ``6 + 12/d`` B per parameter (Megatron-LM ``theoretical_memory_usage.py``:
      ``num_bytes_per_parameter = 6 + 12 / data_parallel_size``). With ``grad_reduce_in_fp32`` False
      the buffer is 16-bit, ``4 + 12/d`` B; the fp32 copy of its shard each rank makes for the step is a
      step transient (``memory.buffers``). Megatron without the distributed optimizer (its bucket size
      named, or tensor or pipeline parallelism: ``megatron_mixed_precision``): 2 + 4 + 12 = 18 B.
    * Megatron-Core's precision-aware optimizer: its master copy and moments as ``optimizer_state_bytes`` gives.
    * Megatron-Core FP8 parameters (``parallel.fp8_param_gather`` under the Megatron engine): a linear weight
      takes 1 byte instead of 2 with a per-tensor recipe on Blackwell (``fp8_param_savings``).
    """
    p = scenario.parallel
    if psi is None:
        psi = params.local(scenario.model, p.tp, p.pp)
    if scenario.training.optimizer == "muon" and scenario.model.moe is not None:
        # an MoE model's Muon states come from its stage's split (its experts apart)
        sizes, expert_sizes = state_sizes(scenario, moe_memory.split(scenario, pipeline_stage).dense, None)
    else:
        sizes, expert_sizes = state_sizes(scenario, psi, outside)
    # DeepSpeed's BF16_Optimizer shards its fp32 master and Adam states
    stage = 1 if p.bf16_optimizer(scenario.training.precision) else p.effective_zero_stage
    if p.framework == "fsdp" and stage == 2:
        stage = 3  # SHARD_GRAD_OP also stores its fp32 flat parameters sharded; the 16-bit copy is a buffer
    if scenario.model.moe is not None:  # experts sharded over EP x ETP and expert-DP
        st = moe_memory.model_states(scenario, zero_model_states, shard_degree(scenario), stage, sizes, expert_sizes,
                                     pipeline_stage)
    else:
        st = zero_model_states(psi, shard_degree(scenario), stage, *sizes)
    pb, gb, ob, host = st.params_bytes, st.grads_bytes, st.optimizer_bytes, 0.0
    if outside is None:
        outside = params.outside_local(scenario.model, p.tp, p.pp)
    pb -= fp8_param_savings(scenario, psi, outside, pipeline_stage)
    if p.framework == "fsdp" and p.offload_optimizer != "none":
        return ModelStateBytes(0.0, 0.0, 0.0, offloaded_bytes=st.total_bytes)
    if p.offload_optimizer != "none":
        host, ob = host + ob, 0.0
        if p.effective_zero_stage >= 2:
            host, gb = host + gb, 0.0
    if p.offload_param != "none":
        host, pb = host + pb, 0.0
    return ModelStateBytes(pb, gb, ob, offloaded_bytes=host)
