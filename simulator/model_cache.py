"""Cluster graphs and collective models kept per process, so repeated simulations plan nothing twice.

Building a cluster's graph and planning its collectives is the part of a simulation that grows
with the GPU count; a ``CollectiveModel`` memoises every evaluated collective by (operation, group
shape, bytes). Simulations in one process (a sweep worker's points, a benchmark's repeats, an API
caller's loop) that share the cluster (topology, node count, GPU, network fidelity, collective
algorithm) therefore share one model. The cache is bounded (least recently used models are
dropped) and keyed by everything the model depends on, so results never depend on what ran before.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

#: Models kept per process: one per distinct cluster; a sweep over node counts touches a handful.
MAX_MODELS = 8


class ModelCache:
    """``get(scenario)`` returns the ``CollectiveModel`` (with its ``cluster``) of the scenario's cluster."""

    def __init__(self, size: int = MAX_MODELS) -> None:
        self.size = size
        self._models: OrderedDict[tuple, Any] = OrderedDict()

    @staticmethod
    def key(scenario: Any) -> tuple:
        cl = scenario.cluster
        nodes = max(1, math.ceil(scenario.n_gpus / cl.topology.gpus_per_node))
        return (cl.topology.model_dump_json(), nodes, cl.gpu_spec.model_dump_json(), cl.network_fidelity,
                cl.collective_algorithm)

    def get(self, scenario: Any) -> Any:
        from simulator.collectives import CollectiveModel
        from simulator.network import build_cluster

        key = self.key(scenario)
        model = self._models.get(key)
        if model is None:
            cl = scenario.cluster
            cluster = build_cluster(cl.topology, key[1], cl.gpu_spec)
            model = CollectiveModel(cluster, fidelity=cl.network_fidelity, algorithm=cl.collective_algorithm)
            self._models[key] = model
            while len(self._models) > self.size:
                self._models.popitem(last=False)
        else:
            self._models.move_to_end(key)
        return model

    def clear(self) -> None:
        self._models.clear()


#: The process's cache (``simulator.api.simulate`` uses it when given no cluster or model).
PROCESS = ModelCache()
