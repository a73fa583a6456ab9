"""Compute model: time of one op (and of a list of ops) on one GPU, by roofline.

* GEMM: ``t = max(F / (P · e_mamf · s(m,n,k)), B / (BW · e_hbm))`` with ``P`` the dense peak of the
  math mode, ``e_mamf`` the max-achievable-matmul fraction (hardware.md §4, [S1]) and the shape
  factor ``s = Π_d d/(d + d_half)`` over ``d ∈ (m, n, k)``.
* Attention (fused FlashAttention kernel): ``t = max(F / (P16 · e_flash), B / (BW · e_hbm))``; the
  unfused path arrives as GEMM plus memory-bound ops from the workload and needs no special case.
* Memory-bound ops (norms, activations, softmax, optimizer): ``t = B / (BW · e_hbm)``.

Units: FLOP, bytes, seconds. fp8 training runs the linear-layer GEMMs at the fp8 rate and attention
at the 16-bit rate (FlashAttention-3 FP8 exists but is not the default in training stacks).
"""

from __future__ import annotations

from typing import Any

from simulator.config.hardware import Dtype, GPUSpec
from simulator.hardware.efficiency import Efficiency


class RooflineComputeModel:
    """Per GPU and training dtype. ``speedup`` scales peak FLOP/s (a what-if knob; 1 = datasheet)."""

    def __init__(self, gpu: GPUSpec, dtype: Dtype, efficiency: Efficiency, *, flops_scale: float = 1.0,
                 hbm_scale: float = 1.0) -> None:
        self.gpu = gpu
        self.eff = efficiency
        self.gemm_peak = gpu.peak_flops(dtype) * flops_scale
        attn_dtype: Dtype = "bf16" if dtype == "fp8" else dtype
        if gpu.peak_tflops.bf16 is None and attn_dtype == "bf16":
            attn_dtype = "fp16"
        self.attn_peak = gpu.peak_flops(attn_dtype) * flops_scale
        self.hbm_Bps = gpu.hbm_bandwidth_Bps * efficiency.hbm_fraction * hbm_scale
        self._cache: dict[int, tuple[tuple, float]] = {}

    def shape_factor(self, shape: tuple[float, ...] | None) -> float:
        """``Π d/(d + d_half)`` over the GEMM dimensions; 1 when the shape is unknown."""
        if not shape:
            return 1.0
        factor = 1.0
        for d in shape:
            factor *= d / (d + self.eff.gemm_half_dim)
        return factor

    def op_time(self, op: Any) -> float:
        """Seconds for one op with attributes ``kind``, ``flops``, ``bytes`` and (GEMM) ``shape``."""
        mem_t = op.bytes / self.hbm_Bps
        if op.kind == "gemm":
            rate = self.gemm_peak * self.eff.gemm_fraction * self.shape_factor(getattr(op, "shape", None))
            return max(op.flops / rate, mem_t)
        if op.kind == "attention":
            return max(op.flops / (self.attn_peak * self.eff.flash_attention_fraction), mem_t)
        return mem_t

    def time(self, ops: tuple) -> float:
        """Sum of op times; cached per ops tuple (builders share one tuple across layers)."""
        hit = self._cache.get(id(ops))
        if hit is not None and hit[0] is ops:
            return hit[1]
        total = sum(self.op_time(op) for op in ops)
        self._cache[id(ops)] = (ops, total)
        return total
