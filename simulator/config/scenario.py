"""The scenario: one study a user writes in YAML (model × cluster × training × parallelism × cost).

Key names are API (later tools and users rely on them). Every section forbids unknown keys and is
frozen. References (model name, topology name, GPU name) are resolved by ``simulator.config.loader``
before validation, so a validated ``Scenario`` is self-contained.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from simulator.config.base import Frozen
from simulator.config.hardware import Dtype, GPUSpec
from simulator.config.model import ModelConfig
from simulator.config.run import CostConfig, ReliabilityConfig
from simulator.config.topology import TopologyConfig

Framework = Literal["deepspeed", "fsdp", "ddp"]
Offload = Literal["none", "cpu", "nvme"]
Recompute = Literal["none", "selective", "full"]


class ClusterConfig(Frozen):
    """Which machines: a node type (topology file), how many nodes, optionally another GPU."""

    topology: TopologyConfig
    nodes: PositiveInt = 1
    #: Override the topology's GPU (e.g. a100-40gb in a dgx-a100 chassis).
    gpu: GPUSpec | None = None
    #: Use only this many GPUs (default: all GPUs of all nodes); must fill whole nodes unless < 1 node,
    #: or, for racks of several hosts (NVL72), whole hosts: the last rack may be partial.
    gpus: PositiveInt | None = None
    network_fidelity: Literal["analytical", "flow"] = "analytical"
    collective_algorithm: Literal["auto", "ring", "tree", "hierarchical", "nvls"] = "auto"

    @property
    def gpu_spec(self) -> GPUSpec:
        """The GPU in use: the override if given, else the topology's (resolved by the loader)."""
        assert self.gpu is not None, "loader resolves cluster.gpu"
        return self.gpu

    @property
    def n_gpus(self) -> int:
        return self.gpus or self.nodes * self.topology.gpus_per_node

    @model_validator(mode="after")
    def _check_gpus(self) -> ClusterConfig:
        per_node = self.topology.gpus_per_node
        total = self.nodes * per_node
        if self.gpus is not None:
            if self.gpus > total:
                raise ValueError(
                    f"cluster.gpus ({self.gpus}) exceeds nodes x gpus_per_node ({self.nodes} x {per_node} = {total})"
                )
            host = self.topology.gpus_per_host
            if host is not None and self.gpus % host:
                # Multi-host nodes (NVL72 racks): a partial rack holds whole compute trays.
                raise ValueError(f"cluster.gpus ({self.gpus}) must be a multiple of the {host} GPUs of one host "
                                 f"(compute tray) of {self.topology.name}")
            if host is None and self.gpus > per_node and self.gpus % per_node:
                raise ValueError(
                    f"cluster.gpus ({self.gpus}) must be a multiple of the node size ({per_node}) when it spans nodes"
                )
        if self.collective_algorithm == "nvls" and not self.topology.nvls:
            raise ValueError(f"cluster.collective_algorithm nvls: topology {self.topology.name} has no NVLink SHARP "
                             "(nvls: true on an NVSwitch node); use auto, ring, tree or hierarchical")
        return self


class KernelConfig(Frozen):
    """Kernel-level choices that change how many memory-bound passes a step makes."""

    flash_attention: bool = True
    fused_norm_residual: bool = True
    fused_adam: bool = True
    #: torch.compile (Inductor): elementwise chains fused into one kernel each, dispatched by generated
    #: code instead of the eager dispatcher (``simulator.hardware.kernels``).
    compile: bool = False
    #: FP8 scaling recipe when ``training.precision`` is fp8: Transformer Engine ``delayed`` or
    #: ``current`` scaling, torchao float8 ``tensorwise`` or ``rowwise``, Blackwell ``mxfp8``.
    fp8_recipe: Literal["delayed", "current", "tensorwise", "rowwise", "mxfp8"] = "delayed"


