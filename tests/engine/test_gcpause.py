"""``gc_paused``: the collector is restored after a step, and a step leaves (almost) no cyclic
garbage, since what it keeps goes straight to the oldest generation, collected only rarely."""

from __future__ import annotations

import gc

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.engine.gcpause import gc_paused


def test_collector_restored():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.mark.parametrize("parallel", [
    {"framework": "deepspeed", "zero_stage": 3},
    {"framework": "fsdp"},
    {"framework": "deepspeed", "zero_stage": 1, "tp": 2, "pp": 2},
])
def test_step_leaves_only_the_engine_environment_as_cyclic_garbage(parallel):
    sc = scenario_from_dict({
        "name": "t", "model": "llama-2-7b", "cluster": {"topology": "dgx-a100", "nodes": 1},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 16,
                     "activation_checkpointing": "full"},
        "parallel": parallel}, overrides=["model.n_layers=4"])
    simulate(sc)
    gc.collect()
    gc.disable()
    try:
        simulate(sc, exact=True)
        # a simpy Environment refers to itself through its bound event classes: 8 objects each
        assert gc.collect() <= 8
    finally:
        gc.enable()
