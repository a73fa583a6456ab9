"""One scenario, end to end: the simulated step and, when a budget is set, the whole run.

``dtsim run``, ``dtsim compare`` and ``dtsim sweep`` all evaluate scenarios through ``evaluate`` so
their figures agree; ``flat_summary`` is the row those tables and files show.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.api import simulate
from simulator.config.scenario import Scenario
from simulator.report.step_report import StepReport
from simulator.runcost.plan import RunReport, plan_run

#: Columns of a flat summary (sweep rows, compare tables), in display order.
SUMMARY_KEYS = (
    "n_gpus",
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "mfu",
    "memory_total_bytes",
    "memory_headroom_bytes",
    "fits",
    "steps",
    "duration_s",
    "wall_clock_s",
    "goodput",
    "gpu_hours",
    "cost_usd",
    "usd_per_million_tokens",
    "energy_kwh",
)


@dataclass(frozen=True)
class Evaluation:
    scenario: Scenario
    step: StepReport
    run: RunReport | None

    @property
    def busy_fraction(self) -> float:
        """Fraction of the step the compute stream is busy (drives the energy estimate)."""
        return min(1.0, self.step.breakdown["compute_busy_s"] / self.step.step_time_s)

    @property
    def oom_reason(self) -> str:
        """Empty when it fits; else what it needs against what the GPU has."""
        mem = self.step.memory
        if mem["fits"]:
            return ""
        return (
            f"needs {mem['total_bytes'] / 2**30:.1f} GiB per GPU, "
            f"{self.scenario.cluster.gpu_spec.name} has {mem['hbm_bytes'] / 2**30:.1f} GiB usable"
        )


def evaluate(scenario: Scenario) -> Evaluation:
    """Simulate one step, then plan the run from the simulated step time and utilisation."""
    step = simulate(scenario)
    busy = min(1.0, step.breakdown["compute_busy_s"] / step.step_time_s)
    return Evaluation(scenario, step, plan_run(scenario, step.step_time_s, busy_fraction=busy))


def flat_summary(ev: Evaluation) -> dict:
    """The ``SUMMARY_KEYS`` of one evaluation (run figures None without a budget)."""
    step, run = ev.step, ev.run
    out = {
        "n_gpus": step.n_gpus,
        "step_time_s": step.step_time_s,
        "tokens_per_s": step.tokens_per_s,
        "tokens_per_s_per_gpu": step.tokens_per_s_per_gpu,
        "mfu": step.mfu,
        "memory_total_bytes": step.memory["total_bytes"],
        "memory_headroom_bytes": step.memory["headroom_bytes"],
        "fits": step.fits,
    }
    run_keys = ("steps", "duration_s", "wall_clock_s", "goodput", "gpu_hours", "cost_usd",
                "usd_per_million_tokens", "energy_kwh")
    out.update({k: (getattr(run, k) if run else None) for k in run_keys})
    return out
