"""benchmarks/platform_pairs.py: which rows it pairs, and a pair's measured ratio from the printed table."""

from __future__ import annotations

import pytest

from simulator.validation.suite import load_runs


@pytest.fixture(scope="module")
def found(benchmark_script):
    return {(x.id, g.id): (x, g) for x, g in benchmark_script("platform_pairs").pairs(list(load_runs()))}


def test_pairs_share_container_table_and_layout(found):
    # 26.04.01's Nemotron 3 Nano preset on DGX-B200 and DGX-GB200: | 8 | MXFP8 | 512 | 2 | 8192 | 0 | 1 | 1 | 1 |
    # n/a | 8 | on both, 32,768 tokens/s/GPU each
    x86, grace = found[("mbridge260401-b200-nemotron-3-nano-8gpu-mxfp8", "mbridge260401-gb200-nemotron-3-nano-8gpu-mxfp8")]
    assert x86.measured_tokens_per_s_per_gpu / grace.measured_tokens_per_s_per_gpu == pytest.approx(32768 / 32768)
    # 26.02.01's DGX-B300 Nemotron 3 Nano row has no scenario to simulate (superseded without one): no pair
    assert not any("260201-b300-nemotron-3-nano" in x for x, _ in found)
    # a different container, or a different micro-batch (GB300 runs Qwen3-30B at 8, GB200 and B200 at 4), is no pair
    for x, g in found:
        assert x.split("-")[0] == g.split("-")[0]
    assert ("mbridge260401-b200-qwen3-30b-a3b-8gpu-mxfp8", "mbridge260401-gb300-qwen3-30b-a3b-8gpu-mxfp8") not in found
    assert len(found) >= 7
