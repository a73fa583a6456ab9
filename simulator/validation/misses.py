"""Runs the simulator misses, reported as numbers with their cause (never silenced).

A simulated run whose throughput error exceeds ``TOLERANCE`` is a *miss*. ``dtsim validate`` lists
every miss with its signed error and the physical cause we believe (``CAUSES``), or "no named cause"
when there is none: the list is a finding, and a cause that no longer explains a miss (the run came
within tolerance) is a stale entry the tests reject.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Per-run tolerance on tokens/s per GPU (the step-engine issue's ±15 %).
TOLERANCE = 0.15

#: Why each known miss misses, as far as we know.
CAUSES: dict[str, str] = {
    "megatron-sc21-t2-zero3-175B-768gpu": "2021 DeepSpeed ZeRO-3 at 96 nodes: the list-based gather cost "
    "(stage3_list_overhead_per_rank_s, fitted on this run and the 1,536-GPU one) leaves it too fast; the "
    "per-rank cost may not be linear in the ranks",
    "torchtitan-h100-llama31-8b-8gpu-fsdp": "Grand Teton H100 (500 W cap, HBM2e) simulated as a 700 W h100-sxm, "
    "so too fast",
    "torchtitan-h100-llama31-8b-8gpu-fsdp-compile": "500 W HBM2e H100 simulated as a 700 W h100-sxm",
    "torchtitan-h100-llama31-8b-8gpu-fsdp-compile-fp8": "500 W HBM2e H100 simulated as a 700 W h100-sxm",
    "llmfoundry-mpt70b-h100-64gpu-seq2048": "Hopper fit with two parameters on their bounds (FlashAttention "
    "low, overlap slowdown high): the H100 set mixes the 500 W torchtitan runs and long sequences (issue 12)",
    "llmfoundry-mpt30b-h100-32gpu-seq2048": "the same Hopper fit on its bounds (issue 12)",
    "megatron-bridge-2511-llama3-8b-8gpu-fsdp-fp8cs": "FP8 GEMM efficiency taken equal to BF16's (no FP8 source) "
    "and Transformer Engine's current-scaling amax reductions not modelled: too fast",
    "nemo2407-llama3-8b-8gpu-fp8": "FP8 on H100 with Transformer Engine: cast/amax costs and FP8 GEMM "
    "efficiency (issue 12 item 2)",
}


def misses(rows: Iterable[dict[str, Any]], tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
    """Simulated rows beyond ``tolerance``, worst first: ``id``, ``error``, ``cause``."""
    out = [{"id": r["id"], "error": r["error"], "cause": CAUSES.get(r["id"], "no named cause")}
           for r in rows if "error" in r and abs(r["error"]) > tolerance]
    return sorted(out, key=lambda m: (-abs(m["error"]), m["id"]))
