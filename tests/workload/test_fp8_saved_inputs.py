"""Transformer Engine keeps the FP8 copy of each linear layer's input for the weight gradient (1 B per
element), torchao's float8 the 16-bit one: hand arithmetic on a Llama-3-8B block (h 4,096, q 4,096,
kv 1,024, SwiGLU f 14,336, 32 heads), 1 x 4,096 tokens, FlashAttention, no dropout, no parallelism."""

from __future__ import annotations

import pytest

from simulator.workload import activations


@pytest.mark.parametrize(("fp8_inputs", "per_token"), [
    # norm inputs 2 x 2 B x h, attention and MLP inputs 2 x 2 B x h, Q 2 x q, K, V 2 x 2 x kv,
    # out-projection input 2 x q, gate/up 2 x 2 x f, down input 2 x f, log-sum-exp 4 B x 32 heads
    (False, 2 * 2 * 4096 + 2 * 2 * 4096 + 2 * 4096 + 2 * 2 * 1024 + 2 * 4096 + 2 * 2 * 14336 + 2 * 14336 + 4 * 32),
    # the attention and MLP inputs and the down input at 1 B; the attention output twice: the 16-bit one
    # FlashAttention keeps for its backward and the out projection's FP8 copy (2 + 1 B)
    (True, 2 * 2 * 4096 + 2 * 1 * 4096 + 2 * 4096 + 2 * 2 * 1024 + (2 + 1) * 4096 + 2 * 2 * 14336 + 1 * 14336 + 4 * 32),
])
def test_te_fp8_keeps_linear_inputs_in_one_byte(llama3_8b, fp8_inputs, per_token):
    got = activations.layer_activation_bytes(llama3_8b, 1, 4096, fp8_inputs=fp8_inputs)
    assert got == pytest.approx(4096 * per_token)


def test_unfused_attention_output_is_kept_only_by_the_projection():
    # without a fused kernel the attention output is the projection's input only: its FP8 copy (1 B)
    assert activations.out_proj_input_bytes(2, 1, flash_attention=False) == 1
    assert activations.out_proj_input_bytes(2, 1, flash_attention=True) == 2 + 1
    assert activations.out_proj_input_bytes(2, 2, flash_attention=True) == 2  # one tensor serves both


@pytest.mark.parametrize(("precision", "recipe", "lin"), [
    ("fp8", "delayed", 1), ("fp8", "current", 1), ("fp8", "mxfp8", 1),  # Transformer Engine
    ("fp8", "tensorwise", 2), ("fp8", "rowwise", 2),  # torchao saves the high-precision input
    ("bf16", "delayed", 2),
])
def test_which_recipes_save_fp8_inputs(new_scenario, shapes, precision, recipe, lin):
    # MXFP8 needs Blackwell's block-scaled GEMMs (the scenario refuses it on the fixture's H100)
    gpu = {"cluster": {"topology": {"name": "t", "gpu": "b200", "gpus_per_node": 8}}} if recipe == "mxfp8" else {}
    sc = new_scenario(shapes["llama3_8b"], training={"precision": precision, "kernels": {"fp8_recipe": recipe}},
                      **gpu)
    assert activations.linear_input_bytes(sc, 2) == lin
