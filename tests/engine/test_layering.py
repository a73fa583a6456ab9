"""Import direction (ARCHITECTURE.md §2): only the engine imports simpy; report never imports engine;
parallel and hardware never import engine, report, api or the CLI."""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "simulator"


def _imports(path: Path) -> set[str]:
    text = path.read_text()
    return set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, flags=re.M))


def test_only_engine_imports_simpy():
    offenders = [p for p in PKG.rglob("*.py") if "simpy" in _imports(p) and p.parent.name != "engine"]
    assert offenders == []


def test_lower_layers_do_not_import_upper_ones():
    rules = {"report": ("simulator.engine",), "parallel": ("simulator.engine", "simulator.report", "simulator.api"),
             "hardware": ("simulator.engine", "simulator.report", "simulator.api", "simulator.parallel")}
    for package, banned in rules.items():
        for path in (PKG / package).rglob("*.py"):
            bad = [m for m in _imports(path) if m.startswith(banned)]
            assert bad == [], f"{path.relative_to(PKG)} imports {bad}"
