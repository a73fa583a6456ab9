"""Kernel-level costs: the launch floor and host dispatch of every kernel, and GEMM tile/wave quantisation.

Launch model. The CPU issues kernels asynchronously onto the compute stream; the GPU runs them in
order. Within one compute task (a block's forward, its backward, the optimizer step) the CPU runs
ahead of the GPU, so the task takes

    T = max( Σ_kernels t_gpu,  Σ_kernels host_s ),  t_gpu = max(gpu_floor_s, roofline time), or for a GEMM
                                                     roofline time + gemm_fixed_s

— GPU-bound when kernels are large (the host's dispatch hides behind them), host-bound when they are
smaller than their dispatch cost (small models, small micro-batches, high tensor parallelism). An
eager transformer block's host side is more than its kernels (views, module calls, autograd nodes):
its ops carry the block's measured host time instead (``simulator.workload.host``).

Sources for the constants (``LaunchCosts``):

* Eager PyTorch dispatch per op: Python (~1 µs) + pybind11 (~1 µs) + autograd recording (1–3 µs) +
  ATen dispatcher (1–2 µs) + backend selection (1–5 µs) + ``cudaLaunchKernel`` (1–3 µs on CUDA 12+),
  "~5–25 µs of CPU-side work per op" (J. Lin, "From PyTorch op to kernel launch", GPU kernel
  lessons, jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html); NVIDIA's Nsight
  Systems guide measures ~20 µs for one PyTorch element-wise op round trip on a V100 (as quoted by
  groundy.com, "Every CUDA kernel pays a launch tax"). We take 10 µs, inside that range.
* torch.compile (Inductor) calls its kernels from generated wrapper code, skipping the Python op,
  pybind11, autograd and ATen dispatcher layers: what remains is the driver launch, 1–3 µs (same
  table); we take its upper end, 3 µs.
* GPU floor: a kernel occupies the GPU at least for its launch. Measured (``benchmarks/gpu_kernels.py``
  ``launch``, one H200, torch 2.11 + CUDA 13.0, 4 December 2026; ``benchmarks/results/h200_kernels_*``):
  a one-block element-wise kernel issued 400 times back to back, the host held off by a sleep kernel
  queued first, takes 1.80, 1.55 and 1.80 µs of GPU time each in three runs; we take their mean, 1.72 µs
  (0.85–0.92 µs inside a CUDA graph). The same runs put the host's eager dispatch at 6.3–7.8 µs per
  element-wise op without autograd, 7.8–11.6 µs with it and 14.3–20.5 µs for a small ``F.linear`` with
  autograd, the range the 10 µs above sits in.
* GEMM fixed cost (``gemm_fixed_s``): a cuBLAS GEMM adds a fixed time to its work (launch, prologue:
  operand descriptors and the first k-tiles in flight before the tensor cores start; epilogue: the
  last tiles written), not hidden by its own work. Measured the same way: a 64×64×64 GEMM back to back
  takes 2.96, 2.74 and 2.95 µs (mean 2.88), and back-to-back GEMMs of 128³ to 4,096³ and of the TP-8
  linear shapes of hidden 1,024–4,096 at 1,024–4,096 tokens (``stream_gemm``, 26 shapes) fit
  ``t = 2.88 µs + F / (P·mamf·s(m,n,k))`` to 7.6 % and 7.2 % mean |log error| in two runs (bias +1.4 %
  and −0.7 %; 2.85 µs zeroes it over both), against 29 % for ``max(floor, F / (P·mamf·s))``; single
  event-timed GEMMs from cold L2 (``gemm``, 288 GEMMs: hidden 1,024–8,192, tokens 1,024–16,384, TP 1 and 8,
  the three layouts) 11.3 % against 18.4 %. The 64³ GEMM itself then comes out 18 % high (3.40 µs at
  the microbenchmark rate): the shape factor still prices its padded tile's short main loop.
  Taken for every architecture (U outside Hopper: a launch and pipeline fill of the same order).

GEMM shape efficiency (``gemm_shape_factor``): cuBLAS/CUTLASS tile the ``m × n`` output in
``Tm × Tn`` tiles, one thread block per tile per SM; with ``T`` tiles on ``S`` SMs the GEMM runs
``ceil(T/S)`` waves and its tensor-core utilisation is ``m·n / (ceil(T/S)·S·Tm·Tn)`` (tile padding and
the idle SMs of the last wave; NVIDIA "Matrix Multiplication Background User's Guide", §"Tile
Quantization" and §"Wave Quantization", docs.nvidia.com/deeplearning/performance/dl-performance-
matrix-multiplication). The library picks the tile that fits the shape best among its candidates:
128×128 on A100 (CUTLASS/cuBLAS default Ampere tile), 128×256, 128×128 and 128×64 on Hopper (CUTLASS 3
warp-specialised tiles; the 128×64 one is what cuBLAS's heuristics pick for GEMMs too small to fill the
132 SMs with larger tiles: without it the back-to-back measurements above come out 14–16 % too slow on
average, with it +0.4 %), 128×256 and 128×128 per SM on Blackwell: its ``tcgen05`` MMA computes a
256×N tile across a pair of SMs (``cta_group::2``, N up to 256), 128 rows on each (CUTLASS
``examples/70_blackwell_gemm/70_blackwell_fp16_gemm.cu``: ``MmaTileShape_MNK = Shape<_256,_128,_64>``,
"could be across 2 SMs"), so each SM owns a 128×128 or 128×256 share of the output. Along ``k`` each
tile pays a fixed main-loop fill and epilogue, modelled as ``k / (k + k½)``, ``k½`` = ``gemm_half_dim`` for
16-bit GEMMs and twice that for FP8 ones, whose main loop runs twice as fast (``k_half``)
(``efficiency.yaml``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: SMs per GPU, from the vendor whitepapers: V100 80 (Volta whitepaper), A100 108 (A100 whitepaper
#: Table 1; A800 is the same GA100 configuration), H100 SXM5 132 and H100 PCIe 114 (H100 whitepaper
#: Table 2; H800 and H200 use the SXM5 GH100 configuration, H100 NVL the 132-SM one). Blackwell: NVIDIA
#: publishes no per-SKU count ("Blackwell Ultra GPUs contain up to 160 SMs ... Available SM count and
#: HBM capacity varies by SKU", NVIDIA technical blog "Inside NVIDIA Blackwell Ultra", figure 1), so
#: the counts the devices report (``cudaDeviceProp.multiProcessorCount``) in public benchmark logs: B200
#: 148 (ByteDance-Seed/VeOmni PR #986: "B200 148 SM"), B300 SXM 148, GB200 and GB300 152
#: (facebookexperimental/triton PR #2768, on GB300: "sm_count 152 ... both hardware counts are the
#: same as GB200's"; a few GB300 logs report 148, most 152). Longest prefix of the catalog name wins;
#: a GPU not listed gets no wave quantisation (tile padding only).
SM_COUNT: dict[str, int] = {
    "v100": 80,
    "a100": 108,
    "a800": 108,
    "h100": 132,
    "h100-pcie": 114,
    "h100-nvl": 132,
    "h800": 132,
    "h200": 132,
    "b200": 148,
    "b300": 148,
    "gb200": 152,
    "gb300": 152,
}

#: Dense 16-bit tensor-core multiply-adds per SM and clock, per architecture: A100 432 tensor cores (4 per SM)
#: x 256 FMA and H100 528 x 512 (hardware.md, its clock check: 1,410 MHz x 432 x 256 x 2 = 311.9 TF; 1,830 MHz
#: x 528 x 512 x 2 = 989.4 TF [S1]); Blackwell 4,096, derived (D) from B200's 2,250 TF dense BF16 at its
#: 1.86 GHz tensor clock [G16] over 148 SMs (2.25e15 / (2 x 148 x 1.86e9) = 4,087). A GPU's 16-bit peak over
#: twice this is its SMs x clock (``sm_issue_Hz``).
TENSOR_FMA_PER_SM_CLOCK: dict[str, int] = {"ampere": 1024, "hopper": 2048, "blackwell": 4096}
#: SMs x clock of the H100-class GPUs (H100 SXM, H800, H200: 132 SMs at 1.83 GHz, 989.5e12 / (2 x 2,048)):
#: the reference of ``Op.sm_bound_Bps``.
REFERENCE_SM_ISSUE_HZ = 989.5e12 / (2 * 2048)
#: Their datasheet HBM bandwidth (H100 SXM, H800: 3.35 TB/s), the reference's on an architecture without
#: a tensor width above.
REFERENCE_HBM_Bps = 3.35e12


def sm_issue_Hz(arch: str, peak_16bit_flops: float) -> float | None:
    """SMs x clock (SM-cycles per second) of a GPU of ``arch`` whose dense 16-bit tensor peak (at its power
    limit) is ``peak_16bit_flops``: what sets the rate of the work its SMs issue beside the tensor cores
    (four warp schedulers of one instruction per clock per SM, the special-function unit's exponentials,
    fp32 arithmetic, in-SM latency), which grows with SMs and clock, not with the tensor width or the HBM
    bandwidth. Blackwell Ultra's doubled exponential rate (``attention.SM_CUDNN_SPEEDUP``) is not applied:
    exponentials are a part of such a kernel's issued work (U). ``None`` for an architecture not in
    ``TENSOR_FMA_PER_SM_CLOCK``."""
    fma = TENSOR_FMA_PER_SM_CLOCK.get(arch)
    return peak_16bit_flops / (2 * fma) if fma else None


#: Output tile candidates (Tm, Tn) per architecture (see module docstring).
TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "ampere": ((128, 128),),
    "hopper": ((128, 256), (128, 128), (128, 64)),
    "blackwell": ((128, 256), (128, 128)),
}
DEFAULT_TILES: tuple[tuple[int, int], ...] = ((128, 128),)
#: Streams Transformer Engine's grouped GEMM spreads its GEMMs over: ``multi_stream_cublas_gemm`` issues
#: GEMM ``i`` on compute stream ``i mod nvte_get_num_compute_streams()``, 4 (TE
#: ``common/util/multi_stream.cpp``; its CUTLASS grouped GEMM is opt-in, ``NVTE_USE_CUTLASS_GROUPED_GEMM``,
#: Hopper BF16 only). Megatron-Core's ``TEGroupedMLP`` runs the experts through it.
TE_GROUPED_STREAMS = 4
#: GPU seconds each GEMM of that multi-stream path adds beyond its share of the work: its launch gap,
#: prologue and epilogue and the tail of its last wave, which the four streams do not hide. Measured as a
#: difference at equal work (Transformer Engine PR #2045, ``general_grouped_gemm`` on H100, TE 2.7 and
#: CUDA 12.9, BF16): 8 GEMMs of (4,096 × 768 × 2,048) run at 627.903 TFLOP/s and 16 of (2,048 × 768 ×
#: 2,048), the same 103.08 GFLOP with the same tiles and waves (``wave_efficiency`` gives both 0.97), at
#: 553.945: 164.17 against 186.08 µs, 21.9 µs for 8 more GEMMs, 2.74 µs each. The single-kernel CUTLASS
#: grouped GEMM of the same PR moves by 0.4 µs per group (650.574 → 636.927 TFLOP/s), so a one-kernel
#: grouped GEMM (``streams`` 0: torch ``_grouped_mm``) carries none. Taken for every architecture and
#: precision (U: measured on Hopper BF16 only).
TE_GROUPED_GEMM_FIXED_S = 2.74e-6


def grouped_gemm_fixed_s(batch: int, streams: int) -> float:
    """GPU seconds a ``batch`` of GEMMs issued as separate kernels on ``streams`` streams adds to their
    work (``TE_GROUPED_GEMM_FIXED_S`` each); 0 for one grouped kernel (``streams`` 0)."""
    return batch * TE_GROUPED_GEMM_FIXED_S if streams else 0.0


@dataclass(frozen=True)
class LaunchCosts:
    """Per-kernel CPU dispatch (``host_s``), GPU floor (``gpu_floor_s``) and the fixed GPU time a GEMM
    kernel adds to its work (``gemm_fixed_s``), seconds (module docstring)."""

    host_s: float
    gpu_floor_s: float
    gemm_fixed_s: float = 0.0


#: Measured GPU floor of a kernel and fixed cost of a cuBLAS GEMM (module docstring), the same whether
#: the host dispatches eagerly or from compiled code (Inductor calls cuBLAS for its matmuls).
GPU_FLOOR_S, GEMM_FIXED_S = 1.72e-6, 2.88e-6
EAGER = LaunchCosts(host_s=10e-6, gpu_floor_s=GPU_FLOOR_S, gemm_fixed_s=GEMM_FIXED_S)
COMPILED = LaunchCosts(host_s=3e-6, gpu_floor_s=GPU_FLOOR_S, gemm_fixed_s=GEMM_FIXED_S)
#: No launch costs (the pure roofline; unit tests of other layers).
NONE = LaunchCosts(host_s=0.0, gpu_floor_s=0.0)


def launch_costs(kernels: object) -> LaunchCosts:
    """The launch costs of a ``training.kernels`` setting: compiled or eager dispatch."""
    return COMPILED if getattr(kernels, "compile", False) else EAGER


def sm_count(gpu_name: str) -> int | None:
    """SMs of a catalogued GPU (longest matching name prefix of ``SM_COUNT``), ``None`` if unknown."""
    best = None
    for prefix in SM_COUNT:
        if gpu_name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return SM_COUNT[best] if best is not None else None


def _slots(tiles: int, sms: int) -> int:
    """SM slots ``tiles`` output tiles occupy: whole waves of ``sms``."""
    return math.ceil(tiles / sms) * sms


def wave_efficiency(m: int, n: int, batch: int, sms: int | None, tiles: tuple[tuple[int, int], ...],
                    streams: int = 0) -> float:
    """Best ``m·n·batch / (waves·S·Tm·Tn)`` over the tile candidates (tile + wave quantisation);
    with ``sms`` unknown, tile padding only (``m·n / (ceil(m/Tm)·Tm·ceil(n/Tn)·Tn)``). ``streams``
    ``c > 0``: the ``batch`` GEMMs are separate kernels on ``c`` streams. The streams run unsynchronised,
    each starting its next GEMM when its last one ends, so the tiles of all ``batch`` GEMMs fill the
    waves as one pool would, but no more than ``c`` GEMMs are in flight: when their ``c·T₁`` tiles are
    fewer than the SMs, the rest idle, ``min(1, c·T₁/S)`` times the tile padding. Measured (H200, 4-64
    GEMMs of 32,768 × n × 2,048 split ``batch`` ways on four streams, replayed from a CUDA graph;
    ``tests/hardware/test_kernels_measured.py``): 7.6 % mean |log error| against 9.3 % for lock-step
    rounds of ``c`` GEMMs, whose 64 GEMMs of 512 × 768 came out 22 % too slow."""
    best = 0.0
    for tm, tn in tiles:
        per_gemm = math.ceil(m / tm) * math.ceil(n / tn)
        padding = m * n / (per_gemm * tm * tn)
        if sms is None:
            best = max(best, padding)
            continue
        eff = padding * per_gemm * batch / _slots(per_gemm * batch, sms)
        if streams:
            eff = min(eff, min(1.0, min(streams, batch) * per_gemm / sms) * padding)
        best = max(best, eff)
    return best


def k_half(gemm_half_dim: float, gpu, dtype: str) -> float:
    """The main-loop fill's half-rate depth ``k½`` of a GEMM in math mode ``dtype`` on ``gpu``:
    ``gemm_half_dim × P(dtype) / P16`` with ``P`` the GPU's dense peaks (``P16`` its 16-bit one).

    A tile's prologue and epilogue take a fixed time, worth more ``k`` steps the faster the tensor cores
    run the main loop, so an FP8 GEMM's fill costs twice the ``k`` of a 16-bit GEMM's on the same tiles.
    Measured on an H200 (``benchmarks/gpu_kernels.py`` ``fp8``, two runs, 48 linear GEMMs of hidden
    2,048-8,192 at 4,096 and 16,384 tokens): the FP8 over BF16 speed-up grows with the depth ``k``, 1.64
    at 2,048, 1.77 at 4,096 and 8,192, 1.84-1.88 at 16,384-32,768, where one ``k½`` for both would keep
    it flat; with ``k½`` 128 for BF16 (``stream_gemm``'s best fit) the FP8 ``k½`` that fits the speed-ups
    best is 320, and 256 (this rule) fits them to 4.1 % mean |log error| against 4.9 % at 128 with the
    rates fitted, 4.2 % against 5.9 % at the catalogued MAMF rates (``tests/hardware/test_kernels_measured.py``). A slower math mode's fill costs fewer ``k`` steps by the
    same rule (FP32 or TF32 GEMMs: not measured)."""
    p16 = gpu.peak_flops("bf16" if gpu.peak_tflops.bf16 else "fp16")
    return gemm_half_dim * gpu.peak_flops(dtype) / p16


def gemm_shape_factor(m: int, n: int, k: int, batch: int, sms: int | None,
                      tiles: tuple[tuple[int, int], ...], k_half: float, streams: int = 0) -> float:
    """Fraction of the large-GEMM rate a ``(m, n, k) × batch`` GEMM reaches: wave quantisation of
    its output tiles (``streams``: see ``wave_efficiency``) times the main-loop fill ``k / (k + k_half)``."""
    return wave_efficiency(m, n, batch, sms, tiles, streams) * k / (k + k_half)
