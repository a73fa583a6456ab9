"""A cluster drawing as a network engineer would draw it (``dtsim topology show --png``).

Left: one node's internals (node 0): NVSwitches, GPUs, PCIe switches and NICs, CPUs in rows, every
device labelled, links coloured by kind. Right: the fabric: spines, leaves, and the nodes as boxes,
a node joined to every leaf one of its NICs reaches. The legend gives each link kind's bandwidth per
direction and its count. matplotlib is imported here only.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from simulator.atomic import replacing

#: Row of each device type in the node drawing (top to bottom).
_NODE_ROWS = {"nvswitch": 4, "gpu": 3, "pcie_switch": 2, "nic": 1, "cpu": 0}
_COLOURS = {"nvlink": "tab:green", "nvlink-c2c": "tab:olive", "pcie": "tab:gray", "net": "tab:orange",
            "upi": "tab:blue"}
_SHORT = {"gpu": "GPU", "nvswitch": "NVS", "pcie_switch": "PCIe", "nic": "NIC", "cpu": "CPU"}


def _gbps(bps: float) -> str:
    return f"{bps / 1e9:g} GB/s"


def _node_panel(ax: Any, graph: Any) -> None:
    members = [n for n, d in graph.nodes(data=True) if d.get("node") == 0 and d["type"] in _NODE_ROWS]
    rows: dict[int, list[str]] = {}
    for n in sorted(members, key=lambda n: graph.nodes[n]["index"]):
        rows.setdefault(_NODE_ROWS[graph.nodes[n]["type"]], []).append(n)
    pos = {}
    for y, names in rows.items():
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) / len(names), y)
    links: Counter = Counter()
    drawn = set()
    for u, v, d in graph.edges(data=True):
        if u in pos and v in pos and (v, u) not in drawn:
            drawn.add((u, v))
            kind = d.get("link", "net")
            if kind == "nvlink" and "cpu" in (graph.nodes[u]["type"], graph.nodes[v]["type"]):
                kind = "nvlink-c2c"  # the Grace-GPU link (NVLink-C2C), not the GPU-GPU fabric
            links[(kind, d["bandwidth_Bps"])] += 1
            ax.plot([pos[u][0], pos[v][0]], [pos[u][1], pos[v][1]], color=_COLOURS.get(kind, "black"), lw=0.6,
                    alpha=0.6, zorder=1)
    for n, (x, y) in pos.items():
        d = graph.nodes[n]
        ax.scatter([x], [y], s=160, color="white", edgecolor="black", zorder=2)
        ax.annotate(f"{_SHORT[d['type']]}{d['index']}", (x, y), fontsize=5, ha="center", va="center", zorder=3)
    for (kind, bw), count in sorted(links.items()):
        ax.plot([], [], color=_COLOURS.get(kind, "black"), label=f"{kind}: {_gbps(bw)} per direction, {count} link{'s' if count > 1 else ''}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=1, frameon=False)
    ax.set_yticks(sorted(set(_NODE_ROWS.values())))
    ax.set_yticklabels(["CPUs", "NICs", "PCIe switches", "GPUs", "NVSwitches"])
    ax.set_xticks([])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.5, 4.5)
    ax.set_title("one node (node 0)")


def _fabric_panel(ax: Any, graph: Any, n_nodes: int) -> None:
    from matplotlib.patches import Rectangle

    leaves = sorted((n for n, d in graph.nodes(data=True) if d["type"] == "leaf"), key=lambda n: graph.nodes[n]["index"])
    spines = sorted((n for n, d in graph.nodes(data=True) if d["type"] == "spine"),
                    key=lambda n: graph.nodes[n]["index"])
    pos = {n: ((i + 0.5) / len(spines), 2) for i, n in enumerate(spines)}
    pos.update({n: ((i + 0.5) / len(leaves), 1) for i, n in enumerate(leaves)})
    node_x = {k: (k + 0.5) / n_nodes for k in range(n_nodes)}
    tiers: Counter = Counter()
    node_leaf: set[tuple[int, str]] = set()
    for u, v, d in graph.edges(data=True):
        tu, tv = graph.nodes[u]["type"], graph.nodes[v]["type"]
        if (tu, tv) == ("leaf", "spine"):
            tiers[("leaf–spine", d["bandwidth_Bps"])] += 1
            ax.plot([pos[u][0], pos[v][0]], [1, 2], color="tab:red", lw=0.5, alpha=0.4)
        elif (tu, tv) == ("nic", "leaf"):
            tiers[("NIC–leaf", d["bandwidth_Bps"])] += 1
            node_leaf.add((graph.nodes[u]["node"], v))
    for k, leaf in sorted(node_leaf):
        ax.plot([node_x[k], pos[leaf][0]], [0, 1], color="tab:orange", lw=0.5, alpha=0.4)
    for n in leaves + spines:
        ax.scatter([pos[n][0]], [pos[n][1]], marker="s", s=90, color="tab:red" if n in spines else "salmon",
                   edgecolor="black", zorder=2)
    width = 0.8 / n_nodes
    for k, x in node_x.items():
        ax.add_patch(Rectangle((x - width / 2, -0.15), width, 0.3, facecolor="lightsteelblue", edgecolor="black",
                               zorder=2))
        if n_nodes <= 16:
            ax.annotate(f"node {k}", (x, 0), fontsize=6, ha="center", va="center", zorder=3)
    for (tier, bw), count in sorted(tiers.items()):
        ax.plot([], [], color="tab:red" if tier == "leaf–spine" else "tab:orange",
                label=f"{tier}: {_gbps(bw)} per direction, {count} link{'s' if count > 1 else ''}")
    if tiers:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.02), frameon=False)
    else:
        ax.text(0.5, 1.0, "single node: no scale-out fabric", ha="center")
    ax.set_yticks([0, 1, 2])
    ax.set_yticklabels([f"{n_nodes} nodes", f"{len(leaves)} leaves", f"{len(spines)} spines"])
    ax.set_xticks([])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.5, 2.5)
    ax.set_title("fabric")


def write_topology_png(cluster: Any, path: Path) -> None:
    """Two panels: node 0's internals and the scale-out fabric, links labelled with bandwidth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6.5), gridspec_kw={"width_ratios": [1.2, 1]})
    _node_panel(left, cluster.graph)
    _fabric_panel(right, cluster.graph, cluster.nodes)
    fig.suptitle(f"{cluster.topology.name} x {cluster.nodes} nodes ({cluster.n_gpus} GPUs)")
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=130, bbox_inches="tight")
    plt.close(fig)
