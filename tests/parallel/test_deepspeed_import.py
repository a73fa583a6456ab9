"""DeepSpeed JSON import: mapped keys, batch arithmetic, one warning for unmodelled keys, bad files."""

from __future__ import annotations

import json

import pytest

from simulator.config.deepspeed_import import apply_deepspeed_config
from simulator.errors import InputError

RAW = {
    "model": "llama-2-7b",
    "cluster": {"topology": {"name": "t", "gpu": "a100-80gb", "gpus_per_node": 8}, "nodes": 2},
    "training": {"seq_len": 4096, "micro_batch_size": 2, "global_batch_size": 64},
    "parallel": {"framework": "fsdp"},
}


def _ds(tmp_path, data):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(data))
    return path


def test_maps_zero_keys_precision_and_batches(tmp_path):
    path = _ds(tmp_path, {
        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "fp16": {"enabled": True},
        "communication_data_type": "fp32",
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": True,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}, "reduce_scatter": True},
    })
    raw, warnings = apply_deepspeed_config(RAW, path)
    par, tr = raw["parallel"], raw["training"]
    assert par["framework"] == "deepspeed" and par["zero_stage"] == 2
    assert par["reduce_bucket_size"] == 2e8 and par["overlap_comm"] is True
    assert par["offload_optimizer"] == "cpu" and par["communication_data_type"] == "fp32"
    assert tr["precision"] == "fp16" and tr["micro_batch_size"] == 4
    assert tr["global_batch_size"] == 4 * 2 * 16  # micro x accumulation x dp
    assert warnings == []
    assert RAW["parallel"] == {"framework": "fsdp"}  # input not mutated


def test_unmodelled_keys_in_one_warning(tmp_path):
    path = _ds(tmp_path, {"optimizer": {"type": "Adam"}, "scheduler": {}, "zero_optimization": {"stage": 1, "foo": 1}})
    _, warnings = apply_deepspeed_config(RAW, path)
    assert len(warnings) == 1
    assert all(k in warnings[0] for k in ("optimizer", "scheduler", "zero_optimization.foo"))


def test_inconsistent_train_batch_size(tmp_path):
    path = _ds(tmp_path, {"train_batch_size": 100, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})
    with pytest.raises(InputError, match="train_batch_size"):
        apply_deepspeed_config(RAW, path)


@pytest.mark.parametrize("content", ["{oops", "[1, 2]"])
def test_unreadable_file(tmp_path, content):
    path = tmp_path / "ds.json"
    path.write_text(content)
    with pytest.raises(InputError, match="deepspeed_config"):
        apply_deepspeed_config(RAW, path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        apply_deepspeed_config(RAW, tmp_path / "nope.json")


def test_auto_values_keep_scenario_values_and_warn(tmp_path):
    path = _ds(tmp_path, {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
                          "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})
    raw, warnings = apply_deepspeed_config(RAW, path)
    assert raw["training"]["micro_batch_size"] == 2 and raw["training"]["global_batch_size"] == 64
    assert "reduce_bucket_size" not in raw["parallel"] and raw["parallel"]["zero_stage"] == 3
    assert len(warnings) == 1 and "auto" in warnings[0]


def test_offload_device_is_checked(tmp_path):
    path = _ds(tmp_path, {"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}})
    with pytest.raises(InputError, match="offload_param"):
        apply_deepspeed_config(RAW, path)


def test_misspelt_key_is_named(tmp_path):
    path = _ds(tmp_path, {"zero_optimization": {"stage": 2, "reduce_bucket_sizee": 5e8}})
    with pytest.raises(InputError, match="did you mean 'zero_optimization.reduce_bucket_size'"):
        apply_deepspeed_config(RAW, path)
