"""The per-process cache of cluster graphs and collective models (``simulator.model_cache``)."""

from __future__ import annotations

from simulator import model_cache
from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.model_cache import ModelCache


def _scenario(nodes: int, gpu_topology: str = "dgx-h100", zero_stage: int = 3):
    return scenario_from_dict({
        "name": "cache", "model": "olmo-2-1b", "cluster": {"topology": gpu_topology, "nodes": nodes},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 4 * 8 * nodes},
        "parallel": {"framework": "deepspeed", "zero_stage": zero_stage},
    })


def test_one_model_per_cluster_and_bounded():
    cache = ModelCache(size=2)
    a = cache.get(_scenario(1))
    assert cache.get(_scenario(1, zero_stage=1)) is a  # same cluster: same model
    b = cache.get(_scenario(2))
    assert b is not a and b.cluster.n_gpus == 16
    assert cache.get(_scenario(1)) is a  # now the 2-node model is the least recently used
    cache.get(_scenario(1, "dgx-a100"))  # a third cluster evicts the least recently used (the 2-node one)
    assert cache.get(_scenario(1)) is a
    assert cache.get(_scenario(2)) is not b


def test_results_do_not_depend_on_what_ran_before():
    model_cache.PROCESS.clear()
    fresh = simulate(_scenario(2)).to_dict()
    simulate(_scenario(2, zero_stage=1))
    simulate(_scenario(1))
    assert simulate(_scenario(2)).to_dict() == fresh
