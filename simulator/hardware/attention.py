"""Which attention kernel a framework runs, and the rate each one reaches per GPU architecture.

The fused attention kernel's time is ``t = F / (P16 · f(impl, arch, direction) · c · a(s))`` (forward
and backward separately): ``P16`` the dense 16-bit peak, ``f`` the published long-sequence fraction of
that peak of the implementation on the architecture (``FRACTIONS``, below), ``c`` the per-architecture
``attention_sustained_of_bench`` (calibrated, like ``gemm_sustained_of_mamf`` for GEMMs: clocks under
the power cap during a training step, causal masking and head dims other than the benchmarks' 128)
and ``a(s)`` the main-loop fill over the key length (``RooflineComputeModel.attention_factor``).

Implementations (``training.kernels.attention``):

* ``fa2``: FlashAttention-2 (flash-attn 2.x), and PyTorch SDPA's flash backend, which is the
  FlashAttention-2 kernel (``torch.nn.functional.scaled_dot_product_attention``; torchtitan, HF
  transformers/accelerate ``attn_implementation="sdpa"``, FSDP and DeepSpeed recipes).
* ``fa1``: FlashAttention 1.x (flash-attn 0.x/1.x, CUDA). FlashAttention-2 is "around 2× speedup
  compared to FlashAttention" (Dao 2023, arXiv:2307.08691, abstract); its benchmark figures give the
  share per architecture and head dim (``FA1_OF_FA2``: about half on A100, 0.40 on H100 at head dim 128).
* ``triton``: the Triton FlashAttention of 2022-23 stacks (``flash_attn_triton.py``, which llm-foundry
  copied as ``attn_impl: triton``; its benchmark script defaulted to it, mosaicml/llm-foundry
  ``scripts/train/benchmarking/submit_benchmarks.py``, ``--attn_impl`` default ``triton``, later
  ``flash`` with flash-attn 2), at ``TRITON_OF_FA2`` of ``fa2``.
* ``fa3``: FlashAttention-3 (Hopper only: wgmma, TMA, warp specialisation).
* ``cudnn``: cuDNN fused attention, Transformer Engine's ``DotProductAttention`` backend on Hopper and
  Blackwell (Megatron-LM/Megatron-Core with TE, NeMo, Megatron-Bridge).
* ``sdpa_math``, ``eager``, ``hf_eager``: unfused attention: ``QKᵀ`` and ``·V`` batched GEMMs with the
  ``s × s`` score matrix written to and read from HBM by the softmax (``simulator.workload.attention_core``:
  Megatron's fused scale-mask-softmax for the first two, Hugging Face's chain of PyTorch ops for
  ``hf_eager``); no fused-kernel rate.

``auto`` (the default) picks what each stack runs out of the box: unfused when
``flash_attention: false``; ``cudnn`` for framework ``ddp`` (dtsim's Megatron-LM / NeMo model) on Hopper
and Blackwell, where Transformer Engine's ``DotProductAttention`` runs cuDNN fused attention (an
assumption about TE's backend choice in NVIDIA's containers, where flash-attn 3 is not installed;
Megatron-Core's ``--attention-backend fused`` forces it and ``dtsim import megatron`` maps it); ``fa2``
otherwise (PyTorch SDPA's flash backend, flash-attn 2). Set the field when a run states its kernel
(plain PyTorch DDP with SDPA on Hopper: ``fa2``; Megatron-FSDP with TE: ``cudnn``).
"""

from __future__ import annotations

from typing import Any

from simulator.config.scenario import TORCHAO_RECIPES, UNFUSED_ATTENTION
from simulator.errors import InputError

FIELD = "training.kernels.attention"
FUSED = ("fa1", "triton", "fa2", "fa3", "cudnn")
#: Architectures where ``auto`` gives Megatron-style (``ddp``) stacks Transformer Engine's cuDNN attention.
CUDNN_ARCHS = ("hopper", "blackwell")

