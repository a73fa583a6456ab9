"""Transformer Engine's fused grouped MLP for the routed experts (``training.kernels.fused_grouped_mlp``).

Megatron-Bridge's 26.06+ Blackwell MoE presets set ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` with Transformer
Engine's op fuser (``_enable_cutedsl_fused_grouped_mlp``: ``use_transformer_engine_op_fuser``,
``moe_mlp_glu_interleave_size 32``). TE then runs the experts' fc1 → activation → fc2 as cuDNN's CuTe DSL
grouped kernels (``transformer_engine/pytorch/ops/fused``, "Fused operation for MoE grouped MLP" and its
joint forward/backward successor, 2026):

* forward: the input quantized to MXFP8 (``_group_quantize_for_grouped_mlp``, as unfused); fc1 as
  ``grouped_gemm_glu_wrapper_sm100``, one kernel whose epilogue applies the activation (SwiGLU, GPT-OSS's
  clamped GeGLU, squared ReLU), the router probabilities and fc1's bias and writes fc2's input already
  quantized (row- and column-wise MXFP8) next to the 16-bit pre-activation it keeps for the backward; fc2
  as ``grouped_gemm_quant_wrapper_sm100`` with its bias in the kernel;
* backward: the output gradient quantized (``bgrad_group_quantize``, which also sums fc2's bias gradient);
  ``grouped_gemm_dglu_wrapper_sm100``: fc2's data gradient with the activation's gradient, the
  probabilities' gradient, fc1's bias gradient and the quantization of fc1's output gradient in its
  epilogue; the weight gradients and fc1's data gradient as grouped kernels;
* each GEMM is one grouped kernel over the local experts, driven by device-side offsets
  (``splits_to_offsets_multi``), not one cuBLAS GEMM per expert on four streams (``Op.streams``);
* limits (the enabling checks): compute capability 10 (sm_100 / sm_103), MXFP8 or NVFP4, expert tensor
  parallelism 1 (Megatron-Core), the activations above.

So, against the unfused ``TEGroupedMLP`` ops (``workload.moe_ops``): the activation (with the GPT-OSS
clamp) and the expert-bias loop have no kernels; fc2's input cast has no forward kernel (its backward,
the output gradient's cast, stays); fc1's input cast has no backward kernel; both GEMMs run as grouped
kernels. The epilogues' extra traffic (the quantized copies, about 2 B per element of fc2's input, inside
compute-bound GEMMs) is not priced. What is unchanged: the FP8 row padding (the fuser aligns to 256 rows)
and the host model of ``TEGroupedMLP`` (``workload.moe_host``; the fused path's host time is not
measured, U); the memory model (the fused path keeps the 16-bit pre-activation, U).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.workload.op import Op

#: The experts' activation-side ops of ``workload.moe_ops`` that the fused kernels absorb whole.
ABSORBED = ("experts_clamp", "experts_bias")


def fuse(experts: list[Op], activation: str) -> list[Op]:
    """The experts' forward ops ``[fc1 cast, fc1, (clamp), activation, fc2 cast, fc2]`` (``moe_ops``
    names: ``experts_up``, ``experts_<mlp>``, ``experts_down``) as the fused grouped MLP runs them (module
    docstring). ``activation``: the activation op's name."""
    out: list[Op] = []
    for op in experts:
        if op.name == activation or op.name in ABSORBED:
            continue
        if op.name == "experts_up.fp8_cast":  # fc1's output gradient is quantized by the dGLU kernel
            op = replace(op, fused_backward=True)
        elif op.name == "experts_down.fp8_cast":  # written by fc1's epilogue; its backward casts dY
            op = replace(op, bytes=0.0, launches=0, transpose_bytes=0.0, transpose_launches=0)
        elif op.kind == "gemm":
            op = replace(op, streams=0)
        out.append(op)
    return out
