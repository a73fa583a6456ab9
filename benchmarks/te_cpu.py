"""Transformer Engine's PyTorch modules on a CPU-only machine, for timing their Python (host) code.

Transformer Engine's Python package (``transformer_engine.pytorch``: the modules, their autograd functions,
quantizer bookkeeping) is pure Python over a C++/CUDA extension, ``transformer_engine_torch``, that needs a
GPU. For host-time measurements (``benchmarks/host_dispatch_te.py``) the extension is stood in for: every
call the BF16 path of ``Linear``, ``LayerNormLinear``, ``GroupedLinear`` and the norms makes becomes the
one or two ATen calls its C++ makes around its one kernel (a GEMM with the bias in its epilogue; a norm
with its statistics; the grouped GEMM's C++ loop, one GEMM per expert), and the CUDA runtime queries TE
makes outside its kernels (device, capability, stream capture, NVTX ranges, ``.cuda()``) are no-ops.
Enum-like attributes the BF16 path only passes through (quantizer indices, overlap types) are inert
objects. What TE's C++ costs beyond those ATen calls (pybind argument conversion, its own checks) is left
out: the figures are TE's Python, a lower bound of its host time. The FP8 paths' calls (quantizers, GEMMs on
quantized operands): ``te_cpu_fp8``.

Use: put a directory holding ``transformer_engine``'s Python first on ``sys.path`` (``pip install
--no-deps --target DIR transformer-engine==2.12.0``: a pure-Python wheel), then ``import te_cpu``.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.machinery
import importlib.util
import os
import re
import sys
import types

import te_cpu_fp8
import torch

os.environ.setdefault("NVTE_PROJECT_BUILDING", "1")  # skip loading TE's shared library at import


class _Inert:
    """An attribute the BF16 path only passes on (an enum member, a class it never instantiates)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Inert(f"{self._name}.{key}")

    def __call__(self, *args, **kwargs):
        return _Inert(f"{self._name}()")

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Inert) and other._name == self._name

    def __index__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


def _module(name: str) -> types.ModuleType:
    """A module whose every attribute is inert."""
    mod = types.ModuleType(name)

    def attr(key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Inert(f"{name}.{key}")

    mod.__getattr__ = attr
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__path__ = []
    return mod


def _dtype_enum() -> type:
    """``tex.DType`` with the members this TE release's Python expects of it."""
    root = importlib.util.find_spec("transformer_engine").submodule_search_locations[0]
    with open(os.path.join(root, "pytorch", "constants.py")) as f:
        names = re.findall(r"int\(tex\.DType\.(k\w+)\)", f.read())
    names = names or ["kByte", "kInt16", "kInt32", "kInt64", "kFloat32", "kFloat16", "kBFloat16",
                      "kFloat8E4M3", "kFloat8E5M2", "kFloat8E8M0", "kFloat4E2M1", "kNumTypes"]
    return enum.IntEnum("DType", {n: i for i, n in enumerate(names)})


TEX = _module("transformer_engine_torch")


def _t(x: torch.Tensor, trans: bool) -> torch.Tensor:
    return x.t() if trans else x


def generic_gemm(A, transa, B, transb, out, quantizer, out_dtype, bias, bias_dtype, gelu, gelu_in, grad,
                 workspace, workspace_size, accumulate, split_accumulator, **kwargs):
    """cuBLAS's column-major ``D = op(A) op(B)``, i.e. row-major ``op(B) @ op(A)`` over the flattened leading
    dimensions; the bias (forward) or its gradient (backward) in the epilogue; a quantized operand's data
    (``te_cpu_fp8.operand``) into the same GEMM, and an output quantizer's quantize after it."""
    a, b = te_cpu_fp8.operand(A), te_cpu_fp8.operand(B)
    shape_b = b.shape
    a = a.reshape(-1, a.shape[-1]) if a.dim() > 2 else a
    b = b.reshape(-1, b.shape[-1]) if b.dim() > 2 else b
    bias_grad = None
    if bias is not None and not grad:
        # FP8 GEMMs take a BF16 bias whatever the activations' dtype (TE casts an FP32 one): into the epilogue
        r = torch.addmm(bias if bias.dtype == b.dtype else bias.to(b.dtype), _t(b, transb), _t(a, transa))
    else:
        r = torch.matmul(_t(b, transb), _t(a, transa))
        if grad and bias is not None:
            bias_grad = b.sum(0)
    if not transb and len(shape_b) > 2:
        r = r.view(*shape_b[:-1], r.shape[-1])
    if out is not None:
        (out.add_ if accumulate else out.copy_)(r.view_as(out))
        r = out
    if quantizer is not None:
        r = TEX.quantize(r, quantizer)
    return r, bias_grad, None, None


def te_general_grouped_gemm(A, transa, B, transb, out, out_dtype, m_splits, bias, bias_dtype, single_output,
                            pre_gelu_out, grad, workspaces, workspace_size, accumulate, split_accumulator,
                            sm_margin):
    """The grouped GEMM's C++ loop: one GEMM per group (``nvte_multi_stream_cublas_gemm``)."""
    ops = [(te_cpu_fp8.operand(a), te_cpu_fp8.operand(b)) for a, b in zip(A, B, strict=True)]
    if single_output:
        start = 0
        for (a, b), m in zip(ops, m_splits, strict=True):
            if m:
                torch.matmul(_t(b, transb), _t(a, transa), out=out[0][start:start + m])
                start += m
    else:
        for (a, b), o in zip(ops, out, strict=True):
            if accumulate:
                o.add_(torch.matmul(_t(b, transb), _t(a, transa)))
            else:
                torch.matmul(_t(b, transb), _t(a, transa), out=o)
    return bias


def _norms(tex: types.ModuleType) -> None:
    """The norm kernels: output and statistics forward, the input and weight (bias) gradients backward."""
    def q(y, quantizer):  # the norm kernel writes its output quantized when given a quantizer
        return y if quantizer is None else tex.quantize(y, quantizer)

    def rmsnorm_fwd(x, weight, eps, ln_out, quantizer, out_dtype, sm_margin, zero_centered_gamma):
        return q(torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps), quantizer), None, x.mean(-1)

    def layernorm_fwd(x, weight, bias, eps, ln_out, quantizer, out_dtype, sm_margin, zero_centered_gamma):
        mu = x.mean(-1)
        return q(torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps), quantizer), mu, mu

    def rmsnorm_bwd(dz, x, rsigma, gamma, sm_margin, zero_centered_gamma):
        return dz * gamma, (dz * x).sum(0)

    def layernorm_bwd(dz, x, mu, rsigma, gamma, sm_margin, zero_centered_gamma):
        return dz * gamma, (dz * x).sum(0), dz.sum(0)

    tex.rmsnorm_fwd, tex.layernorm_fwd = rmsnorm_fwd, layernorm_fwd
    tex.rmsnorm_bwd, tex.layernorm_bwd = rmsnorm_bwd, layernorm_bwd