#: Long-sequence (16k) fraction of the dense BF16 peak, ``(forward, backward)``, head dim 128, no causal
#: mask, FLOPs counted as the FlashAttention benchmarks do (forward ``4·s²·d·heads``, backward 2.5×).
#:
#: Hopper (H100 80GB SXM5, 989.5 TFLOP/s dense BF16), FlashAttention-3 paper (Shah et al. 2024,
#: arXiv:2407.08608), figures "Attention forward speed, head dim 128 (H100 80GB SXM5)" and "Attention
#: backward speed, head dim 128", values at sequence length 16k: FlashAttention-2 370 forward / 322
#: backward TFLOP/s, cuDNN 595 / 516, FlashAttention-3 648 / 561.
#:
#: Ampere (A100 80GB SXM4, 312 TFLOP/s): FlashAttention-2 "reaches up to 230 TFLOPs/s, 73% of the
#: theoretical maximum" (Dao 2023, arXiv:2307.08691, §4 "Benchmarking attention", forward). Its backward
#: and cuDNN's rates are taken relative to it from cudnn-frontend's attention training sweep on one A100
#: (results/llama3.1/a100, 28 September 2026, an A100 80GB PCIe: same GA100, lower clocks, so only the
#: ratios are used; Llama 3.1 shape, head dim 128, 16k tokens, no mask): FlashAttention-2 204 forward /
#: 179 backward TFLOP/s, cuDNN 182 / 144. ``fa3`` needs Hopper: choosing it on Ampere is an error.
#:
#: Blackwell cuDNN: cudnn-frontend's attention training sweep (benchmark/attention_training, config
#: ``llama``: Llama 3.1 shape, 64 query / 8 KV heads, head dim 128, batch 2, bf16; results/llama3.1/gb200,
#: 28 September 2026, cuDNN backend 9.27) measures GB200 at 1,662 TFLOP/s forward and 1,322 backward at
#: 16,384 tokens without a mask (causal: 1,609 / 1,287), of the GB200's 2,500 TFLOP/s dense peak.
#:
#: Blackwell FlashAttention-2 (B200, 2,250 TFLOP/s dense BF16): it has no Blackwell code path (no tcgen05
#: tensor-core instructions); its Ampere-style kernels run there at a fraction of the peak.
#: tritonbench (meta-pytorch/tritonbench PR #171, B200, ``flash_v2``, batch 8, 16 heads, head dim 128)
#: measures 330.6 TFLOP/s forward at sequence 16k (361.6 at 8k); flash-attention issue #1589 (flash-attn
#: 2.7.4, torch 2.8 + cu128 on B200, head dim 64, sequence 16k) 379.4 forward and 334.0 backward,
#: whose backward/forward ratio 0.880 gives the head-dim-128 backward. PyTorch SDPA runs this kernel on
#: B200 unless it prefers cuDNN, which it does only from bundled cuDNN 9.15 on (``sdp_utils.cpp``
#: ``check_prefer_cudnn_attention``, gated on cuDNN > 9.15.0 for sm90/sm100: torch 2.11 and later,
#: huggingface/transformers PR #48163). FlashAttention-3 does not run on Blackwell (``FA3_ARCHS``).
FRACTIONS: dict[str, dict[str, tuple[float, float]]] = {
    "hopper": {
        "fa2": (370 / 989.5, 322 / 989.5),
        "fa3": (648 / 989.5, 561 / 989.5),
        "cudnn": (595 / 989.5, 516 / 989.5),
    },
    "ampere": {
        "fa2": (230 / 312, 230 / 312 * 179 / 204),
        "cudnn": (230 / 312 * 182 / 204, 230 / 312 * 144 / 204),
    },
    "blackwell": {
        "fa2": (330.6 / 2250, 330.6 / 2250 * 334.0 / 379.4),
        "cudnn": (1662 / 2500, 1322 / 2500),
    },
}
#: Rate at head dim 64 relative to head dim 128, ``(forward, backward)``: FlashAttention-3 paper (Shah et
#: al. 2024) figures "Attention forward/backward speed, head dim 64 (H100 80GB SXM5)" against the head-dim
#: 128 ones above, sequence 16k, no causal mask: forward FlashAttention-2 324/370, cuDNN 413/595,
#: FlashAttention-3 497/648; backward 291/322, 433/516, 474/561. Smaller heads do less work per loaded
#: tile (fewer FLOPs per byte of Q, K, V and per softmax element). Taken as a property of each kernel on
#: every architecture (only Hopper is published); head dims between 64 and 128 interpolate linearly,
#: 128 and above use the head-dim-128 rates (the tables' reference).
HEAD_DIM_64: dict[str, tuple[float, float]] = {
    "fa2": (324 / 370, 291 / 322),
    "cudnn": (413 / 595, 433 / 516),
    "fa3": (497 / 648, 474 / 561),
}
#: Rate of cuDNN fused attention on a compute capability relative to its architecture's rate, by SM
#: version, ``(forward, backward)``. Blackwell Ultra (sm_103: B300, GB300) doubles the SFU's exponential
#: throughput (MUFU.EX2), which bounds the softmax of a fused attention kernel on Blackwell; the backward,
#: with 2.5x the forward's matmul work per exponential, gains less. cudnn-frontend's attention training
#: sweep (the Blackwell ``FRACTIONS`` entry's run, results/llama3.1/gb300 against .../gb200, same day,
#: same cuDNN, same 2,500 TFLOP/s dense peak) at 16,384 tokens without a mask: forward 2,112 against
#: 1,662 TFLOP/s (1.271), backward 1,494 against 1,322 (1.130); causal 1.234 / 1.145. Its prefill sweep
#: (benchmark/attention_inference/results/prefill_sweep, causal) gives the same forward ratio, 1,986.3
#: against 1,562.9 (1.271).
SM_CUDNN_SPEEDUP: dict[int, tuple[float, float]] = {103: (2112 / 1662, 1494 / 1322)}

