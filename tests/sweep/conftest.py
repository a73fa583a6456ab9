"""A small scenario so each sweep point simulates in milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

SMALL = {
    "name": "small",
    "model": {"n_layers": 4, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
              "vocab_size": 32000, "mlp": "gelu"},
    "cluster": {"topology": "dgx-h100", "nodes": 1},
    "training": {"seq_len": 1024, "micro_batch_size": 2, "global_batch_size": 64, "total_tokens": 1.0e9},
    "parallel": {"framework": "deepspeed", "zero_stage": 2},
    "cost": {"usd_per_gpu_hour": 2.0},
}


@pytest.fixture
def small_scenario(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path
