"""Megatron-LM's mixture-of-experts and multi-token-prediction arguments ↔ ``model.moe``,
``model.mtp_layers`` and the expert-parallel keys of ``parallel`` (read by ``megatron.import_args``,
written by ``megatron_export.export_args``). Flag names and defaults: Megatron-LM
``megatron/training/arguments.py`` ``_add_moe_args`` and ``_add_mtp_args``:

* ``--num-experts`` (routed experts; none = dense), ``--moe-router-topk`` (default 2),
  ``--moe-ffn-hidden-size`` (default ``--ffn-hidden-size``), ``--moe-shared-expert-intermediate-size``
  (one shared expert module of that width), ``--moe-layer-freq`` (an integer ``N``: blocks ``0, N, 2N, …``
  have experts; or a list expression such as ``([0]*3+[1]*58)``), ``--moe-expert-capacity-factor``
  (token dropping; ``model.moe.capacity_factor``), ``--moe-router-force-load-balancing`` (balanced
  routing for benchmarks: ``model.moe.imbalance`` 1), ``--moe-router-padding-for-quantization`` (named
  ``--moe-router-padding-for-fp8`` before Megatron-Core 0.14; ``model.moe.router_padding_for_fp8``: no
  Fp8Padding copies around the experts), ``--moe-latent-size`` (LatentMoE: ``model.moe.latent_size``);
* ``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``, ``--moe-token-dispatcher-type``
  (``alltoall``; ``flex`` with ``--moe-enable-deepep`` or ``--moe-flex-dispatcher-backend deepep`` /
  ``hybridep``: ``parallel.moe_dispatcher: deepep``; ``allgather`` is not simulated),
  ``--overlap-moe-expert-parallel-comm`` (``parallel.moe_a2a_overlap``), ``--moe-shared-expert-overlap``;
* ``--mtp-num-layers`` (``model.mtp_layers``).

Routing numerics and kernel switches (aux-loss coefficients, score function, router dtype, grouped GEMM,
permute and router fusion) change neither FLOPs nor bytes: listed as ignored with that reason. So are the
2026 recipes' (Megatron-LM ``examples/moe_recipes``) paged stash, which only makes the dropless layer's shapes
static for full-iteration CUDA graphs, Transformer Engine's fused grouped-MLP path and the combined 1F1B's
delayed weight gradients, each with its own reason (``IGNORED``).
"""

from __future__ import annotations

import ast

from simulator.errors import InputError
from simulator.interop.common import Imported, as_float

FIELD = "megatron"
VALUE_FLAGS = (
    "num-experts", "moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
    "moe-layer-freq", "moe-expert-capacity-factor", "expert-model-parallel-size", "expert-tensor-parallel-size",
    "moe-token-dispatcher-type", "moe-flex-dispatcher-backend", "mtp-num-layers", "moe-latent-size",
)
#: The router's padding of each expert's tokens to the quantized GEMMs' row alignment, old and new name.
ROUTER_PADDING_FLAGS = ("moe-router-padding-for-fp8", "moe-router-padding-for-quantization")
BOOL_FLAGS = ("moe-router-force-load-balancing", "moe-enable-deepep", "overlap-moe-expert-parallel-comm",
              "moe-shared-expert-overlap") + ROUTER_PADDING_FLAGS
IGNORED = ((("moe-grouped-gemm", "moe-permute-fusion", "moe-router-fusion", "moe-aux-loss-coeff", "moe-z-loss-coeff",
            "moe-router-load-balancing-type", "moe-router-score-function", "moe-router-dtype",
            "moe-router-pre-softmax", "moe-router-bias-update-rate", "moe-router-enable-expert-bias",
            "moe-router-topk-scaling-factor", "moe-router-num-groups", "moe-router-group-topk",
            "moe-token-drop-policy", "moe-pad-expert-input-to-capacity", "moe-input-jitter-eps",
            "moe-per-layer-logging", "moe-use-legacy-grouped-gemm", "mtp-loss-scaling-factor",
            "moe-hybridep-num-sms", "moe-deepep-num-sms"),
           "MoE routing numerics or kernel choice: same FLOPs and bytes (load balance is model.moe.imbalance)"),
           (("moe-paged-stash", "moe-paged-stash-", "moe-expert-rank-capacity-factor",
             "moe-pad-experts-for-cuda-graph-inference"),
            "paged stash: the dropless layer's tokens kept in fixed-size device buffers so that its shapes are "
            "static and full-iteration CUDA graphs capture it (their time model is training.kernels.cuda_graphs; "
            "with balanced routing no rank exceeds its buffer); the buffers' memory is not modelled"),
           (("use-transformer-engine-op-fuser", "moe-mlp-glu-interleave-size"),
            "Transformer Engine's op fuser for the experts' MLP: it runs the fused grouped MLP only with "
            "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 in the environment, which the arguments do not show; if the launch set "
            "it, add --set training.kernels.fused_grouped_mlp=true"),
           (("delay-wgrad-compute",),
            "the combined 1F1B's order of the experts' weight-gradient GEMMs (parallel.moe_a2a_overlap already "
            "overlaps each all-to-all with the paired micro-batch's compute): same FLOPs and bytes"))