#: cuDNN fused attention in FP8 (Transformer Engine's FP8 dot-product attention, ``training.kernels.fp8_attention``)
#: over the same kernel in BF16 on the same GPU, ``(forward, backward)``: both batched GEMMs in FP8, the softmax
#: in fp32, the backward in FP8 too (TE's default ``NVTE_FP8_DPA_BWD=1``). Measured at 8,192 tokens, causal, head
#: dim 128 (the rows it prices run 4k-8k tokens; the ratio grows with length, B200 16k: 1.147 / 1.276), FP8 and
#: BF16 timed in the same run. By SM version: cudnn-frontend's SDPA training benchmark with cuDNN 9.13.1 and the
#: nv25.09 PyTorch container (benchmark/sdpa_benchmark_training/artifacts, sdpa_fp8_benchmark_results_NVIDIA_B200.csv
#: and _GB300.csv @0b1577c8, sample_gb300_fp8_run.txt: backend_version 91301; batch 1, 128 query / 8 KV heads):
#: sm_100 (B200, and GB200 with the same SM) forward 1.589 -> 1.464 ms, backward 5.526 -> 4.382; sm_103 (GB300, B300)
#: forward 1.281 -> 1.060, backward 4.778 -> 3.632. Hopper (sm_90): cudnn-frontend's attention training sweep on an
#: H200 with cuDNN 9.27 (results/llama3.1/h200/llama3.1_20260928_130009.csv @816ea457; batch 2, 64 / 8 heads,
#: top-left causal): forward 3.357 -> 2.260 ms, backward 10.448 -> 16.298: its FP8 causal backward takes as long
#: as its unmasked one (15.632), no masked tiles skipped, so FP8 slows the backward there. Other GPUs: no measured
#: rate (``fp8_problem``). Its casts: ``workload.attention_core.fp8_cast``.
FP8_SPEEDUP: dict[int, tuple[float, float]] = {
    100: (1.589 / 1.464, 5.526 / 4.382),
    103: (1.281 / 1.060, 4.778 / 3.632),
    90: (3.357 / 2.260, 10.448 / 16.298),
}


#: Sliding-window ("band") attention: a kernel whose query tiles loop over a band of ``w`` keys runs
#: below the long full-length rate, the more so the narrower the band: each 128-query tile visits the
#: band's key tiles, one of them half masked, and pays its prologue and epilogue (load Q, write O and
#: the LSE) over those few. Measured: cudnn-frontend's attention training sweep, config ``gpt_oss``
#: (window 128, head dim 64, 128 heads, batch 2, bf16, 4,096 tokens; results/gpt_oss/<gpu>/, 28 September
#: 2026, cuDNN backend 9.27), against the same GPU's long full-length rate of the same kernel at head
#: dim 128 (results/llama3.1/<gpu>, the ``FRACTIONS`` sweep, 16k, no mask), ``(forward, backward)``:
#: GB200 cuDNN 164 / 183 against 1,662 / 1,322 TFLOP/s; H200 cuDNN 129 / 92 against 640 / 549; A100 80GB
#: PCIe cuDNN 37 / 34 against 182 / 144 (FlashAttention-2 there: 50 / 40 against 204 / 179, a band
#: efficiency within 20 % of cuDNN's). The sweep counts ``s·w`` score pairs, as ``flops.window_share``
#: does but for the first ``w`` queries' triangle (1.6 % at these lengths).
BAND_128: dict[str, tuple[float, float]] = {
    "blackwell": (164 / 1662, 183 / 1322),
    "hopper": (129 / 640, 92 / 549),
    "ampere": (37 / 182, 34 / 144),
}
#: The band width at which a kernel runs at half its long rate.
BAND_REFERENCE_WINDOW = 128


