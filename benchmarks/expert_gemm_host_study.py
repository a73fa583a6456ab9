"""The MoE runs under a larger host cost per expert GEMM: Transformer Engine's grouped GEMM as profiled.

dtsim's MoE host model (``simulator.workload.moe_host``) prices Megatron-Core's experts from a plain-PyTorch
rebuild of ``TEGroupedMLP``: its slope is about 10 µs of the reference block's host time per expert GEMM
(forward 0.0397 x 493 µs per local expert for fc1 and fc2). Transformer Engine issues those GEMMs from a
C++ loop over cuBLASLt (``general_grouped_gemm`` → ``nvte_multi_stream_cublas_gemm``) that the rebuild
does not have. Together AI's PyTorch-profiler report of its Qwen3-235B-A22B BF16 run on 256 DGX-B200 GPUs
(togethercomputer/together-dgxc-benchmarking tests/b200/scripts/qwen3_235b/
qwen3_235b_bf16_256gpu_profiler_report.md@d275be99, rank 0, profiler on) times "Grouped GEMM (native)"
at 0.42 ms of CPU per call over 16,896 calls: six calls per MoE layer (fc1 and fc2 forward, their data
and weight gradients backward) of 16 local experts, about 26 µs per expert GEMM with the profiler's own
overhead (that step ran 30% slower).

This study adds ``--us`` microseconds of host time per expert GEMM (2 forward, 4 backward per local expert)
to every eager MoE block of every expressible MoE run, scaled like all host time by the host's factor
(Grace 2.75), or on Grace hosts unscaled with ``--grace-unscaled`` (a C++ loop need not slow down as
Python does on Grace), and prints per run the signed errors, then the summed |error| (points) and the
calibration objective (mean of ``min(|error|, 0.25)``, ``calibration.objective``) of Hopper, Blackwell on
x86 hosts, Blackwell on Grace hosts and all MoE runs, and the MAPE over every expressible run (the dense
runs simulated once). docs/accuracy-history.md item 39 reports it (not adopted).

Run: ``python benchmarks/expert_gemm_host_study.py`` (about 5 minutes on 2 cores; ``--us 0,16`` for fewer
points).
"""

from __future__ import annotations

import argparse
from multiprocessing import get_context

from host_scale_study import group_line

from simulator.errors import InputError
from simulator.validation.suite import load_runs, scenario_for, try_run
from simulator.workload import host as whost
from simulator.workload import moe_host

#: Expert GEMMs per local expert and pass: fc1 and fc2 forward; their data and weight gradients backward.
GEMMS = (2, 4)
_UNPATCHED = moe_host._host


def _priced(extra_s: float):
    """``moe_host._host`` with ``extra_s`` seconds per expert GEMM on the experts piece, in reference-block
    units (the ``megatron-flash`` block's, which every Megatron-Core MoE block uses)."""
    def _host(piece: str, way: int, local_experts: int, fp8: str | None, scopes: frozenset[str], *rest) -> float:
        base = _UNPATCHED(piece, way, local_experts, fp8, scopes, *rest)
        if piece != "experts" or "moe" in scopes:
            return base
        return base + GEMMS[way] * extra_s * local_experts / whost.BLOCK_HOST_S["megatron-flash"][way]
    return _host


def _errors(args: tuple) -> tuple:
    """(run id, GPU, signed error per value of ``--us``); the study's wrapper is set per value in this worker."""
    run, values, grace_unscaled = args
    grace = run.gpu.startswith("GB")
    errs = []
    for us in values:
        moe_host._host = _priced(us * 1e-6 / (2.75 if grace and grace_unscaled else 1.0))
        o = try_run(run)
        errs.append(None if o.report is None else o.error)
    moe_host._host = _UNPATCHED
    return run.id, run.gpu, errs


def _is_moe(run) -> bool:
    try:
        return scenario_for(run).model.moe is not None
    except InputError:  # refused at validation: reported by ``dtsim validate``, not studied here
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--us", default="0,8,16,24", help="extra host µs per expert GEMM, comma-separated")
    ap.add_argument("--grace-unscaled", action="store_true", help="no Grace factor on the extra time")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    values = [float(x) for x in a.us.split(",")]
    runs = [r for r in load_runs() if r.scenario is not None]
    moe = {r.id for r in runs if _is_moe(r)}
    with get_context("spawn").Pool(a.workers) as pool:
        studied = pool.map(_errors, [(r, values, a.grace_unscaled) for r in runs if r.id in moe], chunksize=1)
        others = pool.map(_errors, [(r, values[:1], False) for r in runs if r.id not in moe], chunksize=4)
    results = [r for r in studied if None not in r[2]]
    print(f"extra µs per expert GEMM {values}{' (Grace unscaled)' if a.grace_unscaled else ''}")
    for rid, gpu, errs in sorted(results):
        print(f"{rid:66} {gpu:6} " + " ".join(f"{e * 100:+7.1f}" for e in errs))
    groups = {"Hopper (x86)": lambda g: g.startswith("H"), "Blackwell, x86 hosts": lambda g: g in ("B200", "B300"),
              "Blackwell, Grace hosts": lambda g: g.startswith("GB"), "all MoE runs": lambda g: True}
    for name, pick in groups.items():
        print(group_line(name, [r[2] for r in results if pick(r[1])]))
    rest = [abs(r[2][0]) for r in others if r[2][0] is not None]
    n = len(rest) + len(results)
    print(f"{'all runs':28} {n:4} runs  MAPE "
          + " / ".join(f"{(sum(rest) + sum(abs(r[2][i]) for r in results)) / n:.2%}" for i in range(len(values))))


if __name__ == "__main__":
    main()