DEEPEP_BACKENDS = ("deepep", "hybridep")


def layer_pattern(text: str, n_layers: int) -> tuple[int, int]:
    """``--moe-layer-freq`` → (``first_dense_layers``, ``layer_interval``): an integer ``N`` (blocks
    ``0, N, 2N, …``), or a list expression of 0/1 per block built from ``[..]``, ``*`` and ``+`` whose
    pattern is some dense blocks first, then an expert block every ``k``-th."""
    text = text.strip().strip("'\"")  # launch scripts often quote it twice for their shell
    if text.isdigit():
        return 0, int(text)
    try:
        pattern = _evaluate(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, TypeError):
        raise InputError(f"--moe-layer-freq {text!r}: give an integer or a list expression such as "
                         "([0]*3+[1]*58)", FIELD) from None
    if len(pattern) != n_layers or set(pattern) - {0, 1} or 1 not in pattern:
        raise InputError(f"--moe-layer-freq {text!r}: a 0/1 list of --num-layers ({n_layers}) entries with at "
                         "least one 1", FIELD)
    first = pattern.index(1)
    moe = [i for i, v in enumerate(pattern) if v]
    interval = moe[1] - moe[0] if len(moe) > 1 else 1
    if any(v != ((i - first) % interval == 0) for i, v in enumerate(pattern) if i >= first):
        raise InputError(f"--moe-layer-freq {text!r}: dtsim places experts in every k-th block after the "
                         "first dense ones (model.moe.first_dense_layers, layer_interval)", FIELD)
    return first, interval


