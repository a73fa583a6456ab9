"""ZeRO-3 fetch granularity as DeepSpeed issues it: one all-gather per ``nn.Linear`` sub-module in
trace order, module lists from the architecture, and a prefetch bucket below one module (which still prefetches)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from simulator.api import build_step_graph, context_for
from simulator.config.loader import load_scenario
from simulator.parallel.deepspeed import Zero3Hooks

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "olmo-2-7b-dgx-h100-zero3.yaml"
FAST = ["training.global_batch_size=32", "training.seq_len=2048"]


def _graph(*extra: str):
    sc = load_scenario(SCENARIO, [*FAST, *extra])
    return sc, build_step_graph(context_for(sc, gpus_per_node=8))


def _parts(g, name):
    return next(t for t in g.tasks if t.name == name).parts


def test_llama_style_block_is_fetched_as_seven_modules_in_trace_order():
    sc, g = _graph()
    assert sc.model.linear_modules == ("q", "k", "v", "o", "gate", "up", "down")
    fwd = [n for n, _ in _parts(g, "allgather fwd 3 mb0")]
    assert fwd == [f"allgather fwd 3.{m} mb0" for m in ("q", "k", "v", "o", "gate", "up", "down")]
    bwd = [n for n, _ in _parts(g, "allgather bwd 3 mb0")]
    assert bwd == [f"allgather bwd 3.{m} mb0" for m in ("down", "up", "gate", "o", "v", "k", "q")]


def test_trace_shows_each_module_gather():
    from simulator.api import simulate
    from simulator.report.chrome_trace import trace_events
    rep = simulate(load_scenario(SCENARIO, FAST))
    names = [e["name"] for e in trace_events(rep.trace)["traceEvents"] if e["ph"] == "X"]
    assert [n for n in names if n.startswith("allgather fwd 3.") and n.endswith(" mb0")] == \
        [f"allgather fwd 3.{m} mb0" for m in ("q", "k", "v", "o", "gate", "up", "down")]


def test_module_bytes_follow_the_weight_shapes():
    # OLMo 2 7B: h = 4096, 32 heads of 128 (q = k = v = 4096 wide), ffn 11008. Weights: q, k, v, o
    # 4096*4096 = 16,777,216 each; gate, up, down 4096*11008 = 45,088,768 each. 2 bytes per element.
    _, g = _graph()
    size = {n.split()[2].split(".")[1]: b for n, b in _parts(g, "allgather fwd 3 mb0")}
    assert size["q"] == pytest.approx(4096 * 4096 * 2, rel=1e-9)
    assert size["gate"] == pytest.approx(4096 * 11008 * 2, rel=1e-9)
    assert sum(size.values()) == pytest.approx((4 * 4096 * 4096 + 3 * 4096 * 11008) * 2, rel=1e-9)


def test_gpt_style_block_fuses_qkv():
    sc, g = _graph("model.mlp=gelu")
    assert sc.model.linear_modules == ("qkv", "o", "fc1", "fc2")
    assert len(_parts(g, "allgather fwd 3 mb0")) == 4


@pytest.mark.parametrize(("bucket", "depth"), [(0, 0), (1, 1), (1e7, 1), (16_777_216, 1), (5e7, 1), (5e8, 2)])
def test_any_prefetch_bucket_fetches_ahead(bucket, depth):
    # DeepSpeed's fetch_sub_module pops parameters while the numel already queued is below the bucket, so
    # any bucket above 0 prefetches at least the next one, even a 1e7 bucket before a 16.8M q_proj (FlagPerf's
    # Llama 2 7B ds_config); 0 prefetches nothing. Modules of 16.8M (q) .. 45.1M (gate) elements; a block is
    # 202.4M: 5e8 // 202.4M = 2 blocks ahead.
    work = SimpleNamespace(layer_params=4 * 4096 * 4096 + 3 * 4096 * 11008,
                           layer_module_params=(4096 * 4096,) * 4 + (4096 * 11008,) * 3)
    p = SimpleNamespace(stage3_prefetch_bucket_size=bucket, stage3_max_live_parameters=1e9)
    assert Zero3Hooks._depth(p, work) == depth


def test_fetch_overhead_is_paid_per_module_call():
    base, slow = (load_scenario(SCENARIO, [*FAST, *x]) for x in ([], ["parallel.stage3_fetch_overhead_s=0.001"]))
    from simulator.api import simulate
    a, b = simulate(base), simulate(slow)
    calls = a.collective_calls["param_allgather"]
    on_link = b.breakdown["communication"]["param_allgather"]["on_link_s"] - \
        a.breakdown["communication"]["param_allgather"]["on_link_s"]
    assert on_link == pytest.approx(calls * 0.001, rel=1e-6)


def test_list_based_gather_cost_grows_with_the_group():
    # DeepSpeed < 0.4: b seconds per rank of the 8-GPU data-parallel group per ZeRO-3 collective.
    from simulator.api import simulate
    base, slow = (load_scenario(SCENARIO, [*FAST, *x]) for x in ([], ["parallel.stage3_list_overhead_per_rank_s=1e-5"]))
    a, b = simulate(base), simulate(slow)
    for kind in ("param_allgather", "grad_reduce"):
        extra = b.breakdown["communication"][kind]["on_link_s"] - a.breakdown["communication"][kind]["on_link_s"]
        assert extra == pytest.approx(a.collective_calls[kind] * 1e-5 * 8, rel=1e-6)
