"""Megatron-Core's ``moe`` and ``shared_experts`` recompute modules (``training.recompute_modules``): the
all-to-alls and ops the recompute re-runs, its FLOPs, the bytes a block keeps and the refusals, by hand."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.work import from_scenario
from simulator.workload import flops, moe_memory

# An MoE model small enough to count by hand: h 64, 2 blocks (both MoE), 4 experts of width 128, top-2,
# one shared expert of width 64, SwiGLU (3 matrices), vocabulary 128.
MODEL = {"name": "tiny-moe", "n_layers": 2, "hidden_size": 64, "n_heads": 4, "ffn_hidden_size": 256,
         "vocab_size": 128, "mlp": "swiglu", "norm": "rmsnorm", "linear_bias": False,
         "max_position_embeddings": 128, "dropout": 0.0,
         "moe": {"n_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 128, "n_shared_experts": 1,
                 "shared_expert_ffn_hidden_size": 64, "imbalance": 1.0}}


def _scenario(modules: list[str] | None, model: dict | None = None, **parallel):
    return scenario_from_dict({
        "name": "t", "model": model or MODEL, "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus": 4},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 8, "precision": "bf16",
                     "activation_checkpointing": "selective", "recompute_modules": modules},
        "parallel": {"framework": "ddp", "ep": 4, **parallel},
    })


def _a2a_tasks(modules: list[str], **parallel) -> list[str]:
    graph = build_step_graph(context_for(_scenario(modules, **parallel), gpus_per_node=8))
    return [t.name for t in graph.tasks if t.name.startswith("ep all_to_all")]


def test_moe_recompute_runs_the_dispatch_and_combine_again():
    """Per MoE block and micro-batch the step runs four all-to-alls (dispatch and combine forward, their
    gradients backward); the moe module re-runs the forward two before the block's backward: 6. On 4
    GPUs (dp 4): 8 / (2 x 4) = 1 micro-batch per rank, 2 MoE blocks: 8 without, 12 with, the 4 more
    named as recomputes."""
    plain, again = _a2a_tasks(["layernorm"]), _a2a_tasks(["moe", "layernorm"])
    assert len(plain) == 2 * 4 and len(again) == 2 * 6
    assert sum("recompute" in n for n in again) == 2 * 2 and not any("recompute" in n for n in plain)
    # DeepEP's dispatch inside one node is one all-to-all too: the same counts
    assert len(_a2a_tasks(["moe"], moe_dispatcher="deepep")) == 2 * 6


def test_moe_recompute_reruns_the_layer_from_the_router():
    """The recompute runs the router, the experts, the shared expert and the unpermute (not the attention
    nor the pre-MLP norm): its compute tasks carry those ops only."""
    sc = _scenario(["moe"])
    mw = from_scenario(sc).moe
    graph = build_step_graph(context_for(sc, gpus_per_node=8))
    names = {op.name for t in graph.tasks if t.kind == "recompute" for op in t.ops}
    assert {"router", "experts_up", "experts_down", "shared_up", "shared_down", "unpermute"} <= names
    assert not names & {"qkv", "attention", "out_proj", "post_attn_add_norm"}
    assert [op.name for op in mw.pre[mw.router_at:]][0] == "router"


def test_moe_recompute_adds_the_moe_layer_forward_flops():
    """Hardware FLOPs grow by each MoE block's MoE-layer forward: router 2·T·h·E + routed experts
    3·2·T·k·h·f_e + shared expert 3·2·T·h·f_s with T = 2 x 128 tokens, per block (2) and micro-batch
    (8 / 2 = 4 in the whole step); shared_experts alone by the shared expert's part."""
    t = 2 * 128
    router, routed, shared = 2 * t * 64 * 4, 3 * 2 * t * 2 * 64 * 128, 3 * 2 * t * 64 * 64
    base = flops.for_scenario(_scenario(["layernorm"]), executed=True)
    moe = flops.for_scenario(_scenario(["moe", "layernorm"]), executed=True)
    sh = flops.for_scenario(_scenario(["shared_experts", "layernorm"]), executed=True)
    assert moe.hardware_flops - base.hardware_flops == 2 * 4 * (router + routed + shared)
    assert sh.hardware_flops - base.hardware_flops == 2 * 4 * shared
    assert moe.model_flops == sh.model_flops == base.model_flops


