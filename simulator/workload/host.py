"""Host (CPU) time of an eager transformer block: the ATen calls its PyTorch code makes.

A compute task's time is ``max(GPU time, host time)`` (``simulator.hardware.kernels``): the CPU issues
every kernel asynchronously and the GPU idles when the CPU falls behind. In eager PyTorch the CPU does
not only launch kernels: every ATen call pays Python, module calls, pybind11, the autograd recorder and
the dispatcher, whether it launches a kernel or only makes a view (``view``, ``transpose``, ``t``,
``split``, ``expand``, ``detach``), and autograd's backward engine runs one node per recorded call. A
block therefore costs the CPU several times its kernel count at ~10 µs per kernel. With small models,
small micro-batches or wide tensor parallelism the GPU work per block drops below that host time and
the step is CPU-bound: the regime where Megatron-LM measurements of 1,024-hidden models on one node run
about twice the roofline (issue 12).

Measured by ``python benchmarks/host_dispatch.py`` (torch 2.13, the reference blocks rebuilt in plain
PyTorch after their framework's code and run on tiny CPU tensors, so that the time is the host's; min
of 20 repeats of a 24-block stack on the 2-core AMD EPYC development machine, 1 December 2026; counts
with ``TorchDispatchMode``):

=================  ================  ==============  ===============  ===============
block              calls fwd / bwd   host fwd (µs)   host bwd (µs)    µs per call
=================  ================  ==============  ===============  ===============
``megatron``       60 / 103          714             667              8.5
``megatron-flash`` 42 / 84           493             573              8.5
``llama``          75 / 139          540             696              5.8
=================  ================  ==============  ===============  ===============

* ``megatron``: Megatron-LM's ``ParallelTransformerLayer`` (megatron/model/transformer.py, 2023: LayerNorm,
  QKV ``ColumnParallelLinear`` with its separate bias add, ``CoreAttention``'s ``baddbmm``, masked
  softmax, dropout, ``bmm`` and ``permute().contiguous()``, bias-dropout-add, bias-GeLU, the Python
  backward of ``LinearWithGradAccumulationAndAsyncCommunication``); ``megatron-flash``: the same with
  PyTorch SDPA in place of the unfused core.
* ``llama``: torchtitan's Llama 3 ``TransformerBlock`` in eager mode (RMSNorm as torch code, separate
  wq/wk/wv, complex rotary, ``repeat_kv`` by expand/reshape, SDPA, SwiGLU).

On a GPU each kernel-launching call also pays ``cudaLaunchKernel`` (1-3 µs, ``kernels`` module
sources) and the CUDA caching allocator where the CPU run pays a tiny CPU kernel (about 1-2 µs: an
``add`` of two 4×4 tensors takes 1.7 µs on the same machine), and a training host's CPU and PyTorch
version differ from the benchmark's (the torch available on the development machine now, 2.14.1,
prints 25-40 % less for the same blocks: 415-428 / 493-528 µs Megatron, three runs; docs/compute.md).
So the table is a lower bound: the compute model multiplies it by the host layer's
``host_dispatch_scale`` (``RooflineComputeModel.host_time``), 1.56 on the A100 platform, fitted on
vTrain's host-bound Megatron-DeepSpeed steps (``simulator.validation.host_calibration``), 1 elsewhere.

Which block applies: compiled blocks (``kernels.compile``: Inductor's wrapper calls its kernels
directly, with no views, module calls or per-op autograd) keep the per-kernel dispatch; eager blocks
with RMSNorm not fused (``fused_norm_residual: false``) are torchtitan/HF-style code (``llama``); every
other eager block is Megatron-style code (``megatron``, or ``megatron-flash`` with FlashAttention). The
rebuilds follow Megatron-LM's legacy layer; Megatron-Core's ``TransformerLayer`` (NeMo, Megatron-Bridge,
Megatron-LM with Transformer Engine) makes as many ATen calls but more Python around them, measured by
running it (``MCORE_HOST``: 1.68× forward, 1.08× backward), and Transformer Engine's modules add their
Python on top (``TE_HOST``: 1.29× / 1.27× of that layer, TE 2.12 run on the CPU).

The CPU runs ahead of the GPU within a block, so what matters is the block's host time against its GPU
time. The engine, though, prices each compute task on its own, and a block is split into several tasks
at its tensor-parallel collectives and weight-gradient pieces. The host time is therefore spread over
the ops in proportion to their work, ``flops + RIDGE_FLOP_PER_BYTE · bytes`` (a GPU-time proxy): every
piece keeps the block's host/GPU ratio and is host-bound exactly when the whole block is. An even spread
would make the pieces of small ops (norms, bias adds between two collectives) host-bound inside a
GPU-bound block, a CPU stall that does not happen.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.workload.bias import linear_impl
from simulator.workload.op import Op

#: (forward, backward) host seconds per block (module docstring; ``benchmarks/host_dispatch.py``).
BLOCK_HOST_S: dict[str, tuple[float, float]] = {
    "megatron": (714e-6, 667e-6),
    "megatron-flash": (493e-6, 573e-6),
    "llama": (540e-6, 696e-6),
}
#: Host seconds per ATen call of each reference block (table above: host time / calls, fwd and bwd).
HOST_PER_CALL_S: dict[str, float] = {"megatron": 8.5e-6, "megatron-flash": 8.5e-6, "llama": 5.8e-6}
#: Backward host seconds per parameter of Megatron-LM DDP's gradient-accumulation hook
#: (megatron/core/distributed/distributed_data_parallel.py ``_make_param_hook``, registered on every
#: parameter's AccumulateGrad node: ``param.main_grad.add_(param.grad)`` unless the weight-gradient GEMM
#: already accumulated into it, then ``param.grad = None``). ``python benchmarks/host_dispatch.py``:
#: 4.1-4.7 µs (three runs, torch 2.14.1, 2,000 parameters with and without the hook).
GRAD_HOOK_S = 4.5e-6
#: Frameworks whose engines run such a Python hook per parameter in the backward: dtsim's Megatron-LM
#: model (``ddp``) and DeepSpeed (ZeRO's ``reduce_ready_partitions_and_remove_grads`` hook per parameter).
#: PyTorch FSDP reduces per flat parameter or per module, not per parameter.
HOOKED_FRAMEWORKS = ("ddp", "deepspeed")

#: Host time PyTorch FSDP adds per wrapped unit (one transformer block), by ``parallel.fsdp_version``, as
#: (forward, backward) fractions of the ``llama`` reference block's host time: its pre-forward all-gather and
#: post-forward reshard, its pre-backward gather and post-backward reduce-scatter, with the mixed-precision
#: casts and views around them. ``python benchmarks/host_dispatch_fsdp.py`` (torch 2.14.1, 5 December 2026,
#: three runs on the 2-core development machine, median): FSDP1 ``FULL_SHARD`` with ``use_orig_params``
#: 650-665 µs forward and 854-872 µs backward per unit beyond the block's own 304-325 / 446-468 µs; FSDP2
#: 448-483 / 509-595 µs (a fourth run: 2.05 / 1.90 and 1.59 / 1.43; the shared machine scatters by up to 20%).
#: A lower bound like the table above (no CUDA events or NCCL enqueues on the CPU);
#: PyTorch issue #173680 profiles FSDP2's ``pre_forward`` at about 1 ms per unit on a Xeon GPU host.
FSDP_UNIT_HOST: dict[int, tuple[float, float]] = {1: (2.12, 1.89), 2: (1.48, 1.17)}

#: The attention half of the ``megatron-flash`` reference block (up to its first bias-dropout-add), as
#: (forward, backward) fractions of the block's host time: ``python benchmarks/host_dispatch_moe.py``,
#: 150 of 323 µs forward and 151 of 400 µs backward (torch 2.13, 2 December 2026).
ATTENTION_HALF = (0.464, 0.376)


#: Megatron-Core's own layer code over the plain-PyTorch rebuilds, (forward, backward) host time: ``python
#: benchmarks/host_dispatch_mcore.py`` runs Megatron-Core 0.16.1's ``TransformerLayer`` on the rebuilds' CPU
#: tensors in the same process (torch 2.13, 6 December 2026, the 2-core development machine; median of three
#: runs). ``dense``: the local-spec layer over the ``megatron-flash`` block (forward 1.62-1.69, backward
#: 1.00-1.12; 511-584 / 400-479 against 311-348 / 374-426 µs); ``moe``: an MoE layer outside its experts
#: (attention half, router, alltoall dispatcher, combine; Transformer Engine's fused ops one call each, as in
#: the rebuild) over ``moe_host``'s pieces, each run's median over 2-16 experts (1.76 forward in all three,
#: 1.98-2.01 backward; three later runs 1.64-1.69 / 1.03-1.12 dense and 1.69-1.71 / 1.90-1.99 MoE, within the
#: shared machine's scatter). The real layers make no more ATen calls than the rebuilds (39 / 67 against 42 / 86 dense):
#: what they add is Megatron-Core's Python per call (module indirections, config branches, viewless-tensor
#: wrapping, the dispatcher's own autograd functions backward). Transformer Engine's modules: ``TE_HOST``.
MCORE_HOST: dict[str, tuple[float, float]] = {"dense": (1.68, 1.08), "moe": (1.76, 1.99)}
#: Transformer Engine's modules over Megatron-Core's local ones, (forward, backward) host time of the same
#: layer: ``python benchmarks/host_dispatch_te.py`` runs TE 2.12's Python (the release of Megatron-Core 0.16's
#: containers; its C++/CUDA extension stood in for by the ATen calls its C++ makes, ``benchmarks/te_cpu.py``)
#: in the TE-spec layer (``TELayerNormColumnParallelLinear``, ``TERowParallelLinear``, ``TENorm``) against the
#: local-spec layer ``MCORE_HOST`` measures (torch 2.13, 6 December 2026, median of three runs). ``dense``:
#: forward 1.27 / 1.29 / 1.30, backward 1.27 / 1.27 / 1.33 (650-674 / 506-541 against 508-519 / 392-426 µs);
#: ``moe``: the MoE layer outside its experts, each run's median over 2-16 experts (1.23 / 1.23 / 1.25 and
#: 1.24 / 1.27 / 1.23); BF16. TE 2.9 (the 25.11 containers) cost more (dense forward 1.55-1.66, backward
#: 1.26-1.34 in the same set-up). The experts' ``GroupedLinear``: ``moe_host.TE_EXPERTS``.
TE_HOST: dict[str, tuple[float, float]] = {"dense": (1.29, 1.27), "moe": (1.23, 1.24)}
#: The same layers under FP8, per ``training.kernels.fp8_recipe`` of Transformer Engine, over their BF16 selves:
#: TE's quantizer bookkeeping (a quantized-tensor object per quantize, built by the C++ from TE's Python classes
#: and a copied quantizer; the amax, scale and cast kernels of current scaling, one cast for delayed scaling
#: and MXFP8; MXFP8 weights' scales swizzled for each GEMM) run on the CPU by ``benchmarks/te_cpu_fp8.py``
#: (Blackwell semantics, no FP8 transposes) in ``python benchmarks/host_dispatch_te.py``, the weights cached
#: after a step's first micro-batch (``is_first_microbatch``). Median of three runs (torch 2.13, TE 2.12, 6
#: December 2026; dense forward / backward, then the MoE layer outside its experts, each run's median over
#: 2-16 experts): delayed 1.46 / 1.41 / 1.35 and 1.38 / 1.36 / 1.31, 1.01 / 1.14 / 1.09 and 1.00 / 1.22 / 1.11;
#: current 1.63 / 1.57 / 1.50 and 1.58 / 1.61 / 1.49, 1.32 / 1.13 / 1.16 and 1.32 / 1.16 / 1.19; MXFP8 1.66 /
#: 1.49 / 1.40 and 1.67 / 1.54 / 1.40, 1.10 / 1.18 / 1.08 and 1.14 / 1.20 / 1.10. TE issue #761 (H100, TE 1.x)
#: saw a te.Linear's FP8 forward take "more than 2x" its BF16 host time; the layers here add the norms,
#: attention and Megatron-Core's code that FP8 leaves alone (the MoE layer's router and dispatcher too).
TE_FP8_HOST: dict[str, dict[str, tuple[float, float]]] = {
    "delayed": {"dense": (1.41, 1.36), "moe": (1.09, 1.11)},
    "current": {"dense": (1.57, 1.58), "moe": (1.16, 1.19)},
    "mxfp8": {"dense": (1.49, 1.54), "moe": (1.10, 1.14)},
}
#: NVFP4's quantizer bookkeeping is not run on the CPU (``benchmarks/te_cpu_fp8.py`` has no NVFP4 quantizer):
#: it takes MXFP8's, the other block-scaled recipe of the same Transformer Engine modules (U).
TE_FP8_HOST["nvfp4"] = TE_FP8_HOST["mxfp8"]
#: Megatron-Core's ``MLASelfAttention`` over its standard self-attention: the host time it adds to a block, as
#: (forward, backward) fractions of the ``megatron-flash`` reference block timed in the same run (``python
#: benchmarks/host_dispatch_mcore.py``, median of three runs: 1.02 / 0.95 / 0.97 and 0.82 / 0.48 / 0.61; a
#: DeepSeek-style layer, low-rank q and kv with their norms, the fused MLA RoPE one call each way, both layers
#: with the one-call core attention): its down and up projections, norms, splits and concatenations.
MLA_HOST_EXTRA = (0.97, 0.61)


def is_megatron_core(model: Any, kernels: Any, framework: str) -> bool:
    """An eager Megatron-style block of Megatron-Core: framework ``ddp`` with Transformer Engine linears
    (NeMo, Megatron-Bridge, Megatron-LM's default ``--transformer-impl``; ``bias.linear_impl``). Not the
    legacy layer the rebuilds follow (Megatron-DeepSpeed, Megatron-LM with its own linears) nor torchtitan-style
    code. Megatron-LM's ``--transformer-impl local`` on Megatron-Core models (the spec measured) is ``linear:
    megatron`` too, which dtsim cannot tell from the legacy layer: it keeps the lower bound there."""
    megatron_code = block_style(model, kernels) in ("megatron", "megatron-flash")
    return megatron_code and framework == "ddp" and linear_impl(kernels, framework) == "te"


def mla_host_s(model: Any, kernels: Any, framework: str) -> tuple[float, float]:
    """Host seconds an MLA block's attention adds to a Megatron-Core block, forward and backward
    (``MLA_HOST_EXTRA`` of the ``megatron-flash`` reference block); none under an ``attn`` CUDA graph, which
    captures it, for other attention or outside Megatron-Core (unmeasured there)."""
    if not (model.is_mla and is_megatron_core(model, kernels, framework)) or "attn" in graphed(kernels):
        return 0.0, 0.0
    ref_f, ref_b = BLOCK_HOST_S["megatron-flash"]
    return MLA_HOST_EXTRA[0] * ref_f, MLA_HOST_EXTRA[1] * ref_b


def te_share(host: Any) -> float:
    """The factor on Transformer Engine's share of a block's host time that makes it cost the host's
    ``te_dispatch_scale`` instead of its ``dispatch_scale`` (``HostConfig``; the compute model multiplies every
    host time by ``dispatch_scale``): 1 where the topology sets none."""
    return 1.0 if host.te_dispatch_scale is None else host.te_dispatch_scale / host.dispatch_scale


def dispatch_overrides(host: Any, scale: float) -> tuple[str, ...]:
    """Scenario overrides that set ``host``'s dispatch scale to ``scale`` and, where the topology sets one,
    Transformer Engine's (``te_dispatch_scale``) in proportion (``te_share`` kept): for studies of host time."""
    sets = (f"cluster.topology.host.dispatch_scale={scale}",)
    if host.te_dispatch_scale is not None:
        sets += (f"cluster.topology.host.te_dispatch_scale={scale * te_share(host)}",)
    return sets


def mcore_scale(model: Any, kernels: Any, framework: str, kind: str, fp8: str | None = None,
                te_share: float = 1.0) -> tuple[float, float]:
    """``MCORE_HOST[kind]`` times ``TE_HOST[kind]`` (Megatron-Core's layer code with Transformer Engine's
    modules), times ``TE_FP8_HOST[fp8][kind]`` under an FP8 recipe ``fp8`` (``TrainingConfig.active_fp8_recipe``),
    for a Megatron-Core block (``is_megatron_core``), else ``(1, 1)``: the rebuilds' own figures. What Transformer
    Engine adds over Megatron-Core's local modules is weighted by ``te_share`` (the function of that name):
    ``code * (1 + (te_host * fp8_host - 1) * te_share)``."""
    if not is_megatron_core(model, kernels, framework):
        return 1.0, 1.0
    (code_f, code_b), (te_f, te_b) = MCORE_HOST[kind], TE_HOST[kind]
    fp8_f, fp8_b = TE_FP8_HOST[fp8][kind] if fp8 in TE_FP8_HOST else (1.0, 1.0)
    return code_f * (1 + (te_f * fp8_f - 1) * te_share), code_b * (1 + (te_b * fp8_b - 1) * te_share)


def graphed(kernels: Any) -> frozenset[str]:
    """The CUDA-graph scopes of ``training.kernels.cuda_graphs``, ``full_iteration`` spelt out as every
    block scope."""
    scopes = frozenset(getattr(kernels, "cuda_graphs", ()) or ())
    if "full_iteration" in scopes:
        return frozenset({"attn", "mlp", "mamba", "moe_router", "moe_preprocess", "moe", "full_iteration"})
    return scopes


def eager_share(kernels: Any, way: int, model: Any = None) -> float:
    """The share of a dense block's host time (``way`` 0 forward, 1 backward) that CUDA graphs leave to
    eager dispatch: a captured scope replays as one graph launch, whose host cost is negligible. A hybrid
    ``model``'s average block (``workload.hybrid_ops``) holds its layer kinds' shares of the reference block, a
    Mamba layer's code taken as long as an attention layer's (U: one Transformer Engine LayerNorm-linear, one
    fused function, one row-parallel linear; not measured) and captured by the ``mamba`` scope."""
    scopes = graphed(kernels)
    if model is not None and model.is_hybrid:
        n, c = model.hybrid_class_counts(False)
        return (mixer_share(model, scopes, way, False) * n
                + (1 - ATTENTION_HALF[way]) * c["-"] * ("mlp" not in scopes)) / max(1, n)
    return 1.0 - ATTENTION_HALF[way] * ("attn" in scopes) - (1 - ATTENTION_HALF[way]) * ("mlp" in scopes)


def mixer_share(model: Any, scopes: frozenset[str], way: int, moe: bool = True) -> float:
    """The eager share of a block's sequence-mixer half (the reference block's ``ATTENTION_HALF``) left to
    dispatch under the CUDA-graph ``scopes``: an attention layer's, or for a hybrid ``model`` the average over its
    blocks with (``moe``) or without an MoE layer of their Mamba (scope ``mamba``) and attention (``attn``)
    layers' (:func:`eager_share`)."""
    if not model.is_hybrid:
        return ATTENTION_HALF[way] * ("attn" not in scopes)
    n, c = model.hybrid_class_counts(moe)
    return ATTENTION_HALF[way] * (c["M"] * ("mamba" not in scopes) + c["*"] * ("attn" not in scopes)) / max(1, n)


#: FLOP per HBM byte at which a kernel turns compute-bound (A100: 312 TFLOP/s / 2.0 TB/s = 156; H100
#: SXM: 989 / 3.35 = 295); only weighs ops against each other in ``spread``.
RIDGE_FLOP_PER_BYTE = 200.0


def block_style(model: Any, kernels: Any) -> str | None:
    """The reference block whose host time applies (``BLOCK_HOST_S``), ``None`` when compiled."""
    if getattr(kernels, "compile", False):
        return None
    if model.norm == "rmsnorm" and not kernels.fused_norm_residual:
        return "llama"
    return "megatron-flash" if kernels.flash_attention else "megatron"


def _work(op: Any) -> float:
    return op.flops + RIDGE_FLOP_PER_BYTE * op.bytes


def spread(ops: tuple | list, host_s: float) -> tuple:
    """``ops`` with ``host_s`` seconds spread over them in proportion to their work (``Op.host_s``), each
    copy of a weighted op (``Op.weight``) its share, so the copies' host times sum to ``host_s``."""
    if not ops:
        return ()
    total = sum(op.weight * _work(op) for op in ops)
    if total <= 0:
        copies = sum(op.weight for op in ops)
        return tuple(replace(op, host_s=host_s / copies) for op in ops)
    return tuple(replace(op, host_s=host_s * _work(op) / total) for op in ops)


def block_param_tensors(model: Any, moe: bool = False) -> float:
    """Parameter tensors of one block as Megatron lays them out: the QKV, output, MLP-up (gate and up
    fused) and MLP-down weights, their biases with ``linear_bias`` (the QKV's with ``qkv_bias``), two norms (four with
    ``sandwich_norm``; weight, and bias for a biased LayerNorm) and the QK-norms; a hybrid's average block
    without (``moe`` False) or with an MoE layer (``workload.hybrid_ops``) its layer kinds' tensors over those
    blocks, an MoE layer counted as an MLP layer (``moe_host.param_tensors`` replaces its two linears)."""
    linears = 4 + (4 if model.linear_bias else int(model.has_qkv_bias))
    norm = 2 if (model.norm == "layernorm" and model.linear_bias) else 1
    dense = linears + model.block_norms * norm + (2 * norm if model.qk_norm else 0)
    if not model.is_hybrid:
        return dense
    # a hybrid's average block: an MLP layer's two linears (and biases) and norm, an attention layer the rest of
    # the dense block; a Mamba layer's input and output projections, its pre-norm, the convolution's weight and
    # bias, dt_bias, A_log, D and the gated norm's weight (Megatron-Core ``MambaMixer``)
    n, c = model.hybrid_class_counts(moe)
    mlp = 2 + (2 if model.linear_bias else 0) + norm
    return (c["M"] * (8 + norm) + c["*"] * (dense - mlp) + (c["-"] + c["E"]) * mlp) / max(1, n)


def pytorch_fsdp_version(par: Any) -> int:
    """``parallel.fsdp_version`` when the run is PyTorch FSDP, else 0: Megatron-FSDP (``framework: fsdp`` with
    ``gradient_reduce_div_fusion`` set, its Megatron-Core switch; None is PyTorch FSDP's behaviour) runs its own
    bucketed hooks, which ``benchmarks/host_dispatch_fsdp.py`` does not measure."""
    torch_fsdp = par.framework == "fsdp" and getattr(par, "gradient_reduce_div_fusion", None) is None
    return par.fsdp_version if torch_fsdp else 0


def fsdp_unit_ops(fsdp_version: int) -> tuple[tuple, tuple]:
    """The host-only ops of one FSDP unit's hooks (``FSDP_UNIT_HOST``), forward and backward: no GPU work
    of their own (the gathers, reductions and copies are priced by ``simulator.parallel.fsdp``), so they
    count against the block's host time, compiled or not. ``fsdp_version`` 0: not FSDP, none."""
    if not fsdp_version:
        return (), ()
    ref_f, ref_b = BLOCK_HOST_S["llama"]
    frac_f, frac_b = FSDP_UNIT_HOST[fsdp_version]
    unit = Op("fsdp_unit", "memory", 0.0, 0.0, launches=0, host_s=frac_f * ref_f)
    return (unit,), (replace(unit, name="fsdp_unit.bwd", host_s=frac_b * ref_b),)


def attach(fwd: list, recompute: tuple, bwd: tuple, model: Any, kernels: Any,
           framework: str, fsdp_version: int = 0, fp8: str | None = None,
           te_share: float = 1.0) -> tuple[tuple, tuple, tuple]:
    """The block's forward, recompute and backward ops with their host time (compiled blocks keep the
    per-kernel dispatch, ``Op.host_s`` None).
    Recomputation re-runs the forward code: each recomputed op carries its forward op's share. Under a
    ``HOOKED_FRAMEWORKS`` engine the backward also runs ``GRAD_HOOK_S`` per parameter tensor; an op with
    ``extra_host_calls`` (Megatron's softmax fallback) adds them at the block's per-call time each way. CUDA
    graphs (``training.kernels.cuda_graphs``) take their scopes' share off the block's host time
    (``eager_share``); the gradient hooks stay (they run on the parameters' AccumulateGrad nodes, outside
    the captured graph). Under FSDP (``fsdp_version`` 1 or 2) the forward starts and the backward ends with
    the unit's hooks (``fsdp_unit_ops``); recomputation runs inside the unit and does not repeat them.
    Megatron-Core's layer code costs ``mcore_scale`` times the rebuild's (under the FP8 recipe ``fp8``, Transformer
    Engine's share weighted by ``te_share``), and its MLA attention ``mla_host_s`` more."""
    unit_f, unit_b = fsdp_unit_ops(fsdp_version)
    style = block_style(model, kernels)
    if style is None:
        return unit_f + tuple(fwd), recompute, tuple(bwd) + unit_b
    fwd_s, bwd_s = BLOCK_HOST_S[style]
    # ops whose code makes more calls than the reference block's (Op.extra_host_calls), and their autograd nodes
    extra = sum(op.extra_host_calls for op in fwd) * HOST_PER_CALL_S[style]
    code_f, code_b = mcore_scale(model, kernels, framework, "dense", fp8, te_share)
    mla_f, mla_b = mla_host_s(model, kernels, framework)
    fwd_s = (fwd_s + extra) * eager_share(kernels, 0, model) * code_f + mla_f
    bwd_s = (bwd_s + extra) * eager_share(kernels, 1, model) * code_b + mla_b
    if framework in HOOKED_FRAMEWORKS:
        bwd_s += GRAD_HOOK_S * block_param_tensors(model)
    fwd_t = spread(fwd, fwd_s)
    by_name = {op.name: op.host_s for op in fwd_t}
    redo = tuple(replace(op, host_s=by_name.get(op.name.removeprefix("recompute."), 0.0)) for op in recompute)
    return unit_f + fwd_t, redo, spread(bwd, bwd_s) + unit_b
