"""Accuracy against published pure data-parallel runs: each within ±15 % of its measured tokens/s
per GPU (the step-engine issue's tolerance); the misses are listed with the reason we believe.

Data: the bundled suite ``simulator/validation/runs.yaml``. The compute efficiencies were fitted
once per GPU architecture on its ``train`` split by benchmarks/calibrate.py, never per run. Runs the
model cannot reproduce are marked ``xfail`` with the reason we believe, and still run.
"""

from __future__ import annotations

import pytest

from simulator.validation.suite import simulate_run
from tests.validation.runs import pure_dp_runs

pytestmark = pytest.mark.validation

TOLERANCE = 0.15

#: Runs where the simulator misses by more than the tolerance, with the reason we believe.
KNOWN_MISSES = {
    "megatron-sc21-t2-zero3-175B-768gpu": "2021 DeepSpeed ZeRO-3 at 96 nodes: measured collapse (88 TFLOP/s) "
    "far beyond the modelled gather latency/bandwidth",
    "megatron-sc21-t2-zero3-175B-1536gpu": "as above at 192 nodes (44 TFLOP/s measured)",
    "torchtitan-h100-llama31-8b-8gpu-fsdp": "Grand Teton H100 (500 W cap, HBM2e) is not in the GPU catalog; "
    "simulated as a 700 W h100-sxm, so too fast",
    "torchtitan-h100-llama31-8b-8gpu-fsdp-compile": "as above",
    "torchtitan-h100-llama31-8b-8gpu-fsdp-compile-fp8": "as above",
    "megatron-sc21-t2-zero3-175B-384gpu": "the same 2021 ZeRO-3 collapse, beginning at 48 nodes (+16%)",
    "ibm-fsdp-a100-llama213b": "checkpoints every n-th block, which the schema cannot express; run as "
    "selective (+16%)",
}


def _params():
    for run in pure_dp_runs():
        marks = [pytest.mark.xfail(reason=KNOWN_MISSES[run.id], strict=False)] if run.id in KNOWN_MISSES else []
        yield pytest.param(run, id=run.id, marks=marks)


@pytest.mark.parametrize("run", list(_params()))
def test_tokens_per_s_per_gpu_within_tolerance(run):
    report = simulate_run(run)
    measured = run.measured_tokens_per_s_per_gpu
    error = report.tokens_per_s_per_gpu / measured - 1
    assert abs(error) <= TOLERANCE, f"{run.id}: simulated {report.tokens_per_s_per_gpu:.0f} vs {measured} ({error:+.1%})"
