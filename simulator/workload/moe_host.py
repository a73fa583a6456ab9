"""Host (CPU) time of an eager MoE block: the attention half, the router and token dispatcher, the experts.

The dense blocks' host model (``simulator.workload.host``) gives an eager block's CPU time from a
reference block rebuilt in plain PyTorch. An MoE block is not that block: in Megatron-Core its MLP slot
is ``MoELayer``, the router (gating GEMM, top-k, auxiliary loss), the alltoall token dispatcher
(tokens per expert, split sizes copied to the host, permute, all-to-alls, the sort by local expert)
and ``TEGroupedMLP``, whose Transformer Engine ``GroupedLinear`` splits its input and issues one GEMM
per local expert (TE ``general_grouped_gemm`` → ``nvte_multi_stream_cublas_gemm``, a C++ loop; per
expert one data- and one weight-gradient GEMM backward, and one input quantize each way in FP8;
TE issue #1499: the grouped path's cost over a single GEMM is "the CPU overheads of PyTorch ops, such
as torch.split() and torch.empty() (2x num_gemms calls)"). Its host time grows with the local experts.

Measured by ``python benchmarks/host_dispatch_moe.py`` (the method of ``benchmarks/host_dispatch.py``:
the layer rebuilt after Megatron-Core 0.13-0.15 with the fusions NVIDIA's MoE recipes turn on,
``moe_router_fusion``, ``moe_permute_fusion``, ``moe_grouped_gemm``; torch 2.13 on tiny CPU tensors,
min over a 24-layer stack and three rounds, 1-32 local experts, Theil-Sen line), as fractions of the
``megatron-flash`` reference block's host time measured in the same run, so they apply to
``host.BLOCK_HOST_S`` whatever the machine's speed (2 December 2026):

=========================================  ====================  ====================
piece (intercept + slope × local experts)  forward               backward
=========================================  ====================  ====================
attention half (``host.ATTENTION_HALF``)   0.464                 0.376
router and dispatch (``pre``)              0.759 + 0.0055 e      0.167 + 0.0034 e
experts                                    0.357 + 0.0397 e      0.289 + 0.0597 e
combine (``post``)                         0.161 + 0.0015 e      0.037 + 0.0007 e
FP8 experts' quantize, extra               + 0.0140 e            + 0.0114 e
=========================================  ====================  ====================

(the reference block: 323 µs forward, 400 µs backward in that run; 16 local experts add 0.64 of its
forward and 0.96 of its backward; the FP8 row is the difference of the FP8 and 16-bit slopes). Of the
forward ``pre``, 0.53 is the router with the pre-MLP norm and 0.14 the dispatcher's preprocessing (the
same at 1-32 experts): the shares that CUDA graphs of scope ``moe_router`` and ``moe_preprocess`` take
off (``training.kernels.cuda_graphs``; the router's share off the backward ``pre`` too, the
preprocessing has no backward). ``attn`` takes the attention half off (a hybrid's MoE block: its attention or Mamba layer, ``mamba`` the latter;
``host.mixer_share``), ``moe`` the whole MoE slot (router,
dispatcher, experts and combine, with the shared experts and GPT-OSS's eager extras), ``full_iteration``
everything.
A block with shared experts adds the reference block's MLP half (1 − the attention half) for them.
The table is the rebuild's; Megatron-Core's own code, run on the CPU by ``python
benchmarks/host_dispatch_mcore.py``, costs ``host.MCORE_HOST["moe"]`` times it outside the experts (1.76
forward, 1.99 backward), which multiplies every piece but the experts (and their clamp and bias loop)
under Megatron-Core (``host.mcore_scale``, with Transformer Engine's modules' ``host.TE_HOST``). Its
experts, ``TEGroupedMLP`` on TE's ``GroupedLinear``, add ``TE_EXPERTS`` to the table's experts: ``python
benchmarks/host_dispatch_te.py`` runs TE 2.12's Python (its C++/CUDA extension stood in for by the ATen
calls its C++ makes) against the rebuild's stand-in at 2-16 local experts, BF16 (per-expert lists,
quantizer-usage loops, the per-expert weight-gradient bookkeeping backward; TE's FP8 quantizers do not run
there, so FP8 experts keep only the table's extra quantize slope).
An MLA block's attention adds ``host.mla_host_s`` (measured the same way) to the attention half.

Where the host time goes: spread over the block's ops in proportion to their work, forward and backward,
as for a dense block (``host.spread``), so the block is host-bound exactly when its host time exceeds its
GPU time. A dropless dispatcher synchronises the CPU with the GPU in every MoE layer's forward
(Megatron-Core ``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize``: the all-to-all needs its split
sizes on the host; skipped only with a capacity factor and ``moe_pad_expert_input_to_capacity``). The
CPU's lead over the GPU then restarts in every layer, so host and GPU time balance per layer and not
over the whole step: what per-block spreading gives (dtsim balances them per block for dense blocks
too). The same fractions apply to the other eager reference blocks (``host.block_style``); compiled
blocks keep the per-kernel dispatch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.workload import host as whost
from simulator.workload import ops as wops

#: Per piece, (intercept, slope per local expert) as fractions of the reference block's forward host
#: time, then of its backward; 16-bit GroupedLinear (module table).
PIECES: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "pre": ((0.759, 0.0055), (0.167, 0.0034)),
    "experts": ((0.357, 0.0397), (0.289, 0.0597)),
    "post": ((0.161, 0.0015), (0.037, 0.0007)),
}
#: What Transformer Engine's ``TEGroupedMLP`` adds to the experts' piece under Megatron-Core, (intercept, slope
#: per local expert) as fractions of the reference block, forward then backward (module docstring; torch 2.13,
#: TE 2.12, Megatron-Core 0.16.1, 6 December 2026, median of three runs: forward 0.296 / 0.290 / 0.300 +
#: 0.0258 / 0.0257 / 0.0175 e, backward 0.181 / 0.190 / 0.188 + 0.0292 / 0.0326 / 0.0269 e; at 16 experts
#: 489-574 / 749-871 against the stand-in's 316-355 / 514-576 µs).
TE_EXPERTS: tuple[tuple[float, float], tuple[float, float]] = ((0.296, 0.0257), (0.188, 0.0292))
#: What FP8 adds to ``TEGroupedMLP`` over its BF16 self, per Transformer Engine recipe, (intercept, slope per local
#: expert) forward then backward in reference-block units: per expert and ``GroupedLinear`` call a quantized
#: tensor built for its input (``split_quantize``) and, backward, for its output gradient, with their kernels;
#: ``Fp8Padding`` / ``Fp8Unpadding`` (``python benchmarks/host_dispatch_te.py``, ``host.TE_FP8_HOST``; median
#: of three runs, Theil-Sen over 2-16 experts: delayed 0.443 / 0.419 / 0.258 + 0.1281 / 0.1466 / 0.1171 e and
#: 0.153 / 0.164 / 0.071 + 0.0927 / 0.0882 / 0.0820 e; current 0.294 / 0.449 / 0.388 + 0.1769 / 0.1470 / 0.1262 e
#: and 0.111 / 0.152 / 0.153 + 0.1227 / 0.1098 / 0.0953 e; MXFP8 0.498 / 0.616 / 0.277 + 0.1866 / 0.1857 /
#: 0.1950 e and 0.171 / 0.238 / 0.075 + 0.1561 / 0.1544 / 0.1595 e; at 16 experts 1,203-1,688 / 1,337-1,883
#: against 542-642 / 815-943 µs in BF16).
TE_FP8_EXPERTS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "delayed": ((0.419, 0.1281), (0.153, 0.0882)),
    "current": ((0.388, 0.1470), (0.152, 0.1098)),
    "mxfp8": ((0.498, 0.1866), (0.171, 0.1561)),
}
TE_FP8_EXPERTS["nvfp4"] = TE_FP8_EXPERTS["mxfp8"]  # NVFP4 not run on the CPU: MXFP8's (``host.TE_FP8_HOST``, U)
#: Shares of ``pre``'s forward host time in the router (with the pre-MLP norm) and in the preprocessing.
ROUTER_SHARE, PREPROCESS_SHARE = 0.53, 0.14
#: The experts' extra slope under FP8 (the per-expert input / gradient quantize), forward and backward, in the
#: rebuild (experts other than Megatron-Core's ``TEGroupedMLP``, which has ``TE_FP8_EXPERTS``).
FP8_EXPERT_SLOPE = (0.0140, 0.0114)
#: Eager code of GPT-OSS's blocks beyond the module table's layer, as what it adds in (intercept, slope
#: per local expert) fractions of the reference block, forward then backward: ``python
#: benchmarks/host_dispatch_gptoss.py`` (torch 2.13, 3 December 2026, min of 5 rounds; the reference
#: block 339 µs forward and 437 µs backward in that run; repeated runs on the shared 2-core development
#: machine scatter by about 20%; 2.9-3.5 µs per ATen call). ``yarn_rope``: Megatron-Core's eager YaRN on q and k
#: over the fused RoPE (24 calls forward, 20 backward; part of the attention half, which the ``attn``
#: CUDA graph captures); ``geglu_clamp``: the clamped SwiGLU's chunk, clamps, ``cat`` and offset tensor
#: (7 / 13, before the activation); ``expert_bias``: ``TEGroupedMLP._apply_bias``'s loop over the local
#: experts (2e + 5 / 5e + 3 calls, Theil-Sen line over 1-32 experts; after the activation).
EXTRAS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "yarn_rope": ((0.215, 0.0), (0.144, 0.0)),
    "geglu_clamp": ((0.070, 0.0), (0.079, 0.0)),
    "expert_bias": ((0.056, 0.0272), (0.019, 0.0333)),
}
#: Share of the experts piece's host time issued before its activation (the ``tokens_per_expert`` list,
#: the probabilities' view and fc1): fc1 and fc2 are the same ``GroupedLinear`` call, the activation one
#: autograd function between them, so half.
FC1_SHARE = 0.5


def param_tensors(model: Any, local_experts: int) -> int:
    """Parameter tensors of one MoE block as Megatron-Core lays them out: QKV and output (and their
    biases), the norms, the router, each local expert's fc1 and fc2 (``GroupedLinear`` keeps one weight
    per expert, and one bias with ``linear_bias``) and the shared experts' two weights."""
    per_linear = 2 if model.linear_bias else 1
    shared = 2 if model.moe.n_shared_experts else 0
    return whost.block_param_tensors(model, True) - 2 * per_linear + 1 + 2 * local_experts * per_linear + shared


