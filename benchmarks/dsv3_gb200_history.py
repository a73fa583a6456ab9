"""NVIDIA's DeepSeek-V3 GB200 optimisation history against dtsim: the states dtsim can express.

Megatron-LM ``docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md`` times one
layout (256 GB200, TP 1, PP 8 x VP 4, EP 32, micro-batch 1, global batch 2,048, MXFP8) through thirteen
software states. Its last state is the corpus row ``megatronlm-dsv3-gb200-256gpu-mxfp8-hybridep``; this
script changes that row's dispatcher, CUDA graphs and MLA up-projection recompute back to earlier states
and prints dtsim's TFLOP/s/GPU (the row's FLOP convention) beside the measured ones. The measured states
also differ in kernels dtsim does not distinguish (the write-up's fusions, NUMA binding, DeepEP's MNNVL
bandwidth), so the comparison shows how much each switch moves the step in dtsim, not a fit.

    python benchmarks/dsv3_gb200_history.py
"""

from __future__ import annotations

import copy
import dataclasses

from simulator.api import simulate
from simulator.validation.suite import load_runs, scenario_for, select

ROW = "megatronlm-dsv3-gb200-256gpu-mxfp8-hybridep"
GRAPHS = ["attn", "moe_router", "moe_preprocess"]
#: (write-up state, measured TFLOP/s/GPU, dispatcher, CUDA graph scopes, recompute modules)
STATES = (
    ("Router fusion (AlltoAll, eager, up_proj recompute)", 540.00, "alltoall", [], ["moe_act", "mla_up_proj"]),
    ("Enable DeepEP", 566.07, "deepep", [], ["moe_act", "mla_up_proj"]),
    ("Remove up_proj recompute", 610.71, "deepep", [], ["moe_act"]),
    ("CUDA Graphs", 663.27, "deepep", GRAPHS, ["moe_act"]),
    ("Fuse quantization to normalization (final, HybridEP)", 970.01, "deepep", GRAPHS, ["moe_act"]),
)


def main() -> None:
    run = select(load_runs(), ROW)[0]
    print(f"{'state':54} {'measured':>9} {'dtsim':>7}  TFLOP/s/GPU")
    for label, measured, dispatcher, graphs, modules in STATES:
        sc = copy.deepcopy(run.scenario)
        sc["parallel"]["moe_dispatcher"] = dispatcher
        sc["training"]["recompute_modules"] = modules
        kernels = sc["training"]["kernels"]
        if graphs:
            kernels["cuda_graphs"] = graphs
        else:
            kernels.pop("cuda_graphs", None)
        rep = simulate(scenario_for(dataclasses.replace(run, scenario=sc)))
        tflops = run.flops_per_token * rep.tokens_per_step / (rep.step_time_s * rep.n_gpus) / 1e12
        print(f"{label:54} {measured:9.1f} {tflops:7.1f}")


if __name__ == "__main__":
    main()