class TrainingConfig(Frozen):
    """Batch, sequence, precision, recomputation and the token budget of the run."""

    seq_len: PositiveInt
    micro_batch_size: PositiveInt = Field(description="sequences per GPU per micro-batch")
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    precision: Dtype = "bf16"
    activation_checkpointing: Recompute = "none"
    total_tokens: PositiveFloat | None = None
    steps: PositiveInt | None = None
    #: FLOP convention for attention in model-FLOP counts (MFU): "full" counts the whole s×s score
    #: matrix (PaLM App. B, Megatron SC'21 Eq. 3); "causal" counts the unmasked half (Megatron-LM code,
    #: FlashAttention benchmarks). Kernel time always uses causal work.
    attention_flops: Literal["full", "causal"] = "full"
    kernels: KernelConfig = KernelConfig()
    #: Gradient clipping by global norm before the optimizer step (Megatron ``--clip-grad``,
    #: torchtitan ``max_norm``; on in most LLM recipes): one read and one read-write of the gradients.
    grad_clipping: bool = True

    @model_validator(mode="after")
    def _check_budget(self) -> TrainingConfig:
        if self.total_tokens is not None and self.steps is not None:
            raise ValueError("give training.total_tokens or training.steps, not both")
        return self


class ParallelConfig(Frozen):
    """Parallel layout and the communication semantics of one framework.

    DeepSpeed keys follow DeepSpeed's names (elements, not bytes); DDP keys follow
    ``torch.nn.parallel.DistributedDataParallel``; FSDP keys follow ``torch.distributed.fsdp``.
    A key of another framework than ``framework`` is an error (it would be silently ignored there).
    """

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    #: Context parallelism (Megatron-Core ``context_parallel_size``, ring attention): the sequence
    #: split over ``cp`` ranks; the batch splits over dp = GPUs / (tp · cp · pp), gradients reduce
    #: over dp · cp. ``training.global_batch_size`` must be a multiple of ``micro_batch_size · dp``.
    cp: PositiveInt = 1
    #: Expert parallelism (MoE models; Megatron-Core ``--expert-model-parallel-size``): the routed
    #: experts split over ``ep`` ranks; ``etp`` splits each expert's width
    #: (``--expert-tensor-parallel-size``); expert data parallel = tp·cp·dp / (ep·etp).
    ep: PositiveInt = 1
    etp: PositiveInt = 1
    #: Run the shared experts while the token dispatch is in flight (``--moe-shared-expert-overlap``).
    moe_shared_expert_overlap: bool = False
    #: Token dispatcher: one all-to-all over the EP group (Megatron-Core ``alltoall``), or DeepEP's
    #: two hops across nodes (each token crosses the network once per destination node, then NVLink).
    moe_dispatcher: Literal["alltoall", "deepep"] = "alltoall"
    #: Megatron sequence parallelism (Korthikanti et al. 2022): norm/dropout activations split by tp.
    sequence_parallel: bool = False
    #: Megatron TP communication overlap (``--tp-comm-overlap``) / PyTorch async-TP: TP collectives
    #: run on their own stream, chunk-pipelined with the GEMM next to them (forward) and alongside
    #: the weight-gradient GEMMs (backward). No effect with tp = 1.
    tp_comm_overlap: bool = False
    #: Pipeline schedule: "1f1b" (PipeDream-Flush), "gpipe" (all forwards, then all backwards) or
    #: "interleaved" (Megatron interleaved 1F1B over ``virtual_stages`` model chunks per GPU).
    pipeline_schedule: Literal["1f1b", "gpipe", "interleaved"] = "1f1b"
    #: Model chunks per pipeline stage for the interleaved schedule (Megatron
    #: ``--num-layers-per-virtual-pipeline-stage`` = layers / (pp · virtual_stages)).
    virtual_stages: PositiveInt = 1
    #: Megatron-Core uneven pipeline placement (``simulator.parallel.pipeline_split``): blocks on the
    #: first / last GPU stage (``--decoder-first/last-pipeline-num-layers``), or the embedding / loss
    #: counted as one layer slot each (``--account-for-embedding/loss-in-pipeline-split``).
    decoder_first_pipeline_num_layers: PositiveInt | None = None
    decoder_last_pipeline_num_layers: PositiveInt | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    #: Megatron distributed optimizer (``--use-distributed-optimizer``) with framework ddp: gradients
    #: reduce-scattered, optimizer states sharded over DP, parameters all-gathered (ZeRO-1-like).
    distributed_optimizer: bool = False
    zero_stage: int = Field(0, ge=0, le=3)
    framework: Framework = "deepspeed"
    # --- DeepSpeed (deepspeed/runtime/zero/config.py defaults, DS 0.16.5) ---
    reduce_bucket_size: PositiveFloat = 5e8
    allgather_bucket_size: PositiveFloat = 5e8
    overlap_comm: bool | None = Field(None, description="None = DeepSpeed default: True for stage 3, else False")
    contiguous_gradients: bool = True
    use_multi_rank_bucket_allreduce: bool = True
    #: Elements gathered ahead of use; 0 (or less than the smallest module) means no prefetch.
    stage3_prefetch_bucket_size: NonNegativeFloat = 5e7
    #: Host time DeepSpeed spends per sub-module fetch (partitioned-parameter bookkeeping, hooks,
    #: post-gather copies), seconds. 0 by default (not measured for current releases); DeepSpeed
    #: PR #1188 (2021) measured ~0.8 ms per fetch on a 5.1B BERT before its fix (200 ms over 64
    #: blocks x 4 modules), the value for 2021-era runs.
    stage3_fetch_overhead_s: NonNegativeFloat = 0.0
    #: Host time per rank of the group per ZeRO-3 collective, seconds. DeepSpeed before 0.4 (2021)
    #: gathered into a Python list of one tensor per rank (a ``narrow`` view each, then PyTorch's
    #: list all-gather copies every piece out; ``reduce_scatter`` likewise takes a list), so the host
    #: cost of one fetch grows with the data-parallel degree; later releases gather into one flat
    #: tensor (``all_gather_into_tensor``, DeepSpeed PR #1188): 0.
    stage3_list_overhead_per_rank_s: NonNegativeFloat = 0.0
    stage3_max_live_parameters: PositiveFloat = 1e9
    stage3_param_persistence_threshold: NonNegativeFloat = 1e5
    offload_optimizer: Offload = "none"
    offload_param: Offload = "none"
    communication_data_type: Literal["fp32", "fp16", "bf16"] | None = None
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    zero_hpz_partition_size: PositiveInt = 1
    onebit_adam: bool = False
    deepspeed_config: str | None = None
    # --- PyTorch DDP (torch/nn/parallel/distributed.py) ---
    bucket_cap_mb: PositiveFloat = 25.0
    first_bucket_mb: PositiveFloat = 1.0
    no_sync: bool = True
    #: gradient_as_bucket_view=True makes gradients views into the buckets (saves one gradient copy).
    gradient_as_bucket_view: bool = False
    comm_hook: Literal["none", "fp16", "bf16"] = "none"
    # --- PyTorch FSDP (torch/distributed/fsdp/api.py) ---
    sharding_strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    backward_prefetch: Literal["backward_pre", "backward_post", "none"] = "backward_pre"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    reshard_after_forward: bool | None = None
    param_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    reduce_dtype: Literal["fp32", "fp16", "bf16"] | None = None

    _DEEPSPEED_ONLY: ClassVar[tuple[str, ...]] = (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "overlap_comm",
        "contiguous_gradients",
        "use_multi_rank_bucket_allreduce",
        "stage3_prefetch_bucket_size",
        "stage3_max_live_parameters",
        "stage3_param_persistence_threshold",
        "stage3_fetch_overhead_s",
        "stage3_list_overhead_per_rank_s",
        "communication_data_type",
        "zero_quantized_weights",
        "zero_quantized_gradients",
        "zero_hpz_partition_size",
        "onebit_adam",
        "deepspeed_config",
    )
    _DDP_ONLY: ClassVar[tuple[str, ...]] = (
        "bucket_cap_mb",
        "first_bucket_mb",
        "no_sync",
        "gradient_as_bucket_view",
        "comm_hook",
    )
    _FSDP_ONLY: ClassVar[tuple[str, ...]] = (
        "sharding_strategy",
        "backward_prefetch",
        "forward_prefetch",
        "limit_all_gathers",
        "reshard_after_forward",
        "param_dtype",
        "reduce_dtype",
    )

    @model_validator(mode="before")
    @classmethod
    def _interleave_when_virtual(cls, data: Any) -> Any:
        """Virtual stages imply the interleaved schedule (as in Megatron-LM) unless one is named."""
        if isinstance(data, dict) and "pipeline_schedule" not in data:
            v = data.get("virtual_stages", 1)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                return {**data, "pipeline_schedule": "interleaved"}
        return data

    @model_validator(mode="after")
    def _check_framework_keys(self) -> ParallelConfig:
        owners = {"deepspeed": self._DEEPSPEED_ONLY, "ddp": self._DDP_ONLY, "fsdp": self._FSDP_ONLY}
        for framework, keys in owners.items():
            if framework == self.framework:
                continue
            for key in sorted(set(keys) & self.model_fields_set):
                raise ValueError(
                    f"parallel.{key} is a {framework} option, but parallel.framework is {self.framework!r}; "
                    f"remove it or set parallel.framework: {framework}"
                )
        if self.framework == "ddp" and self.zero_stage != 0:
            raise ValueError("parallel.zero_stage must be 0 with framework ddp (DDP replicates everything)")
        if self.framework == "fsdp" and "zero_stage" in self.model_fields_set:
            expected = self.fsdp_zero_stage
            if self.zero_stage != expected:
                raise ValueError(
                    f"parallel.zero_stage {self.zero_stage} contradicts sharding_strategy {self.sharding_strategy!r} "
                    f"(which shards like ZeRO-{expected}); set parallel.sharding_strategy instead"
                )
        if self.offload_param != "none" and self.zero_stage != 3:
            raise ValueError("parallel.offload_param needs zero_stage 3 (DeepSpeed offloads parameters only in stage 3)")
        if self.offload_optimizer != "none" and self.framework == "deepspeed" and self.zero_stage == 0:
            raise ValueError("parallel.offload_optimizer needs zero_stage 1, 2 or 3 (ZeRO-Offload)")
        if self.framework == "ddp" and self.offload_optimizer != "none":
            raise ValueError("parallel.offload_optimizer is not available with framework ddp; use deepspeed")
        self._check_pipeline_keys()
        return self

    def _check_pipeline_keys(self) -> None:
        """Schedule, virtual stages and the distributed optimizer against each other (the checks that
        need the model or the cluster are in ``simulator.parallel.checks``)."""
        if self.virtual_stages > 1 and self.pipeline_schedule != "interleaved":
            raise ValueError(
                f"parallel.virtual_stages ({self.virtual_stages}) needs parallel.pipeline_schedule: interleaved "
                f"(got {self.pipeline_schedule!r})"
            )
        if self.pipeline_schedule == "interleaved" and self.pp < 2:
            raise ValueError("parallel.pipeline_schedule interleaved needs parallel.pp >= 2")
        if self.distributed_optimizer and self.framework != "ddp":
            raise ValueError(
                "parallel.distributed_optimizer (Megatron) applies to framework ddp; with deepspeed use "
                "zero_stage: 1, with fsdp a sharding_strategy"
            )

    @property
    def fsdp_zero_stage(self) -> int:
        """The ZeRO stage an FSDP sharding strategy corresponds to (FULL_SHARD ≈ 3, SHARD_GRAD_OP ≈ 2)."""
        return {"full_shard": 3, "hybrid_shard": 3, "shard_grad_op": 2, "no_shard": 0}[self.sharding_strategy]

    @property
    def effective_zero_stage(self) -> int:
        """What is sharded, as a ZeRO stage: params+grads+optimizer = 3 ... nothing = 0. Megatron's
        distributed optimizer shards the optimizer states like ZeRO-1."""
        if self.framework == "fsdp":
            return self.fsdp_zero_stage
        return 1 if self.distributed_optimizer else self.zero_stage

    @property
    def effective_overlap_comm(self) -> bool:
        """DeepSpeed's overlap_comm default: True for stage 3, False otherwise (config.py)."""
        if self.overlap_comm is not None:
            return self.overlap_comm
        return self.zero_stage == 3