def _host(piece: str, way: int, local_experts: int, fp8: str | None, scopes: frozenset[str], code: float = 1.0,
          te: float = 0.0) -> float:
    """``piece``'s eager host time in reference-block units (module table), less what the CUDA-graph
    ``scopes`` capture (``host.graphed``, where ``full_iteration`` includes ``moe``); outside the experts
    times ``code``, Megatron-Core's code over the rebuild's (``host.mcore_scale``); the experts plus
    ``TE_EXPERTS`` times ``te`` where non-zero (Megatron-Core's ``TEGroupedMLP``, ``te`` its ``host.te_share``),
    and ``TE_FP8_EXPERTS`` under its FP8 recipe ``fp8``; other FP8 experts the rebuild's ``FP8_EXPERT_SLOPE``."""
    if "moe" in scopes:  # the whole MoE slot replays as graphs
        return 0.0
    a, slope = PIECES[piece][way]
    if piece == "experts" and te:
        (te_a, te_slope), (fp8_a, fp8_slope) = TE_EXPERTS[way], TE_FP8_EXPERTS.get(fp8, ((0.0, 0.0),) * 2)[way]
        a, slope = a + (te_a + fp8_a) * te, slope + (te_slope + fp8_slope) * te
    elif piece == "experts" and fp8:
        slope += FP8_EXPERT_SLOPE[way]
    eager = 1.0 if piece == "experts" else code
    if piece == "pre":
        eager -= code * (ROUTER_SHARE * ("moe_router" in scopes)
                         + PREPROCESS_SHARE * ("moe_preprocess" in scopes) * (way == 0))
    return (a + slope * local_experts) * eager


