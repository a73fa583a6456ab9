"""Shared fixtures: paths to the repository's bundled scenarios, and bundled topologies by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.config.topology import TopologyConfig, load_topology

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def olmo_scenario_path() -> Path:
    return SCENARIOS / "olmo-2-7b-8xh100.yaml"


@pytest.fixture(scope="session")
def topo():
    """Bundled topologies by name, loaded once."""
    cache: dict[str, TopologyConfig] = {}

    def get(name: str) -> TopologyConfig:
        if name not in cache:
            cache[name] = load_topology(name)
        return cache[name]

    return get
