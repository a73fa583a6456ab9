"""Expert-parallel groups: which GPUs form the ``ep`` / ``etp`` / ``edp`` groups, and DeepEP's two hops.

Megatron-Core ``parallel_state.initialize_model_parallel``, expert rank generator with order
"tp-ep-dp-pp": within one pipeline stage the ``tp·cp·dp`` ranks that the attention part splits
as TP × CP × DP are re-split for the expert part as ``etp × ep × edp`` with ETP innermost, then EP,
then expert-data-parallel: ``stage_rank = etp_idx + etp·(ep_idx + ep·edp_idx)``, so
``edp = tp·cp·dp / (ep·etp)``. With node-major GPU numbering, an EP group of ``ep·etp ≤`` GPUs per
node sits inside one NVLink domain: EP is placed inside the node first, as Megatron-Core does.
DeepEP's hops (``simulator.parallel.expert``, "DeepEP dispatcher") split each EP group by node.
"""

from __future__ import annotations


def expert_groups(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, kind: str) -> list[list[int]]:
    """Every concurrent copy of an ``ep`` / ``etp`` / ``edp`` group (global GPU indices)."""
    stage = tp * cp * dp
    edp = stage // (ep * etp)
    out: list[list[int]] = []
    for p in range(pp):
        base = p * stage

        def r(t: int, e: int, d: int, base: int = base) -> int:
            return base + t + etp * (e + ep * d)

        if kind == "ep":
            out += [[r(t, e, d) for e in range(ep)] for d in range(edp) for t in range(etp)]
        elif kind == "etp":
            out += [[r(t, e, d) for t in range(etp)] for d in range(edp) for e in range(ep)]
        elif kind == "edp":
            out += [[r(t, e, d) for d in range(edp)] for e in range(ep) for t in range(etp)]
        else:
            raise KeyError(f"unknown expert group kind {kind!r}")
    return out


def two_hop_groups(ep_groups: list[list[int]], node_of, kind: str) -> list[list[int]]:
    """DeepEP's hops of every EP group: ``ep_intra`` = the group's GPUs on one node, ``ep_inter`` =
    the group's GPUs with the same position on each of its nodes (one per node, same rail)."""
    out: list[list[int]] = []
    for group in ep_groups:
        by_node: dict[int, list[int]] = {}
        for gpu in group:
            by_node.setdefault(node_of(gpu), []).append(gpu)
        chunks = list(by_node.values())
        if kind == "ep_intra":
            out += chunks
        else:
            out += [[c[i] for c in chunks] for i in range(min(len(c) for c in chunks))]
    return out
