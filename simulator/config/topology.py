"""Cluster topology files (``topologies/*.yaml``): one node type and how nodes attach to the fabric.

This module holds the schema and the file lookup; ``simulator.network`` turns a validated
``TopologyConfig`` into a networkx graph.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import PositiveInt

from simulator.config.base import Frozen

#: The repository's bundled topology folder (``topologies/`` beside the package).
BUNDLED_TOPOLOGY_DIR = Path(__file__).resolve().parents[2] / "topologies"


class TopologyConfig(Frozen):
    """One node type (GPU model, GPUs per node) and its fabric."""

    name: str
    description: str = ""
    gpu: str
    gpus_per_node: PositiveInt


def bundled_topology_names() -> list[str]:
    """Names of the topology files shipped in ``topologies/`` (without ``.yaml``)."""
    if not BUNDLED_TOPOLOGY_DIR.is_dir():
        return []
    return sorted(p.stem for p in BUNDLED_TOPOLOGY_DIR.glob("*.yaml"))


def resolve_topology_path(ref: str, base_dir: Path | None = None) -> Path:
    """Find a topology by bundled name (``dgx-h100``) or by path (absolute, or relative to
    ``base_dir`` — the scenario's folder — or to the working directory).

    Raises ``FileNotFoundError`` whose message lists the bundled names.
    """
    candidates = []
    as_path = Path(ref)
    if as_path.suffix in (".yaml", ".yml") or "/" in ref:
        if base_dir is not None and not as_path.is_absolute():
            candidates.append(base_dir / as_path)
        candidates.append(as_path)
    else:
        candidates.append(BUNDLED_TOPOLOGY_DIR / f"{ref}.yaml")
    for path in candidates:
        if path.is_file():
            return path
    names = ", ".join(bundled_topology_names()) or "(none bundled)"
    raise FileNotFoundError(f"unknown topology {ref!r}; bundled topologies: {names}; or give a path to a .yaml file")
