"""Host (CPU) time of Transformer Engine's modules in Megatron-Core's layer, over its local modules.

NeMo, Megatron-Bridge and Megatron-LM run Megatron-Core's ``TransformerLayer`` with Transformer Engine's
modules (``get_gpt_layer_with_transformer_engine_spec``: ``TELayerNormColumnParallelLinear``,
``TERowParallelLinear``, ``TENorm``, and ``TEGroupedMLP`` on TE's ``GroupedLinear`` for the experts).
``benchmarks/host_dispatch_mcore.py`` measures the local spec (Megatron-Core's own linears and norms) against
dtsim's plain-PyTorch rebuilds. This script runs TE's own Python on the CPU (``benchmarks/te_cpu.py``
stands in for its C++/CUDA extension: each extension call the ATen calls its C++ makes around its kernel),
in the same process and on the same tensors as that script, and prints, forward and backward:

* dense: the TE-spec layer over the local-spec layer (both with the one-call core attention);
* MoE outside the experts: the same for an MoE layer (attention half, ``TENorm``, router, dispatcher,
  combine), the experts the rebuild's stand-in on both sides and subtracted (as ``host_dispatch_mcore``);
* experts: ``TEGroupedMLP`` (TE ``GroupedLinear`` fc1 and fc2, BF16, Megatron-Core's expert code, the
  weighted SwiGLU one call as in the rebuild) against the rebuild's ``TEGroupedMLP`` stand-in at 2-16 local
  experts: the host time TE adds, as a Theil-Sen line (intercept + slope per local expert) in fractions of
  the rebuild's ``megatron-flash`` reference block timed in the same run;
* Grace: a ``te.Linear`` forward over a ``torch.nn.Linear`` one, the excess at dtsim's x86 reference block,
  and the Grace factor for TE's share it gives with TransformerEngine issue #2053's GB200 figures
  (``HostConfig.te_dispatch_scale``);
* FP8, per Transformer Engine recipe (delayed, current scaling, MXFP8; ``benchmarks/te_cpu_fp8.py`` stands in
  for the quantizers' extension calls): the dense layer and the MoE layer outside its experts over their
  BF16 selves, and what FP8 adds to ``TEGroupedMLP`` (a line in reference-block fractions as above).

Setup (a separate virtualenv; no GPU): ``pip install torch megatron-core==0.16.1 pydantic einops`` and
``pip install --no-deps --target DIR transformer-engine==2.12.0`` (the pure-Python wheel; 2.12 is the
release of Megatron-Core 0.16's containers); run ``python benchmarks/host_dispatch_te.py --te DIR``
(about 2.5 minutes). Results (torch 2.13.0+cpu, the 2-core development machine, 6 December 2026): see
``simulator.workload.host.TE_HOST`` / ``TE_FP8_HOST`` and ``simulator.workload.moe_host.TE_EXPERTS`` /
``TE_FP8_EXPERTS``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--te", required=True, help="directory holding transformer_engine's Python (pip --target)")
    return ap.parse_args()


ARGS = _args() if __name__ == "__main__" else None
if ARGS is not None:
    sys.path.insert(0, ARGS.te)

import te_cpu  # noqa: E402, F401  (before Megatron-Core, which imports Transformer Engine if it can)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from host_dispatch import MegatronLayer, host_time  # noqa: E402
from host_dispatch_mcore import LAYERS, REPEATS, ROUNDS, TOKENS, _CoreAttention, _Experts, real_layer  # noqa: E402
from host_dispatch_moe import FFN, HIDDEN, _line, _min_rounds, _WeightedSwiGLU  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec  # noqa: E402
from megatron.core.transformer.moe import experts as mcore_experts  # noqa: E402
from megatron.core.transformer.moe.moe_layer import get_default_pg_collection  # noqa: E402
from megatron.core.transformer.spec_utils import build_module  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

EXPERT_COUNTS = (2, 4, 8, 16)
#: CPU µs per forward of ``torch.nn.Linear`` and ``te.Linear`` on a GB200's Grace (TransformerEngine issue #2053:
#: BF16, hidden 2,048, 8,192 tokens, TE of August 2025), and dtsim's x86 reference-block forward
#: (``simulator.workload.host.BLOCK_HOST_S["megatron-flash"][0]``), for the Grace factor of TE's share.
GRACE_LINEAR_US, REFERENCE_FWD_US = (37.08, 99.66), 493.0
# the experts' fused weighted SwiGLU kernel, one call each way as in the rebuild's stand-in
mcore_experts.weighted_bias_swiglu_impl = lambda x, bias, probs, *a: _WeightedSwiGLU.apply(x, probs)


def te_spec(**kwargs):
    """``get_gpt_layer_with_transformer_engine_spec(**kwargs)`` with the one-call core attention."""
    spec = get_gpt_layer_with_transformer_engine_spec(**kwargs)
    spec.submodules.self_attention.submodules.core_attention = _CoreAttention
    return spec


def _expert_config(experts: int, fp8: str | None = None) -> TransformerConfig:
    return TransformerConfig(
        fp8="e4m3" if fp8 else None, fp8_recipe=fp8 or "delayed",
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=4, ffn_hidden_size=4 * HIDDEN,
        use_cpu_initialization=True, params_dtype=torch.float32, add_bias_linear=False, gated_linear_unit=True,
        activation_func=F.silu, bias_activation_fusion=True, gradient_accumulation_fusion=False,
        hidden_dropout=0.0, attention_dropout=0.0, num_moe_experts=experts, moe_router_topk=2,
        moe_grouped_gemm=True, moe_ffn_hidden_size=FFN, apply_rope_fusion=False, masked_softmax_fusion=False)


def _te_experts(experts: int, fp8: str | None = None) -> list:
    spec = get_gpt_layer_with_transformer_engine_spec(num_experts=experts, moe_grouped_gemm=True)
    config, groups = _expert_config(experts, fp8), get_default_pg_collection()
    return [build_module(spec.submodules.mlp.submodules.experts, num_local_experts=experts, config=config,
                         pg_collection=groups) for _ in range(LAYERS)]


def experts_time(modules: list, experts: int) -> tuple[float, float]:
    """Min over ``REPEATS`` of a chain of ``LAYERS`` expert modules: (forward, backward) host seconds each,
    ``2 x TOKENS`` routed tokens spread evenly over the experts."""
    rows = 2 * TOKENS
    per_expert = torch.tensor([rows // experts] * experts)
    x, probs = torch.randn(rows, HIDDEN, requires_grad=True), torch.rand(rows)
    best = None
    for i in range(REPEATS + 3):
        t0 = time.perf_counter()
        y = x
        for m in modules:
            y, _ = m(y, per_expert, probs)
        t1 = time.perf_counter()
        y.sum().backward()
        t2 = time.perf_counter()
        row = ((t1 - t0) / LAYERS, (t2 - t1) / LAYERS)
        if i >= 3 and (best is None or sum(row) < sum(best)):
            best = row
    return best


def _ratio(te: tuple, local: tuple) -> str:
    return f"{te[0] * 1e6:.0f} / {te[1] * 1e6:.0f} against {local[0] * 1e6:.0f} / {local[1] * 1e6:.0f} µs"


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    import megatron.core
    import transformer_engine
    print(f"torch {torch.__version__}, Megatron-Core {megatron.core.__version__}, Transformer Engine "
          f"{getattr(transformer_engine, '__version__', '?')} (Python, CPU stand-in extension); {LAYERS} layers, "
          f"min of {REPEATS} repeats and {ROUNDS} rounds; µs per layer")
    ref_f, ref_b = _min_rounds(lambda: host_time(lambda: MegatronLayer(flash=True), (TOKENS, 1, HIDDEN)))
    print(f"reference block (megatron-flash rebuild): {ref_f * 1e6:.0f} / {ref_b * 1e6:.0f}")
    grace_te(ref_f)
    local = _min_rounds(lambda: real_layer(0)[0])
    te = _min_rounds(lambda: real_layer(0, te_spec)[0])
    print(f"dense: TE spec {_ratio(te, local)} (local spec): forward {te[0] / local[0]:.2f}x, "
          f"backward {te[1] / local[1]:.2f}x")
    te_moe, ratios = {}, []
    for e in EXPERT_COUNTS:
        local_moe = _min_rounds(lambda e=e: real_layer(e))
        te_moe[e] = _min_rounds(lambda e=e: real_layer(e, te_spec))
        ratios.append(_outside_ratio(te_moe[e], local_moe))
    print("MoE layer outside its experts, TE spec over local spec at "
          f"{', '.join(map(str, EXPERT_COUNTS))} experts: forward {', '.join(f'{r[0]:.2f}' for r in ratios)}, "
          f"backward {', '.join(f'{r[1]:.2f}' for r in ratios)}; medians {_medians(ratios)}")
    added, te_experts = [], {}
    for e in EXPERT_COUNTS:
        stand_in = _min_rounds(lambda e=e: experts_time([_Experts(e) for _ in range(LAYERS)], e))
        real = te_experts[e] = _min_rounds(lambda e=e: experts_time(_te_experts(e), e))
        added.append(((real[0] - stand_in[0]) / ref_f, (real[1] - stand_in[1]) / ref_b))
        print(f"experts, {e} local: TEGroupedMLP {_ratio(real, stand_in)} (the rebuild's stand-in)")
    _print_line("TE's experts add", added)
    fp8(te, te_moe, te_experts, (ref_f, ref_b))


def _linear_forward(make) -> float:
    """Min over rounds and repeats of the forward host seconds per call of ``LAYERS`` ``make()`` linears."""
    mods, x, best = [make() for _ in range(LAYERS)], torch.randn(TOKENS, HIDDEN, requires_grad=True), float("inf")
    for i in range(ROUNDS * REPEATS + 3):
        t0 = time.perf_counter()
        for m in mods:
            m(x)
        if i >= 3:  # warm-up
            best = min(best, (time.perf_counter() - t0) / LAYERS)
    return best


def grace_te(ref_f: float) -> None:
    """``te.Linear``'s forward host time over ``torch.nn.Linear``'s (both FP32 on the CPU tensors), in reference-
    block units and at dtsim's x86 reference block, and the Grace factor for TE's share it gives with issue #2053's
    GB200 figures: (99.66 - 37.08) µs over that excess (``HostConfig.te_dispatch_scale``)."""
    import transformer_engine.pytorch as te
    te_s = _linear_forward(lambda: te.Linear(HIDDEN, HIDDEN, bias=False, params_dtype=torch.float32, device="cpu"))
    pt_s = _linear_forward(lambda: torch.nn.Linear(HIDDEN, HIDDEN, bias=False))
    excess = (te_s - pt_s) / ref_f * REFERENCE_FWD_US
    print(f"te.Linear forward {te_s * 1e6:.1f} against torch.nn.Linear {pt_s * 1e6:.1f} µs: TE adds "
          f"{(te_s - pt_s) / ref_f:.4f} of the reference block, {excess:.1f} µs at dtsim's x86 block; Grace "
          f"(TE #2053): ({GRACE_LINEAR_US[1]} - {GRACE_LINEAR_US[0]}) / {excess:.1f} = "
          f"{(GRACE_LINEAR_US[1] - GRACE_LINEAR_US[0]) / excess:.2f}")


def _outside_ratio(num: tuple, den: tuple) -> tuple[float, float]:
    """(forward, backward) ratio of two MoE layers' host time outside their experts (``real_layer`` results)."""
    return tuple((num[0][way] - num[1][way]) / (den[0][way] - den[1][way]) for way in (0, 1))


