"""Shared fixtures: paths to the repository's bundled scenarios, bundled topologies by name, and the
scripts of ``benchmarks/`` by name."""

from __future__ import annotations

import importlib.util
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


@pytest.fixture(scope="session")
def benchmark_script():
    """A script of ``benchmarks/`` by file stem, imported once (its functions are tested; nothing runs)."""
    cache: dict[str, object] = {}

    def get(stem: str):
        if stem not in cache:
            spec = importlib.util.spec_from_file_location(stem, ROOT / "benchmarks" / f"{stem}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            cache[stem] = module
        return cache[stem]

    return get
