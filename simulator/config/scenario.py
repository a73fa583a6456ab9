"""The scenario: one study a user writes in YAML (model × cluster × training × parallelism × cost).

Key names are API (later tools and users rely on them). Every section forbids unknown keys and is
frozen. References (model name, topology name, GPU name) are resolved by ``simulator.config.loader``
before validation, so a validated ``Scenario`` is self-contained.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from simulator.config.base import Frozen
from simulator.config.hardware import Dtype, GPUSpec
from simulator.config.kernels import (  # noqa: F401
    MXFP8_ARCHS,
    NVFP4_ARCHS,
    TORCHAO_RECIPES,
    UNFUSED_ATTENTION,
    AttentionImpl,
    KernelConfig,
)
from simulator.config.lora import LoraConfig
from simulator.config.model import ModelConfig
from simulator.config.parallel import Framework, Offload, ParallelConfig  # noqa: F401  (re-exported)
from simulator.config.run import CostConfig, ReliabilityConfig
from simulator.config.topology import FullMeshFabric, NVSwitchFabric, TopologyConfig
from simulator.hardware import power

#: ``selective``: Korthikanti et al. 2022 (the attention core is recomputed); ``selective_op``:
#: torchtitan's op-level policy (``simulator.workload.op_sac``: every second GEMM output and the SDPA
#: output saved, the rest recomputed); ``full``: only block inputs kept.
Recompute = Literal["none", "selective", "selective_op", "full"]
#: Megatron-Core's selective-recompute modules (``TransformerConfig.recompute_modules``).
RecomputeModule = Literal["core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts"]


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
    collective_algorithm: Literal["auto", "ring", "tree", "hierarchical", "nvls", "collnet"] = "auto"
    #: Board power cap of every GPU (``nvidia-smi --power-limit``), W; None = the GPU's TDP. The GPU then
    #: computes at the datasheet peak of its silicon at that power (simulator.hardware.power).
    gpu_power_limit_W: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _gpu_bounds_scale_up(cls, data: Any) -> Any:
        """A GPU's own NVLink (or xGMI) ports bound what the node's scale-up fabric gives it: with
        ``cluster.gpu`` overriding the topology's GPU, the fabric's per-GPU bandwidth is the smaller of
        the two (an H800, 8 NVLink4 links = 200 GB/s per direction [catalog], in a DGX H100 chassis whose
        NVSwitches give the H100's 18 links 450), and a GPU with none catalogued (a PCIe card) cannot sit
        on NVSwitch or an xGMI mesh. Every consumer (the node graph, NCCL's tuner model, the reports)
        then reads the one bounded topology."""
        if not isinstance(data, dict) or data.get("gpu") is None or data.get("topology") is None:
            return data
        try:
            topo = TopologyConfig.model_validate(data["topology"])
            gpu = GPUSpec.model_validate(data["gpu"])
        except ValueError:
            return data  # the field validators report it
        fabric = topo.intra_node
        if isinstance(fabric, NVSwitchFabric):
            have = fabric.bandwidth_GBps_per_gpu
        elif isinstance(fabric, FullMeshFabric):
            have = fabric.link_GBps * (topo.gpus_per_node - 1)
        else:
            return data
        own = gpu.nvlink_GBps_per_direction
        if own <= 0:
            raise ValueError(f"cluster.gpu {gpu.name} has no NVLink/xGMI scale-up link (catalog "
                             f"nvlink_GBps_per_direction 0), but topology {topo.name} joins its GPUs with "
                             f"{fabric.kind}; use a PCIe topology (intra_node kind pcie) or an SXM/OAM GPU")
        if own >= have:
            return data
        if isinstance(fabric, NVSwitchFabric):
            bounded = fabric.model_copy(update={"bandwidth_GBps_per_gpu": own})
        else:
            bounded = fabric.model_copy(update={"link_GBps": own / (topo.gpus_per_node - 1)})
        return {**data, "topology": topo.model_copy(update={"intra_node": bounded})}

    @cached_property
    def gpu_spec(self) -> GPUSpec:
        """The GPU in use: the override if given, else the topology's (resolved by the loader), under
        ``gpu_power_limit_W`` when set (``simulator.hardware.power.capped``)."""
        assert self.gpu is not None, "loader resolves cluster.gpu"
        if self.gpu_power_limit_W is None:
            return self.gpu
        return power.capped(self.gpu, self.gpu_power_limit_W)

    @property
    def n_gpus(self) -> int:
        return self.gpus or self.nodes * self.topology.gpus_per_node

    @model_validator(mode="after")
    def _check_gpus(self) -> ClusterConfig:
        if self.gpu_power_limit_W is not None and self.gpu is not None:
            power.peak_fraction(self.gpu, self.gpu_power_limit_W)  # raises naming the field
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
        if self.collective_algorithm == "collnet" and not self.topology.sharp:
            raise ValueError(f"cluster.collective_algorithm collnet: topology {self.topology.name} has no SHARP "
                             "switches (set cluster.topology.fabric.sharp=true on a rail-optimised fat tree); "
                             "use auto, ring, tree or hierarchical")
        return self



class TrainingConfig(Frozen):
    """Batch, sequence, precision, recomputation and the token budget of the run."""

    seq_len: PositiveInt
    micro_batch_size: PositiveInt = Field(description="sequences per GPU per micro-batch")
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    precision: Dtype = "bf16"
    activation_checkpointing: Recompute = "none"
    #: With ``activation_checkpointing: full``, the blocks of each pipeline model chunk that recompute;
    #: the others keep their activations (Megatron ``--recompute-method block --recompute-num-layers``,
    #: torchtitan per-layer selective checkpointing, fms-fsdp ``selective_checkpointing``;
    #: ``simulator.workload.recompute``). None: every block.
    recompute_layers: PositiveInt | None = None
    #: With ``activation_checkpointing: selective``, the modules Megatron-Core recomputes
    #: (``--recompute-modules``; its default, and dtsim's, ``[core_attn]``): each keeps no output and re-runs
    #: before the backward (what each module covers: ``simulator.workload.recompute.modules``).
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    #: Activation offloading to host memory (Megatron-Core ``cpu_offloading`` with
    #: ``cpu_offloading_num_layers``, Transformer Engine's ``get_cpu_offload_context``): the first ``n``
    #: blocks copy what they saved for the backward to pinned host memory after their forward and back
    #: before their backward, one block ahead (``simulator.parallel.activation_offload``). 0 = none.
    activation_offload_layers: NonNegativeInt = 0
    total_tokens: PositiveFloat | None = None
    steps: PositiveInt | None = None
    #: FLOP convention for attention in model-FLOP counts (MFU): "full" counts the whole s×s score
    #: matrix (PaLM App. B, Megatron SC'21 Eq. 3); "causal" counts the unmasked half (Megatron-LM code,
    #: FlashAttention benchmarks). Kernel time always uses causal work.
    attention_flops: Literal["full", "causal"] = "full"
    #: Mean tokens per document when several documents are packed into each sequence and the fused
    #: attention kernel masks per document (FlashAttention varlen, Transformer Engine THD with
    #: ``cu_seqlens``: NeMo / Megatron-Bridge packed SFT, torchtitan document masking). The attention core
    #: then covers ``seq_len / document_tokens`` documents of ``document_tokens`` tokens: its work scales
    #: by ``document_tokens / seq_len`` and the kernel's key length is ``document_tokens``. Unfused
    #: attention computes the whole ``s × s`` matrix and masks it, so it saves nothing. ``None``: one
    #: document per sequence.
    document_tokens: PositiveInt | None = None
    kernels: KernelConfig = KernelConfig()
    #: Gradient clipping by global norm before the optimizer step (Megatron ``--clip-grad``,
    #: torchtitan ``max_norm``; on in most LLM recipes): one read and one read-write of the gradients.
    grad_clipping: bool = True
    #: The optimizer: ``adam`` (AdamW) or ``muon``, Megatron-Core's Muon (``--optimizer muon``; with
    #: ``parallel.distributed_optimizer`` its layer-wise distributed ``dist_muon``): Newton-Schulz-orthogonalised
    #: momentum for the blocks' weight matrices, Adam for the embedding and output layer
    #: (``simulator.workload.muon``).
    optimizer: Literal["adam", "muon"] = "adam"
    #: Newton-Schulz iterations per Muon step (Megatron-Core ``--muon-num-ns-steps``, default 5).
    muon_ns_steps: PositiveInt = 5
    #: LoRA fine-tuning: frozen base weights and trainable low-rank adapters (``simulator.workload.lora``);
    #: None: every weight trains.
    lora: LoraConfig | None = None

    @property
    def active_fp8_recipe(self) -> str | None:
        """``kernels.fp8_recipe`` when training in FP8, else ``None`` (the recipe is ignored otherwise)."""
        return self.kernels.fp8_recipe if self.precision == "fp8" else None

    @model_validator(mode="after")
    def _check_budget(self) -> TrainingConfig:
        if self.total_tokens is not None and self.steps is not None:
            raise ValueError("give training.total_tokens or training.steps, not both")
        if self.document_tokens is not None and self.document_tokens > self.seq_len:
            raise ValueError(f"training.document_tokens ({self.document_tokens}) exceeds training.seq_len "
                             f"({self.seq_len}): a packed document is at most one sequence")
        return self


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
        if t.activation_checkpointing == "selective_op" and (m.moe is not None or m.is_mla):
            raise ValueError("training.activation_checkpointing: selective_op (torchtitan's op-level policy) is "
                             "modelled for dense blocks only; use selective or full for an MoE or MLA model")
        from simulator.workload import lora, muon, recompute

        problem = recompute.check(self) or muon.check(self) or lora.check(self)
        if problem:
            raise ValueError(problem)
        if "moe" in t.kernels.cuda_graphs and (m.moe is None or m.moe.capacity_factor is None):
            raise ValueError("training.kernels.cuda_graphs: moe captures an MoE block's whole MLP slot, which "
                             "Megatron-Core graphs only with static shapes: set model.moe.capacity_factor (token "
                             "drop with padding), or use moe_router and moe_preprocess for a dropless model")
        if "mamba" in t.kernels.cuda_graphs and not (m.is_hybrid and m.hybrid_counts[0]):
            raise ValueError("training.kernels.cuda_graphs: mamba captures a hybrid's Mamba layers, which this model "
                             "has none of (model.hybrid_pattern); remove it")
        if t.kernels.activation_fp8_input_store and t.precision != "fp8":
            raise ValueError("training.kernels.activation_fp8_input_store keeps the activation's input in FP8, which "
                             "needs training.precision: fp8; remove it or train in fp8")
        if p.fp8_param_gather and t.precision != "fp8":
            raise ValueError(f"parallel.fp8_param_gather needs training.precision: fp8 (got {t.precision!r}): only "
                             "FP8 linears have FP8 weights to gather; remove it or train in fp8")
        from simulator.config.moe import check_layout, fused_grouped_mlp_problem

        check_layout(m, p, n, self.cluster.topology.gpus_per_node)
        from simulator.hardware.attention import fp8_problem

        problem = fused_grouped_mlp_problem(m, t, p, self.cluster.gpu_spec) or fp8_problem(self)
        if problem:
            raise ValueError(problem)
        try:
            self.cluster.gpu_spec.peak_flops(t.precision)
        except ValueError as exc:
            raise ValueError(f"training.precision: {exc}") from None
        gpu = self.cluster.gpu_spec
        if t.precision == "fp8" and t.kernels.fp8_recipe == "mxfp8" and gpu.arch not in MXFP8_ARCHS:
            raise ValueError(f"training.kernels.fp8_recipe mxfp8 needs block-scaled (MX) FP8 GEMMs, which "
                             f"{gpu.name} ({gpu.arch}) does not have ({', '.join(MXFP8_ARCHS)} only); use delayed "
                             "or current (Transformer Engine) or tensorwise or rowwise (torchao)")
        if t.active_fp8_recipe == "nvfp4":
            if gpu.arch not in NVFP4_ARCHS:
                raise ValueError(f"training.kernels.fp8_recipe nvfp4 needs NVFP4 GEMMs, which {gpu.name} ({gpu.arch}) "
                                 f"does not have ({', '.join(NVFP4_ARCHS)} only); use delayed or current (Transformer Engine)")
            if p.fp8_param_gather:
                raise ValueError("parallel.fp8_param_gather with training.kernels.fp8_recipe nvfp4: Megatron-Core "
                                 "gathers an NVFP4 model's weights in BF16 (Megatron-Bridge: \"fp4_param and "
                                 "fp4_param_gather are not supported for now\"); set parallel.fp8_param_gather false")
        return self
