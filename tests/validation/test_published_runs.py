"""Accuracy against published pure data-parallel FSDP / ZeRO-3 runs (tokens/s per GPU, ±15 %).

Data: ``published_runs.yaml`` beside this file (copied from the calibration set). The compute
model's calibrated values (efficiency.yaml: sustained GEMM fraction per architecture, FlashAttention
fraction, compute slowdown under communication) were fitted once on these rows together, never per
run. Rows the model cannot reproduce are marked ``xfail`` with the reason, and still run.
"""

from __future__ import annotations

import pytest

from tests.validation.runs import rows, simulate_row

TOLERANCE = 0.15

#: Rows where the simulator misses by more than the tolerance, with the reason we believe.
KNOWN_MISSES = {
    "torchtitan-a100-llama38b-lbs1-selective-per-layer": "per-layer selective AC (every 2nd block fully "
    "recomputed) has no dtsim equivalent; simulated as selective, so too fast",
    "ibm-fsdp-a100-llama213b": "'checkpoint every n-th block' has no dtsim equivalent; simulated as selective",
    "megatron-sc21-t2-zero3-175B-384gpu": "at the tolerance edge (+15.0 %): dtsim is faster than the 2021 "
    "DeepSpeed ZeRO-3 measurements across the whole table, increasingly with scale",
    "megatron-sc21-t2-zero3-175B-768gpu": "2021 DeepSpeed ZeRO-3 at 96 nodes: measured collapse (88 TFLOP/s) "
    "far beyond the modelled gather latency/bandwidth",
    "megatron-sc21-t2-zero3-175B-1536gpu": "as above at 192 nodes (44 TFLOP/s measured)",
}


def _params():
    for row in rows():
        marks = [pytest.mark.validation]
        if row["id"] in KNOWN_MISSES:
            marks.append(pytest.mark.xfail(reason=KNOWN_MISSES[row["id"]], strict=False))
        yield pytest.param(row, id=row["id"], marks=marks)


@pytest.mark.parametrize("row", list(_params()))
def test_tokens_per_s_per_gpu_within_tolerance(row):
    report = simulate_row(row)
    measured = row["measured_tokens_per_s_per_gpu"]
    error = report.tokens_per_s_per_gpu / measured - 1
    assert abs(error) <= TOLERANCE, f"{row['id']}: simulated {report.tokens_per_s_per_gpu:.0f} vs {measured} ({error:+.1%})"
