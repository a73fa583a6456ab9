"""SHARP (NCCL CollNet) as a fat-tree option in a scenario: off by default, validated, used by DDP."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError

TINY = {"name": "tiny", "n_layers": 2, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
        "vocab_size": 32000}


def _raw(**cluster):
    return {"name": "t", "model": TINY, "cluster": {"topology": "dgx-a100", "nodes": 4, **cluster},
            "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 32},
            "parallel": {"framework": "ddp"}}


def test_sharp_off_by_default_and_collnet_needs_it():
    assert not scenario_from_dict(_raw()).cluster.topology.sharp
    with pytest.raises(InputError, match="fabric.sharp"):
        scenario_from_dict(_raw(collective_algorithm="collnet"))


def test_ddp_gradient_all_reduce_is_shorter_with_sharp():
    # SHARP halves the bytes each NIC carries for the gradient all-reduce (S/p instead of
    # 2(N-1)/N * S/p = 1.5 S/p on 4 nodes); this tiny model's step is mostly its exposed all-reduce.
    plain = simulate(scenario_from_dict(_raw())).step_time_s
    sharp = simulate(scenario_from_dict(_raw(), overrides=["cluster.topology.fabric.sharp=true"])).step_time_s
    assert sharp < 0.9 * plain
