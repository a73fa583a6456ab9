"""Transformer Engine's FP8 quantizers on a CPU-only machine: the extension calls of its FP8 paths.

``benchmarks/te_cpu.py`` stands in for Transformer Engine's C++/CUDA extension on the BF16 path; this module
adds what its FP8 paths call, for per-tensor current scaling (``Float8CurrentScaling``), delayed scaling
(``DelayedScaling``) and MXFP8 (``MXFP8BlockScaling``), with a Blackwell GPU's semantics (non-TN FP8 GEMMs
supported, so a per-tensor FP8 tensor keeps no transpose). As in ``te_cpu``, each call does what its C++
does outside the kernels and one ATen call per kernel it launches:

* ``quantize``: the C++ ``Quantizer::create_tensor`` allocates the buffers (``at::empty``: data, scale
  inverse, and for MXFP8 the column-wise data and both block-scale tensors) and constructs TE's Python
  tensor object (``Float8TensorStorage`` / ``MXFP8TensorStorage`` for internal quantizers, else the
  ``torch.Tensor`` subclasses), or, given an output, reads and updates its attributes; then the kernels:
  current scaling computes the amax, the scale from it and the cast (``nvte_compute_amax``,
  ``nvte_compute_scale_from_amax``, ``nvte_quantize_v2``: three), delayed scaling and MXFP8 one cast each
  (TE ``csrc/quantizer.cpp``, ``csrc/extensions/cast.cpp``).
* ``split_quantize``: one output per split (``create_tensor``) and each split's kernels (the C++
  ``multi_tensor_quantize_impl`` loop); ``bgrad_quantize``: the bias gradient and a quantize.
* GEMMs on quantized operands: the operand's data (row-wise, else column-wise) into one GEMM, as on the
  16-bit path; an MXFP8 operand whose scales are not yet in the GEMM's swizzled layout gets them swizzled
  first (``swizzle_scaling_factors``: an allocation and a kernel).

The "FP8" buffers carry the source's dtype: a CPU FP8 GEMM (``torch._scaled_mm``) is computed in software,
38 µs for a 32 x 64 x 64 product against 5.6 µs for the same ``matmul`` in FP32 (torch 2.13, the 2-core
machine), which is CPU work a GPU does not ask of its host. Nor are the values faithful (amaxes are not
taken of absolute values, the block scales are not written): the figures are host time, which is the same
whatever the numbers.
"""

from __future__ import annotations

import functools
import math
import types

import torch

MX_BLOCK = 32


def _up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


class _Classes:
    """TE's Python quantizer and tensor classes (imported once ``transformer_engine.pytorch`` is)."""

    def __init__(self) -> None:
        from transformer_engine.pytorch.tensor.float8_tensor import (
            Float8CurrentScalingQuantizer,
            Float8Tensor,
        )
        from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer, MXFP8Tensor
        from transformer_engine.pytorch.tensor.storage.float8_tensor_storage import Float8TensorStorage
        from transformer_engine.pytorch.tensor.storage.mxfp8_tensor_storage import MXFP8TensorStorage
        self.current, self.mx = Float8CurrentScalingQuantizer, MXFP8Quantizer
        self.f8, self.f8_storage, self.mx_tensor, self.mx_storage = (Float8Tensor, Float8TensorStorage,
                                                                   MXFP8Tensor, MXFP8TensorStorage)


@functools.cache
def _classes() -> _Classes:
    return _Classes()


