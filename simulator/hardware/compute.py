"""Compute model: time of one op (and of a list of ops) on one GPU, by roofline, per kernel.

* GEMM: ``t = max(F / (P · e_mamf · s(m,n,k)), B / (BW · e_hbm)) + n · t_gemm`` with ``P`` the dense peak of the
  math mode, ``e_mamf`` the max-achievable-matmul fraction (hardware.md §4, [S1]), the shape
  factor ``s`` from tile and wave quantisation on the GPU's SMs and ``t_gemm`` the measured fixed time
  each of its ``n`` GEMM kernels adds (``simulator.hardware.kernels``: 2.88 µs on H200); a
  grouped GEMM issued as one kernel per GEMM on several streams (Transformer Engine's ``GroupedLinear``)
  adds ``batch × TE_GROUPED_GEMM_FIXED_S`` (measured, ``simulator.hardware.kernels``).
* Attention (fused kernel): ``t = max(F / (P16 · f · c · a(s)), B / (BW · e_hbm))`` with ``f`` the
  published long-sequence fraction of peak of the framework's kernel (FlashAttention-2/3, cuDNN) on the
  architecture, forward or backward, ``c`` the calibrated ``attention_sustained_of_bench``
  (``simulator.hardware.attention``) and ``a(s)`` the main-loop fill over the causal key length
  (``attention_factor``); the unfused path arrives as GEMM plus memory-bound ops from the workload
  and needs no special case.
* Memory-bound ops (norms, activations, softmax, optimizer): ``t = B / (BW · e_hbm)``.
* Every other op of ``n`` kernels takes at least ``n`` GPU launch floors, and a list of ops (one compute
  task) takes ``max(Σ GPU time, Σ host dispatch)`` (``simulator.hardware.kernels``).

Units: FLOP, bytes, seconds. fp8 training runs the linear-layer GEMMs (``Op.linear``) at the fp8
rate; attention, the logits GEMM and the unfused attention GEMMs at the 16-bit rate (Transformer
Engine and torchao leave the output layer and attention in BF16; FlashAttention-3 FP8 is not the
default in training stacks).

FP8 accumulation on Hopper. The FP8 MAMF of the catalog is measured with ``torch._scaled_mm``'s
default precise accumulation (stas00/ml-engineering ``mamf-finder.py``: ``torch._scaled_mm(A, B, scale,
scale, out=C)``, ``use_fast_accum`` False). Training stacks run the forward GEMM with Hopper's fast
accumulation and the two backward GEMMs precisely: Transformer Engine ``_2X_ACC_FPROP = False``,
``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True`` (``module/base.py``; its current-scaling recipe likewise),
torchao float8 ``gemm_config_output = Float8GemmConfig(use_fast_accum=True)`` and precise
``grad_input`` / ``grad_weight`` (``torchao/float8/config.py``). Fast accumulation speeds an FP8 GEMM
up "1.1x to 1.2x" (pytorch/ao issue #2377, H100 benchmark; the only figure found in text, U): the
forward FP8 linear GEMMs run ``FP8_FAST_ACCUM_SPEEDUP`` (the midpoint, 1.15) faster on Hopper. With
cuBLAS 13.0 (torch 2.11) fast accumulation gains nothing on an H200: precise over fast time 0.99 on
average over 16 linear shapes of hidden 4,096 and 8,192 (``benchmarks/gpu_kernels.py`` ``fast_accum``,
``benchmarks/results``); the 1.15 is kept for the cuBLAS 12 of the validated FP8 runs. Blackwell
has no such mode (cuBLASLt fast accumulation is Hopper-only; MXFP8 accumulates in FP32).

FP8 on Blackwell. Its FP8 GEMMs take any operand layout, so Transformer Engine keeps no transposed copy
of a per-tensor FP8 tensor there (``nvte_is_non_tn_fp8_gemm_supported``, compute capability 10.0 on):
the bytes and kernels a cast spends on that copy (``Op.transpose_bytes``, ``workload.fp8_casts``) are
dropped on ``NON_TN_FP8_ARCHS``. The catalog's FP8 MAMF is a per-tensor-scaled GEMM; a block-scaled
MXFP8 GEMM (1×32 UE8M0 scales loaded beside each operand tile) runs at ``MXFP8_GEMM_RATE`` of it:
Transformer Engine's GEMM profiling guide (``docs/examples/gemm_profiling``, B300 SXM6, the twelve
pre-quantized GEMMs of a 4,096-wide layer with a 16,384-wide MLP at 15,872 tokens, kernel time only)
times them at 7.161 ms per layer in MXFP8 against 6.812 in FP8 current scaling (forward 2.365 / 2.158,
data gradient 2.397 / 2.329, weight gradient 2.400 / 2.325). An NVFP4 GEMM (E2M1 operands, an E4M3 scale per
16 elements) runs at ``NVFP4_GEMM_RATE`` of it: the same guide times the same twelve GEMMs at 3.764 ms per
layer in NVFP4 (forward 1.254, data gradient 1.305, weight gradient 1.205), 1.81x the per-tensor FP8 rate
where B300's datasheet FP4 peak is 3.1x its FP8 peak (14,000 against 4,500 TFLOP/s): at these shapes the
FP4 kernels reach 36% of that peak against FP8's 66%. The rate is taken over FP8's on every Blackwell part,
not scaled by each part's FP4 / FP8 peak ratio (2 on B200 / GB200, 3 on GB300): no NVFP4 GEMM timing of a
B200 or GB200 is published (U); NVIDIA's NVFP4 / MXFP8 throughput ratios for Llama 3.1 405B (each at its preset's
layout), 1.40-1.48 on GB200 against 1.43-1.50 on GB300 (Megatron-Bridge performance summary), show no sign of the
peaks' ratio.
"""

