"""``parallel.moe_a2a_overlap`` (Megatron-Core combined 1F1B, DeepSeek-V3's DualPipe pairing): the
issue order follows the published pairing, the same bytes go on the link, less of it is exposed, and
the layouts it cannot simulate are refused with the key named."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.checks import check_layout
from simulator.parallel.ir import COMPUTE, CollectiveTask, ComputeTask

# 4 MoE blocks, 16 experts of width 512, top-2 (as tests/parallel/test_expert.py), 2 DGX H100 with EP 16:
# the all-to-alls cross InfiniBand, so there is communication to hide.
TINY = {"name": "tiny-moe", "n_layers": 4, "hidden_size": 1024, "n_heads": 8, "n_kv_heads": 8,
        "ffn_hidden_size": 2816, "vocab_size": 32000,
        "moe": {"n_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 512}}


def _scenario(sets=(), pp=1):
    raw = {
        "name": "t", "model": TINY,
        "cluster": {"topology": "dgx-h100", "nodes": 2 * pp},
        "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 64},
        "parallel": {"framework": "ddp", "ep": 16, "pp": pp},
    }
    return scenario_from_dict(raw, overrides=list(sets))


def _compute_names(sc, g_fwd, g_bwd, layer_f, layer_b):
    tasks = build_step_graph(context_for(sc)).tasks
    keep = (f"fwd {layer_f} mb{g_fwd} ", f"bwd {layer_b} mb{g_bwd} ")
    return [t.name for t in tasks if isinstance(t, ComputeTask) and t.stream == COMPUTE and t.name.startswith(keep)], \
        [t.name for t in tasks if isinstance(t, CollectiveTask) and "all_to_all" in t.name
         and t.name.endswith((keep[0].strip(), keep[1].strip()))]


def test_issue_order_is_the_dualpipe_pairing():
    # Forward of mb1 block 0 runs with the backward of mb0 block 3 (both 5th units of their pass:
    # E,0,1,2,3 / H,3,2,1,0 -> step 1 pairs fwd block 0 with bwd block 3). Compute order: bwd unpermute,
    # fwd attention (hides bwd combine), bwd experts (hide fwd dispatch), fwd experts (hide bwd
    # dispatch), bwd attention (hides fwd combine), fwd unpermute.
    compute, ep = _compute_names(_scenario(["parallel.moe_a2a_overlap=true"]), 1, 0, 0, 3)
    assert compute == ["bwd 3 mb0 unpermute", "fwd 0 mb1 attn+router", "bwd 3 mb0 experts", "fwd 0 mb1 experts",
                       "bwd 3 mb0 attn+router", "fwd 0 mb1 unpermute"]
    assert ep == [
        "ep all_to_all combine-bwd bwd 3 mb0", "ep all_to_all dispatch fwd 0 mb1",
        "ep all_to_all dispatch-bwd bwd 3 mb0", "ep all_to_all combine fwd 0 mb1"]


def test_same_bytes_less_exposed():
    base = simulate(_scenario())
    over = simulate(_scenario(["parallel.moe_a2a_overlap=true"]))
    eb, eo = base.breakdown["communication"]["ep"], over.breakdown["communication"]["ep"]
    assert eo["on_link_s"] == pytest.approx(eb["on_link_s"], rel=1e-9)  # the same all-to-alls
    assert eo["exposed_s"] < 0.7 * eb["exposed_s"]
    assert over.step_time_s < base.step_time_s


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
def test_pipelines_pair_steady_state_forwards_and_backwards(schedule):
    sets = [f"parallel.pipeline_schedule={schedule}"]
    if schedule == "interleaved":
        sets.append("parallel.virtual_stages=2")
    base = simulate(_scenario(sets, pp=2))
    over = simulate(_scenario([*sets, "parallel.moe_a2a_overlap=true"], pp=2))
    eb, eo = base.breakdown["communication"]["ep"], over.breakdown["communication"]["ep"]
    assert eo["on_link_s"] == pytest.approx(eb["on_link_s"], rel=1e-9)
    assert eo["exposed_s"] < eb["exposed_s"]
    # (The step need not be shorter: a combined step waits for both its activations and its
    # gradients before it starts, which couples the pipeline stages more tightly.)


@pytest.mark.parametrize(("sets", "pp", "match"), [
    (["parallel.framework=fsdp"], 1, "framework: ddp"),
    (["training.activation_checkpointing=full"], 1, "full activation recomputation"),
    (["parallel.pipeline_schedule=gpipe"], 2, "gpipe"),
])
def test_unsupported_layouts_are_refused(sets, pp, match):
    with pytest.raises(InputError, match=match):
        check_layout(_scenario(["parallel.moe_a2a_overlap=true", *sets], pp=pp))


def test_needs_an_moe_model():
    raw = {"name": "t", "model": {k: v for k, v in TINY.items() if k != "moe"},
           "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 8},
           "parallel": {"framework": "ddp", "moe_a2a_overlap": True}}
    with pytest.raises(Exception, match="moe_a2a_overlap needs an MoE model"):
        scenario_from_dict(raw)


def test_a_second_host_synchronisation_splits_the_forward_experts():
    # the clamped SwiGLU (GPT-OSS) synchronises the host before its activation: the forward experts run as
    # two tasks, in the plain schedule and in the combined 1F1B; the backward keeps one
    clamped = dict(TINY, mlp="swiglu", swiglu_limit=7.0)

    def names(sets):
        raw = {"name": "t", "model": clamped, "cluster": {"topology": "dgx-h100", "nodes": 2},
               "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 64},
               "parallel": {"framework": "ddp", "ep": 16}}
        tasks = build_step_graph(context_for(scenario_from_dict(raw, overrides=list(sets)))).tasks
        return [t.name for t in tasks if isinstance(t, ComputeTask) and t.stream == COMPUTE]

    plain = names(())
    i = plain.index("fwd 0 mb0 experts")
    assert plain[i + 1] == "fwd 0 mb0 experts (after sync)"
    assert "bwd 0 mb0 experts (after sync)" not in plain
    paired = names(["parallel.moe_a2a_overlap=true"])
    i = paired.index("fwd 0 mb1 experts")
    assert paired[i + 1] == "fwd 0 mb1 experts (after sync)"
