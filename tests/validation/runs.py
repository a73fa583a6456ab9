"""Load the validation set and simulate one row (shared by the tests and benchmarks/validate)."""

from __future__ import annotations

from pathlib import Path

import yaml

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.report.step_report import StepReport

DATA = Path(__file__).with_name("published_runs.yaml")


def rows() -> list[dict]:
    return yaml.safe_load(DATA.read_text())["runs"]


def simulate_row(row: dict) -> StepReport:
    raw = {"name": row["id"], **row["scenario"]}
    return simulate(scenario_from_dict(raw, overrides=row.get("set", [])))
