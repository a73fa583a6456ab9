"""Compose a simulated step time into the whole run: steps, ideal and expected wall-clock, goodput,
GPU-hours, cost and energy. Keys of ``RunReport.as_dict`` are the ``run.*`` JSON keys of ``dtsim run``."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.runcost.checkpoint import checkpoint_cost
from simulator.runcost.reliability import daly_interval, expected_wall_clock, job_mtbf_s
from simulator.units import HOUR_S

#: Node power besides the GPUs per watt of GPU TDP: DGX H100 (10.2 kW − 8 × 700 W) / 5.6 kW ≈ 0.82.
NODE_OVERHEAD_PER_GPU_TDP = (10200.0 - 8 * 700.0) / (8 * 700.0)


@dataclass(frozen=True)
class RunReport:
    steps: int
    tokens: float
    duration_s: float  # failure- and checkpoint-free: steps × step time
    wall_clock_s: float  # expected, with checkpoints, failures and restarts
    goodput: float  # duration_s / wall_clock_s
    mtbf_s: float
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_stall_s: float
    checkpoint_interval_s: float | None
    gpu_hours: float
    #: None when neither the scenario (cost.usd_per_gpu_hour) nor the catalog gives a price: the run
    #: is simulated and timed all the same, with no cost.
    usd_per_gpu_hour: float | None
    cost_usd: float | None
    usd_per_million_tokens: float | None
    average_power_W: float
    energy_kwh: float

    def as_dict(self) -> dict:
        return asdict(self)


def run_steps(scenario: Scenario) -> int | None:
    """Optimizer steps: ``training.steps``, or ``ceil(total_tokens / (global batch × seq len))``."""
    t = scenario.training
    if t.steps is not None:
        return t.steps
    if t.total_tokens is None:
        return None
    return math.ceil(t.total_tokens / scenario.tokens_per_step)


def price_per_gpu_hour(scenario: Scenario) -> float | None:
    """The scenario's price, else the catalog's dated snapshot, else None (no cost reported); spot
    capacity applies its discount."""
    price = scenario.cost.usd_per_gpu_hour
    if price is None:
        price = scenario.cluster.gpu_spec.price_usd_per_gpu_hour
    if price is None:
        return None
    return price * (1.0 - scenario.cost.spot.discount)


def plan_run(scenario: Scenario, step_time_s: float, busy_fraction: float = 1.0) -> RunReport | None:
    """The whole run, or None when the scenario sets no token budget or step count.

    Energy: each GPU draws ``TDP·(p_idle + (1 − p_idle)·busy)`` where ``busy`` is the simulated
    fraction of the step its compute stream is busy, plus the node's power besides its GPUs
    (``cost.node_overhead_W``, else the topology's ``node_overhead_W``, else the DGX H100 ratio) per
    node, a partial node its share by GPUs, over the expected wall-clock.
    """
    steps = run_steps(scenario)
    if steps is None:
        return None
    rel, cost = scenario.reliability, scenario.cost
    n_gpus = scenario.n_gpus
    n_nodes = math.ceil(n_gpus / scenario.cluster.topology.gpus_per_node)
    solve_s = steps * step_time_s

    # Preemptions interrupt the job like failures, whether or not hardware failures are modelled.
    mtbf = job_mtbf_s(
        n_gpus,
        rel.gpu_mtbf_hours if rel.enabled else math.inf,
        n_nodes,
        rel.node_mtbf_hours if rel.enabled else None,
        cost.spot.preemptions_per_node_hour,
    )

    ck = checkpoint_cost(scenario)
    restart_s = rel.restart_s
    if rel.checkpoint.enabled:
        delta = ck.stall_s
        if rel.checkpoint.interval_s is not None:
            interval = rel.checkpoint.interval_s
            if interval > solve_s:
                raise InputError(
                    f"checkpoint interval {interval:.0f} s is longer than the whole run ({solve_s:.0f} s); "
                    "shorten it or leave it unset for the optimal (Daly) interval",
                    "reliability.checkpoint.interval_s",
                )
        else:
            interval = daly_interval(delta, mtbf)
        if rel.checkpoint.asynchronous:
            # The snapshot being written is lost with a failure: on average the last durable
            # checkpoint is older by the background write time.
            restart_s += ck.write_s
    else:
        delta, interval = 0.0, solve_s
    wall = expected_wall_clock(solve_s, interval, delta, restart_s, mtbf)

    price = price_per_gpu_hour(scenario)
    gpu_hours = n_gpus * wall / HOUR_S
    tokens = steps * scenario.tokens_per_step
    # A GPU draws its board power (the power limit when one is set) while busy and a fraction of its
    # rated TDP while idle; the node around it (CPUs, fans, NICs) is sized for the rated TDP.
    rated_W, drawn_W = scenario.cluster.gpu.tdp_W, scenario.cluster.gpu_spec.tdp_W
    idle = cost.gpu_idle_power_fraction
    power = n_gpus * (rated_W * idle * (1 - busy_fraction) + drawn_W * busy_fraction)
    topo = scenario.cluster.topology
    overhead = cost.node_overhead_W if cost.node_overhead_W is not None else topo.node_overhead_W
    if overhead is None:
        overhead = NODE_OVERHEAD_PER_GPU_TDP * topo.gpus_per_node * rated_W
    # a partial node (cluster.gpus: compute trays of an NVL72 rack) is charged its share
    power += overhead * n_gpus / topo.gpus_per_node
    return RunReport(
        steps=steps,
        tokens=tokens,
        duration_s=solve_s,
        wall_clock_s=wall,
        goodput=solve_s / wall if wall > 0 else 1.0,  # 0 when the run is not expected to finish
        mtbf_s=mtbf,
        checkpoint_bytes=ck.size_bytes if rel.checkpoint.enabled else 0.0,
        checkpoint_write_s=ck.write_s if rel.checkpoint.enabled else 0.0,
        checkpoint_stall_s=delta,
        checkpoint_interval_s=interval if rel.checkpoint.enabled and math.isfinite(interval) else None,
        gpu_hours=gpu_hours,
        usd_per_gpu_hour=price,
        cost_usd=None if price is None else gpu_hours * price,
        usd_per_million_tokens=None if price is None else gpu_hours * price / (tokens / 1e6),
        average_power_W=power,
        energy_kwh=power * wall / 3.6e6,
    )