class MemoryConfig(Frozen):
    """Per-GPU memory the model states and activations do not account for."""

    #: CUDA context with lazy module loading: ≈300–400 MB (pytorch issues #107667, #109888; formulas.md §2.6).
    cuda_context_bytes: NonNegativeFloat = 4.0e8
    #: Caching-allocator fragmentation as a fraction of the allocated peak (formulas.md §2.6: 5–15%).
    fragmentation: float = Field(0.10, ge=0, le=1)
    #: NCCL buffers per communicator: NCCL_BUFFSIZE 4 MiB × channels × peers × protocols
    #: (formulas.md §2.5, magnitude U: "100s of MB").
    nccl_buffers_bytes: NonNegativeFloat = 2.5e8


class SweepConfig(Frozen):
    """A grid of overrides kept in the scenario file (``dtsim sweep`` reads it; other commands ignore it).

    ``grid`` maps a dotted path to a list of values or a range ``start:stop:log|lin:count``.
    """

    grid: dict[str, list[Any] | str] = Field(default_factory=dict)
    objective: Literal["step_time", "cost", "tokens_per_s", "wall_clock"] = "step_time"


class Scenario(Frozen):
    """One complete study. See README "Scenario format" for every key."""

    name: str = "scenario"
    model: ModelConfig
    cluster: ClusterConfig
    training: TrainingConfig
    parallel: ParallelConfig = ParallelConfig()
    memory: MemoryConfig = MemoryConfig()
    cost: CostConfig = CostConfig()
    reliability: ReliabilityConfig = ReliabilityConfig()
    sweep: SweepConfig | None = None
    #: Variants for ``dtsim compare`` given in the file: each maps dotted paths to values and may
    #: carry a ``label``; other commands ignore it.
    compare: list[dict[str, Any]] | None = None

    @property
    def n_gpus(self) -> int:
        return self.cluster.n_gpus

    @property
    def dp(self) -> int:
        """Data-parallel degree, the ranks that split the batch: GPUs / (tp · cp · pp) (the cp ranks of
        a group share its sequences; Megatron-Core ``parallel_state``: ``data_parallel_size =
        world / (tp · cp · pp)``)."""
        p = self.parallel
        return self.n_gpus // (p.tp * p.cp * p.pp)

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per optimizer step per data-parallel rank: G = B_global / (b · dp)."""
        return self.training.global_batch_size // (self.training.micro_batch_size * self.dp)

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch_size * self.training.seq_len

    @model_validator(mode="after")
    def _check_layout(self) -> Scenario:
        p, t, m = self.parallel, self.training, self.model
        n = self.n_gpus
        if p.pp > m.n_layers:
            raise ValueError(f"parallel.pp ({p.pp}) exceeds the number of layers ({m.n_layers})")
        if n % (p.tp * p.cp * p.pp):
            cp = f" x cp={p.cp}" if p.cp > 1 else ""
            raise ValueError(
                f"parallel: tp={p.tp}{cp} x pp={p.pp} = {p.tp * p.cp * p.pp} does not divide the {n} GPUs; "
                f"dp = GPUs / (tp x {'cp x ' if p.cp > 1 else ''}pp) must be an integer"
            )
        if m.n_heads % p.tp or m.kv_heads % p.tp:
            raise ValueError(
                f"parallel.tp ({p.tp}) must divide n_heads ({m.n_heads}) and n_kv_heads ({m.kv_heads})"
            )
        if p.tp > self.cluster.topology.gpus_per_node and p.tp % self.cluster.topology.gpus_per_node:
            raise ValueError(f"parallel.tp ({p.tp}) must divide or be a multiple of the node size")
        dp = self.dp
        if t.global_batch_size % (t.micro_batch_size * dp):
            raise ValueError(
                f"training.global_batch_size ({t.global_batch_size}) must be a multiple of "
                f"micro_batch_size x dp = {t.micro_batch_size} x {dp} = {t.micro_batch_size * dp}"
            )
        if t.total_tokens is not None and t.total_tokens < self.tokens_per_step:
            raise ValueError(
                f"training.total_tokens ({t.total_tokens:.3g}) is below one step "
                f"(global_batch_size x seq_len = {self.tokens_per_step:,} tokens)"
            )
        if m.position_embedding == "learned" and m.max_position_embeddings and t.seq_len > m.max_position_embeddings:
            raise ValueError(
                f"training.seq_len ({t.seq_len}) exceeds the model's max_position_embeddings ({m.max_position_embeddings})"
            )
        from simulator.config.moe import check_layout

        check_layout(m, p, n, self.cluster.topology.gpus_per_node)
        try:
            self.cluster.gpu_spec.peak_flops(t.precision)
        except ValueError as exc:
            raise ValueError(f"training.precision: {exc}") from None
        return self
