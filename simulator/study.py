"""One scenario, end to end: the simulated step and, when a budget is set, the whole run.

``dtsim run``, ``dtsim compare`` and ``dtsim sweep`` all evaluate scenarios through ``evaluate`` so
their figures agree; ``flat_summary`` is the row those tables and files show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.api import simulate
from simulator.collectives import CollectiveModel
from simulator.config.scenario import Scenario
from simulator.network import build_cluster
from simulator.report.step_report import StepReport
from simulator.runcost.plan import RunReport, plan_run
from simulator.workload.memory import allocated_bytes

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
    "memory_tight",
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
            f"needs {allocated_bytes(mem) / 2**30:.1f} GiB per GPU at the allocated "
            f"peak, {self.scenario.cluster.gpu_spec.name} has {mem['hbm_bytes'] / 2**30:.1f} GiB usable"
        )


class Reuse:
    """Built clusters and collective models shared by the evaluations of one caller (a sweep chunk).

    Points of a sweep often differ only in settings that leave the cluster alone (ZeRO stage, bucket
    size, micro-batch); rebuilding its graph and re-planning its collectives for each point would
    repeat identical work. The memo is an explicit object, so nothing is shared between callers.
    """

    def __init__(self) -> None:
        self._models: dict[tuple, CollectiveModel] = {}

    def collective_model(self, scenario: Scenario) -> CollectiveModel:
        cl = scenario.cluster
        nodes = math.ceil(scenario.n_gpus / cl.topology.gpus_per_node)
        key = (cl.topology.model_dump_json(), nodes, cl.gpu_spec.name, cl.network_fidelity, cl.collective_algorithm)
        if key not in self._models:
            cluster = build_cluster(cl.topology, nodes, cl.gpu_spec)
            self._models[key] = CollectiveModel(cluster, fidelity=cl.network_fidelity,
                                                algorithm=cl.collective_algorithm)
        return self._models[key]


def evaluate(scenario: Scenario, reuse: Reuse | None = None, efficiency=None, exact: bool = False) -> Evaluation:
    """Simulate one step, then plan the run from the simulated step time and utilisation.
    ``efficiency`` replaces the catalogued compute efficiencies (a user calibration profile);
    ``exact`` simulates every micro-batch (no steady-state extrapolation) and keeps the trace."""
    if reuse is None:
        step = simulate(scenario, efficiency=efficiency, exact=exact)
    else:
        model = reuse.collective_model(scenario)
        step = simulate(scenario, cluster=model.cluster, collective_model=model, efficiency=efficiency,
                        exact=exact)
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
        "memory_tight": bool(step.memory.get("tight", False)),
    }
    run_keys = ("steps", "duration_s", "wall_clock_s", "goodput", "gpu_hours", "cost_usd",
                "usd_per_million_tokens", "energy_kwh")
    out.update({k: (getattr(run, k) if run else None) for k in run_keys})
    return out
