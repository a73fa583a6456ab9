"""Re-fit the calibrated compute-model values against the validation set (a script, not a test).

Fits, on a coarse grid, the five values marked "calibrated" in ``simulator/hardware/efficiency.yaml``
(sustained GEMM fraction of MAMF for ampere and hopper, FlashAttention fraction for each, and the
compute slowdown under communication), once for all rows together, minimising the RMS relative error
of tokens/s per GPU. The Megatron rows are left out of the fit: the ZeRO-3 table (2021 DeepSpeed
behaviour at scale) and the DDP 1.7B row, which serves as an out-of-sample check.

Run: ``python -m tests.validation.calibrate`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.hardware.efficiency import for_gpu
from tests.validation.runs import rows

GRID = {
    "ampere_sustained": (0.74, 0.78, 0.82),
    "hopper_sustained": (0.66, 0.70, 0.74),
    "slowdown": (0.15, 0.30, 0.45),
    "ampere_flash": (0.50, 0.55, 0.62),
    "hopper_flash": (0.35, 0.40, 0.45),
}


def _errors(cases, point: dict[str, float]) -> list[float]:
    out = []
    for row, scenario in cases:
        gpu = scenario.cluster.gpu_spec
        eff = for_gpu(gpu)
        arch = "ampere" if gpu.arch == "ampere" else "hopper"
        mamf = gpu.mamf_fraction or eff.gemm_fraction
        eff = dataclasses.replace(eff, gemm_fraction=mamf * point[f"{arch}_sustained"],
                                  flash_attention_fraction=point[f"{arch}_flash"],
                                  compute_slowdown_during_comm=point["slowdown"])
        report = simulate(scenario, efficiency=eff)
        out.append(report.tokens_per_s_per_gpu / row["measured_tokens_per_s_per_gpu"] - 1)
    return out


def main() -> None:
    cases = [(r, scenario_from_dict({"name": r["id"], **r["scenario"]}, overrides=r.get("set", [])))
             for r in rows() if not r["id"].startswith("megatron")]
    results = []
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values, strict=True))
        errs = _errors(cases, point)
        results.append((math.sqrt(sum(e * e for e in errs) / len(errs)), max(map(abs, errs)), point))
    results.sort(key=lambda r: r[0])
    for rms, worst, point in results[:5]:
        print(f"rms {rms:.3f}  worst {worst:.3f}  {point}")


if __name__ == "__main__":
    main()