from __future__ import annotations

from typing import Any

from simulator.config.hardware import Dtype, GPUSpec
from simulator.hardware import attention
from simulator.hardware.efficiency import Efficiency
from simulator.hardware.kernels import (
    DEFAULT_TILES,
    EAGER,
    REFERENCE_SM_ISSUE_HZ,
    TILES,
    LaunchCosts,
    REFERENCE_HBM_Bps,
    gemm_shape_factor,
    grouped_gemm_fixed_s,
    k_half,
    sm_count,
    sm_issue_Hz,
)

#: Forward FP8 GEMM speed-up of fast accumulation over the precise accumulation the FP8 MAMF is
#: measured with, per architecture (module docstring: midpoint of pytorch/ao #2377's 1.1-1.2x, U).
FP8_FAST_ACCUM_SPEEDUP: dict[str, float] = {"hopper": 1.15}
#: Architectures whose FP8 GEMMs take every operand layout: no transposed FP8 copies (module docstring).
NON_TN_FP8_ARCHS = ("blackwell",)
#: MXFP8 GEMM rate over the per-tensor FP8 GEMM rate (module docstring: 6.812 / 7.161 ms, B300).
MXFP8_GEMM_RATE = 6.812 / 7.161
#: NVFP4 GEMM rate over the per-tensor FP8 GEMM rate (module docstring: 6.812 / 3.764 ms, B300).
NVFP4_GEMM_RATE = 6.812 / 3.764
#: The linear GEMMs' rate over a per-tensor FP8 GEMM's, per block-scaled recipe.
BLOCK_SCALED_GEMM_RATE: dict[str, float] = {"mxfp8": MXFP8_GEMM_RATE, "nvfp4": NVFP4_GEMM_RATE}


