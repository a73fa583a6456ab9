"""``parallel.overlap_grad_reduce: false`` (Megatron-LM's default): one reduction of the whole gradient
buffer after the last backward, exposed."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.ir import CollectiveTask, ComputeTask

TINY = {"name": "tiny", "n_layers": 4, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
        "vocab_size": 32000}


def _sc(*sets):
    raw = {"name": "t", "model": TINY, "cluster": {"topology": "dgx-a100", "nodes": 1},
           "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 16},
           "parallel": {"framework": "ddp"}}
    return scenario_from_dict(raw, overrides=list(sets))


def test_one_reduction_of_the_whole_buffer_after_the_last_backward():
    ctx = context_for(_sc("parallel.overlap_grad_reduce=false"))
    g = build_step_graph(ctx)
    reds = [t for t in g.tasks if isinstance(t, CollectiveTask) and t.kind == "grad_reduce"]
    assert len(reds) == 1
    (red,) = reds
    # fp32 gradients (AMP) of every parameter: 4 B x total
    assert red.nbytes == pytest.approx(4 * ctx.work.total_params)
    last_bwd = max(t.id for t in g.tasks if isinstance(t, ComputeTask) and t.kind == "backward")
    assert red.deps == (last_bwd,)


def test_the_reduction_is_exposed_between_backward_and_optimizer():
    off = simulate(_sc("parallel.overlap_grad_reduce=false"))
    b = off.breakdown
    red = b["communication"]["grad_reduce"]
    assert red["exposed_s"] == pytest.approx(red["on_link_s"], rel=1e-9)  # nothing hides it
    # serial: compute, then the one reduction, then the optimizer; no compute slowed by overlap
    assert off.step_time_s == pytest.approx(b["compute_busy_s"] + red["exposed_s"], rel=1e-9)