def band_half(arch: str) -> tuple[float, float] | None:
    """``(forward, backward)`` band width ``w½`` of a window kernel's efficiency ``w / (w + w½)``
    against the long full-length rate at the same head dim, from ``BAND_128`` (measured at head dim
    64: its ratio to the head-dim-128 rate is divided by cuDNN's ``HEAD_DIM_64``); ``None`` where not
    measured. One value per architecture for every fused kernel: what sets it is the tile geometry
    they share (on A100 FlashAttention-2's band efficiency is within 20 % of cuDNN's)."""
    ratio = BAND_128.get(arch)
    if ratio is None:
        return None
    w = BAND_REFERENCE_WINDOW
    return tuple(w * (hd64 / r - 1) for r, hd64 in zip(ratio, HEAD_DIM_64["cudnn"], strict=True))


def sm_speedup(impl: str, sm: int | None) -> tuple[float, float]:
    """``SM_CUDNN_SPEEDUP`` of ``sm`` for cuDNN fused attention, else ``(1, 1)``."""
    return SM_CUDNN_SPEEDUP.get(sm or 0, (1.0, 1.0)) if impl == "cudnn" else (1.0, 1.0)


def fp8_speedup(impl: str, sm: int | None, fp8_attention: bool) -> tuple[float, float]:
    """``FP8_SPEEDUP`` of ``sm`` for cuDNN attention run in FP8, else ``(1, 1)``."""
    return FP8_SPEEDUP.get(sm or 0, (1.0, 1.0)) if fp8_attention and impl == "cudnn" else (1.0, 1.0)


def fp8_problem(scenario: Any) -> str | None:
    """Why ``training.kernels.fp8_attention`` cannot run here, or None: Transformer Engine's FP8 attention runs in
    an FP8 recipe of its own (delayed or current scaling, MXFP8, NVFP4: not torchao's), through cuDNN
    (``training.kernels.attention`` cudnn, Megatron's default), on a GPU whose rate is measured (``FP8_SPEEDUP``)."""
    t, gpu = scenario.training, scenario.cluster.gpu_spec
    if not t.kernels.fp8_attention:
        return None
    if t.precision != "fp8" or t.kernels.fp8_recipe in TORCHAO_RECIPES:
        return ("training.kernels.fp8_attention is Transformer Engine's FP8 attention, which runs with a TE FP8 "
                "recipe: set training.precision fp8 with fp8_recipe delayed, current, mxfp8 or nvfp4, or remove it")
    if for_scenario(scenario) != "cudnn":
        return ("training.kernels.fp8_attention runs through cuDNN fused attention: set training.kernels.attention "
                "cudnn (Megatron-Core with Transformer Engine), or remove fp8_attention")
    if head_dim_of(scenario.model) > 128:
        return (f"training.kernels.fp8_attention: cuDNN's FP8 attention takes head dims up to 128 (this model's "
                f"is {head_dim_of(scenario.model)}); remove it")
    if (gpu.sm or 0) not in FP8_SPEEDUP:
        return (f"training.kernels.fp8_attention has no measured rate on {gpu.name} (sm_{gpu.sm}); measured on "
                "Hopper and Blackwell only: remove it")
    return None


