"""CLI for the network layer: ``dtsim collective`` (an nccl-tests-like sweep) and ``dtsim topology show``.

The main app registers ``collective`` as a command and ``topology_app`` under ``topology``. Bad input
raises ``simulator.errors.InputError``, which ``cli_common.handle_errors`` prints as one line with
exit code 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import networkx as nx
import typer
from rich.console import Console
from rich.table import Table

from simulator.cli_common import handle_errors
from simulator.cli_output import check_output
from simulator.collectives import ALGORITHMS, FIDELITIES, OPS, CollectiveModel
from simulator.collectives.algorithms import by_node
from simulator.config.topology import load_topology
from simulator.errors import InputError
from simulator.network import Cluster, build_cluster
from simulator.parallel.checks import check_flow_size
from simulator.units import parse_bytes

#: Printed with a single-node all-to-all: the collective model's reported gap (docs/network.md, the
#: ``known_gap`` curves of ``collectives/nccl_tests_curves.yaml``).
A2A_GAP_NOTE = ("[yellow]note:[/] inside one node dtsim's all-to-all is 41-51% slower than nccl-tests at "
                "16-64 MiB on 8 x H100 (within 6% from 512 MiB): a known gap of the collective model, see "
                "docs/network.md")

topology_app = typer.Typer(help="Inspect cluster topologies (topologies/*.yaml).", no_args_is_help=True)


def _bytes(text: str, option: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise InputError(str(exc), field=option) from None


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """nccl-tests' ``-b/-e/-f`` size sweep: min, min·f, … up to max (inclusive)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise InputError(f"need 1 <= min-bytes <= max-bytes, got {min_bytes} and {max_bytes}", field="--min-bytes")
    if factor < 2:
        raise InputError(f"step factor must be >= 2, got {factor}", field="--step-factor")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def _cluster_for(topology: str, nodes: int, gpus: int | None, sharp: bool = False) -> tuple[Cluster, int]:
    topo = load_topology(topology)
    if sharp:
        topo = _with_sharp(topo)
    if nodes < 1:
        raise InputError(f"need at least one node, got {nodes}", field="--nodes")
    per_node = topo.gpus_per_node
    if gpus is not None:
        if gpus < 1:
            raise InputError(f"need at least one GPU, got {gpus}", field="--gpus")
        host = topo.gpus_per_host
        if host is not None and gpus % host:
            raise InputError(f"{gpus} GPUs is not a multiple of the {host} GPUs of one host (compute tray)",
                             field="--gpus")
        if host is None and gpus > per_node and gpus % per_node:
            raise InputError(f"{gpus} GPUs is not a multiple of the node size ({per_node})", field="--gpus")
        nodes = max(nodes, math.ceil(gpus / per_node))
    cluster = build_cluster(topo, nodes)
    return cluster, gpus or cluster.n_gpus


def _with_sharp(topo):
    """``topo`` with SHARP in-network reduction switched on (its fat tree must be rail-optimised)."""
    from simulator.config.topology import FatTreeFabric, TopologyConfig

    if not isinstance(topo.fabric, FatTreeFabric):
        raise InputError(f"{topo.name} has no fat-tree fabric; SHARP (CollNet) needs InfiniBand switches "
                         "in a rail-optimised fat tree", "--sharp")
    try:
        return TopologyConfig.model_validate({**topo.model_dump(), "fabric": {**topo.fabric.model_dump(), "sharp": True}})
    except ValueError as exc:
        raise InputError(str(exc).splitlines()[-1], "--sharp") from None


