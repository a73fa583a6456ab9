"""The ``parallel`` section of a scenario: the parallel layout (tp, pp, cp, ep, pipeline schedule)
and the communication semantics of one framework (DeepSpeed, FSDP or DDP/Megatron), with the checks
that tie its keys together. Key names are API (README "Scenario format").
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from simulator.config.base import Frozen
from simulator.config.parallel_rules import check_schedule_and_optimizer

Framework = Literal["deepspeed", "fsdp", "ddp"]
Offload = Literal["none", "cpu", "nvme"]


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
    #: Token dispatcher: one all-to-all over the EP group of one copy per expert (Megatron-Core
    #: ``alltoall``), or DeepEP / HybridEP (Megatron-Core ``flex``): one copy per GPU holding any of the
    #: token's experts, and across nodes two hops (the network once per destination node, then NVLink).
    moe_dispatcher: Literal["alltoall", "deepep"] = "alltoall"
    #: Overlap the token all-to-alls of one micro-batch with the compute of another (Megatron-Core
    #: ``--overlap-moe-expert-parallel-comm``, Megatron-Bridge ``moe_a2a_overlap``; DeepSeek-V3's
    #: DualPipe overlap): the forward of micro-batch g+1 and the backward of g run together, block by
    #: block (``simulator.parallel.expert.combined_block``). Framework ddp, without full recomputation.
    moe_a2a_overlap: bool = False
    #: Megatron sequence parallelism (Korthikanti et al. 2022): norm/dropout activations split by tp.
    sequence_parallel: bool = False
    #: Megatron TP communication overlap (``--tp-comm-overlap``, NeMo ``ub_tp_comm_overlap``) / PyTorch
    #: async-TP: TP collectives run on their own stream beside the GEMMs. With sequence parallelism as
    #: Transformer Engine's userbuffers pair them (each all-gather beside the GEMM consuming it, each
    #: reduce-scatter beside the GEMM producing it; docs/tp-overlap.md), else chunk-pipelined with the
    #: GEMM before them (forward) and alongside the weight-gradient GEMMs (backward). Off by default,
    #: as in Megatron-LM and NeMo's base configs; NVIDIA's H100 performance recipes turn it on. No
    #: effect with tp = 1.
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
    #: Megatron-Core's rank order tp-cp-pp-dp instead of tp-cp-dp-pp (``--use-tp-pp-dp-mapping``, NeMo
    #: ``use_tp_pp_dp_mapping``): consecutive ranks hold one whole pipeline and data parallelism is
    #: outermost, so on a large NVLink domain a pipeline's stage boundaries stay inside it and the gradient
    #: reduction crosses the network instead (``simulator.parallel.mesh``). Dense models only
    #: (``simulator.parallel.checks``).
    use_tp_pp_dp_mapping: bool = False
    #: Megatron-Core ``defer_embedding_wgrad_compute``: the last pipeline stage keeps the output layer's
    #: weight-gradient GEMM of its first ``wgrad_deferral_limit`` micro-batches (0: all of them) and runs
    #: them in the pipeline flush, after its last backward (``simulator.parallel.deferred_wgrad``).
    defer_embedding_wgrad_compute: bool = False
    wgrad_deferral_limit: NonNegativeInt = 0
    #: Megatron-Core ``pipeline_model_parallel_layout``: what each of the ``pp·virtual_stages``
    #: virtual stages holds, in virtual-stage order, stages separated by ``|``: ``E`` embedding,
    #: ``t`` a transformer block, ``m`` an MTP block (not modelled: no work), ``L`` the loss;
    #: ``(..)*n`` and ``x*n`` repeat, commas are cosmetic. DeepSeek-V3 on pp=8 × v=2 (Megatron-Bridge
    #: ``deepseek_v3.py``): ``"Etttt|(tttt|)*14tmL"`` (``simulator.parallel.pipeline_split``).
    pipeline_layout: str | None = None
    #: Megatron distributed optimizer (``--use-distributed-optimizer``) with framework ddp: gradients
    #: reduce-scattered, optimizer states sharded over DP, parameters all-gathered (ZeRO-1-like).
    distributed_optimizer: bool = False
    #: With the distributed optimizer: the updated parameters are all-gathered bucket by bucket ahead
    #: of the next step's forward, which waits only for the bucket it needs (Megatron
    #: ``--overlap-param-gather``, NeMo ``optim.overlap_param_sync``); else after the optimizer step,
    #: exposed.
    overlap_param_gather: bool = False
    #: FP8 training: the blocks' linear weights (every block parameter but its norms and biases)
    #: are gathered in FP8, 1 byte per element plus negligible scales, instead of the parameter
    #: dtype: Megatron ``--fp8-param-gather`` (the distributed optimizer's parameter all-gather and
    #: Megatron-FSDP's gathers; Megatron-Bridge's FP8 mixed-precision recipes set it,
    #: ``training/mixed_precision.py``: delayed, tensorwise current scaling, MXFP8) and torchtitan
    #: ``float8.enable_fsdp_float8_all_gather`` (FSDP2 casts each shard to float8 before the
    #: all-gather, torchao ``float8/fsdp_utils.py``). Embeddings, the output layer and the norms
    #: stay in the parameter dtype (neither stack converts them to FP8 modules). Needs
    #: ``training.precision: fp8``; DeepSpeed has no such option.
    fp8_param_gather: bool = False
    zero_stage: int = Field(0, ge=0, le=3)
    framework: Framework = "deepspeed"
    # --- DeepSpeed (deepspeed/runtime/zero/config.py defaults, DS 0.16.5) ---
    #: Elements per bucket: at least one (DeepSpeed's config takes an integer).
    reduce_bucket_size: float = Field(5e8, ge=1)
    allgather_bucket_size: float = Field(5e8, ge=1)
    overlap_comm: bool | None = Field(None, description="None = DeepSpeed default: True for stage 3, else False")
    contiguous_gradients: bool = True
    use_multi_rank_bucket_allreduce: bool = True
    #: Elements gathered ahead of use; 0 means no prefetch (any positive bucket gathers at least the next
    #: parameter ahead: DeepSpeed tests the queued numel before adding one).
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
    #: Keep a fetched parameter when its next use comes within this many parameters of the trace
    #: (DeepSpeed ``PartitionedParameterCoordinator.__params_to_release``); else release and fetch it
    #: again. Decides which modules full activation recomputation fetches a second time.
    stage3_max_reuse_distance: NonNegativeFloat = 1e9
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
    #: PyTorch DDP's gradient buckets (``bucket_cap_mb``, a first bucket of ``first_bucket_mb``). Not
    #: Megatron-Core's: with the distributed optimizer see ``ddp_bucket_size``.
    bucket_cap_mb: PositiveFloat = 25.0
    first_bucket_mb: PositiveFloat = 1.0
    #: Megatron-Core DDP's gradient bucket, in elements (``DistributedDataParallelConfig.bucket_size``,
    #: Megatron-LM ``--ddp-bucket-size``). Setting it, or the distributed optimizer, makes the data-parallel
    #: engine Megatron-Core's: unset, its default ``max(4·10⁷, 10⁶·dp·cp)`` elements ("larger DP sizes
    #: need larger buckets to ensure collectives do not become latency-bound"), no small first bucket,
    #: and one bucket per model chunk after the first under the interleaved schedule (Megatron-LM
    #: ``get_model``: ``disable_bucketing=(model_chunk_idx > 0)``); without ``overlap_grad_reduce`` one
    #: bucket in all. PyTorch DDP (no distributed optimizer, no ``ddp_bucket_size``) keeps
    #: ``bucket_cap_mb``.
    ddp_bucket_size: PositiveInt | None = None
    no_sync: bool = True
    #: gradient_as_bucket_view=True makes gradients views into the buckets (saves one gradient copy).
    gradient_as_bucket_view: bool = False
    comm_hook: Literal["none", "fp16", "bf16"] = "none"
    #: Reduce gradient buckets while the backward runs (PyTorch DDP; Megatron ``--overlap-grad-reduce``).
    #: False: Megatron-LM's default: one reduction of the whole gradient buffer after the last backward
    #: (``finish_grad_sync``; Megatron-Core DDP uses a single bucket when it does not overlap), exposed.
    overlap_grad_reduce: bool = True
    #: The gradient buffer and its reduction in fp32 (Megatron-Core ``DistributedDataParallelConfig
    #: .grad_reduce_in_fp32``; Megatron-LM keeps fp32 unless ``--grad-reduce-in-bf16``). False: the
    #: ``main_grad`` buffer has the 16-bit parameter dtype, so it holds and reduces 2 B per gradient
    #: instead of 4 (NVIDIA's Megatron-Bridge performance recipes for Qwen3, DeepSeek-V3 and GPT-OSS set
    #: ``cfg.ddp.grad_reduce_in_fp32 = False``). The distributed optimizer then casts its own shard to
    #: fp32 for the step (``4/d`` B per parameter, counted with the optimizer states). No effect in fp32
    #: training (the parameters, and so the gradients, are fp32).
    grad_reduce_in_fp32: bool = True
    #: Megatron-Core's precision-aware optimizer (``--use-precision-aware-optimizer``, Megatron-Bridge
    #: ``optimizer.use_precision_aware_optimizer``): Transformer Engine's ``FusedAdam`` steps the distributed
    #: optimizer's states in their own dtypes. With BF16 weights its fp32 master copy keeps only the 16 low
    #: bits the BF16 weight lacks (``OptimizerConfig.store_param_remainders``, on by default: 2 B per
    #: parameter instead of 4, the weight being the high half); FP8 weights (``fp8_param_gather``) keep a
    #: 4-byte master. Memory only (``workload.model_states``); needs the distributed optimizer.
    precision_aware_optimizer: bool = False
    #: Adam's ``exp_avg`` and ``exp_avg_sq`` under the precision-aware optimizer (``--exp-avg-dtype``,
    #: ``--exp-avg-sq-dtype``): fp32 (Megatron-Core's default, 4 B each) or bf16 (2 B each).
    optimizer_moments_dtype: Literal["fp32", "bf16"] = "fp32"
    # --- PyTorch FSDP (torch/distributed/fsdp/api.py) ---
    sharding_strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    backward_prefetch: Literal["backward_pre", "backward_post", "none"] = "backward_pre"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    reshard_after_forward: bool | None = None
    param_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    reduce_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    #: 1: FSDP1 ``FullyShardedDataParallel`` (flat parameter: gathers land in place); 2: FSDP2
    #: ``fully_shard`` (per-parameter DTensor; torchtitan): every gather is copied out into the
    #: parameters and every gradient reduction copied in (simulator/parallel/fsdp.py).
    fsdp_version: Literal[1, 2] = 1
    #: The gradient averaging (÷ ranks) fused into the reduction (NCCL PreMulSum / AVG), so no separate
    #: divide pass over the gradients: Megatron-FSDP (Megatron-Core ``DistributedDataParallelConfig
    #: .gradient_reduce_div_fusion``, default True). None: PyTorch FSDP's own behaviour, FSDP1 dividing
    #: in place before and after each reduce-scatter and FSDP2 fusing fp32/bf16 reductions only
    #: (simulator/parallel/fsdp.py).
    gradient_reduce_div_fusion: bool | None = None
    #: Skip the gradient reduction on all but the last micro-batch of a step: FSDP1 ``model.no_sync()``,
    #: FSDP2 ``set_requires_gradient_sync(False)``; Hugging Face Accelerate's default for FSDP gradient
    #: accumulation (``GradientAccumulationPlugin(sync_each_batch=False)``). One reduce-scatter per unit
    #: and step instead of one per micro-batch, at the price of the whole model's unsharded gradients
    #: held between micro-batches. False: torchtitan's and plain FSDP's behaviour, a reduction per
    #: micro-batch (simulator/parallel/fsdp.py).
    fsdp_no_sync: bool = False

    _DEEPSPEED_ONLY: ClassVar[tuple[str, ...]] = (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "overlap_comm",
        "contiguous_gradients",
        "use_multi_rank_bucket_allreduce",
        "stage3_prefetch_bucket_size",
        "stage3_max_live_parameters",
        "stage3_max_reuse_distance",
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
        "ddp_bucket_size",
        "no_sync",
        "gradient_as_bucket_view",
        "comm_hook",
        "overlap_grad_reduce",
        "grad_reduce_in_fp32",
        "precision_aware_optimizer",
        "optimizer_moments_dtype",
        "defer_embedding_wgrad_compute",
        "wgrad_deferral_limit",
        "use_tp_pp_dp_mapping",
    )
    _FSDP_ONLY: ClassVar[tuple[str, ...]] = (
        "sharding_strategy",
        "backward_prefetch",
        "forward_prefetch",
        "limit_all_gathers",
        "reshard_after_forward",
        "fsdp_version",
        "gradient_reduce_div_fusion",
        "fsdp_no_sync",
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

    @classmethod
    def framework_keys(cls) -> dict[str, tuple[str, ...]]:
        """Framework → the ``parallel`` keys only that framework reads."""
        return {"deepspeed": cls._DEEPSPEED_ONLY, "ddp": cls._DDP_ONLY, "fsdp": cls._FSDP_ONLY}

    @classmethod
    def foreign_keys(cls, framework: str) -> set[str]:
        """The ``parallel`` keys a scenario of ``framework`` may not set: the other frameworks' own keys
        and, outside ddp, Megatron's distributed optimizer and its parameter gather (checked below)."""
        keys = {k for f, ks in cls.framework_keys().items() if f != framework for k in ks}
        return keys if framework == "ddp" else keys | {"distributed_optimizer", "overlap_param_gather"}

    @model_validator(mode="after")
    def _check_framework_keys(self) -> ParallelConfig:
        for framework, keys in self.framework_keys().items():
            if framework == self.framework:
                continue
            for key in sorted(set(keys) & self.model_fields_set):
                # the same switch under another name in this framework
                alias = {("no_sync", "fsdp"): "fsdp_no_sync", ("fsdp_no_sync", "ddp"): "no_sync"}.get(
                    (key, self.framework))
                fix = f"parallel.{alias}" if alias else f"parallel.framework: {framework}"
                raise ValueError(
                    f"parallel.{key} is a {framework} option, but parallel.framework is {self.framework!r}; "
                    f"remove it or set {fix}"
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
        check_schedule_and_optimizer(self)
        return self

    def ddp_grad_bytes(self, precision: str) -> int:
        """Bytes per gradient in the ddp engine's buffer and its reduction: 4 (fp32, PyTorch DDP under
        AMP and Megatron's default), 2 with a 16-bit ``comm_hook`` on the wire only, or in the buffer too
        when ``grad_reduce_in_fp32`` is False in 16-bit training (``grad_buffer_bytes``)."""
        if self.comm_hook in ("fp16", "bf16"):
            return 2
        return self.grad_buffer_bytes(precision)

    @property
    def megatron_ddp(self) -> bool:
        """Whether the ddp engine is Megatron-Core's (its distributed optimizer or bucket size named)."""
        return self.framework == "ddp" and (self.distributed_optimizer or self.ddp_bucket_size is not None)

    def megatron_bucket_elements(self, dp_cp: int) -> int:
        """Megatron-Core DDP's gradient bucket in elements: ``ddp_bucket_size``, else its default
        ``max(4·10⁷, 10⁶·dp_cp)`` (megatron/core/distributed/distributed_data_parallel.py)."""
        return self.ddp_bucket_size or max(40_000_000, 1_000_000 * dp_cp)

    def grad_buffer_bytes(self, precision: str) -> int:
        """Bytes per gradient the ddp engine stores: 2 with ``grad_reduce_in_fp32`` False in 16-bit
        (or fp8) training, else 4."""
        return 2 if not self.grad_reduce_in_fp32 and precision in ("bf16", "fp16", "fp8") else 4

    def step_grad_copy_bytes(self, precision: str) -> int:
        """Bytes per parameter of the fp32 copy a Megatron optimizer makes of a 16-bit ``main_grad`` for its
        step (4 with ``grad_buffer_bytes`` 2; with an fp32 buffer the gradient is used in place: 0)."""
        return 4 if self.grad_buffer_bytes(precision) == 2 else 0

    def bf16_optimizer(self, precision: str) -> bool:
        """DeepSpeed trains bf16 without ZeRO through its ``BF16_Optimizer`` (``engine.py``: bf16 at
        ``zero_optimization.stage`` 0, BigScience's BLOOM-176B setup: "The new BF16_Optimizer implements its
        own ZeRO Stage 1"; ``simulator.parallel.deepspeed``): fp32 gradient accumulation every
        micro-batch, an fp32 all-reduce, fp32 master weights and Adam states sharded over the
        data-parallel ranks, and a post-step all-gather of the bf16 weights."""
        return self.framework == "deepspeed" and self.zero_stage == 0 and precision == "bf16"

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
