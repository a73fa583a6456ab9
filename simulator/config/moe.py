"""Mixture-of-experts feed-forward layers as a user or the model catalog writes them down.

Key names follow the issue's schema and map one-to-one onto Megatron-Core's MoE arguments
(``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``, ``--moe-expert-capacity-factor``)
and onto Hugging Face config keys (``simulator.catalog.hf``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from simulator.config.base import Frozen

#: Default load imbalance, max/mean tokens per expert of one MoE layer. Not a measurement: a
#: capacity factor, the buffer margin over the mean tokens per expert that Switch Transformer
#: (Fedus et al. 2021, JMLR 2022) defines in §2.2 and varies from 1.0 to 2.0 in Table 1; 1.25 is
#: the usual setting, chosen so that with the auxiliary load-balancing loss few tokens overflow.
#: (U): no published per-step max/mean tokens-per-expert measurement of a production MoE run was
#: found to replace it. Set ``model.moe.imbalance`` to a measured value (Megatron-Core logs it per
#: layer) when you have one; the Megatron-Bridge benchmark recipes force-balance the router
#: (``moe_router_force_load_balancing``), which is ``imbalance: 1.0``.
DEFAULT_IMBALANCE = 1.25


class MoEConfig(Frozen):
    """Routed experts (and optional always-on shared experts) replacing the dense MLP of some blocks.

    Every block ``i`` with ``i >= first_dense_layers`` and ``(i - first_dense_layers) % layer_interval
    == 0`` is an MoE block; the others keep the dense MLP of width ``model.ffn_hidden_size``. Each
    expert is an MLP of the model's ``mlp`` kind (SwiGLU: 3 matrices) and width
    ``expert_ffn_hidden_size``; each token goes to ``top_k`` routed experts plus every shared expert.
    """

    n_experts: PositiveInt = Field(description="routed experts per MoE layer")
    top_k: PositiveInt = Field(description="routed experts per token")
    expert_ffn_hidden_size: PositiveInt
    n_shared_experts: NonNegativeInt = 0
    #: Width of ONE shared expert; defaults to ``expert_ffn_hidden_size`` (DeepSeek-V3).
    shared_expert_ffn_hidden_size: PositiveInt | None = None
    first_dense_layers: NonNegativeInt = 0
    layer_interval: PositiveInt = 1
    #: Router kind (Megatron-Core ``--moe-router-load-balancing-type``-style choice). Both are priced
    #: as the ``h × E`` router GEMM plus a softmax/top-k pass; Sinkhorn's normalisation iterations
    #: are not counted separately.
    router: Literal["topk", "sinkhorn"] = "topk"
    #: Router ``nn.Linear`` has a bias (GPT-OSS).
    router_bias: bool = False
    #: Expert capacity factor (tokens per expert capped at ``cf · tokens·top_k / n_experts``,
    #: overflow dropped); ``null`` = dropless (Megatron-Core default, MegaBlocks).
    capacity_factor: PositiveFloat | None = None
    #: Megatron-Core ``moe_router_padding_for_fp8``: the router pads each expert's token count to the FP8
    #: GEMMs' row multiple inside the routing map, which removes ``TEGroupedMLP``'s explicit
    #: ``Fp8Padding`` / ``Fp8Unpadding`` copies. False (Megatron-Core's default): under FP8 the experts'
    #: input is padded and their output unpadded (``simulator.workload.moe_ops``, ``FP8_PADDING_PASSES``).
    router_padding_for_fp8: bool = False
    #: LatentMoE (NVIDIA Nemotron 3 Super; Megatron-Core ``moe_latent_size``): the routed experts work in this
    #: width behind one down projection ``h -> latent_size`` (all experts') before the dispatch and an up projection
    #: ``latent_size -> h`` after the combine, so the experts' GEMMs and the all-to-alls carry ``latent_size``-wide
    #: tokens; the router and the shared experts keep the hidden width. ``null`` = the experts take the hidden
    #: states as they are (every other MoE).
    latent_size: PositiveInt | None = None
    #: Load imbalance: max / mean tokens per expert. The most-loaded expert-parallel rank sets the
    #: pace of the grouped GEMM and of the all-to-all (``rank_imbalance``: none without expert
    #: parallelism); >= 1 (1 = perfectly balanced).
    imbalance: float = Field(DEFAULT_IMBALANCE, ge=1.0)

    @model_validator(mode="after")
    def _check(self) -> MoEConfig:
        if self.top_k > self.n_experts:
            raise ValueError(f"model.moe.top_k ({self.top_k}) exceeds n_experts ({self.n_experts})")
        if "imbalance" not in self.model_fields_set and self.imbalance > self.n_experts / self.top_k:
            # the default is capped where no expert can get that much (7 or 8 of 8 experts per token); set
            # in place, so it stays a default (not written back by exclude_unset dumps)
            object.__setattr__(self, "imbalance", self.n_experts / self.top_k)
        if self.imbalance > self.n_experts / self.top_k:
            # a token reaches an expert at most once: the busiest expert gets at most all T tokens, the
            # mean is T·top_k/n_experts
            raise ValueError(f"model.moe.imbalance ({self.imbalance:g}) exceeds n_experts / top_k "
                             f"({self.n_experts}/{self.top_k} = {self.n_experts / self.top_k:g}), the most an expert "
                             "can get (every token); give max/mean tokens per expert at or below it")
        if self.shared_expert_ffn_hidden_size is not None and self.n_shared_experts == 0:
            raise ValueError("model.moe.shared_expert_ffn_hidden_size is set but n_shared_experts is 0; "
                             "set n_shared_experts or remove it")
        return self

    def rank_imbalance(self, ep: int) -> float:
        """Max/mean routed copies per expert-parallel rank, the factor by which the most-loaded rank's
        grouped GEMMs, received tokens and all-to-all exceed the mean rank's: ``min(imbalance,
        capacity_factor, ep)``, at least 1. The busiest expert processes ``imbalance ×`` the mean, at most
        ``capacity_factor ×`` (the overflow is dropped). A rank's copies are the sum over its ``E/ep``
        experts, so at most ``E/ep`` times the busiest expert's (that multiple of the rank's mean) and at
        most every copy (``ep ×`` the mean). With ``ep = 1`` the one rank holds every expert and receives
        every copy, however they spread over its experts: 1. Between those bounds the busiest rank's
        experts are taken as loaded as the busiest expert (the upper bound: where its experts' loads sit
        is not modelled). Not modelled either: padding every expert to its capacity (Megatron-Core
        ``moe_pad_expert_input_to_capacity``), under which each computes ``capacity_factor ×`` the mean
        rows at any ``ep``."""
        cap = self.capacity_factor if self.capacity_factor is not None else self.imbalance
        return max(1.0, min(self.imbalance, cap, float(ep)))

    def routed_width(self, hidden_size: int) -> int:
        """Width of the tokens the routed experts take and return: ``latent_size`` (LatentMoE), else the
        model's hidden size."""
        return self.latent_size or hidden_size

    @property
    def shared_width(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size

    def is_moe_layer(self, i: int) -> bool:
        """Whether block ``i`` (0-based) has routed experts."""
        return i >= self.first_dense_layers and (i - self.first_dense_layers) % self.layer_interval == 0


def check_layout(model, parallel, n_gpus: int, gpus_per_node: int) -> None:
    """Expert-parallel degrees against the model and the cluster (Megatron-Core's checks in
    ``arguments.py``: ``num_experts % ep == 0``; sequence parallelism with MoE and TP > 1)."""
    ep, etp = parallel.ep, parallel.etp
    moe = model.moe
    if moe is None:
        if ep > 1 or etp > 1:
            raise ValueError(f"parallel.ep/etp ({ep}/{etp}) need an MoE model (model.moe); set them to 1")
        for key in ("moe_shared_expert_overlap", "moe_dispatcher", "moe_a2a_overlap"):
            if key in parallel.model_fields_set:
                raise ValueError(f"parallel.{key} needs an MoE model (model.moe); remove it")
        return
    if moe.n_experts % ep:
        raise ValueError(f"parallel.ep ({ep}) must divide model.moe.n_experts ({moe.n_experts})")
    if moe.expert_ffn_hidden_size % etp:
        raise ValueError(f"parallel.etp ({etp}) must divide model.moe.expert_ffn_hidden_size "
                         f"({moe.expert_ffn_hidden_size})")
    stage = n_gpus // parallel.pp
    if stage % (ep * etp):
        raise ValueError(f"parallel.ep x etp = {ep} x {etp} must divide the {stage} GPUs of a pipeline stage "
                         "(tp x cp x dp); expert data parallel = stage GPUs / (ep x etp)")
    if parallel.tp > 1 and not parallel.sequence_parallel:
        raise ValueError("an MoE model with parallel.tp > 1 needs parallel.sequence_parallel: true "
                         "(Megatron-Core requires it)")


#: Activations Transformer Engine's fused grouped MLP kernels implement (``ScaledSwiGLU``,
#: ``ScaledClampedQGeGLU``, ``ScaledSReLU``; ``simulator.workload.fused_grouped_mlp``).
FUSED_GROUPED_MLP_ACTIVATIONS = ("swiglu", "geglu", "relu")


def fused_grouped_mlp_problem(model, training, parallel, gpu) -> str | None:
    """Why ``training.kernels.fused_grouped_mlp`` cannot run here (Transformer Engine's enabling checks and
    Megatron-Core's: ``simulator.workload.fused_grouped_mlp``), or None."""
    if not training.kernels.fused_grouped_mlp:
        return None
    key = "training.kernels.fused_grouped_mlp"
    if model.moe is None:
        return f"{key} fuses an MoE model's routed experts, which this model has none of; remove it"
    if training.active_fp8_recipe not in ("mxfp8", "nvfp4"):
        return (f"{key} runs MXFP8 or NVFP4 experts only: set training.precision fp8 with "
                "training.kernels.fp8_recipe mxfp8 or nvfp4, or remove it")
    if (gpu.sm or 0) // 10 != 10:
        return f"{key} needs compute capability 10 (B200, B300, GB200, GB300), not {gpu.name}; remove it"
    if parallel.framework != "ddp":
        return f"{key} is Megatron-Core's Transformer Engine path: it needs parallel.framework ddp; remove it"
    if parallel.etp != 1:
        return (f"{key} needs parallel.etp 1 (Megatron-Core fuses no expert tensor parallelism): set parallel.etp 1 "
                "or remove it")
    if model.mlp not in FUSED_GROUPED_MLP_ACTIVATIONS:
        return (f"{key} fuses the activations {', '.join(FUSED_GROUPED_MLP_ACTIVATIONS)}, not model.mlp "
                f"{model.mlp}; remove it")
    return None