def _evaluate(node: ast.AST) -> list[int]:
    """A list expression of integer literals, ``*`` by an integer and ``+`` (no names, no calls)."""
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(node.left) + _evaluate(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _evaluate(node.left) * _literal(node.right)
    raise ValueError("not a list expression")


def _literal(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    raise ValueError("not an integer")


def import_moe(flags: dict, integer, out: Imported) -> None:
    """The MoE, MTP and expert-parallel keys of ``flags`` into ``out`` (module docstring)."""
    mtp = integer("mtp-num-layers")
    if mtp:
        out.set("model.mtp_layers", mtp)
    experts = integer("num-experts")
    moe_only = [f for f in ("moe-router-topk", "moe-ffn-hidden-size", "expert-model-parallel-size") if f in flags]
    if experts is None:
        if moe_only:
            raise InputError(f"--{moe_only[0]} needs --num-experts (the routed experts)", FIELD)
        return
    out.set("model.moe.n_experts", experts)
    out.set("model.moe.top_k", integer("moe-router-topk") or 2)
    out.set("model.moe.expert_ffn_hidden_size", integer("moe-ffn-hidden-size") or out.raw["model"]["ffn_hidden_size"])
    shared = integer("moe-shared-expert-intermediate-size")
    if shared:
        out.set("model.moe.n_shared_experts", 1)
        out.set("model.moe.shared_expert_ffn_hidden_size", shared)
    latent = integer("moe-latent-size")
    if latent is not None:  # 0 reaches the model check, which names the key
        out.set("model.moe.latent_size", latent)
    freq = flags.get("moe-layer-freq")
    if isinstance(freq, str):
        first, interval = layer_pattern(freq, out.raw["model"]["n_layers"])
        out.set("model.moe.first_dense_layers", first)
        out.set("model.moe.layer_interval", interval)
    capacity = flags.get("moe-expert-capacity-factor")
    if isinstance(capacity, str):
        out.set("model.moe.capacity_factor", as_float(capacity, "--moe-expert-capacity-factor"))
    if flags.get("moe-router-force-load-balancing"):
        out.set("model.moe.imbalance", 1.0)
    if any(flags.get(flag) for flag in ROUTER_PADDING_FLAGS):
        out.set("model.moe.router_padding_for_fp8", True)
    ep, etp = integer("expert-model-parallel-size"), integer("expert-tensor-parallel-size")
    for key, value in (("ep", ep), ("etp", etp)):
        if value:
            out.set(f"parallel.{key}", value)
    dispatcher = flags.get("moe-token-dispatcher-type", "allgather")
    if dispatcher == "allgather" and ep not in (None, 1):
        raise InputError("--moe-token-dispatcher-type allgather (Megatron-LM's default) is not simulated with "
                         "expert parallelism: give alltoall or flex", FIELD)
    if dispatcher == "flex" and (flags.get("moe-enable-deepep") or flags.get("moe-flex-dispatcher-backend")
                                 in DEEPEP_BACKENDS):
        out.set("parallel.moe_dispatcher", "deepep")
    for flag, key in (("overlap-moe-expert-parallel-comm", "moe_a2a_overlap"),
                      ("moe-shared-expert-overlap", "moe_shared_expert_overlap")):
        if flags.get(flag):
            out.set(f"parallel.{key}", True)


def export_moe(s) -> list[str]:
    """The Megatron-LM flags of ``s``'s experts, expert parallelism and MTP modules."""
    m, par = s.model, s.parallel
    lines = [f"--mtp-num-layers {m.mtp_layers}"] if m.mtp_layers else []
    moe = m.moe
    if moe is None:
        return lines
    lines += [f"--num-experts {moe.n_experts}", f"--moe-router-topk {moe.top_k}",
              f"--moe-ffn-hidden-size {moe.expert_ffn_hidden_size}", "--moe-grouped-gemm"]
    if moe.n_shared_experts:
        lines.append(f"--moe-shared-expert-intermediate-size {moe.n_shared_experts * moe.shared_width}")
    if moe.first_dense_layers == 0 and moe.layer_interval > 1:
        lines.append(f"--moe-layer-freq {moe.layer_interval}")
    elif moe.first_dense_layers:
        pattern = [int(i >= moe.first_dense_layers and (i - moe.first_dense_layers) % moe.layer_interval == 0)
                   for i in range(m.n_layers)]
        lines.append(f"--moe-layer-freq {_pattern_text(pattern)!r}")
    if moe.latent_size:
        lines.append(f"--moe-latent-size {moe.latent_size}")
    if moe.capacity_factor is not None:
        lines.append(f"--moe-expert-capacity-factor {moe.capacity_factor:g}")
    if moe.imbalance == 1.0:
        lines.append("--moe-router-force-load-balancing")
    if moe.router_padding_for_fp8:
        lines.append("--moe-router-padding-for-fp8")
    lines += [f"--expert-model-parallel-size {par.ep}", f"--expert-tensor-parallel-size {par.etp}"]
    if getattr(par, "moe_dispatcher", "alltoall") == "deepep":
        lines += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    else:
        lines.append("--moe-token-dispatcher-type alltoall")
    if getattr(par, "moe_a2a_overlap", False):
        lines.append("--overlap-moe-expert-parallel-comm")
    if getattr(par, "moe_shared_expert_overlap", False):
        lines.append("--moe-shared-expert-overlap")
    if s.training.kernels.fused_grouped_mlp:  # the launch also sets NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (docs/interop.md)
        lines.append("--use-transformer-engine-op-fuser")
        if m.gated_mlp:  # the fused GLU kernel reads gate and up interleaved in blocks of 32 (Megatron-Bridge)
            lines.append("--moe-mlp-glu-interleave-size 32")
    return lines


def _pattern_text(pattern: list[int]) -> str:
    """``[0,0,1,1,1]`` → ``([0]*2+[1]*3)``: runs of equal entries."""
    runs: list[tuple[int, int]] = []
    for v in pattern:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    return "(" + "+".join(f"[{v}]*{n}" for v, n in runs) + ")"
