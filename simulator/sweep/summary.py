"""What a sweep row records about a simulated point."""

from __future__ import annotations

from simulator.config.scenario import Scenario
from simulator.study import SUMMARY_KEYS, Reuse, evaluate, flat_summary

OUTPUT_KEYS = SUMMARY_KEYS


def summarize(scenario: Scenario, reuse: Reuse | None = None) -> tuple[dict, str]:
    """The flat summary of one point and, when it does not fit, the reason."""
    ev = evaluate(scenario, reuse)
    return flat_summary(ev), ev.oom_reason
