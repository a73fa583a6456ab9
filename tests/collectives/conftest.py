from __future__ import annotations

import pytest

from simulator.config.topology import TopologyConfig, load_topology


@pytest.fixture(scope="session")
def topo():
    """Bundled topologies by name, loaded once."""
    cache: dict[str, TopologyConfig] = {}

    def get(name: str) -> TopologyConfig:
        if name not in cache:
            cache[name] = load_topology(name)
        return cache[name]

    return get
