"""benchmarks/platform_pairs.py: which rows it pairs (both table formats), and a pair's figures from the table."""

from __future__ import annotations

import pytest

from simulator.validation.suite import load_runs

pytestmark = pytest.mark.validation

#: The x86 / Grace pairs of one container, variant and printed layout with a scenario on both sides, read off the
#: tables by hand: (container, x86 system, the id after the system).
EXPECTED = {
    ("mbridge2511", "b200", "llama3-8b-8gpu-fp8cs"),
    ("mbridge260201", "b300", "qwen3-30b-a3b-8gpu-mxfp8"), ("mbridge260201", "b200", "qwen3-30b-a3b-8gpu-mxfp8"),
    ("mbridge260401", "b300", "qwen3-30b-a3b-8gpu-mxfp8"), ("mbridge260401", "b200", "qwen3-30b-a3b-8gpu-mxfp8"),
    ("mbridge260401", "b300", "nemotron-3-nano-8gpu-mxfp8"), ("mbridge260401", "b200", "nemotron-3-nano-8gpu-mxfp8"),
    ("mbridge260401", "b200", "nemotron-3-super-64gpu-nvfp4"),
    ("mbridge2606", "b300", "qwen3-30b-a3b-8gpu-mxfp8"), ("mbridge2606", "b300", "nemotron-3-nano-8gpu-mxfp8"),
}
SIBLING = {"b200": "gb200", "b300": "gb300"}


@pytest.fixture(scope="module")
def found(benchmark_script):
    return {(x.id, g.id): (x, g) for x, g in benchmark_script("platform_pairs").pairs(list(load_runs()))}


def test_the_pairs_are_the_tables_own(found):
    assert set(found) == {(f"{c}-{x}-{v}", f"{c}-{SIBLING[x]}-{v}") for c, x, v in EXPECTED}


def test_a_pairs_figures_are_the_printed_ones(found):
    # 26.04.01's Nemotron 3 Nano preset: | DGX-B200 | 8 | MXFP8 | 512 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 8 | 32768 |
    # 726 | and | DGX-GB200 | ... | 32768 | 727 |
    x86, grace = found[("mbridge260401-b200-nemotron-3-nano-8gpu-mxfp8", "mbridge260401-gb200-nemotron-3-nano-8gpu-mxfp8")]
    assert x86.measured_tokens_per_s_per_gpu == 32768 and grace.measured_tokens_per_s_per_gpu == 32768
    # 25.11's format (system before "table", model the first cell): Llama 3 8B FP8-CS 30,624 against 31,508
    x86, grace = found[("mbridge2511-b200-llama3-8b-8gpu-fp8cs", "mbridge2511-gb200-llama3-8b-8gpu-fp8cs")]
    assert (x86.measured_tokens_per_s_per_gpu, grace.measured_tokens_per_s_per_gpu) == (30624, 31508)


def test_a_different_layout_is_no_pair(benchmark_script):
    # 26.04.01's GPT-OSS 120B runs EP 8 on DGX-B200 and EP 64 on DGX-GB200: the layouts differ, no pair
    layout_b200 = "| DGX-B200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 13568 | 369 |"
    layout_gb200 = "| DGX-GB200 | 64 | BF16 | 1280 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 64 | 16640 | 452 |"
    rows = [benchmark_script("platform_pairs").table_row(f"Model: GPT OSS 120B table; row: {r}")
            for r in (layout_b200, layout_gb200)]
    assert [r[0] for r in rows] == ["B200", "GB200"] and rows[0][1] != rows[1][1]
