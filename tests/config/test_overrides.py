from __future__ import annotations

import pytest

from simulator.config.overrides import apply_override, parse_value
from simulator.errors import InputError


def test_values_are_typed():
    assert parse_value("4") == 4
    assert parse_value("5e8") == 5e8
    assert parse_value("true") is True
    assert parse_value("dgx-h100") == "dgx-h100"
    assert parse_value("[1, 2]") == [1, 2]


def test_nested_set_creates_sections_and_copies():
    raw = {"parallel": {"tp": 1}}
    out = apply_override(raw, "parallel.zero_stage=2")
    assert out == {"parallel": {"tp": 1, "zero_stage": 2}}
    assert raw == {"parallel": {"tp": 1}}
    assert apply_override({}, "cost.usd_per_gpu_hour=2.5") == {"cost": {"usd_per_gpu_hour": 2.5}}


def test_malformed_override():
    with pytest.raises(InputError, match="dotted.path=value"):
        apply_override({}, "parallel.tp")
    with pytest.raises(InputError, match="not a mapping"):
        apply_override({"model": "llama-3-8b"}, "model.n_layers=2")
