"""Mamba hybrids (Nemotron-H): parameters and FLOPs of each layer kind, checked against Megatron-Core's
module shapes written out by hand and against NVIDIA's published Nemotron-H FLOP count."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from simulator import catalog
from simulator.catalog.hf import model_dict_from_hf
from simulator.cli import app
from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.workload import flops, params

# Keys as in nvidia/Nemotron-H-8B-Base-8K/config.json (Megatron-Bridge tests/unit_tests/models/nemotronh).
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_bias": False,
    "attention_head_dim": 128, "chunk_size": 128, "conv_kernel": 4, "expand": 2, "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "intermediate_size": 21504, "mamba_head_dim": 64, "mamba_num_heads": 128, "mamba_proj_bias": False,
    "max_position_embeddings": 8192, "mlp_bias": False, "mlp_hidden_act": "relu2", "n_groups": 8,
    "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8, "ssm_state_size": 128,
    "tie_word_embeddings": False, "use_bias": False, "use_conv_bias": True, "vocab_size": 131072,
}


def test_nemotron_h_56b_parameters_by_hand():
    """Megatron-Core's modules, written out: a Mamba layer is its fused pre-norm (8,192), in_proj
    8,192 x (2 x 16,384 + 2 x 8 x 256 + 256), the depthwise conv over 16,384 + 4,096 channels with 4 taps and a
    bias, dt_bias / A_log / D (3 x 256), the gated norm (16,384) and out_proj 16,384 x 8,192; an attention layer
    its norm, QKV 8,192 x (8,192 + 2 x 1,024) and the output 8,192 x 8,192; an MLP layer its norm and
    2 x 8,192 x 32,768 (squared ReLU, not gated)."""
    mamba = 8192 + 8192 * (2 * 16384 + 2 * 8 * 256 + 256) + (16384 + 4096) * 5 + 3 * 256 + 16384 + 16384 * 8192
    attention = 8192 + 8192 * (8192 + 2 * 1024) + 8192 * 8192
    mlp = 8192 + 2 * 8192 * 32768
    assert (mamba, attention, mlp) == (438_432_512, 151_003_136, 536_879_104)
    outside = 2 * 131072 * 8192 + 8192  # untied embedding and output layer, final norm
    c = params.count(catalog.get_model("nemotron-h-56b"))
    assert c.total == 54 * mamba + 10 * attention + 54 * mlp + outside
    assert c.non_embedding == c.total - 2 * 131072 * 8192
    # the 59 blocks of two layers average the 118 layers
    assert params.layer(catalog.get_model("nemotron-h-56b")).total * 59 == pytest.approx(c.total - outside)


def test_nemotron_h_4b_matches_its_checkpoint_size():
    """nvidia/Nemotron-H-4B-Base-8K ships 4.99 GB + 3.98 GB of BF16 safetensors: 2 bytes a parameter."""
    n = params.count(catalog.get_model("nemotron-h-4b")).total
    assert 8.96e9 <= 2 * n <= 8.98e9


def test_nemotron_h_56b_flops_equal_nvidia_formula():
    """NVIDIA/dgxc-benchmarking nemotron-h/README.md counts a 8,192-token 56B sequence as 6 x (MLP
    237,494,511,599,616 + attention 23,364,622,090,240 + Mamba 199,690,209,460,224 + output layer
    8,796,093,022,208) FLOPs with its chunk of 256 tokens and the whole attention matrix."""
    m = catalog.get_model("nemotron-h-56b")
    m = m.model_copy(update={"mamba": m.mamba.model_copy(update={"chunk_size": 256})})
    nvidia = 6 * (237_494_511_599_616 + 23_364_622_090_240 + 199_690_209_460_224 + 8_796_093_022_208)
    assert flops.step(m, 1, 8192, causal=False).model_flops == nvidia


def test_causal_halves_the_intra_chunk_product():
    """Causal counting drops half of each attention layer's core (QK^T and PV, 2 x s^2 x q_dim each a sequence) and half
    of each Mamba layer's intra-chunk product (Q x d_inner a token, _chunk_scan_fwd skipping the tiles above the
    diagonal); nothing else changes. nemotron-h-8b: 4 attention, 24 Mamba layers, q_dim 4,096, d_inner 8,192."""
    m, s = catalog.get_model("nemotron-h-8b"), 4096
    full = flops.step(m, 1, s, causal=False).forward_flops
    causal = flops.step(m, 1, s, causal=True).forward_flops
    assert full - causal == 4 * 2 * s * s * 4096 + 24 * s * 128 * 8192


def test_hf_import_equals_catalog(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NEMOTRON_H_8B))
    model = ModelConfig.model_validate(model_dict_from_hf(path))
    assert model.n_layers == 26 and model.hybrid_counts == (24, 4, 24)
    assert params.count(model).total == params.count(catalog.get_model("nemotron-h-8b")).total
    path.write_text(json.dumps({**NEMOTRON_H_8B, "hybrid_override_pattern": "MEM*E-"}))
    with pytest.raises(InputError, match="lacks key 'n_routed_experts'"):  # MoE layers need their experts
        model_dict_from_hf(path)
    path.write_text(json.dumps({**NEMOTRON_H_8B, "use_bias": True}))
    with pytest.raises(InputError, match="use_bias"):
        model_dict_from_hf(path)
    path.write_text(json.dumps({**NEMOTRON_H_8B, "mlp_hidden_act": "silu"}))
    with pytest.raises(InputError, match="mlp_hidden_act 'silu' is not modelled"):
        model_dict_from_hf(path)


BASE = dict(name="x", hidden_size=64, n_heads=4, ffn_hidden_size=128, vocab_size=100,
            mamba={"n_heads": 8, "n_groups": 2})


@pytest.mark.parametrize(("update", "text"), [
    ({"hybrid_pattern": "M-M*-"}, "even, non-zero length"),
    ({"hybrid_pattern": "M-M*-E"}, "MoE layers"),
    ({"hybrid_pattern": "M-M*x-"}, "unknown layer kind"),
    ({"hybrid_pattern": "M-M*-M-M", "n_layers": 3}, "set it to 4"),
    ({"hybrid_pattern": "*-*-", "mamba": None}, None),
    ({"hybrid_pattern": "M-*-", "mamba": None}, "set model.mamba"),
    ({"mamba": {"n_heads": 8, "n_groups": 3}, "hybrid_pattern": "M-*-"}, "multiple of model.mamba.n_groups"),
    ({"n_layers": 2}, "set model.hybrid_pattern"),
])
def test_config_checks(update, text):
    data = {**BASE, **update}
    if text is None:
        assert ModelConfig(**data).n_layers == 2  # half the pattern, filled in
        return
    with pytest.raises(ValidationError, match=text):
        ModelConfig(**data)


def test_export_refused_with_one_clear_error_and_flops_works(tmp_path):
    """The step and memory of a hybrid are simulated (tests/workload/test_hybrid_ops.py); an exported transformer
    config would drop its Mamba layers, so export refuses it."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: nemotron-h-8b\ncluster: {topology: dgx-h100, nodes: 1}\n"
                        "training: {seq_len: 8192, micro_batch_size: 1, global_batch_size: 64, precision: bf16}\n"
                        "parallel: {framework: ddp, tp: 2}\n")
    result = CliRunner().invoke(app, ["export", "--to", "megatron", str(scenario)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.count("error:") == 1 and "model.hybrid_pattern" in result.output
    assert CliRunner().invoke(app, ["flops", str(scenario)]).exit_code == 0
