"""Megatron-Core's ``mlp`` recompute module (``training.recompute_modules: [mlp]``): which ops re-run, the
FLOPs, the bytes a block keeps and the MLP's tensor-parallel collectives again, by hand."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.config.scenario import KernelConfig
from simulator.parallel.build import build_step_graph, context_for
from simulator.workload import activations, flops, ops

# A GELU-4h block small enough to count by hand: h 64, f 256, 4 heads, 2 blocks, vocabulary 128.
MODEL = {"name": "tiny", "n_layers": 2, "hidden_size": 64, "n_heads": 4, "ffn_hidden_size": 256, "vocab_size": 128,
         "mlp": "gelu", "norm": "layernorm", "linear_bias": False, "position_embedding": "learned",
         "max_position_embeddings": 128, "dropout": 0.0}


def _scenario(modules: list[str], tp: int = 1):
    return scenario_from_dict({
        "name": "t", "model": MODEL, "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus": 2 * tp},
        "training": {"seq_len": 128, "micro_batch_size": 2, "global_batch_size": 8, "precision": "bf16",
                     "activation_checkpointing": "selective", "recompute_modules": modules},
        "parallel": {"framework": "ddp", "tp": tp, "sequence_parallel": tp > 1},
    })


def test_mlp_ops_are_marked_for_recompute():
    """Fused kernels: the post-attention add + norm (its norm is in TE's linear_fc1), the up GEMM, the
    GELU and the down GEMM re-run; the attention's ops do not. Their GEMM FLOPs: the MLP forward,
    2 GEMMs x 2 * tokens * h * f = 4 * 256 * 64 * 256 for 256 tokens."""
    m = _scenario(["mlp"]).model
    block = ops.layer_ops(m, 2, 128, 1, 2, KernelConfig(), "none", mlp_recompute=True)
    marked = [op.name for op in block if op.recompute]
    assert marked == ["post_attn_add_norm", "mlp_up", "mlp_gelu", "mlp_down"]
    assert sum(op.flops for op in ops.recompute_ops(block) if op.kind == "gemm") == 4 * 256 * 64 * 256


def test_mlp_recompute_adds_the_mlp_forward_flops():
    """Hardware FLOPs grow by the MLP forward of every block and micro-batch: 2 blocks x 4 micro-batches
    x 2 * 2 * (2 * 128 tokens) * 64 * 256; model FLOPs do not change."""
    with_mlp = flops.for_scenario(_scenario(["core_attn", "mlp"]), executed=True)
    without = flops.for_scenario(_scenario(["core_attn"]), executed=True)
    assert with_mlp.hardware_flops - without.hardware_flops == 2 * 4 * 2 * 2 * 256 * 64 * 256
    assert with_mlp.model_flops == without.model_flops


def test_mlp_recompute_keeps_only_the_mlp_input():
    """Per block and micro-batch, p = 2, no TP: the MLP input (the norm output, 2 * sbh) and the GELU's
    input and output (2 * s * b * f each) are not kept: 2 * 256 * 64 + 4 * 256 * 256 bytes fewer."""
    m = _scenario(["mlp"]).model
    kept = activations.layer_activation_bytes(m, 2, 128, 1, recompute="none")
    checkpointed = activations.layer_activation_bytes(m, 2, 128, 1, recompute="none", mlp_recompute=True)
    assert kept - checkpointed == 2 * 256 * 64 + 4 * 256 * 256


def test_mlp_recompute_runs_the_mlp_tensor_parallel_collectives_again():
    """With TP 2 and sequence parallelism the recomputed MLP all-gathers its input and reduce-scatters its
    output again: one reduce-scatter and one all-gather per block and micro-batch in the recompute. On 4
    GPUs at TP 2, dp 2: 8 / (2 x 2) = 2 micro-batches per rank, so 2 blocks x 2 micro-batches x 2
    collectives; core_attn alone recomputes no collective."""
    def recompute_collectives(modules):
        sc = _scenario(modules, tp=2)
        graph = build_step_graph(context_for(sc, gpus_per_node=8))
        return sum(1 for t in graph.tasks if t.name.startswith("tp ") and "recompute" in t.name)

    assert recompute_collectives(["core_attn", "mlp"]) == 2 * 2 * 2
    assert recompute_collectives(["core_attn"]) == 0


@pytest.mark.parametrize("modules", [["mlp"], ["core_attn", "mlp"]])
def test_mlp_recompute_simulates(modules):
    from simulator.api import simulate

    assert simulate(_scenario(modules)).breakdown["recompute_s"] > 0