def _spread(pieces: tuple, seconds: float) -> tuple:
    """``pieces`` (tuples of ops) with ``seconds`` of host time spread over all their ops by work."""
    flat = whost.spread([op for p in pieces for op in p], seconds)
    out, i = [], 0
    for p in pieces:
        out.append(tuple(flat[i:i + len(p)]))
        i += len(p)
    return tuple(out)


def _extras(model: Any, kernels: Any, way: int, local_experts: int, scopes: frozenset[str],
            code: float = 1.0) -> dict[str, float]:
    """The ``EXTRAS`` of this block's code in reference-block units (``way`` 0 forward, 1 backward), less
    what the CUDA-graph ``scopes`` capture (the clamp and the bias loop are the experts' code, the RoPE
    the attention's, which costs ``code`` times the rebuild's; the fused grouped MLP runs neither as code:
    ``workload.fused_grouped_mlp``)."""
    slot = "moe" not in scopes and not kernels.fused_grouped_mlp
    present = {"yarn_rope": wops.megatron_eager_yarn(model, kernels) and "attn" not in scopes,
               "geglu_clamp": bool(model.swiglu_limit) and slot, "expert_bias": bool(model.linear_bias) and slot}
    return {k: (EXTRAS[k][way][0] + EXTRAS[k][way][1] * local_experts) * (code if k == "yarn_rope" else 1.0)
            for k, on in present.items() if on}


