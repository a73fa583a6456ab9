"""``training.kernels``: which kernels a framework runs (attention implementation, fusions, FP8 recipe,
CUDA graphs, torch.compile). Re-exported by ``simulator.config.scenario``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from simulator.config.base import Frozen

#: Attention kernel implementations (``simulator.hardware.attention``): ``auto`` picks per framework and GPU
#: architecture; ``fa1`` FlashAttention 1.x; ``triton`` the Triton FlashAttention of 2022-23 stacks (llm-foundry
#: ``attn_impl: triton``); ``fa2`` FlashAttention-2 (also PyTorch SDPA's flash backend); ``fa3`` FlashAttention-3
#: (Hopper); ``cudnn`` cuDNN fused attention (Transformer Engine's default on Hopper and Blackwell); ``sdpa_math``
#: and ``eager`` unfused attention (score matrix in HBM) around Megatron's fused scale-mask-softmax; ``hf_eager``
#: Hugging Face's eager attention (scale, mask add, fp32 softmax and cast as separate PyTorch ops).
AttentionImpl = Literal["auto", "fa1", "triton", "fa2", "fa3", "cudnn", "sdpa_math", "eager", "hf_eager"]
UNFUSED_ATTENTION = ("sdpa_math", "eager", "hf_eager")
#: Block-scaled MX FP8 GEMMs (``fp8_recipe: mxfp8``): NVIDIA Blackwell (sm_100/103) and AMD CDNA4 (MI350/355X).
MXFP8_ARCHS = ("blackwell", "cdna4")
#: NVFP4 GEMMs (``fp8_recipe: nvfp4``: E2M1 values with an E4M3 scale per 16 elements and a per-tensor FP32
#: scale, Transformer Engine's ``NVFP4BlockScaling``): NVIDIA Blackwell only (sm_100/103).
NVFP4_ARCHS = ("blackwell",)
#: FP8 recipes of torchao's float8 linears (no Transformer Engine modules).
TORCHAO_RECIPES = ("tensorwise", "rowwise")


class KernelConfig(Frozen):
    """Kernel-level choices that change how many memory-bound passes a step makes."""

    flash_attention: bool = True
    #: Which attention kernel runs (``AttentionImpl``); ``sdpa_math``/``eager``/``hf_eager`` imply
    #: ``flash_attention: false``.
    attention: AttentionImpl = "auto"
    #: Transformer Engine's FP8 dot-product attention (Megatron-Core ``--fp8-dot-product-attention``, NeMo
    #: ``fp8_dot_product_attention``, ``FP8_DPA=1`` in NVIDIA's MLPerf configs): cuDNN fused attention with its
    #: GEMMs in FP8, forward and backward, and TE's casts of Q, K, V and the output gradient to FP8
    #: (``simulator.hardware.attention.FP8_SPEEDUP``). Needs a TE FP8 recipe and cuDNN attention.
    fp8_attention: bool = False
    #: Megatron-Core's ``activation_func_fp8_input_store`` (``--activation-func-fp8-input-store``; NVIDIA's MLPerf
    #: ``FP8_ACT=1``): the MLP activation's input kept for the backward in FP8, 1 byte per element instead of 2,
    #: quantized in the forward and dequantized in the backward (``simulator.workload.ops``). Needs precision fp8.
    activation_fp8_input_store: bool = False
    fused_norm_residual: bool = True
    #: Bias add and a GELU/ReLU activation in the linear GEMMs' epilogues, forward and backward (flash-attn's
    #: ``fused_dense``, Apex's FusedDense: ``simulator.workload.bias``); gated MLPs keep their activation kernel.
    gemm_epilogue: bool = False
    #: Whose linears run, for their bias kernels (``simulator.workload.bias``): Megatron-LM's own
    #: (``megatron``), Transformer Engine's (``te``) or PyTorch ``nn.Linear`` (``torch``); ``auto``: torch with
    #: framework fsdp, te with ddp (Megatron-LM's default ``--transformer-impl``), megatron with deepspeed.
    linear: Literal["auto", "megatron", "te", "torch"] = "auto"
    fused_adam: bool = True
    #: torch.compile (Inductor): elementwise chains fused into one kernel each, dispatched by generated
    #: code instead of the eager dispatcher (``simulator.hardware.kernels``).
    compile: bool = False
    #: CUDA graphs: the code of these Megatron-Core ``--cuda-graph-scope`` parts is captured once and
    #: replayed, so it costs the host no dispatch (``simulator.workload.host``): ``attn`` the attention
    #: half of every block, ``mlp`` a dense block's MLP half, ``moe_router`` an MoE block's router (with
    #: its pre-MLP norm), ``moe_preprocess`` its token dispatcher's preprocessing (``--cuda-graph-impl
    #: transformer_engine``), ``moe`` an MoE block's whole MLP slot: router, dispatch, experts, combine and
    #: shared experts (``--cuda-graph-scope moe``; Megatron-Core captures it only with static shapes, a
    #: capacity factor with padding, so it needs ``model.moe.capacity_factor``; Megatron-Core's local
    #: per-layer graphs of such a block capture it too); ``full_iteration`` the whole forward and backward
    #: of every block (``--cuda-graph-impl local --cuda-graph-scope full_iteration``); ``mamba`` a hybrid's Mamba
    #: layers (``model.hybrid_pattern``; Megatron-Bridge's Nemotron-H presets capture ``[mamba, attn]``). Empty: eager.
    cuda_graphs: tuple[Literal["attn", "mlp", "mamba", "moe_router", "moe_preprocess", "moe", "full_iteration"],
                       ...] = ()
    #: Transformer Engine's fused grouped MLP for the routed experts (its op fuser's CuTe DSL kernels,
    #: ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``; Megatron-Bridge's 26.06+ Blackwell MoE presets): fc1 with the
    #: activation, the router weighting and fc2's input quantization in one grouped kernel, fc2 with its bias
    #: in another, and the backward's activation gradient in fc2's data-gradient kernel
    #: (``simulator.workload.fused_grouped_mlp``). Needs MXFP8 or NVFP4 on compute capability 10 (B200, B300,
    #: GB200, GB300), Megatron-Core (``parallel.framework ddp``) and expert tensor parallelism 1.
    fused_grouped_mlp: bool = False
    #: Low-precision GEMM recipe when ``training.precision`` is fp8: Transformer Engine ``delayed`` or
    #: ``current`` scaling, torchao float8 ``tensorwise`` or ``rowwise``, Blackwell ``mxfp8``, or Blackwell
    #: ``nvfp4`` (the linear layers' GEMMs in NVFP4, Megatron ``--fp4-format e2m1 --fp4-recipe nvfp4``;
    #: the rest of the step keeps precision fp8's mixed-precision layout: BF16 weights, attention and logits).
    fp8_recipe: Literal["delayed", "current", "tensorwise", "rowwise", "mxfp8", "nvfp4"] = "delayed"
    #: Which Transformer Engine modules carry the FP8 GEMMs (recipes delayed, current, mxfp8, nvfp4;
    #: ``simulator.workload.fp8_casts``): ``fused``, TE's ``LayerNormLinear`` / ``LayerNormMLP`` as
    #: Megatron-Core and NeMo build them (the norm and activation kernels write the FP8 input; the
    #: weights are cast once per step, ``is_first_microbatch``); ``linear``, a ``te.Linear`` swapped in
    #: for each ``nn.Linear`` (llm-foundry ``fc_type: te``, which its H100 FP8 benchmarks set): every
    #: linear casts its own input in a kernel of its own and its weight in every forward.
    fp8_te_modules: Literal["fused", "linear"] = "fused"
    #: How the loss is computed, for its memory and traffic (``workload.loss.IMPLEMENTATIONS``): Megatron's
    #: in-place vocab-parallel kernel (``fused``), PyTorch ``F.cross_entropy`` on upcast logits
    #: (``eager``: torchtitan, FSDP trainers), or on the 16-bit logits (``eager_no_upcast``: NeMo
    #: AutoModel's ``fp32_upcast: false``), or that under torch.compile (``compiled``), or
    #: FlashAttention's fused cross-entropy kernel (``flash``: ``flash_attn.losses.cross_entropy``,
    #: llm-foundry's MPT default ``loss_fn: fused_crossentropy``), or Transformer Engine's Triton loss
    #: (``te``: Megatron-Core ``cross_entropy_fusion_impl te``, Megatron-Bridge's default); ``auto``: eager
    #: with framework fsdp, fused otherwise.
    cross_entropy: Literal["auto", "fused", "eager", "eager_no_upcast", "compiled", "flash", "te"] = "auto"
    #: Full recomputation stops once every tensor the block's forward saved is rebuilt: PyTorch's
    #: non-reentrant checkpoint (``torch.utils.checkpoint`` early stop, on by default) does not
    #: re-run the block's last GEMM and residual add (``simulator.workload.recompute.early_stop``). None: on with
    #: framework fsdp (``checkpoint_wrapper`` NO_REENTRANT: torchtitan, FSDP trainers), off for Megatron
    #: (``ddp``) and DeepSpeed, whose reentrant checkpoints re-run the whole block.
    checkpoint_early_stop: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _attention_implies_flash(cls, data: Any) -> Any:
        """An unfused ``attention`` turns ``flash_attention`` off; a fused one contradicts
        ``flash_attention: false``."""
        if not isinstance(data, dict) or "attention" not in data:
            return data
        impl, flash = data["attention"], data.get("flash_attention")
        if impl in UNFUSED_ATTENTION:
            if flash is True:
                raise ValueError(f"training.kernels.attention {impl} is unfused attention but "
                                 "training.kernels.flash_attention is true; remove one of them")
            return {**data, "flash_attention": False}
        if impl != "auto" and flash is False:
            raise ValueError(f"training.kernels.attention {impl} is a fused (flash) kernel but "
                             "training.kernels.flash_attention is false; use attention: eager, hf_eager or sdpa_math")
        return data

    @model_validator(mode="after")
    def _te_modules_need_te(self) -> KernelConfig:
        """``fp8_te_modules: linear`` describes Transformer Engine modules; torchao recipes have none."""
        if self.fp8_te_modules == "linear" and self.fp8_recipe in TORCHAO_RECIPES:
            raise ValueError(f"training.kernels.fp8_te_modules linear describes Transformer Engine modules, but "
                             f"training.kernels.fp8_recipe {self.fp8_recipe} is torchao float8; use fp8_recipe "
                             "delayed, current, mxfp8 or nvfp4, or leave fp8_te_modules at fused")
        return self

