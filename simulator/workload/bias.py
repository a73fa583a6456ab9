"""The kernels of a block's linear biases (``model.linear_bias``: GPT-3, MPT, GPT-OSS), as the modules that
run the linears issue them (``training.kernels.linear``).

The bias gradient is a reduction of the output gradient over the tokens (``grad_output.sum(0)``). Where it
runs, and whether the forward add is a kernel of its own, depends on whose linears run:

* PyTorch ``nn.Linear`` (``torch``): the bias in ``addmm``'s cuBLASLt epilogue forward, one reduction kernel
  per biased linear backward (autograd's ``grad.sum(0)``).
* Megatron-LM's own linears (``megatron``: ``--transformer-impl local``, Megatron-DeepSpeed): the QKV linear
  (``ColumnParallelLinear``, ``skip_bias_add=False``) runs ``matmul`` then ``output + bias``, one add kernel
  forward whose gradient is the identity, so backward it is only the bias's reduction
  (``LinearWithGradAccumulationAndAsyncCommunication``: ``grad_output.sum(dim=0)``); the output projection and
  the MLP return their biases (``skip_bias_add=True``) to the fused bias-dropout-add and bias-activation
  kernels, whose autograd reduces the gradients: one reduction kernel each.
* Transformer Engine's (``te``: Megatron-Core's default ``--transformer-impl transformer_engine``, NeMo,
  Megatron-Bridge): the same, except the QKV linear (``TELayerNormColumnParallelLinear`` keeps its bias):
  no kernel either way, the bias added in the forward GEMM's epilogue (``tex.gemm(..., bias=bias,
  use_bias=True)``, cuBLASLt ``EPILOGUE_BIAS``) and its gradient reduced in the weight-gradient GEMM's
  (``grad=True``, ``EPILOGUE_BGRADB``; under FP8 in the output gradient's cast, ``bgrad_quantize``).
* Every bias and its gradient in GEMM epilogues, no bias kernel at all (``block_linear`` gives ``gemm``):
  ``kernels.gemm_epilogue`` (flash-attn's ``fused_dense``: "Fused matmul + bias (forward and
  backward), and fused matmul + bias + gelu (forward and backward)", flash-attention training/README.md, from
  Apex's FusedDense; cuBLASLt DGELU_BGRAD, BGRADB), and a ``te.Linear`` in place of every ``nn.Linear`` under
  FP8 (``kernels.fp8_te_modules: linear``, llm-foundry's ``fc_type: te``: the FP8 GEMM's bias epilogue forward,
  ``fp8_cast_transpose_bgrad_fused`` backward).

The epilogues' own traffic is left in the GEMMs' time, which their FLOPs set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.config.model import ModelConfig
from simulator.workload.op import ADD_FLOPS, Op, memory_op


def linear_impl(kernels: Any, framework: str) -> str:
    """Whose linears a block runs (``training.kernels.linear``, ``auto`` resolved): PyTorch ``nn.Linear``
    (``torch``) in framework ``fsdp``'s blocks (llm-foundry, torchtitan, Accelerate's and Lightning's FSDP
    trainers); Transformer Engine's (``te``) in framework ``ddp``'s, taken as Megatron-Core (NeMo,
    Megatron-Bridge, and Megatron-LM, whose ``--transformer-impl`` defaults to ``transformer_engine`` and whose
    flash and cuDNN attention come through Transformer Engine; a plain PyTorch DDP model's eager blocks are
    ``nn.Linear`` whatever this says, ``layer_ops``); Megatron-LM's own (``megatron``) under DeepSpeed
    (Megatron-DeepSpeed)."""
    impl = getattr(kernels, "linear", "auto")
    if impl != "auto":
        return impl
    return {"fsdp": "torch", "ddp": "te"}.get(framework, "megatron")


def block_linear(linear: str, fused: bool, epilogue: bool, te_linear_fp8: bool) -> str:
    """Whose bias kernels a block runs: ``gemm`` (none: every bias and its gradient in GEMM epilogues) with
    ``kernels.gemm_epilogue`` or ``te.Linear`` modules under FP8 (module docstring); ``torch`` in an eager
    (unfused) block, whose linears are ``nn.Linear``; else ``linear`` (``linear_impl``)."""
    if epilogue or te_linear_fp8:
        return "gemm"
    return linear if fused else "torch"


def bias_ops(i: int, model: ModelConfig, tokens: int, n: int, pb: int, linear: str) -> list[Op]:
    """The bias kernels of a block's ``i``-th biased linear (QKV 0, output 1, MLP up 2, down 3; output width
    ``n``; ``qkv_bias`` biases the QKV only), placed right after its GEMM, as the ``linear`` modules
    (``block_linear``) run them (module docstring): Megatron-LM's QKV bias add (3 passes forward, the reduction as its backward), Transformer
    Engine's QKV bias nothing, every other bias one reduction kernel backward; nothing at all for ``gemm``."""
    biased = model.has_qkv_bias if i == 0 else model.linear_bias
    if not biased or linear == "gemm" or (i == 0 and linear == "te"):
        return []
    grad = float(tokens * n * pb)
    if i == 0 and linear == "megatron":
        return [replace(memory_op("qkv_bias_add", tokens * n, 3, pb, ADD_FLOPS), bwd_launches=1, bwd_bytes=grad)]
    return [Op(f"bias_grad_{i}", "memory", 0.0, 0.0, launches=0, bwd_launches=1, bwd_bytes=grad)]