def test_moe_recompute_keeps_only_the_layer_input():
    """Per MoE block and micro-batch (p = 2, T = 256 tokens, 512 routed copies at EP 4, imbalance 1): the
    layer keeps nothing past its input, so the block stores 0 routed bytes (the copies' input 64 wide, the
    two up projections and the product 128 wide each: 512·2·(64 + 3·128)) and 0 shared bytes
    (256·2·3·64), and holds them again for one block during its backward; shared_experts frees the
    shared expert's alone."""
    routed, shared = 512 * 2 * (64 + 3 * 128), 256 * 2 * 3 * 64
    base = moe_memory.moe_block_extra(_scenario(["layernorm"]), 2)
    norm = 2 * 256 * 64  # the pre-MLP norm output layernorm frees in every case
    assert base - moe_memory.moe_block_extra(_scenario(["moe"]), 2) == routed + shared - norm
    assert base - moe_memory.moe_block_extra(_scenario(["shared_experts", "layernorm"]), 2) == shared
    assert moe_memory.recompute_transient(_scenario(["moe"]), 2) == routed + shared
    assert moe_memory.recompute_transient(_scenario(["shared_experts"]), 2) == shared
    assert moe_memory.recompute_transient(_scenario(["layernorm"]), 2) == 0
    # and the stage's peak carries that transient (one block's, whatever the blocks in flight)
    from simulator.workload import activations
    assert activations.activations(_scenario(["moe"])).recompute_transient == routed + shared


def test_moe_recompute_modules_refused_where_megatron_builds_no_such_module():
    dense = {k: v for k, v in MODEL.items() if k != "moe"}
    with pytest.raises(InputError, match="no MoE blocks"):
        from simulator.api import simulate
        simulate(_scenario(["moe"], model=dense, ep=1))
    no_shared = {**MODEL, "moe": {"n_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 128}}
    with pytest.raises(InputError, match="shared experts, but the model has none"):
        simulate(_scenario(["shared_experts"], model=no_shared))
    with pytest.raises(InputError, match="Megatron-Core refuses it"):
        simulate(_scenario(["moe"], moe_a2a_overlap=True))
    with pytest.raises(InputError, match="shared_experts recompute cannot work with --moe-shared-expert-overlap"):
        simulate(_scenario(["shared_experts"], moe_shared_expert_overlap=True))


def test_shared_expert_collectives_rerun_as_often_as_the_shared_experts():
    """TP 2 with sequence parallelism: per MoE block and micro-batch the backward's attention places its
    collectives beside its GEMMs (Megatron's asynchronous TP backward, ``expert_tp.placement``), so the block
    issues the shared expert's pair (1), plus one pair per re-run of the shared expert: once with moe, once
    with shared_experts, twice with both (the checkpoints nest)."""
    from simulator.parallel import expert_tp

    def bwd_calls(modules):
        return expert_tp.plain_tp_calls(from_scenario(_scenario(modules, tp=2, sequence_parallel=True)), "bwd")

    assert [bwd_calls(m) for m in (["layernorm"], ["moe"], ["shared_experts"], ["moe", "shared_experts"])] == \
        [1, 2, 2, 3]


def test_shared_experts_rerun_before_their_backward():
    """shared_experts checkpoints the shared expert: its three forward ops re-run first in its backward."""
    mw = from_scenario(_scenario(["shared_experts"])).moe
    assert [op.name for op in mw.bwd_shared[:3]] == ["recompute.shared_up", "recompute.shared_swiglu",
                                                     "recompute.shared_down"]
    assert not any(op.name.startswith("recompute.") for op in from_scenario(_scenario(["layernorm"])).moe.bwd_shared)


@pytest.mark.parametrize("modules", [["moe"], ["moe", "layernorm", "moe_act"]])
def test_moe_recompute_simulates(modules):
    from simulator.api import simulate

    assert simulate(_scenario(modules)).breakdown["recompute_s"] > 0
