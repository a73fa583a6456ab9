"""Checkpoint/restart mathematics for exponentially distributed interruptions.

Notation (Daly 2006): ``M`` mean time between interruptions of the job, ``δ`` time to write one
checkpoint (training stalls for it), ``R`` restart time (detect, reschedule, reload), ``τ`` compute
time between checkpoints, ``T_s`` failure-free solve time. All in seconds.
"""

from __future__ import annotations

import math


def young_interval(delta: float, mtbf: float) -> float:
    """Young's first-order optimum ``τ = √(2·δ·M)`` (J. W. Young, CACM 17(9), 1974)."""
    return math.sqrt(2.0 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly's higher-order optimum (J. T. Daly, FGCS 22(3):303–312, 2006, higher-order estimate):

    ``τ = √(2δM)·[1 + ⅓·√(δ/(2M)) + ⅑·(δ/(2M))] − δ`` for ``δ < 2M``, else ``τ = M``.

    With δ = 5 min it gives 117 min for M = 24 h, 57 min for 6 h and 9.1 min for 15 min (the
    paper's worked examples; formulas.md §7).
    """
    if delta <= 0:
        return math.inf
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def expected_wall_clock(solve_s: float, interval_s: float, delta: float, restart_s: float, mtbf: float) -> float:
    """Expected wall-clock time to finish ``solve_s`` of work (Daly 2006, complete model for exponentially distributed interruptions):

    ``T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ``.

    Limits: no failures (M → ∞) gives ``T_s·(1 + δ/τ)``; no checkpoints is one segment
    (``τ = T_s``, ``δ = 0``). The form is evaluated with ``expm1`` so a huge M loses no precision.
    """
    if solve_s <= 0:
        return 0.0
    interval_s = min(interval_s, solve_s)
    segments = solve_s / interval_s
    if math.isinf(mtbf):
        return segments * (interval_s + delta)
    exponent = (restart_s + interval_s + delta) / mtbf
    if exponent > 700.0:
        # e^700 ≈ 1e304: a segment is hundreds of MTBFs long, so the run is not expected to finish.
        return math.inf
    per_segment = mtbf * math.exp(restart_s / mtbf) * math.expm1((interval_s + delta) / mtbf)
    return per_segment * segments


def job_mtbf_s(n_gpus: int, gpu_mtbf_h: float, n_nodes: int, node_mtbf_h: float | None,
               preemptions_per_node_hour: float) -> float:
    """Job-level MTBF: interruption rates of independent components add,
    ``1/M = N_gpu/M_gpu + N_node/M_node + N_node·λ_preempt`` (formulas.md §7: system MTBF ≈ component
    MTBF / number of components)."""
    rate_per_h = n_gpus / gpu_mtbf_h + n_nodes * preemptions_per_node_hour
    if node_mtbf_h is not None:
        rate_per_h += n_nodes / node_mtbf_h
    return math.inf if rate_per_h == 0 else 3600.0 / rate_per_h