def forward(ops: Any, model: Any, kernels: Any, framework: str, local_experts: int, fp8: str | None,
            te_share: float = 1.0) -> Any:
    """``ops`` (``moe_ops.MoEBlockOps``) with the block's forward host time spread over them by work
    (module docstring); unchanged when the block is compiled.

    A block that synchronises a second time, in its experts (``MoEBlockOps.sync_at``: the clamped
    SwiGLU's offset tensor), balances host and GPU per stretch between two synchronisations instead of per
    block: the stretch from the dispatcher's synchronisation to the activation's (the rest of ``pre``
    after the router and the preprocessing, and the experts up to the activation: ``FC1_SHARE`` of their
    host time, and the clamp's) and the stretch from the activation to the next block's dispatcher (the
    rest). Each stretch's host time is spread over its own ops by work, so each is host-bound exactly when
    its host time exceeds its GPU time (the engine runs the experts as two tasks, ``MoEWork.experts_sync``);
    the synchronisation's own latency (tens of µs) is left out."""
    style = whost.block_style(model, kernels)
    if style is None:
        return ops
    ref, scopes = whost.BLOCK_HOST_S[style][0], whost.graphed(kernels)
    code = whost.mcore_scale(model, kernels, framework, "moe", fp8, te_share)[0]
    te = te_share * whost.is_megatron_core(model, kernels, framework)
    extras = _extras(model, kernels, 0, local_experts, scopes, code)
    seconds = (whost.mixer_share(model, scopes, 0) * code + sum(extras.values())
               + sum(_host(p, 0, local_experts, fp8, scopes, code, te) for p in PIECES))
    if ops.shared and "moe" not in scopes:
        seconds += (1 - whost.ATTENTION_HALF[0]) * code
    mla = whost.mla_host_s(model, kernels, framework)[0]  # the attention's, before the synchronisation
    if not ops.sync_at or "moe" in scopes:
        pre, experts, shared, post = _spread((ops.pre, ops.experts, ops.shared, ops.post), seconds * ref + mla)
        return replace(ops, pre=pre, experts=experts, shared=shared, post=post)
    # the router and the preprocessing come before the dispatcher's synchronisation, graphed or not
    between = (_host("pre", 0, local_experts, fp8, frozenset(), code) * (1 - ROUTER_SHARE - PREPROCESS_SHARE)
               + FC1_SHARE * _host("experts", 0, local_experts, fp8, scopes, te=te) + extras.get("geglu_clamp", 0.0))
    # DeepEP's dispatch has no permute before it: its synchronisation follows the whole pre piece
    cut = next((i for i, op in enumerate(ops.pre) if op.name == "permute"), len(ops.pre))
    (pre_a, ex_b, shared, post), (pre_b, ex_a) = (
        _spread((ops.pre[:cut], ops.experts[ops.sync_at:], ops.shared, ops.post), (seconds - between) * ref + mla),
        _spread((ops.pre[cut:], ops.experts[:ops.sync_at]), between * ref))
    return replace(ops, pre=pre_a + pre_b, experts=ex_a + ex_b, shared=shared, post=post)


def backward(bwd: tuple, model: Any, kernels: Any, framework: str, local_experts: int, fp8: str | None,
             te_share: float = 1.0) -> tuple:
    """The block's backward pieces (pre, experts, shared, post) with the backward host time spread over
    their ops by work; recomputed ops keep their forward op's share. Under a
    ``host.HOOKED_FRAMEWORKS`` engine the backward also runs ``host.GRAD_HOOK_S`` per parameter tensor."""
    style = whost.block_style(model, kernels)
    if style is None:
        return bwd
    ref, scopes = whost.BLOCK_HOST_S[style][1], whost.graphed(kernels)
    code = whost.mcore_scale(model, kernels, framework, "moe", fp8, te_share)[1]
    te = te_share * whost.is_megatron_core(model, kernels, framework)
    total = (whost.mixer_share(model, scopes, 1) * code
             + sum(_extras(model, kernels, 1, local_experts, scopes, code).values())
             + sum(_host(p, 1, local_experts, fp8, scopes, code, te) for p in PIECES)) * ref
    if bwd[2] and "moe" not in scopes:
        total += (1 - whost.ATTENTION_HALF[1]) * code * ref
    total += whost.mla_host_s(model, kernels, framework)[1]
    if framework in whost.HOOKED_FRAMEWORKS:
        total += whost.GRAD_HOOK_S * param_tensors(model, local_experts)
    own = tuple(tuple(op for op in p if not op.name.startswith("recompute.")) for p in bwd)
    placed = _spread(own, total)
    out = []
    for piece, new in zip(bwd, placed, strict=True):
        it = iter(new)
        out.append(tuple(op if op.name.startswith("recompute.") else next(it) for op in piece))
    return tuple(out)
