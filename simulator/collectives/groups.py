"""Checking a query's groups and reducing them to a *shape*, the key of the collective caches.

Two queries with the same shape put the same traffic pattern on fabric elements that are alike
(same local GPU indices, same node pattern inside each leaf block, blocks of the same size), so
they take the same time (ARCHITECTURE.md §1.4: costs are cached by operation, group shape, bytes).
Both functions are vectorised with numpy: a 16,384-GPU group costs about a millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.errors import InputError
from simulator.network.cluster import Cluster


def _as_members(cluster: Cluster, g) -> np.ndarray:
    a = np.asarray(g) if not isinstance(g, str | bytes) else np.asarray([g], dtype=object)
    if a.size and (a.ndim != 1 or a.dtype.kind not in "iu" or a.min() < 0 or a.max() >= cluster.n_gpus):
        for x in (g if a.ndim == 1 else [g]):  # the slow path names the offending entry
            cluster.check_gpu(x)
        raise InputError(f"a group must be a flat sequence of GPU indices, got {g!r}", field="groups")
    return a.astype(np.int64, copy=False).reshape(-1)


def normalise_groups(cluster: Cluster, op: str, groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """Groups as sorted member lists (``send_recv`` keeps ``[src, dst]``); ``InputError`` for an
    empty query, indices outside the cluster, repeated GPUs, groups sharing GPUs or unequal sizes."""
    if isinstance(groups, str) or not isinstance(groups, Sequence) or not groups:
        raise InputError("groups must be a non-empty sequence of GPU index sequences", field="groups")
    fast = _rectangular(cluster, op, groups)
    if fast is not None:
        return fast
    arrays = []
    total = 0
    for g in groups:
        members = _as_members(cluster, g)
        if op != "send_recv":
            members = np.sort(members)
        if len(np.unique(members)) != len(members):
            raise InputError(f"a group lists the same GPU twice: {list(g)}", field="groups")
        total += len(members)
        arrays.append(members)
    if len(arrays) > 1 and len(np.unique(np.concatenate(arrays))) != total:
        raise InputError("groups of one query must not share GPUs", field="groups")
    sizes = {len(a) for a in arrays}
    if len(sizes) != 1:
        raise InputError(f"all groups of one query must have the same size, got {sorted(sizes)}", field="groups")
    if op == "send_recv" and sizes != {2}:
        raise InputError("send_recv groups are [src, dst] pairs", field="groups")
    return [a.tolist() for a in arrays]


def _rectangular(cluster: Cluster, op: str, groups: Sequence[Sequence[int]]) -> list[list[int]] | None:
    """All checks at once for the usual query (equal-size groups of valid, distinct indices);
    ``None`` sends anything else through the one-group-at-a-time path and its error messages."""
    try:
        arr = np.asarray(groups)
    except ValueError:  # ragged
        return None
    if arr.ndim != 2 or not arr.size or arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= cluster.n_gpus:
        return None
    if op == "send_recv" and arr.shape[1] != 2:
        return None
    srt = np.sort(arr, axis=1)
    if (np.diff(srt, axis=1) == 0).any() or (len(arr) > 1 and len(np.unique(srt)) != srt.size):
        return None
    return (arr if op == "send_recv" else srt).astype(np.int64, copy=False).tolist()


def _first_appearance(x: np.ndarray) -> np.ndarray:
    """Relabel values 0, 1, 2, ... in order of first appearance."""
    uniq, first, inv = np.unique(x, return_index=True, return_inverse=True)
    label = np.empty(len(uniq), dtype=np.int64)
    label[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return label[inv.reshape(-1)]


def shape_key(cluster: Cluster, groups: list[list[int]]) -> tuple:
    """Groups up to the fabric's symmetry: machines relabelled by first appearance, leaf blocks
    relabelled by first appearance (with their size); local GPU index kept."""
    per_block, g = cluster.layout.nodes_per_block, cluster.gpus_per_node
    arr = np.asarray(groups, dtype=np.int64)
    flat = arr.reshape(-1)
    k, i = np.divmod(flat, g)
    b = k // per_block
    size = np.minimum(per_block, cluster.nodes - b * per_block)
    rows = np.stack((_first_appearance(b), size, _first_appearance(k), i))
    return (arr.shape, rows.tobytes())