def collective(
    topology: str = typer.Option(..., "--topology", "-t", help="bundled topology name or YAML path"),
    nodes: int = typer.Option(1, "--nodes", "-N", help="number of nodes"),
    op: str = typer.Option("all_reduce", "--op", help=f"one of: {', '.join(OPS)}"),
    algo: str = typer.Option("auto", "--algo", help=f"one of: {', '.join(ALGORITHMS)}"),
    fidelity: str = typer.Option("analytical", "--fidelity", help=f"one of: {', '.join(FIDELITIES)}"),
    min_bytes: str = typer.Option("8", "--min-bytes", "-b", help="smallest size (8, 64K, 1M, 1GB)"),
    max_bytes: str = typer.Option("8G", "--max-bytes", "-e", help="largest size"),
    nbytes: str | None = typer.Option(None, "--bytes", help="a single size instead of a sweep"),
    step_factor: int = typer.Option(2, "--step-factor", "-f", help="multiply the size by this each row"),
    gpus: int | None = typer.Option(None, "--gpus", help="use the first N GPUs (default: all)"),
    sharp: bool = typer.Option(False, "--sharp", help="switch on SHARP in-network reduction (NCCL CollNet) "
                               "on the fat tree; same as fabric.sharp: true in the topology file"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Predict an nccl-tests run: time, algbw and busbw of one collective over a size sweep."""
    _collective(topology, nodes, op, algo, fidelity, min_bytes, max_bytes, nbytes, step_factor, gpus, as_json, sharp)


@handle_errors
def _collective(topology: str, nodes: int, op: str, algo: str, fidelity: str, min_bytes: str, max_bytes: str,
                nbytes: str | None, step_factor: int, gpus: int | None, as_json: bool, sharp: bool = False) -> None:
    for value, valid, option in ((op, OPS, "--op"), (algo, ALGORITHMS, "--algo"), (fidelity, FIDELITIES, "--fidelity")):
        if value not in valid:
            raise InputError(f"unknown value {value!r}; valid: {', '.join(valid)}", field=option)
    check_flow_size(fidelity, nodes, "--fidelity")
    cluster, n = _cluster_for(topology, nodes, gpus, sharp)
    if algo == "nvls" and not cluster.topology.nvls:
        raise InputError(f"{cluster.topology.name} has no NVLink SHARP (NVLS needs NVSwitch with nvls: true, "
                         "H100 and later); use --algo auto, ring, tree or hierarchical", "--algo")
    if algo == "collnet" and not cluster.topology.sharp:
        raise InputError(f"{cluster.topology.name} has no SHARP switches; add --sharp (or fabric.sharp: true) "
                         "or use --algo auto, ring, tree or hierarchical", "--algo")
    model = CollectiveModel(cluster, fidelity=fidelity, algorithm=algo)
    group = [0, n - 1] if op == "send_recv" else list(range(n))
    if nbytes is not None:
        sizes = [_bytes(nbytes, "--bytes")]
        if sizes[0] < 1:
            raise InputError(f"must be at least 1 (got {nbytes}); nccl-tests sizes start at 1 byte",
                             field="--bytes")
    else:
        sizes = sweep_sizes(_bytes(min_bytes, "--min-bytes"), _bytes(max_bytes, "--max-bytes"), step_factor)
    rows = []
    for size in sizes:
        r = model.run(op, [group], size)
        rows.append({"bytes": size, "time_s": r.time_s, "algbw_GBps": r.algbw_GBps, "busbw_GBps": r.busbw_GBps,
                     "algorithm": r.algorithm, "protocol": r.protocol})
    fallback = sorted({r["algorithm"] for r in rows if algo != "auto" and not r["algorithm"].startswith(algo)})
    if fallback:
        Console(stderr=True).print(f"[yellow]warning:[/] --algo {algo} does not apply here; the model used "
                                   f"{', '.join(fallback)}", highlight=False, soft_wrap=True)
    if op == "all_to_all" and len(by_node(cluster, group)) == 1:
        Console(stderr=True).print(A2A_GAP_NOTE, highlight=False, soft_wrap=True)
    console = Console()
    if as_json:
        doc = {"topology": cluster.topology.name, "nodes": cluster.nodes, "gpus": n, "op": op,
               "fidelity": fidelity, "rows": rows}
        typer.echo(json.dumps(doc, indent=2))
        return
    table = Table(title=f"{op} on {n} GPUs: {cluster.topology.name} x {cluster.nodes} ({fidelity})")
    for col in ("size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm"):
        table.add_column(col, justify="right" if col != "algorithm" else "left")
    for row in rows:
        table.add_row(str(row["bytes"]), f"{row['time_s'] * 1e6:.1f}", f"{row['algbw_GBps']:.2f}",
                      f"{row['busbw_GBps']:.2f}", f"{row['algorithm']}/{row['protocol']}")
    console.print(table)


@topology_app.command("show")
def show(
    name: str = typer.Argument(..., help="bundled topology name or YAML path"),
    nodes: int = typer.Option(1, "--nodes", "-N", help="number of nodes"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    png: Path | None = typer.Option(None, "--png", help="draw the graph to this PNG (needs matplotlib)"),
    graphml: Path | None = typer.Option(None, "--graphml", help="write the graph as GraphML"),
) -> None:
    """GPU count, link counts, per-GPU and bisection bandwidth of NAME on N nodes."""
    _show(name, nodes, as_json, png, graphml)


@handle_errors
def _show(name: str, nodes: int, as_json: bool, png: Path | None, graphml: Path | None) -> None:
    check_output(png, "--png", (".png",))
    check_output(graphml, "--graphml", (".graphml", ".xml"), (png,))
    if png is not None and nodes > MAX_DRAWN_NODES:
        raise InputError(f"--png draws at most {MAX_DRAWN_NODES} nodes (a larger drawing is unreadable and takes "
                         f"minutes); use --nodes {MAX_DRAWN_NODES} or fewer for the picture", "--png")
    cluster, _ = _cluster_for(name, nodes, None)
    stats = cluster.stats()
    if graphml is not None:
        write_graphml(cluster, graphml)
    if png is not None:
        try:
            from simulator.report.topology_png import write_topology_png
        except ImportError:  # pragma: no cover - depends on the environment
            raise InputError("drawing needs matplotlib: pip install 'dtsim[plot]'", field="--png") from None
        write_topology_png(cluster, png)
    if as_json:
        typer.echo(json.dumps(stats, indent=2))
        return
    table = Table(title=f"{cluster.topology.name} x {nodes}: {cluster.topology.description}")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.1f}"
        table.add_row(key, str(value))
    Console().print(table)


#: Largest cluster ``topology show --png`` draws, in nodes.
MAX_DRAWN_NODES = 64


def write_graphml(cluster: Cluster, path: Path) -> None:
    """GraphML with the graph's typed nodes and edge attributes (``None`` stored as -1)."""
    g = nx.DiGraph()
    g.add_nodes_from((n, {k: (-1 if v is None else v) for k, v in d.items()}) for n, d in cluster.graph.nodes(data=True))
    g.add_edges_from(cluster.graph.edges(data=True))
    nx.write_graphml(g, str(path))
