"""Shared model shapes and a scenario builder for the workload tests.

Shapes are written out here (not read from the catalog) so each expected number depends only on the
published architecture, never on data the code under test also reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.config.model import ModelConfig
from simulator.config.scenario import Scenario

#: Llama 3 8B (Meta, config.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_8B = dict(
    n_layers=32,
    hidden_size=4096,
    n_heads=32,
    n_kv_heads=8,
    ffn_hidden_size=14336,
    vocab_size=128256,
    mlp="swiglu",
    norm="rmsnorm",
    tied_embeddings=False,
)
#: GPT-3 175B (Brown et al. 2020 Table 2.1): 96 layers, d_model 12288, 96 heads, d_ff = 4·d_model.
GPT3_175B = dict(
    n_layers=96,
    hidden_size=12288,
    n_heads=96,
    ffn_hidden_size=4 * 12288,
    vocab_size=51200,
    mlp="gelu",
    norm="layernorm",
    linear_bias=True,
    tied_embeddings=True,
    position_embedding="learned",
    max_position_embeddings=2048,
)


def model(**fields: Any) -> ModelConfig:
    return ModelConfig.model_validate(fields)


def make_scenario(model_fields: dict, *, gpus: int = 8, **sections: dict) -> Scenario:
    """A scenario on ``gpus`` H100s (one node of 8) with the given section overrides."""
    raw: dict[str, Any] = {
        "model": dict(model_fields),
        "cluster": {
            "topology": {"name": "t", "gpu": "h100-sxm", "gpus_per_node": 8},
            "nodes": max(1, gpus // 8),
            **({"gpus": gpus} if gpus < 8 else {}),
        },
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 64},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return scenario_from_dict(raw)


# Session-scoped so hypothesis tests may use them (they are immutable).
@pytest.fixture(scope="session")
def llama3_8b() -> ModelConfig:
    return model(**LLAMA3_8B)


@pytest.fixture(scope="session")
def gpt3_175b() -> ModelConfig:
    return model(**GPT3_175B)


@pytest.fixture(scope="session")
def shapes() -> dict[str, dict]:
    return {"llama3_8b": LLAMA3_8B, "gpt3_175b": GPT3_175B}


@pytest.fixture(scope="session")
def new_model():
    return model


@pytest.fixture(scope="session")
def new_scenario():
    return make_scenario