#: A fused attention backward's main-loop fill over its forward's: ``k½`` of ``a(s)`` is ``gemm_half_dim``
#: forward and ``BACKWARD_FILL`` times that backward (``RooflineComputeModel.attention_factor``). Each
#: backward tile loads K and V, loops over the query tiles and writes dK and dV (FlashAttention-2's
#: backward; dQ accumulated on the side), more fixed work per tile than the forward's load Q / write O.
#: Measured on an H200 (``benchmarks/gpu_kernels.py`` ``attention_short``, two runs, causal, head dim
#: 128, 512-4,096 tokens, FlashAttention-2 and cuDNN, each against the same GPU's 16k rate): over the
#: 16 rows the backward fits best at ``k½`` 384-448 (3.8 % / 3.6 % mean |log error|; 28 % at the
#: forward's 128), the forward at 192 (3.7 %; 6.6 % at 128); FlashAttention-2's causal backward at 512
#: tokens runs 121 TFLOP/s, 0.40 of its 16k rate (``tests/hardware/test_kernels_measured.py``).
BACKWARD_FILL = 3.0
#: Architectures FlashAttention-3 runs on (wgmma and TMA: Hopper only).
FA3_ARCHS = ("hopper",)
#: FlashAttention (1.x) relative to FlashAttention-2 on the same GPU, ``(head dim 64, head dim 128)``:
#: the FlashAttention-2 paper's forward + backward benchmark with a causal mask (Dao 2023,
#: arXiv:2307.08691, Fig. 4(c)(d) "Attention forward + backward speed on A100 GPU" and Fig. 7(c)(d), the
#: same on H100 80GB SXM5, bar labels in TFLOP/s), mean of the ratios at 2k, 4k and 8k tokens (at 16k
#: the A100 FlashAttention bars fall to 18-19). A100, head dim 64: FA1 77 / 87 / 92 against FA2 140 / 158
#: / 165 (0.553); head dim 128: 81 / 87 / 91 against 155 / 182 / 189 (0.494). H100, head dim 64: 136 / 138
#: / 149 against 232 / 257 / 273 (0.556); head dim 128: 106 / 104 / 135 against 265 / 294 / 308 (0.397):
#: the sm80 kernels of both (no wgmma, no TMA) leave FA1 further behind on Hopper at head dim 128. Other
#: architectures: the paper's "around 2×" (abstract), 0.5.
FA1_OF_FA2: dict[str, tuple[float, float]] = {
    "ampere": ((77 / 140 + 87 / 158 + 92 / 165) / 3, (81 / 155 + 87 / 182 + 91 / 189) / 3),
    "hopper": ((136 / 232 + 138 / 257 + 149 / 273) / 3, (106 / 265 + 104 / 294 + 135 / 308) / 3),
}
FA1_OF_FA2_DEFAULT = 0.5
#: The Triton FlashAttention (``triton``) relative to FlashAttention-2 on the same GPU, ``(forward,
#: backward)``. Ampere: "FlashAttention-2 is 1.3-1.5× faster than FlashAttention in Triton in the forward
#: pass and around 2× faster in the backward pass" (Dao 2023, arXiv:2307.08691 §4.1, A100), the middle of
#: the forward range. Hopper (no published rate): 0.84 both ways, measured from llm-foundry's 2023 sweep,
#: whose every row ran the kernel: within a group of its rows only the attention's quadratic part grows with the
#: sequence length, so the spread of the group's errors is smallest at the attention's rate
#: (``python benchmarks/triton_rate.py``, whose docstring has the method: 3.3 % mean |deviation| over 24 H100
#: rows at 0.84, 5.3 % at FlashAttention-2's rate and at 0.70; a shallow minimum, 3.4-3.5 % at 0.86-0.88, the
#: ratio stored before the LoRA rows joined the Hopper fit; on A100 it finds 0.60 where the paper's
#: pair costs what 0.54-0.57 does). Why the gap would be narrower on H100 (a hypothesis): FlashAttention-2's
#: sm80 kernels reach only 37 % of H100's dense peak against 74 % of A100's, a ceiling Ampere-style code
#: shares there, and llm-foundry's ``triton_pre_mlir`` fork (vchiley/triton, branch
#: ``triton_pre_mlir_sm90``) has no Hopper wgmma path (upstream Triton's came later: PRs #2036, #2414).
#: Other architectures: FlashAttention-2's rate.
TRITON_OF_FA2: dict[str, tuple[float, float]] = {"ampere": (1 / 1.4, 1 / 2.0), "hopper": (0.84, 0.84)}


