"""The MoE rows under two data-movement costs that measure better than dtsim's: what they hide.

dtsim prices two pieces of every MoE layer above their measured cost (docs/accuracy-history.md item 16):

* ``a2a``: the single-node all-to-all pays the ring pipeline fill fitted on all-reduce curves; two
  8 x H100 nccl-tests curves (``collectives/nccl_tests_curves.yaml``, ``known_gap``) follow latency +
  size / bandwidth instead, about ``A2A_LATENCY_S`` and ``A2A_RATE`` of the direct-transfer rate;
* ``permute``: the token permutations (permute, sort by local expert, restore, unpermute) move 9 passes
  of the ``T·top_k·h`` routed tokens forward and 18 backward (a memory op's backward is priced at twice
  its forward), where Transformer Engine's fused kernels move about 7 each way: a permutation's backward
  moves what its forward moves, and the fused unpermute reads the ``top_k`` copies and writes one.

Each variant replaces dtsim's cost by the measured-like one, in a fresh process, and prints every MoE
run's signed error with and without it and the sum of |error|. Both make the MoE rows faster, and most
are too fast already: the over-cost stands in for MoE time dtsim does not model, so neither is applied.
``--moe-host-scale`` multiplies the MoE blocks' host time (``workload.moe_host``) on top, the test of
whether that time is what is missing.

Run: ``python benchmarks/moe_hidden_time.py --variant a2a`` (or ``permute``, ``both``; optionally
``--moe-host-scale 2``), about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from multiprocessing import get_context
from types import SimpleNamespace

from simulator.collectives import model as cmodel
from simulator.validation.suite import load_runs, scenario_for, try_run
from simulator.workload import host as whost
from simulator.workload import moe_host, moe_ops

#: nccl-tests all-to-all on one 8 x H100 node: latency and share of the direct-transfer rate (module docstring).
A2A_LATENCY_S = 50e-6
A2A_RATE = 0.935


def _true_all_to_all() -> None:
    original = cmodel.CollectiveModel._physical_time

    def physical_time(self, op, prof, proto_name, nbytes, t, nccl_algo):
        if op == "all_to_all" and not any(ph.steps_inter for ph in prof.phases):
            return A2A_LATENCY_S + sum(ph.beta_s_per_byte for ph in prof.phases) * nbytes / A2A_RATE
        return original(self, op, prof, proto_name, nbytes, t, nccl_algo)

    cmodel.CollectiveModel._physical_time = physical_time


def _fused_permutations() -> None:
    original = moe_ops.moe_block_ops

    def block_ops(model, *args, **kwargs):
        ops = original(model, *args, **kwargs)
        k = model.moe.top_k

        def fix(op):
            routed_bytes = op.bytes / 2  # permute, sort and restore: read + write of the routed tokens
            if op.name in ("permute",):
                return replace(op, bwd_bytes=(1 + 1 / k) * routed_bytes)
            if op.name in ("sort_chunks", "restore_chunks"):
                return replace(op, bwd_bytes=op.bytes)
            if op.name == "unpermute":
                per_pass = op.bytes / 3
                return replace(op, bytes=(1 + 1 / k) * per_pass, bwd_bytes=(2 + 1 / k) * per_pass)
            return op

        return replace(ops, pre=tuple(map(fix, ops.pre)), experts=tuple(map(fix, ops.experts)),
                       post=tuple(map(fix, ops.post)))

    moe_ops.moe_block_ops = block_ops


def _scaled_moe_host(factor: float) -> None:
    """The MoE blocks' host time times ``factor`` (the dense blocks' unchanged)."""
    scaled = {k: (f * factor, b * factor) for k, (f, b) in whost.BLOCK_HOST_S.items()}
    moe_host.whost = SimpleNamespace(**{**vars(whost), "BLOCK_HOST_S": scaled})


def moe_runs() -> list:
    """The expressible validation runs of an MoE model."""
    return [r for r in load_runs() if r.expressible and scenario_for(r).model.moe is not None]


def errors(job: tuple[str, float]) -> dict[str, float]:
    """Signed error of every MoE run under ``variant`` (``none`` = dtsim as it is) and the MoE host
    scale. Run in a fresh process each, so that no cache filled under one cost model serves the other."""
    variant, host_scale = job
    if host_scale != 1.0:
        _scaled_moe_host(host_scale)
    if variant in ("a2a", "both"):
        _true_all_to_all()
    if variant in ("permute", "both"):
        _fused_permutations()
    out = {}
    for run in moe_runs():
        o = try_run(run)
        if o.report is not None:
            out[run.id] = o.error
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("a2a", "permute", "both"), default="both")
    parser.add_argument("--moe-host-scale", type=float, default=1.0, help="MoE blocks' host time x this")
    args = parser.parse_args()
    variant = args.variant + (f" + MoE host x{args.moe_host_scale:g}" if args.moe_host_scale != 1.0 else "")
    with get_context("spawn").Pool(2) as pool:
        before, after = pool.map(errors, (("none", 1.0), (args.variant, args.moe_host_scale)))
    print(f"| run | dtsim | {variant} |")
    print("|---|---:|---:|")
    for rid in before:
        print(f"| {rid} | {before[rid]:+.1%} | {after[rid]:+.1%} |")
    s0, s1 = (sum(abs(e) for e in d.values()) * 100 for d in (before, after))
    print(f"\n{len(before)} MoE runs: sum of |error| {s0:,.0f} -> {s1:,.0f} points "
          f"(mean {s0 / len(before):.1f}% -> {s1 / len(before):.1f}%)")


if __name__ == "__main__":
    main()
