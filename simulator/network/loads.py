"""Link loads of many GPU→GPU hops at once, vectorised through the node template.

Every intra-node route is a template route shifted to its node (``routing``), so the bytes a set of
hops puts on node ``k``'s internal edges are

    load[k·E + e] = Σ_key C[k, key] · R[key, e]

where ``key`` is the template route a hop uses inside node ``k`` (GPU ``i``→GPU ``j``, GPU ``i``→NIC
``r``, NIC ``r``→GPU ``j``, or GPU ``i``↔its NVSwitch plane), ``C[k, key]`` the bytes of all hops
using it there and ``R`` the template routes' ECMP weights as a dense matrix. The fabric part of a
cross-node hop (NIC→leaf, leaf→spines, spines→leaf, leaf→NIC) is added by ``bincount`` on compact
edge ids (``edges`` module). This equals the sum of ``bytes·weight`` over the per-hop ``Route``s
(``fabric.link_loads``) up to floating-point summation order, at the cost of a few array operations
per call instead of one Python ``Route`` per hop.
"""

from __future__ import annotations

import numpy as np

from simulator.network.cluster import Cluster
from simulator.network.fabric import Transfer


class HopLoads:
    """Per-cluster template route matrix (rows built on first use); see the module docstring."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        g, n = cluster.gpus_per_node, cluster.edges.nics
        self.g, self.n = g, n
        self._gn = g * g
        self._ng = g * g + g * n
        self._su = g * g + 2 * g * n
        self.n_keys = self._su + 2 * g
        self._rows: dict[int, np.ndarray] = {}

    def _route_of_key(self, key: int):
        t, g, n = self.cluster.template_routes, self.g, self.n
        if key < self._gn:
            return t.gpu_gpu(*divmod(key, g))
        if key < self._ng:
            return t.gpu_nic(*divmod(key - self._gn, n))
        if key < self._su:
            return t.nic_gpu(*divmod(key - self._ng, g))
        k = key - self._su
        return t.gpu_switch_plane(k % g, k < g)

    def _matrix(self, keys: np.ndarray) -> np.ndarray:
        e = self.cluster.edges_per_node
        out = np.zeros((len(keys), e))
        for row, key in enumerate(keys.tolist()):
            vec = self._rows.get(key)
            if vec is None:
                r = self._route_of_key(key)
                vec = np.bincount(r.edges, weights=r.weights, minlength=e)
                self._rows[key] = vec
            out[row] = vec
        return out

    def _parts(self, src, dst, nbytes, rail, switch):
        """(per-node template-route byte matrix, its non-zero columns, fabric edge ids, bytes)."""
        c, g, n = self.cluster, self.g, self.n
        t = c.edges
        keep = (nbytes > 0) & (src != dst)
        if not keep.all():
            src, dst, nbytes, rail = src[keep], dst[keep], nbytes[keep], rail[keep]
        ka, i = np.divmod(src, g)
        kb, j = np.divmod(dst, g)
        intra = ka == kb
        nodes = [ka[intra]]
        keys = [i[intra] * g + j[intra]]
        weights = [nbytes[intra]]
        fab_ids: list[np.ndarray] = []
        fab_w: list[np.ndarray] = []
        cross = ~intra
        if cross.any():
            ka_c, kb_c, i_c, j_c, b_c = ka[cross], kb[cross], i[cross], j[cross], nbytes[cross]
            r = rail[cross]
            default = (j_c if c.has_p2p_scale_up else i_c) * n // g
            r = np.where(r < 0, default, r)
            nodes += [ka_c, kb_c]
            keys += [self._gn + i_c * n + r, self._ng + r * g + j_c]
            weights += [b_c, b_c]
            fab_ids += [t.nic_up(ka_c, r), t.nic_down(kb_c, r)]
            fab_w += [b_c, b_c]
            la, lb = t.leaf(ka_c, r), t.leaf(kb_c, r)
            far = la != lb
            if far.any():
                fab_ids += [t.first_aggregate + 2 * la[far], t.first_aggregate + 2 * lb[far] + 1]
                fab_w += [b_c[far], b_c[far]]
        if switch is not None and len(switch[0]):
            k_s, i_s = np.divmod(switch[0], g)
            nodes += [k_s, k_s]
            keys += [self._su + i_s, self._su + g + i_s]
            weights += [switch[1], switch[2]]
        flat = np.concatenate(nodes) * self.n_keys + np.concatenate(keys)
        counts = np.bincount(flat, weights=np.concatenate(weights),
                             minlength=c.nodes * self.n_keys).reshape(c.nodes, self.n_keys)
        used = np.flatnonzero(counts.any(axis=0))
        ids = np.concatenate(fab_ids) if fab_ids else np.zeros(0, dtype=np.int64)
        w = np.concatenate(fab_w) if fab_w else np.zeros(0)
        return counts[:, used], used, ids, w

    def loads(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, rail: np.ndarray,
              switch: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """Bytes on every compact edge id for hops ``src→dst`` of ``nbytes`` (``rail`` −1: the
        default rail, see ``Cluster.route``) plus NVLS traffic ``switch = (gpu, up, down)``."""
        c = self.cluster
        counts, used, ids, w = self._parts(src, dst, nbytes, rail, switch)
        out = np.zeros(c.edges.n_compact)
        if len(used):
            out[: c.nodes * c.edges_per_node] = (counts @ self._matrix(used)).ravel()
        if len(ids):
            out += np.bincount(ids, weights=w, minlength=len(out))
        return out

    def bottleneck(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, rail: np.ndarray,
                   switch: tuple[np.ndarray, np.ndarray, np.ndarray] | None, capacity_Bps: np.ndarray) -> float:
        """``max_e loads_e / capacity_e`` (s) without materialising the loads of idle edges: node
        edges as a (nodes × E) matrix against the template's capacities, fabric edges compressed."""
        c = self.cluster
        counts, used, ids, w = self._parts(src, dst, nbytes, rail, switch)
        worst = 0.0
        if len(used):
            e = c.edges_per_node
            # every node is a copy of the template, so node edge j has capacity capacity[j]
            per_edge = (counts @ self._matrix(used)).max(axis=0)
            hot = per_edge > 0
            if hot.any():
                worst = float(np.max(per_edge[hot] / capacity_Bps[:e][hot]))
        if len(ids):
            first = c.edges.first_nic  # fabric ids are dense from here on
            fab = np.bincount(ids - first, weights=w)
            hot = np.flatnonzero(fab)
            worst = max(worst, float(np.max(fab[hot] / capacity_Bps[first + hot])))
        return worst


def bottleneck_time(loads: np.ndarray, capacity_Bps: np.ndarray) -> float:
    """``max_e load_e / capacity_e`` over loaded edges (s), as ``fabric.analytical_time``."""
    used = loads > 0
    return float(np.max(loads[used] / capacity_Bps[used])) if used.any() else 0.0


def compact_transfers(cluster: Cluster, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                      rail: np.ndarray) -> list[Transfer]:
    """One ``Transfer`` per hop on compact routes (for the flow fidelity)."""
    out = []
    for s, d, b, r in zip(src.tolist(), dst.tolist(), nbytes.tolist(), rail.tolist(), strict=True):
        if b > 0 and s != d:
            out.append(Transfer(cluster.route(s, d, None if r < 0 else r, compact=True), b))
    return out
