"""Transformer Engine's FP8 attention (``training.kernels.fp8_attention``) and Megatron-Core's FP8 store of the
activation's input (``training.kernels.activation_fp8_input_store``): the kernel rates against cudnn-frontend's
measured FP8 / BF16 times, the casts' bytes, the saved activations of a LoRA block, and the refusals, by hand."""

from __future__ import annotations

import pytest

from simulator.catalog import get_gpu
from simulator.config.loader import scenario_from_dict
from simulator.config.scenario import KernelConfig
from simulator.errors import InputError
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.workload import activations, ops
from simulator.workload.attention_core import attention_core_ops

# cudnn-frontend's SDPA training benchmark, causal, head dim 128, 8,192 tokens, BF16 and FP8 timed in one run
# (ms, forward and backward): B200 and GB300 with cuDNN 9.13.1, H200 with cuDNN 9.27.
MEASURED_MS = {
    "b200": ((1.589, 5.526), (1.464, 4.382)),
    "gb300": ((1.281, 4.778), (1.060, 3.632)),
    "h200": ((3.357, 10.448), (2.260, 16.298)),
}


@pytest.mark.parametrize("gpu", sorted(MEASURED_MS))
def test_fp8_attention_runs_at_the_measured_fp8_over_bf16_ratio(gpu):
    spec = get_gpu(gpu)
    bf16 = RooflineComputeModel(spec, "fp8", for_gpu(spec), attention_impl="cudnn")
    fp8 = RooflineComputeModel(spec, "fp8", for_gpu(spec), attention_impl="cudnn", fp8_attention=True)
    (bf16_f, bf16_b), (fp8_f, fp8_b) = MEASURED_MS[gpu]
    assert fp8.attn_rate[0] / bf16.attn_rate[0] == pytest.approx(bf16_f / fp8_f)
    assert fp8.attn_rate[1] / bf16.attn_rate[1] == pytest.approx(bf16_b / fp8_b)
    # in a BF16 run the flag changes nothing (the scenario refuses it there)
    bf16_run = RooflineComputeModel(spec, "bf16", for_gpu(spec), attention_impl="cudnn", fp8_attention=True)
    assert bf16_run.attn_rate == RooflineComputeModel(spec, "bf16", for_gpu(spec), attention_impl="cudnn").attn_rate


def _llama70b():
    return scenario_from_dict({"name": "t", "model": "llama-2-70b", "cluster": {"topology": "dgx-b200", "nodes": 1},
                               "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 8,
                                            "precision": "fp8"}}).model


def test_the_casts_around_fp8_attention_by_hand():
    # Llama 2 70B, one 8,192-token sequence: Q 8,192 wide, K and V 1,024 each. Forward Q, K, V read in BF16 and
    # written in FP8, 3 B per element; backward the output gradient (the query's width), 3 B per element.
    cast, core = attention_core_ops(_llama70b(), 1, 8192, 1, 2, True, fp8=True)
    assert (cast.name, core.name) == ("attention.fp8_quantize", "attention")
    assert cast.bytes == 3 * 8192 * (8192 + 2 * 1024) == 251_658_240
    assert ops._backward(cast)[0].bytes == 3 * 8192 * 8192 == 201_326_592
    assert len(attention_core_ops(_llama70b(), 1, 8192, 1, 2, True)) == 1


def test_lora_block_keeps_no_frozen_linear_inputs_by_hand():
    # Llama 2 70B (h 8,192, f 28,672, 64 heads of 128, 8 KV heads), one 8,192-token sequence, FP8 inputs, no dropout.
    # LoRA on qkv and proj (MLPerf's), FP8 attention and the activation's FP8 input store:
    #   the two norm inputs 2 x 2 B x sbh, the qkv adapter's BF16 input 2 B x sbh (fc1 frozen: nothing);
    #   Q, K, V in FP8 1 B x s x (8,192 + 2,048), the attention output in BF16 2 B x s x 8,192;
    #   the SwiGLU input (gate and up) in FP8 1 B x s x 2f, fc2 frozen: no activation output;
    #   the fp32 log-sum-exp 4 B x 64 heads x s.
    s, h, f = 8192, 8192, 28672
    expected = (2 * 2 + 2) * s * h + s * (1 * (8192 + 2048) + 2 * 8192) + s * 2 * f + 4 * 64 * s
    assert expected == 1_092_616_192
    got = activations.layer_activation_bytes(_llama70b(), 1, s, fp8_inputs=True, adapters=("qkv", "proj"),
                                             act_input_bytes=1, qkv_bytes=1)
    assert got == expected
    # full training keeps every linear's FP8 input, the attention output in BF16 and in FP8 (proj's copy), the
    # SwiGLU input in BF16 and its output in FP8: 2 x 2 + 2 x 1 B x sbh, s x (2 x 10,240 + 3 x 8,192), s x (2 x 2f + f)
    full = (2 * 2 + 2 * 1) * s * h + s * (2 * 10240 + 3 * 8192) + s * (2 * 2 * f + f) + 4 * 64 * s
    assert activations.layer_activation_bytes(_llama70b(), 1, s, fp8_inputs=True) == full


def test_activation_fp8_input_store_adds_its_casts_by_hand():
    # A SwiGLU block: the activation kernel reads gate and up (2f) and writes f, 3 passes of 2 B; the store also
    # writes its FP8 copy of the 2f input (1 B each); the backward reads it back and writes BF16 (3 B each).
    m = _llama70b()
    tokens, f = 8192, 28672

    def act(kernels):
        block = ops.layer_ops(m, 1, tokens, 1, 2, kernels, "none", fp8="delayed")
        return next(op for op in block if op.name == "mlp_swiglu")

    plain = act(KernelConfig())
    stored = act(KernelConfig(activation_fp8_input_store=True))
    assert plain.bytes == 3 * 2 * tokens * f
    assert stored.bytes == plain.bytes + 2 * tokens * f
    assert ops._backward(stored)[0].bytes == 2 * plain.bytes + 3 * 2 * tokens * f


@pytest.mark.parametrize("training,parallel,gpu,field", [
    ({"precision": "bf16", "kernels": {"fp8_attention": True}}, {}, "dgx-b200", "fp8_attention"),
    ({"precision": "fp8", "kernels": {"fp8_attention": True, "fp8_recipe": "rowwise"}}, {"framework": "fsdp"},
     "dgx-b200", "fp8_attention"),
    ({"precision": "fp8", "kernels": {"fp8_attention": True, "attention": "fa2"}}, {}, "dgx-b200", "fp8_attention"),
    ({"precision": "fp8", "kernels": {"fp8_attention": True}}, {}, "dgx-a100", "fp8_attention"),
    ({"precision": "bf16", "kernels": {"activation_fp8_input_store": True}}, {}, "dgx-b200", "activation_fp8_input_store"),
])
def test_refusals_name_the_field(training, parallel, gpu, field):
    data = {"name": "t", "model": "llama-2-70b", "cluster": {"topology": gpu, "nodes": 1},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8, **training},
            "parallel": {"framework": "ddp", **parallel}}
    with pytest.raises((InputError, ValueError)) as exc:
        scenario_from_dict(data)
    assert field in str(exc.value)
