"""The scale-out traffic expert parallelism over InfiniBand adds, as the difference of two measured rows.

Megatron-Bridge's performance tables run one GPT-OSS 120B preset (64 GPUs, micro-batch 4, global batch 1,280)
at EP 8, its all-to-alls inside each node's NVLink (26.04.01 table), and at EP 64, across the eight nodes over
InfiniBand (26.02 table; 26.02.01's EP-8 rows, superseded, give 51.4 and 53.1 µs below where 26.04.01's give
50.6 and 54.0). The difference of their per-token times cancels whatever both share (GPT-OSS's own gap,
docs/validation.md) and leaves what the scale-out links carry: EP 64's all-to-alls, less the expert-data-parallel
gradient and parameter traffic that EP 8 sends over InfiniBand and EP 64 does not. dtsim reproduces DGX-B200's
difference at its 400 Gb/s ConnectX-7 links, and DGX-B300's only at the same 400 Gb/s per GPU, not at
ConnectX-8's 800: the corpus's assumption for NVIDIA's DGX-B300 cluster (docs/validation-corpus.md).
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator.validation.suite import load_runs, simulate_run

pytestmark = pytest.mark.validation

EP8 = "mbridge260401-{gpu}-gpt-oss-120b-64gpu-bf16"
EP64 = "mbridge2602-{gpu}-gpt-oss-120b-64gpu-ep64-bf16"
NIC_800 = "cluster.topology.nics.bandwidth_Gbps=800"


def _us_per_token(run, measured: bool) -> float:
    tokens = run.measured_tokens_per_s_per_gpu if measured else simulate_run(run).tokens_per_s_per_gpu
    return 1e6 / tokens


def _difference(gpu: str, sets: tuple[str, ...] = (), measured: bool = False) -> float:
    runs = {r.id: r for r in load_runs()}
    ep8, ep64 = (dataclasses.replace(runs[name.format(gpu=gpu)], overrides=runs[name.format(gpu=gpu)].overrides + sets)
                 for name in (EP8, EP64))
    return _us_per_token(ep64, measured) - _us_per_token(ep8, measured)


def test_the_tables_own_difference():
    # hand arithmetic from the printed tokens/s/GPU: B200 1e6/8,047 - 1e6/13,568, B300 1e6/8,359 - 1e6/15,232
    assert _difference("b200", measured=True) == pytest.approx(124.27 - 73.70, abs=0.05)
    assert _difference("b300", measured=True) == pytest.approx(119.63 - 65.65, abs=0.05)


@pytest.mark.parametrize("gpu", ["b200", "b300"])
def test_ep64_over_infiniband_adds_the_measured_time(gpu):
    measured = _difference(gpu, measured=True)
    assert _difference(gpu) == pytest.approx(measured, rel=0.10)


def test_800_gbps_links_would_halve_it_on_b300():
    # the datasheet's ConnectX-8 rate doubles the all-to-alls' bandwidth: half the measured difference
    assert _difference("b300", (NIC_800,)) < 0.6 * _difference("b300", measured=True)