def fa1_of_fa2(arch: str, head_dim: int) -> float:
    """``fa1``'s rate as a share of ``fa2``'s at ``head_dim`` (``FA1_OF_FA2``; linear between head dims 64
    and 128, their end values outside)."""
    r64, r128 = FA1_OF_FA2.get(arch, (FA1_OF_FA2_DEFAULT, FA1_OF_FA2_DEFAULT))
    t = min(max(head_dim - 64, 0) / 64, 1.0)
    return r64 + (r128 - r64) * t


def _rated(impl: str) -> str:
    """The kernel whose published rates ``impl`` is priced from (``fa1``, ``triton``: ``fa2``'s)."""
    return "fa2" if impl in ("fa1", "triton") else impl


def _of_rated(impl: str, arch: str) -> tuple[float, float]:
    """``(forward, backward)`` rate of ``impl`` as a share of its ``_rated`` kernel's at head dim 128."""
    if impl == "fa1":
        return (fa1_of_fa2(arch, 128),) * 2
    if impl == "triton":
        return TRITON_OF_FA2.get(arch, (1.0, 1.0))
    return 1.0, 1.0


def resolve(impl: str, flash_attention: bool, framework: str, arch: str) -> str:
    """The attention kernel a scenario runs: ``impl`` unless ``auto`` (module docstring's rule)."""
    if impl != "auto":
        return impl
    if not flash_attention:
        return "eager"
    if framework == "ddp" and arch in CUDNN_ARCHS:
        return "cudnn"
    return "fa2"


def for_scenario(scenario: Any) -> str:
    """The attention kernel of a validated scenario (``resolve`` on its kernels, framework and GPU)."""
    k = scenario.training.kernels
    return resolve(k.attention, k.flash_attention, scenario.parallel.framework, scenario.cluster.gpu_spec.arch)


def fractions(impl: str, arch: str, fallback: float) -> tuple[float, float]:
    """``(forward, backward)`` long-sequence fraction of dense 16-bit peak of ``impl`` on ``arch``.

    A kernel without a published rate on the architecture (every kernel on Ada, Volta or AMD) uses
    ``fallback`` (``efficiency.yaml``'s ``flash_attention_fraction`` planning value) for both directions
    (``fa1`` at ``fa1_of_fa2`` of ``fa2``, head dim 128; ``triton`` at ``TRITON_OF_FA2`` of it where
    that has the architecture, else at it). ``fa3``
    anywhere but Hopper raises ``InputError``: FlashAttention-3 needs Hopper's wgmma and TMA."""
    if impl in UNFUSED_ATTENTION:
        raise ValueError(f"{impl} is unfused: its GEMMs and softmax are costed as such")
    table = FRACTIONS.get(arch, {})
    if impl == "fa3" and arch not in FA3_ARCHS:
        choices = ", ".join(["fa1", "triton", *table] if table else ["fa1", "triton", "fa2", "cudnn"])
        raise InputError(f"fa3 has no published rate on {arch} GPUs: FlashAttention-3 runs on Hopper only "
                         f"(choose one of {choices}, sdpa_math, eager or hf_eager)", FIELD)
    fwd, bwd = table.get(_rated(impl), (fallback, fallback))
    share_fwd, share_bwd = _of_rated(impl, arch)
    return fwd * share_fwd, bwd * share_bwd


def head_dim_factor(impl: str, head_dim: int, arch: str = "") -> tuple[float, float]:
    """``(forward, backward)`` rate of ``impl`` at ``head_dim`` relative to its head-dim-128 rate
    (``HEAD_DIM_64``, the same on every architecture; 1 from head dim 128 up); ``fa1`` also moves with its
    share of ``fa2`` on ``arch`` (``fa1_of_fa2``)."""
    ratio = HEAD_DIM_64.get(_rated(impl))
    if ratio is None or head_dim >= 128:
        return 1.0, 1.0
    t = max(head_dim - 64, 0) / 64
    own = fa1_of_fa2(arch, head_dim) / fa1_of_fa2(arch, 128) if impl == "fa1" else 1.0
    return (ratio[0] + (1 - ratio[0]) * t) * own, (ratio[1] + (1 - ratio[1]) * t) * own


def head_dim_of(model: Any) -> int:
    """The query/key head dim the attention kernel runs at: ``qk_nope + qk_rope`` for MLA (DeepSeek-V3:
    128 + 64 = 192), else ``d_head``."""
    if getattr(model, "is_mla", False):
        return int(model.qk_nope_head_dim + model.qk_rope_head_dim)
    return int(model.d_head)