class _Props:
    major, minor, multi_processor_count, name = 10, 0, 148, "CPU stand-in"


def _cuda_runtime() -> None:
    """The CUDA runtime calls TE makes outside its kernels, as no-ops on the CPU."""
    import torch.cuda.graphs
    torch.cuda.is_available = lambda: True
    torch.cuda.is_current_stream_capturing = torch.cuda.graphs.is_current_stream_capturing = lambda: False
    torch.cuda.get_device_properties = lambda *a, **k: _Props()
    torch.cuda.get_device_capability = lambda *a, **k: (10, 0)
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.device = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.nvtx.range = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.nvtx.range_push = torch.cuda.nvtx.range_pop = lambda *a, **k: None
    # with CUDA "available", torch.compile'd functions (Megatron-Core's router) save and restore its RNG
    torch.cuda.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)
    torch.cuda.set_rng_state = lambda *a, **k: None
    torch.Tensor.is_cuda = property(lambda self: True)  # TE asserts its inputs are on the GPU
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.Tensor.record_stream = lambda self, stream: None  # the "GPU" tensors are the CPU's


def install() -> None:
    """The stand-in extension and the no-op CUDA calls; then ``transformer_engine.pytorch`` imports."""
    tex = TEX
    tex.DType = _dtype_enum()
    tex.generic_gemm, tex.te_general_grouped_gemm = generic_gemm, te_general_grouped_gemm
    te_cpu_fp8.install(tex)
    tex.get_num_cublas_streams = lambda: 4
    _norms(tex)
    sys.modules["transformer_engine_torch"] = tex
    # ONNX export and TE's Triton kernels are imported, never called, on the BF16 path
    for name in ("onnxscript", "onnxscript.onnx_opset", "onnxscript.values", "onnx",
                 "transformer_engine.pytorch.triton", "transformer_engine.pytorch.triton.pad",
                 "transformer_engine.pytorch.triton.cross_entropy", "transformer_engine.pytorch.triton.permutation"):
        sys.modules.setdefault(name, _module(name))
    import transformer_engine.common
    transformer_engine.common.load_framework_extension = lambda framework: None
    _cuda_runtime()
    import transformer_engine.pytorch  # noqa: F401
    te_cpu_fp8.cpu_recipe_states()
    from transformer_engine.pytorch.module import base
    if hasattr(base, "_multi_stream_cublas_workspace"):  # TE <= 2.10 caches its cuBLAS workspaces there
        base._cublas_workspace = torch.empty(1, dtype=torch.uint8)
        base._multi_stream_cublas_workspace[:] = [torch.empty(1, dtype=torch.uint8) for _ in range(4)]


install()
