"""Shared fixtures: paths to the repository's bundled scenarios and topologies."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def olmo_scenario_path() -> Path:
    return SCENARIOS / "olmo-2-7b-8xh100.yaml"
