"""Fabric solvers: how long a set of concurrent transfers takes on the graph's directed links.

Both take transfers (a ``Route`` and a byte count) and an effective capacity per edge id (B/s):

* ``analytical_time`` — α–β on the bottleneck: every link carries the sum of the bytes routed over
  it, ``T = max_e load_e / capacity_e`` (the congestion bound of Thakur et al. 2005 applied per link).
* ``flow_time`` — max–min fair sharing (progressive filling, Bertsekas & Gallager, *Data Networks*
  §6.5.2): all unfinished transfers get rates such that no rate can grow without lowering a smaller
  one; a transfer using edge ``e`` with weight ``w`` (ECMP share) consumes ``w·rate`` there. Rates are
  recomputed whenever a transfer finishes; the result is the time the last one finishes.

With no link shared both give ``max_t bytes_t / min_e(capacity_e / w_e)``; they differ when transfers
of different sizes share links (the flow model lets early finishers free bandwidth).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from simulator.network.routing import Route


class Transfer(NamedTuple):
    route: Route
    nbytes: float


def _incidence(transfers: list[Transfer]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    live = [t for t in transfers if t.nbytes > 0 and len(t.route.edges)]
    if not live:
        return (np.zeros(0, np.int64),) * 2 + (np.zeros(0),) * 2  # type: ignore[return-value]
    flow = np.concatenate([np.full(len(t.route.edges), k, dtype=np.int64) for k, t in enumerate(live)])
    edge = np.concatenate([t.route.edges for t in live])
    weight = np.concatenate([t.route.weights for t in live])
    nbytes = np.array([t.nbytes for t in live], dtype=np.float64)
    return flow, edge, weight, nbytes


def link_loads(transfers: list[Transfer], n_edges: int) -> np.ndarray:
    """Bytes crossing each edge id (sum over transfers of ``bytes · weight``)."""
    flow, edge, weight, nbytes = _incidence(transfers)
    if not len(nbytes):
        return np.zeros(n_edges)
    return np.bincount(edge, weights=weight * nbytes[flow], minlength=n_edges)


def analytical_time(transfers: list[Transfer], capacity_Bps: np.ndarray) -> float:
    """Bottleneck time ``max_e load_e / capacity_e`` (s)."""
    loads = link_loads(transfers, len(capacity_Bps))
    used = loads > 0
    return float(np.max(loads[used] / capacity_Bps[used])) if used.any() else 0.0


def maxmin_rates(
    flow: np.ndarray, edge: np.ndarray, weight: np.ndarray, active: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """Max–min fair rates (B/s) of the ``active`` flows by progressive filling.

    ``flow``/``edge``/``weight`` list the incidence entries (flow uses ``edge`` with ``weight``);
    ``capacity`` is indexed by the (compressed) edge index.
    """
    n_flows = len(active)
    rate = np.zeros(n_flows)
    frozen = ~active.copy()
    cap_left = capacity.astype(np.float64).copy()
    n_e = len(capacity)
    while not frozen.all():
        free = ~frozen[flow]
        demand = np.bincount(edge[free], weights=weight[free], minlength=n_e)
        used = demand > 0
        share = np.full(n_e, np.inf)
        share[used] = cap_left[used] / demand[used]
        level = share.min()
        tight = share <= level * (1 + 1e-9)
        hit = np.unique(flow[free & tight[edge]])
        rate[hit] = level
        frozen[hit] = True
        mask = np.isin(flow, hit)
        cap_left -= np.bincount(edge[mask], weights=weight[mask] * level, minlength=n_e)
        np.maximum(cap_left, 0.0, out=cap_left)
    return rate


def flow_time(transfers: list[Transfer], capacity_Bps: np.ndarray) -> float:
    """Makespan (s) of the transfers under max–min fair sharing, recomputed at each completion."""
    flow, edge, weight, nbytes = _incidence(transfers)
    if not len(nbytes):
        return 0.0
    used, edge_c = np.unique(edge, return_inverse=True)
    cap = capacity_Bps[used]
    remaining = nbytes.copy()
    active = remaining > 0
    t = 0.0
    while active.any():
        rate = maxmin_rates(flow, edge_c, weight, active, cap)
        dt = float(np.min(remaining[active] / rate[active]))
        t += dt
        remaining[active] -= rate[active] * dt
        active &= remaining > 1e-9 * nbytes
    return t