def _create(c: _Classes, q, shape: list, dtype: torch.dtype):
    """``Quantizer::create_tensor``: the buffers, then the Python object, as the C++ constructs it."""
    row, col, internal = q.rowwise_usage, q.columnwise_usage, q.internal
    if isinstance(q, c.mx):
        rows = math.prod(shape[:-1])
        kw = dict(
            rowwise_data=torch.empty(shape, dtype=dtype) if row else None,
            rowwise_scale_inv=(torch.empty(_up(rows, 128), _up(shape[-1] // MX_BLOCK, 4), dtype=torch.uint8)
                               if row else None),
            columnwise_data=torch.empty(shape, dtype=dtype) if col else None,
            columnwise_scale_inv=(torch.empty(_up(rows // MX_BLOCK, 4), _up(shape[-1], 128), dtype=torch.uint8)
                                  if col else None),
            fp8_dtype=q.dtype, quantizer=q, with_gemm_swizzled_scales=q.optimize_for_gemm)
        return c.mx_storage(**kw) if internal else c.mx_tensor(shape=shape, dtype=dtype, **kw)
    kw = dict(data=torch.empty(shape, dtype=dtype), fp8_scale_inv=torch.empty(1), fp8_dtype=q.dtype,
              data_transpose=None, quantizer=q)
    return c.f8_storage(**kw) if internal else c.f8(shape=shape, dtype=dtype, **kw)


def _update(c: _Classes, q, out) -> None:
    """``convert_and_update_tensor``: the attributes the C++ reads and sets on a given output."""
    if isinstance(q, c.mx):
        _ = (out._rowwise_data, out._columnwise_data, out._rowwise_scale_inv, out._columnwise_scale_inv)
    else:
        _ = (out._data, out._transpose, out._scale_inv)
        out._transpose_invalid = True
    out._fp8_dtype = q.dtype


def _kernels(c: _Classes, q, src: torch.Tensor, out) -> None:
    """The quantize kernels: current scaling's amax, scale and cast; one cast otherwise."""
    if isinstance(q, c.mx):
        data = out._rowwise_data if out._rowwise_data is not None else out._columnwise_data
    else:
        data = out._data
        if isinstance(q, c.current):
            q.scale.copy_(torch.amax(src, dim=tuple(range(src.dim()))))
    data.copy_(src)


def install(tex: types.ModuleType) -> None:
    """The FP8 extension calls on ``tex`` (``te_cpu``'s stand-in module)."""
    def quantize(tensor, quantizer, output=None, noop_flag=None):
        c = _classes()
        tensor = tensor.contiguous()
        if output is None:
            output = _create(c, quantizer, list(tensor.shape), tensor.dtype)
        else:
            _update(c, quantizer, output)
        if tensor.numel():
            _kernels(c, quantizer, tensor, output)
        return output

    def split_quantize(tensor, split_sections, quantizer_list, *args, **kwargs):
        c = _classes()
        tensor = tensor.contiguous()
        tail = list(tensor.shape[1:])
        outs = [_create(c, q, [m, *tail], tensor.dtype) for q, m in zip(quantizer_list, split_sections, strict=True)]
        for q, src, out in zip(quantizer_list, torch.split(tensor, list(split_sections)), outs, strict=True):
            if src.numel():
                _kernels(c, q, src, out)
        return outs

    def bgrad_quantize(grad_output, quantizer):
        return grad_output.sum(0), quantize(grad_output, quantizer)

    def dequantize(tensor, otype):
        data = getattr(tensor, "_data", None)
        if data is None:
            data = tensor._rowwise_data if tensor._rowwise_data is not None else tensor._columnwise_data
        return data.to(torch.float32)

    tex.quantize, tex.split_quantize, tex.bgrad_quantize, tex.dequantize = (quantize, split_quantize,
                                                                           bgrad_quantize, dequantize)


def cpu_recipe_states() -> None:
    """TE's recipe states allocate their scale and amax buffers on the GPU by default: on the CPU here."""
    from transformer_engine.pytorch import quantization

    def on_cpu(init):
        return lambda self, *a, device=None, **k: init(self, *a, device=torch.device("cpu"), **k)

    for cls in quantization.RecipeState.__subclasses__():
        cls.__init__ = on_cpu(cls.__init__)


def operand(x) -> torch.Tensor:
    """A GEMM operand's data: a quantized operand's row-wise data, else its
    column-wise data (the same logical shape on Blackwell); an MXFP8 operand's scales swizzled into the
    GEMM's layout first when they are not already."""
    if isinstance(x, torch.Tensor) and not hasattr(x, "_quantizer"):
        return x
    if hasattr(x, "_rowwise_data"):
        if not x._with_gemm_swizzled_scales:
            for s in (x._rowwise_scale_inv, x._columnwise_scale_inv):
                if s is not None:
                    torch.empty_like(s).copy_(s)
        return x._rowwise_data if x._rowwise_data is not None else x._columnwise_data
    return x._data if x._data is not None else x._transpose.t()