class RooflineComputeModel:
    """Per GPU and training dtype. ``speedup`` scales peak FLOP/s (a what-if knob; 1 = datasheet)."""

    def __init__(self, gpu: GPUSpec, dtype: Dtype, efficiency: Efficiency, *, flops_scale: float = 1.0,
                 hbm_scale: float = 1.0, launch: LaunchCosts = EAGER, attention_impl: str = "fa2",
                 attention_head_dim: int = 128, host_scale: float = 1.0, fp8_recipe: str = "",
                 fp8_attention: bool = False) -> None:
        self.gpu = gpu
        #: the host CPU's time per call over an x86 DGX host's (``HostConfig.dispatch_scale``)
        self.host_scale = host_scale
        self.eff = efficiency
        self.launch = launch
        self.sms = sm_count(gpu.name)
        self.tiles = TILES.get(gpu.arch, DEFAULT_TILES)
        attn_dtype: Dtype = "bf16" if dtype == "fp8" else dtype
        if gpu.peak_tflops.bf16 is None and attn_dtype == "bf16":
            attn_dtype = "fp16"
        self.fp8 = dtype == "fp8"
        self.gemm_peak = gpu.sustained_peak_flops(dtype) * flops_scale
        if self.fp8 and gpu.mamf_fraction_fp8 is not None:
            # FP8 GEMMs reach their own measured share of the FP8 peak (H100 SXM: 70.9 % against 80.3 %
            # for BF16, hardware.md §4 [S1]); the fitted sustained fraction applies to both.
            self.gemm_peak *= gpu.mamf_fraction_fp8 / (efficiency.gemm_fraction / efficiency.gemm_sustained_of_mamf)
        self.fast_accum = FP8_FAST_ACCUM_SPEEDUP.get(gpu.arch, 1.0) if self.fp8 else 1.0
        #: the FP8 linear GEMMs' rate over a per-tensor FP8 GEMM's (block-scaled MXFP8, NVFP4: module docstring)
        self.fp8_gemm_rate = BLOCK_SCALED_GEMM_RATE.get(fp8_recipe, 1.0) if self.fp8 else 1.0
        #: FP8 casts make no transposed copies on this GPU (``NON_TN_FP8_ARCHS``)
        self.non_tn_fp8 = gpu.arch in NON_TN_FP8_ARCHS
        self.attn_peak = gpu.sustained_peak_flops(attn_dtype) * flops_scale
        self.hbm_Bps = gpu.hbm_bandwidth_Bps * efficiency.hbm_fraction * hbm_scale
        #: this GPU's SMs x clock over the H100-class reference's, for kernels bound by their SMs' issue rate
        #: (``Op.sm_bound_Bps``); an architecture without a tensor width in ``kernels.TENSOR_FMA_PER_SM_CLOCK``
        #: scales them with its datasheet HBM bandwidth over the H100's 3.35 TB/s instead
        issue = sm_issue_Hz(gpu.arch, self.attn_peak)
        self.sm_issue_scale = (issue / REFERENCE_SM_ISSUE_HZ if issue is not None
                               else gpu.hbm_bandwidth_Bps * hbm_scale / REFERENCE_HBM_Bps)
        self._cache: dict[int, tuple[tuple, float, float]] = {}
        #: the fused attention kernel and its (forward, backward) rates in FLOP/s at long sequence
        self.attention_impl = attention_impl
        if attention_impl in attention.FUSED:
            fwd, bwd = attention.fractions(attention_impl, gpu.arch, efficiency.flash_attention_fraction)
            hf, hb = attention.head_dim_factor(attention_impl, attention_head_dim, gpu.arch)
            c = efficiency.attention_sustained_of_bench
            sf, sb = attention.sm_speedup(attention_impl, getattr(gpu, "sm", None))
            ff, fb = attention.fp8_speedup(attention_impl, getattr(gpu, "sm", None), fp8_attention and self.fp8)
            self.attn_rate = (self.attn_peak * fwd * hf * c * sf * ff, self.attn_peak * bwd * hb * c * sb * fb)
        else:  # unfused: no attention ops reach op_time; keep a rate for ops built without the scenario
            self.attn_rate = (self.attn_peak * efficiency.flash_attention_fraction,) * 2
        #: sliding-window kernels' half-rate band width (forward, backward): measured per architecture,
        #: else the main-loop fill's constant (a band of ``w`` keys as a causal loop over ``2w``)
        self.band_half = attention.band_half(gpu.arch) or (efficiency.gemm_half_dim,) * 2
        #: the GEMM main-loop fill's half-rate depth of the 16-bit GEMMs and of the linear layers' (FP8 under
        #: an FP8 recipe: ``kernels.k_half``)
        self.k_half = k_half(efficiency.gemm_half_dim, gpu, attn_dtype)
        self.k_half_linear = k_half(efficiency.gemm_half_dim, gpu, dtype)

    def shape_factor(self, shape: tuple[int, ...] | None, k_half: float, batch: int = 1, streams: int = 0) -> float:
        """Tile/wave quantisation × main-loop fill of a GEMM ``(m, n, k)`` (``batch`` of them, as one
        grouped kernel or on ``streams`` streams) with the fill's half-rate depth ``k_half``; 1 when the
        shape is unknown."""
        if not shape:
            return 1.0
        m, n, k = shape
        return gemm_shape_factor(int(m), int(n), int(k), batch, self.sms, self.tiles, k_half, streams)

    def attention_factor(self, kv_len: int, backward: bool = False) -> float:
        """Main-loop fill of a causal FlashAttention kernel: each query tile loops over ``kv_len / 2``
        keys on average and pays a fixed prologue/epilogue (load Q, write O and the LSE), the same
        per-tile fill as a GEMM's ``k / (k + gemm_half_dim)``, and ``attention.BACKWARD_FILL`` times that
        ``k½`` in the backward (measured); 1 when the length is unknown. So the published long-sequence
        rate (``simulator.hardware.attention``) applies at long sequences, and short ones run slower
        (FlashAttention-2 benchmarks: throughput grows with sequence length)."""
        if not kv_len:
            return 1.0
        keys = kv_len / 2
        return keys / (keys + self.eff.gemm_half_dim * (attention.BACKWARD_FILL if backward else 1.0))

    def op_time(self, op: Any) -> float:
        """GPU seconds for one op with attributes ``kind``, ``flops``, ``bytes``, (GEMM) ``shape`` and
        (optionally) ``launches``: the roofline time, at least one launch floor per kernel; a GEMM's
        roofline time plus the fixed time of each of its kernels (``LaunchCosts.gemm_fixed_s``); times the
        op's ``weight`` (its copies per block, ``Op.weight``)."""
        return getattr(op, "weight", 1.0) * self._one_op_time(op)

    def _one_op_time(self, op: Any) -> float:
        math_s, memory_s, floor_s, fixed_s = self.op_terms(op)
        return max(math_s, memory_s, floor_s) + fixed_s

    def op_terms(self, op: Any) -> tuple[float, float, float, float]:
        """One copy of ``op``'s time terms ``(math, memory, launch floor, fixed)``; its time is
        ``max(math, memory, floor) + fixed``. A GEMM's fixed time per kernel (``LaunchCosts.gemm_fixed_s``,
        which includes its launch floor) adds to its roofline time, so its floor term is 0; other kernels
        take at least ``LaunchCosts.gpu_floor_s`` each and have no fixed term."""
        issued = getattr(op, "sm_bound_Bps", 0.0)
        bandwidth = issued * self.sm_issue_scale if issued else self.hbm_Bps
        mem_t = (op.bytes - (getattr(op, "transpose_bytes", 0.0) if self.non_tn_fp8 else 0.0)) / bandwidth
        if issued:  # a kernel of matrix products measured as a whole (Op.sm_bound_Bps): its FLOPs bound it too
            mem_t = max(mem_t, op.flops / (self.attn_peak * self.eff.gemm_fraction))
        if op.kind == "gemm":
            # fp8 recipes run only the linear layers in FP8; the rest stays 16-bit
            fp8_linear = self.fp8 and getattr(op, "linear", False)
            peak = self.gemm_peak if (not self.fp8 or fp8_linear) else self.attn_peak
            if fp8_linear:
                peak *= self.fp8_gemm_rate
                if not getattr(op, "backward", False):
                    peak *= self.fast_accum  # forward FP8 GEMMs accumulate fast on Hopper (module docstring)
            batch, streams = getattr(op, "batch", 1), getattr(op, "streams", 0)
            kh = self.k_half_linear if fp8_linear else self.k_half
            rate = peak * self.eff.gemm_fraction * self.shape_factor(getattr(op, "shape", None), kh, batch, streams)
            fixed = self.launches(op) * self.launch.gemm_fixed_s + grouped_gemm_fixed_s(batch, streams)
            return op.flops / rate, mem_t, 0.0, fixed  # the fixed time includes the launch floor
        floor = self.launches(op) * self.launch.gpu_floor_s
        if op.kind == "attention":
            back = 1 if getattr(op, "backward", False) else 0
            rate = self.attn_rate[back]
            windowed = getattr(op, "window_share", 0.0)
            t = op.flops * (1 - windowed) / (rate * self.attention_factor(getattr(op, "k", 0), bool(back)))
            if windowed:  # the sliding-window blocks' share runs at the band rate (attention.BAND_128)
                t += op.flops * windowed / (rate * op.window / (op.window + self.band_half[back]))
            return t, mem_t, floor, 0.0
        return 0.0, mem_t, floor, 0.0

    def op_bound(self, op: Any) -> str:
        """What sets ``op``'s time: ``compute`` (its FLOPs at the kernel's rate), ``memory`` (its bytes at
        the HBM bandwidth) or ``launch`` (the launch floor, or a GEMM's fixed time per kernel outweighing
        its roofline time)."""
        math_s, memory_s, floor_s, fixed_s = self.op_terms(op)
        top = max(math_s, memory_s, floor_s)
        if floor_s >= top or fixed_s > top:
            return "launch"
        return "compute" if math_s >= memory_s else "memory"

    def launches(self, op: Any) -> int:
        """Kernels ``op`` launches on this GPU: its ``launches`` less the transpose kernels of FP8 casts
        where FP8 GEMMs take any layout (``NON_TN_FP8_ARCHS``), at least one."""
        n = getattr(op, "launches", 1)
        if self.non_tn_fp8 and getattr(op, "transpose_launches", 0):
            n = max(1, n - op.transpose_launches)
        return n

    def host_time(self, ops: tuple) -> float:
        """CPU seconds to issue ``ops``: each op's measured host time (``Op.host_s``, eager blocks, times
        ``host_dispatch_scale``: the training host's cost per call over the CPU-only benchmark that
        measured it) plus the kernels it issues from compiled code (``Op.cpp_launches``), or its kernels
        at ``launch.host_s`` each (already GPU-host figures), each op times its ``weight``; none at all under a
        launch model without host costs."""
        per_kernel = self.launch.host_s
        if per_kernel == 0:
            return 0.0
        total = measured = 0.0
        for op in ops:
            s, w = getattr(op, "host_s", None), getattr(op, "weight", 1.0)
            if s is None:
                total += w * self.launches(op) * per_kernel
            else:
                measured += w * s
                total += w * getattr(op, "cpp_launches", 0) * per_kernel
        return (total + measured * self.eff.host_dispatch_scale) * self.host_scale

    def _priced(self, ops: tuple) -> tuple:
        """``(ops, max(Σ GPU op time, Σ host dispatch), host excess, recompute share)``, computed once per
        ops tuple (builders share one tuple across layers; the tuple is kept so its ``id`` is not reused).
        The recompute share is the part of the GPU time in ops that re-run a forward (``recompute.*``,
        ``workload.ops.recompute_ops``)."""
        hit = self._cache.get(id(ops))
        if hit is None or hit[0] is not ops:
            times = [self.op_time(op) for op in ops]
            gpu, host = sum(times), self.host_time(ops)
            redo = sum(t for t, op in zip(times, ops, strict=True) if op.name.startswith("recompute."))
            hit = self._cache[id(ops)] = (ops, max(gpu, host), max(0.0, host - gpu), redo / gpu if redo else 0.0)
        return hit

    def recompute_share(self, ops: tuple) -> float:
        """Share of ``ops``' GPU time that re-runs forward work: an MoE block's op-level recomputes
        (``training.recompute_modules``) run inside its backward tasks, and the step's breakdown reports
        that share of those tasks as recomputation (``engine.summary``)."""
        return self._priced(ops)[3]

    def host_bound(self, ops: tuple) -> float:
        """Seconds by which issuing ``ops`` outlasts their GPU work (0 when GPU-bound): the part of
        ``time`` the GPU waits on the CPU."""
        return self._priced(ops)[2]

    def time(self, ops: tuple) -> float:
        """``max(Σ GPU op time, Σ host dispatch)``."""
        return self._priced(ops)[1]