def _medians(ratios: list) -> str:
    return f"{statistics.median(r[0] for r in ratios):.2f}x / {statistics.median(r[1] for r in ratios):.2f}x"


def _print_line(what: str, added: list) -> None:
    for way, name in ((0, "forward"), (1, "backward")):
        a, s = _line(list(EXPERT_COUNTS), [x[way] for x in added])
        print(f"{what}, {name}: {a:.3f} + {s:.4f} x local experts of the reference block")


def fp8(bf16_dense: tuple, bf16_moe: dict, bf16_experts: dict, ref: tuple) -> None:
    """Per FP8 recipe (``te_cpu_fp8``), under TE's autocast: the dense TE-spec layer and the MoE layer outside
    its experts over the same in BF16 (``main``'s), and what ``TEGroupedMLP`` adds over its BF16 self
    (``Fp8Padding`` and the per-expert quantizes), at the same 2-16 local experts. Megatron-Core quantizes the
    weights at a step's first micro-batch only (``is_first_microbatch``): these are the later micro-batches'."""
    from transformer_engine.common.recipe import DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling
    from transformer_engine.pytorch import autocast
    # dtsim's training.kernels.fp8_recipe, Megatron-Core's fp8_recipe, TE's recipe
    for name, mcore, recipe in (("delayed", "delayed", DelayedScaling), ("current", "tensorwise", Float8CurrentScaling),
                                ("mxfp8", "mxfp8", MXFP8BlockScaling)):
        with autocast(enabled=True, recipe=recipe()):
            dense = _min_rounds(lambda: real_layer(0, te_spec)[0])
            ratios = [_outside_ratio(_min_rounds(lambda e=e: real_layer(e, te_spec)), bf16_moe[e])
                      for e in EXPERT_COUNTS]
            real = {e: _min_rounds(lambda e=e, m=mcore: experts_time(_te_experts(e, m), e)) for e in EXPERT_COUNTS}
        print(f"FP8 {name}: dense TE spec {_ratio(dense, bf16_dense)} (BF16): forward "
              f"{dense[0] / bf16_dense[0]:.2f}x, backward {dense[1] / bf16_dense[1]:.2f}x; MoE layer outside its "
              f"experts: medians {_medians(ratios)}")
        for e in EXPERT_COUNTS:
            print(f"  experts, {e} local: FP8 {_ratio(real[e], bf16_experts[e])} (BF16)")
        _print_line(f"FP8 {name} experts add over BF16",
                    [tuple((real[e][w] - bf16_experts[e][w]) / ref[w] for w in (0, 1)) for e in EXPERT_COUNTS])

if __name__ == "__main__":
    main()
