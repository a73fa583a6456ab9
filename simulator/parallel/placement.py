"""Human-readable placement of a rank mesh: which GPUs form each TP / CP / PP / DP group.

TP groups that span nodes are flagged: their all-reduces, on the critical path of every block
(formulas.md §6), then cross the scale-out network instead of NVLink (Narayanan et al. SC'21 §3.3:
"tensor model parallelism ... within a multi-GPU server").
"""

from __future__ import annotations

from simulator.parallel.mesh import RankMesh

#: Print at most this many groups per kind (a 1,024-GPU mesh has 128 TP groups).
MAX_GROUPS = 16


def _fmt_group(mesh: RankMesh, group: list[int]) -> str:
    nodes = sorted({mesh.node(g) for g in group})
    where = f"node {nodes[0]}" if len(nodes) == 1 else "nodes " + ",".join(map(str, nodes))
    return f"[{', '.join(map(str, group))}] ({where})"


def _ranges(xs: list[int]) -> str:
    """Sorted integers as runs: [0, 1, 2, 3, 8, 9] -> "0-3, 8-9" (at most MAX_GROUPS runs, then a count)."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    more = f", ... {len(text) - MAX_GROUPS} more runs" if len(text) > MAX_GROUPS else ""
    return ", ".join(text[:MAX_GROUPS]) + more


def placement_lines(mesh: RankMesh) -> list[str]:
    """Lines describing the mesh: degrees, then each group kind's groups (GPU indices, nodes)."""
    lines = [
        f"mesh: tp={mesh.tp} cp={mesh.cp} dp={mesh.dp} pp={mesh.pp} on {mesh.n_gpus} GPUs "
        f"({mesh.gpus_per_node} per node); {mesh.formula}"
    ]
    kinds = [("tp", mesh.tp), ("cp", mesh.cp), ("pp", mesh.pp), ("dp", mesh.dp * mesh.cp)]
    for kind, degree in kinds:
        if degree == 1:
            continue
        groups = mesh.groups(kind)
        label = "DP x CP (gradient reduction)" if kind == "dp" and mesh.cp > 1 else kind.upper()
        lines.append(f"{label} groups ({len(groups)} of {degree}):")
        for group in groups[:MAX_GROUPS]:
            lines.append(f"  {_fmt_group(mesh, group)}")
        if len(groups) > MAX_GROUPS:
            lines.append(f"  ... {len(groups) - MAX_GROUPS} more")
    if mesh.ep > 1 or mesh.etp > 1:
        lines += _expert_lines(mesh)
    if mesh.pp > 1:
        stages: list[list[int]] = [[] for _ in range(mesh.pp)]
        for x in range(mesh.n_gpus):  # one pass over the GPUs, each to its stage in rank order
            stages[mesh.stage(x)].append(x)
        for p, gpus in enumerate(stages):
            nodes = sorted({mesh.node(g) for g in gpus})
            lines.append(f"stage {p}: GPUs {_ranges(gpus)} (nodes {_ranges(nodes)})")
    crossing = mesh.spans_nodes("tp") if mesh.tp > 1 else []
    if crossing:
        lines.append(f"WARNING: {len(crossing)} of {len(mesh.groups('tp'))} TP groups span nodes "
                     f"(tp={mesh.tp}, {mesh.gpus_per_node} GPUs per node): their collectives, on the critical "
                     "path of every block, cross the inter-node network")
    return lines


def _expert_lines(mesh: RankMesh) -> list[str]:
    """EP / ETP / expert-DP groups of the MoE blocks (``simulator.parallel.expert``)."""
    lines = [f"experts: ep={mesh.ep} etp={mesh.etp} edp={mesh.size('edp')}; "
             "stage rank = etp + etp*(ep + ep*edp), ETP innermost (Megatron-Core expert mesh)"]
    for kind, degree in (("ep", mesh.ep), ("etp", mesh.etp), ("edp", mesh.size("edp"))):
        if degree == 1:
            continue
        groups = mesh.groups(kind)
        lines.append(f"{kind.upper()} groups ({len(groups)} of {degree}):")
        lines += [f"  {_fmt_group(mesh, g)}" for g in groups[:MAX_GROUPS]]
        if len(groups) > MAX_GROUPS:
            lines.append(f"  ... {len(groups) - MAX_GROUPS} more")
    crossing = mesh.spans_nodes("ep") if mesh.ep > 1 else []
    if crossing:
        lines.append(f"note: {len(crossing)} of {len(mesh.groups('ep'))} EP groups span nodes: their token "
                     "all-to-alls cross the inter-node network")
    return lines
