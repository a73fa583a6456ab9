"""NVIDIA's DeepSeek-V3 GB200 optimisation history against dtsim: the states dtsim can express.

Megatron-LM ``docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md`` times one
layout (256 GB200, TP 1, PP 8 x VP 4, EP 32, micro-batch 1, global batch 2,048, MXFP8) through thirteen
software states. Its last state is the corpus row ``megatronlm-dsv3-gb200-256gpu-mxfp8-hybridep``; this
script changes that row's dispatcher, CUDA graphs and MLA up-projection recompute back to earlier states
and prints dtsim's TFLOP/s/GPU (the row's FLOP convention) beside the measured ones. The measured states
also differ in kernels dtsim does not distinguish (the write-up's fusions, NUMA binding, DeepEP's MNNVL
bandwidth), so the comparison shows how much each switch moves the step in dtsim, not a fit.
``--dispatch-scale S ...`` repeats the states with Grace's host scale (``cluster.topology.host.dispatch_scale``,
2.75 in the topology, and Transformer Engine's 1.88 in proportion) set to each ``S``: how much more host time per
MoE block the eager states imply;
``--rows GLOB`` prints the signed error of those validation runs at each scale instead (any host).

    python benchmarks/dsv3_gb200_history.py [--dispatch-scale 6 10]
    python benchmarks/dsv3_gb200_history.py --rows 'mbridge*-b200-deepseek*' --dispatch-scale 1 3 4 5
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

from simulator.api import simulate
from simulator.validation.suite import load_runs, scenario_for, select
from simulator.workload import host as whost

ROW = "megatronlm-dsv3-gb200-256gpu-mxfp8-hybridep"
GRAPHS = ["attn", "moe_router", "moe_preprocess"]
#: (write-up state, measured TFLOP/s/GPU, dispatcher, CUDA graph scopes, recompute modules)
STATES = (
    ("Router fusion (AlltoAll, eager, up_proj recompute)", 540.00, "alltoall", [], ["mlp", "mla_up_proj"]),
    ("Enable DeepEP", 566.07, "deepep", [], ["mlp", "mla_up_proj"]),
    ("Remove up_proj recompute", 610.71, "deepep", [], ["moe_act", "mlp"]),
    ("CUDA Graphs", 663.27, "deepep", GRAPHS, ["moe_act", "mlp"]),
    ("Fuse quantization to normalization (final, HybridEP)", 970.01, "deepep", GRAPHS, ["moe_act", "mlp"]),
)


def _at_scale(run, scale: float | None, scenario: dict | None = None):
    """``run`` (with ``scenario`` in place of its own) with the host's dispatch scale set to ``scale`` and, where
    the topology sets one, Transformer Engine's (``te_dispatch_scale``) in proportion."""
    sets = run.overrides
    if scale is not None:
        sets += whost.dispatch_overrides(scenario_for(run).cluster.topology.host, scale)
    return dataclasses.replace(run, scenario=scenario or run.scenario, overrides=sets)


def tflops(run, dispatcher: str, graphs: list[str], modules: list[str], scale: float | None) -> float:
    """dtsim's TFLOP/s/GPU (the row's FLOP convention) for ``run`` set to one state."""
    sc = copy.deepcopy(run.scenario)
    sc["parallel"]["moe_dispatcher"] = dispatcher
    sc["training"]["recompute_modules"] = modules
    kernels = sc["training"]["kernels"]
    if graphs:
        kernels["cuda_graphs"] = graphs
    else:
        kernels.pop("cuda_graphs", None)
    rep = simulate(scenario_for(_at_scale(run, scale, sc)))
    return run.flops_per_token * rep.tokens_per_step / (rep.step_time_s * rep.n_gpus) / 1e12


def print_rows(pattern: str, scales: list[float]) -> None:
    """Signed throughput error of the validation runs matching ``pattern`` with the host's dispatch scale
    set to each of ``scales``."""
    print("run  " + "  ".join(f"scale {s:g}" for s in scales))
    for run in select(load_runs(), pattern):
        if run.scenario is None:
            continue
        errors = []
        for scale in scales:
            rep = simulate(scenario_for(_at_scale(run, scale)))
            errors.append(rep.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu - 1)
        print(run.id + "  " + "  ".join(f"{e:+.0%}" for e in errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatch-scale", type=float, nargs="*", default=[], metavar="S",
                        help="also print each state at these Grace host scales")
    parser.add_argument("--rows", metavar="GLOB", help="validation runs to print at each host scale instead")
    args = parser.parse_args()
    scales = args.dispatch_scale
    if args.rows:
        print_rows(args.rows, scales)
        return
    run = select(load_runs(), ROW)[0]
    head = "".join(f" {'scale ' + format(s, 'g'):>10}" for s in scales)
    print(f"{'state':54} {'measured':>9} {'dtsim':>7}{head}  TFLOP/s/GPU")
    for label, measured, dispatcher, graphs, modules in STATES:
        cells = [tflops(run, dispatcher, graphs, modules, None)]
        cells += [tflops(run, dispatcher, graphs, modules, s) for s in scales]
        print(f"{label:54} {measured:9.1f} {cells[0]:7.1f}" + "".join(f" {c:10.1f}" for c in cells[1:]))


if __name__ == "__main__":
    main()
