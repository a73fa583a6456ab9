"""The Triton FlashAttention's rate on H100, measured from llm-foundry's sequence sweeps.

llm-foundry's 2023 benchmark table (``llmfoundry-*`` corpus rows) ran its Triton FlashAttention
(``kernels.attention: triton``) on every A100 and H100 row, and no other publication gives that kernel's
H100 rate. Its rows come in groups: one model on one GPU type and count, in one precision and with one
activation checkpointing setting, at several sequence lengths (and with them other micro-batch and batch
sizes, which dtsim prices). The GEMMs, norms, loss and optimizer cost about the same per token at every
length (their work is linear in the tokens); the attention's quadratic part grows with it. A wrong
attention rate therefore tilts a group's errors with the sequence length, whatever GEMM share the
calibration gives the group's level. The spread of each row's error around its group's mean (mean
|deviation| over the rows of groups with two or more lengths) is smallest at the kernel's rate, as dtsim
applies it: ``TRITON_OF_FA2`` times FlashAttention-2's published rate times the fitted attention share
(the out-of-fold one: errors are ``dtsim validate``'s, with the shares fitted without llm-foundry, which
the ratio does not move, since no other publication runs the kernel).

The sweep identifies one ratio for both directions, not the two apart. The check, on A100, where the
FlashAttention-2 paper publishes the ratio (``TRITON_OF_FA2["ampere"]``: "1.3-1.5× faster ... in the
forward pass and around 2× faster in the backward pass"): the paper's pair costs a causal attention what
one ratio of 0.54 does (``one_ratio``; 0.57 where full recomputation runs the forward twice), and the
sweep's one-ratio minimum should lie near it. The measurement: the same one-ratio scan on H100. Rows
with a cause of their own in ``misses.CAUSES`` (llm-foundry's MPT-30B at 8k tokens on 8 H100, near its
memory limit) still count.

Run: ``python benchmarks/triton_rate.py`` (about 5 seconds on 2 cores).
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
from typing import Any

from simulator.hardware import attention
from simulator.validation.suite import load_runs, try_run
from simulator.workload.ops import ATTENTION_BWD_FLOPS

#: Corpus rows of the sweep: ``llmfoundry-mpt<model>-<gpu>-<n>gpu-seq<length>[-fp8]``.
ROW = re.compile(r"llmfoundry-mpt(?P<model>\w+?)-(?P<gpu>\S+?)-(?P<n>\d+)gpu-seq(?P<seq>\d+)(?P<fp8>-fp8)?$")
#: One ratio of FlashAttention-2's rate for both directions, tried on each GPU.
RATIOS = {"A100": (0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.80, 1.00),
          "H100": (0.70, 0.75, 0.80, 0.84, 0.86, 0.88, 0.90, 0.92, 0.95, 1.00)}


@functools.cache
def sweep(gpu: str) -> tuple[tuple[Any, tuple[str, ...]], ...]:
    """The ``gpu`` rows of the sweep, each with its group (model, GPU type, count, precision, checkpointing)."""
    out = []
    for run in load_runs():
        m = ROW.match(run.id)
        if m is not None and run.gpu == gpu:
            checkpointing = str(run.scenario["training"].get("activation_checkpointing", "none"))
            out.append((run, (m["model"], m["gpu"], m["n"], m["fp8"] or "", checkpointing)))
    return tuple(out)


def spread(gpu: str) -> tuple[float, int, int]:
    """Mean |error − its group's mean error| (fraction) over the ``gpu`` sweep rows of groups with two or
    more sequence lengths, with the current ``attention.TRITON_OF_FA2``; and the rows and groups counted."""
    groups: dict[tuple[str, ...], list[float]] = {}
    for run, group in sweep(gpu):
        outcome = try_run(run)
        if outcome.report is not None:
            groups.setdefault(group, []).append(outcome.error)
    devs = [e - statistics.mean(v) for v in groups.values() if len(v) > 1 for e in v]
    return statistics.mean(abs(d) for d in devs), len(devs), sum(len(v) > 1 for v in groups.values())


def spread_at(gpu: str, arch: str, ratio: tuple[float, float]) -> tuple[float, int, int]:
    """``spread(gpu)`` with ``TRITON_OF_FA2[arch]`` set to ``ratio`` (restored afterwards)."""
    stored = attention.TRITON_OF_FA2[arch]
    attention.TRITON_OF_FA2[arch] = ratio
    try:
        return spread(gpu)
    finally:
        attention.TRITON_OF_FA2[arch] = stored


def scan(gpu: str, arch: str) -> float:
    """Print the spread at each of ``RATIOS[gpu]`` on ``arch``; return the ratio of the smallest."""
    best = None
    for ratio in RATIOS[gpu]:
        s, rows, groups = spread_at(gpu, arch, (ratio, ratio))
        print(f"{gpu}  {ratio:.2f} of FlashAttention-2  spread {100 * s:5.2f} %  ({rows} rows, {groups} groups)")
        if best is None or s < best[0]:
            best = (s, ratio)
    return best[1]


def one_ratio(arch: str, forward: float, backward: float, forwards: int = 1) -> float:
    """The one ratio that costs a causal attention's ``forwards`` forward passes and its backward what
    ``forward`` and ``backward`` of FlashAttention-2's rates on ``arch`` cost together."""
    fa2_fwd, fa2_bwd = attention.FRACTIONS[arch]["fa2"]
    t_fwd, t_bwd = forwards / fa2_fwd, ATTENTION_BWD_FLOPS / fa2_bwd
    return (t_fwd + t_bwd) / (t_fwd / forward + t_bwd / backward)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    fwd, bwd = attention.TRITON_OF_FA2["ampere"]
    a100 = scan("A100", "ampere")
    paper = spread_at("A100", "ampere", (fwd, bwd))[0]
    print(f"A100 check: smallest spread at {a100:.2f}; the paper's {fwd:.3f} forward / {bwd:.3f} backward "
          f"({100 * paper:.2f} %) costs what {one_ratio('ampere', fwd, bwd):.2f} does "
          f"({one_ratio('ampere', fwd, bwd, forwards=2):.2f} under full recomputation)")
    h100 = scan("H100", "hopper")
    print(f"H100: smallest spread at {h100:.2f} of FlashAttention-2's rate "
          f"(stored {attention.TRITON_OF_FA2['hopper'][0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
