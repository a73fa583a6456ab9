"""Transformer Engine's fused grouped MLP (``training.kernels.fused_grouped_mlp``): which kernels vanish,
checked by hand on Qwen3-30B-A3B's experts, and the enabling checks."""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.config.kernels import KernelConfig
from simulator.errors import InputError
from simulator.python_api import load
from simulator.workload import moe_ops
from simulator.workload.ops import backward_ops

# Qwen3-30B-A3B: hidden 2,048, 128 experts of width 768, top-8. Micro-batch 4 x 4,096 tokens, EP 8:
# 16,384 tokens x 8 = 131,072 token copies over 16 local experts = 8,192 rows per expert.
COPIES, WIDTH, HIDDEN = 131_072, 768, 2048


def _experts(fused: bool, model: str = "qwen3-30b-a3b", ep: int = 8):
    kernels = KernelConfig(fp8_recipe="mxfp8", fused_grouped_mlp=fused)
    m = catalog.get_model(model)
    m = m.model_copy(update={"moe": m.moe.model_copy(update={"imbalance": 1.0})})  # balanced: 8,192 rows each
    return moe_ops.moe_block_ops(m, 4, 4096, 1, 2, kernels, "none", ep=ep, fp8="mxfp8",
                                 streams=moe_ops.expert_streams("ddp"))


def _bytes(ops) -> float:
    return sum(op.bytes for op in ops)


def test_forward_loses_the_activation_and_fc2_input_cast_by_hand():
    plain, fused = _experts(False).experts, _experts(True).experts
    # Permutation 2 and its inverse bracket the experts (16 local experts), fused or not
    assert [op.name for op in fused] == ["sort_chunks", "experts_up.fp8_cast", "experts_up", "experts_down.fp8_cast",
                                         "experts_down", "restore_chunks"]
    assert next(op for op in fused if op.name == "experts_down.fp8_cast").launches == 0
    # SwiGLU: read gate and up, write the product (3 passes of 2 B over 131,072 x 768 elements); the fc2
    # input's standalone MXFP8 cast: read 2 B, write the row- and column-wise copies (1 + 1 B).
    act = 3 * 2 * COPIES * WIDTH
    cast = 4 * COPIES * WIDTH
    assert _bytes(plain) - _bytes(fused) == pytest.approx(act + cast)
    assert all(op.streams == 0 for op in fused if op.kind == "gemm")  # one grouped kernel each
    assert {op.streams for op in plain if op.kind == "gemm"} == {4}  # TE GroupedLinear: four streams


def test_backward_loses_the_activation_gradient_and_fc1_gradient_cast_by_hand():
    plain, fused = backward_ops(list(_experts(False).experts)), backward_ops(list(_experts(True).experts))
    names = [op.name for op in fused]
    assert "experts_up.fp8_cast.bwd" not in names  # fc1's output gradient: quantized in the dGLU epilogue
    assert "experts_down.fp8_cast.bwd" in names  # dY's cast stays a kernel
    # the SwiGLU backward: twice the forward's bytes; fc1's output-gradient cast: 4 B over 131,072 x 1,536
    act_bwd = 2 * 3 * 2 * COPIES * WIDTH
    up_grad_cast = 4 * COPIES * 2 * WIDTH
    assert _bytes(plain) - _bytes(fused) == pytest.approx(act_bwd + up_grad_cast)
    # the four GEMM gradients are unchanged
    assert sum(op.flops for op in plain if op.kind == "gemm") == sum(op.flops for op in fused if op.kind == "gemm")


def test_gpt_oss_clamp_and_bias_loop_are_absorbed_with_the_second_synchronisation():
    plain, fused = _experts(False, "gpt-oss-120b"), _experts(True, "gpt-oss-120b")
    assert {"experts_clamp", "experts_bias"} <= {op.name for op in plain.experts}
    assert not {"experts_clamp", "experts_bias"} & {op.name for op in fused.experts}
    assert plain.sync_at > 0 and fused.sync_at == 0


BASE = {
    "model": "qwen3-30b-a3b",
    "cluster": {"topology": "gb200-nvl72", "nodes": 1, "gpus": 8},
    "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "fp8",
                 "kernels": {"fp8_recipe": "mxfp8", "fused_grouped_mlp": True}},
    "parallel": {"framework": "ddp", "ep": 8},
}


@pytest.mark.parametrize(("changes", "phrase"), [
    ({"cluster.topology": "dgx-h100"}, "compute capability 10"),
    ({"training.kernels.fp8_recipe": "current"}, "MXFP8 or NVFP4"),
    ({"model": "llama-3-8b", "parallel.ep": 1}, "MoE model"),
    ({"parallel.framework": "fsdp"}, "parallel.framework ddp"),
    ({"parallel.ep": 4, "parallel.etp": 2}, "parallel.etp 1"),
])
def test_refused_where_transformer_engine_does_not_fuse(changes, phrase):
    with pytest.raises(InputError, match="training.kernels.fused_grouped_mlp") as err:
        load(BASE, **{key.replace('.', '__'): value for key, value in changes.items()})
    assert phrase in str(err.value)


def test_accepted_on_blackwell_mxfp8():
    assert load(BASE).training.kernels.fused_grouped_mlp


def test_megatron_export_writes_the_op_fuser_flags():
    from simulator.interop.megatron_export import export_args

    text = export_args(load(BASE)).text.split()
    assert "--use-transformer-engine-op-fuser" in text
    assert text[text.index("--moe-mlp-glu-interleave-size") + 1] == "32"  # Qwen3's SwiGLU: gate and up interleaved
    assert "--use-transformer-engine-op-fuser" not in export_args(load(BASE, training__kernels__fused_grouped_mlp=False)).text
