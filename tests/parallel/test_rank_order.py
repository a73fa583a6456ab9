"""Megatron-Core's two rank orders (``parallel.use_tp_pp_dp_mapping``): which GPUs form each group, by hand."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.interop.megatron import import_args
from simulator.interop.pipeline import import_scenario
from simulator.parallel.build import mesh_for
from simulator.parallel.mesh import RankMesh


def test_default_order_keeps_data_parallel_inside_pipeline_stage():
    """tp-cp-dp-pp on 8 GPUs, tp 2, dp 2, pp 2: rank = t + 2·(d + 2·p), so stage 0 is GPUs 0-3."""
    mesh = RankMesh(tp=2, dp=2, pp=2, gpus_per_node=4)
    assert mesh.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_tp_pp_dp_mapping_puts_a_whole_pipeline_on_consecutive_ranks():
    """tp-cp-pp-dp (Megatron-Core ``--use-tp-pp-dp-mapping``): rank = t + 2·(p + 2·d), so one pipeline is GPUs
    0-3 (one node of four) and its data-parallel peers sit on the other node."""
    mesh = RankMesh(tp=2, dp=2, pp=2, gpus_per_node=4, pp_before_dp=True)
    assert mesh.groups("tp") == [[0, 1], [4, 5], [2, 3], [6, 7]]
    assert mesh.groups("pp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.spans_nodes("pp") == [] and len(mesh.spans_nodes("dp")) == 4
    assert RankMesh(tp=2, dp=2, pp=2, gpus_per_node=4).spans_nodes("dp") == []


def _scenario(**parallel):
    return scenario_from_dict({
        "name": "order", "model": "llama-3-8b",
        "cluster": {"topology": "dgx-h100", "nodes": 2},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 32, "precision": "bf16"},
        "parallel": {"framework": "ddp", "tp": 4, "pp": 2, **parallel},
    })


def test_scenario_key_reaches_the_mesh():
    """tp 4, pp 2 on two 8-GPU nodes: the pipeline's two stages are on one node only with the mapping."""
    assert mesh_for(_scenario(), 8).spans_nodes("pp") != []
    assert mesh_for(_scenario(use_tp_pp_dp_mapping=True), 8).spans_nodes("pp") == []


@pytest.mark.parametrize("ep", [1, 8])
def test_mapping_with_an_moe_model_is_refused(ep):
    """The expert groups are placed in the default order only, so an MoE model is refused at any ep (at ep 1 its
    expert-data-parallel groups would still be contiguous blocks of ranks)."""
    from simulator.api import simulate

    scenario = scenario_from_dict({
        "name": "moe", "model": "mixtral-8x7b", "cluster": {"topology": "dgx-h100", "nodes": 2},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 32, "precision": "bf16"},
        "parallel": {"framework": "ddp", "tp": 4, "pp": 2, "ep": ep, "sequence_parallel": True,
                     "use_tp_pp_dp_mapping": True},
    })
    with pytest.raises(InputError, match="use_tp_pp_dp_mapping"):
        simulate(scenario)


def test_placement_lists_each_stage_under_the_mapping():
    """tp 2, dp 2, pp 2 mapped: stage 0 is GPUs 0, 1 (pipeline 0) and 4, 5 (pipeline 1); stage 1 is 2, 3 and 6, 7."""
    from simulator.parallel.placement import placement_lines

    text = "\n".join(placement_lines(RankMesh(tp=2, dp=2, pp=2, gpus_per_node=4, pp_before_dp=True)))
    assert "stage 0: GPUs 0-1, 4-5 (nodes 0-1)" in text and "stage 1: GPUs 2-3, 6-7 (nodes 0-1)" in text
    assert "tp-cp-pp-dp" in text
    assert "stage 0: GPUs 0-3 (nodes 0)" in "\n".join(placement_lines(RankMesh(tp=2, dp=2, pp=2, gpus_per_node=4)))


def test_megatron_flag_round_trip():
    from simulator.interop.megatron_export import export_args

    args = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 64 --bf16 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
            "--use-tp-pp-dp-mapping --vocab-size 128256")
    assert import_args(args).get("parallel.use_tp_pp_dp_mapping") is True
    scenario, _, _ = import_scenario("megatron", text=args, topology="dgx-h100", nodes=2)
    assert "--use-tp-pp-dp-mapping" in export_args(scenario).text
    moe = import_args(args + " --num-experts 8 --moe-token-dispatcher-type alltoall")
    assert moe.get("parallel.use_tp_pp_dp_mapping") is None


def test_nemo_recipe_key_reaches_the_scenario():
    """NeMo's model.use_tp_pp_dp_mapping (megatron_gpt_config.yaml) is the same switch."""
    from tests.interop.test_importers import NEMO

    text = NEMO.replace("  sequence_parallel:", "  use_tp_pp_dp_mapping: true\n  sequence_parallel:", 1)
    assert "use_tp_pp_dp_mapping" in text
    scenario, _, _ = import_scenario("nemo", text=text, topology="dgx-a100", nodes=2,
                                     overrides=["model.vocab_size=50304"])
    assert scenario.parallel.use_tp_pp_dp_mapping is True
