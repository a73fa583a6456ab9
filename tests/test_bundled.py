"""Bundled topologies and scenarios: found in the source tree and, in an installed package, in the
copies ``setup.py`` ships under ``simulator/_bundled/`` (``.ci/run`` checks a real non-editable
install)."""

from __future__ import annotations

from pathlib import Path

from simulator import bundled
from simulator.config.loader import load_scenario, resolve_scenario_path

ROOT = Path(__file__).resolve().parents[1]


def test_source_tree_wins(monkeypatch):
    assert bundled.bundled_dir("topologies") == ROOT / "topologies"
    assert bundled.bundled_dir("scenarios") == ROOT / "scenarios"


def test_installed_layout_is_found(tmp_path, monkeypatch):
    # An installed package: site-packages/simulator/_bundled/topologies/, no top-level folder beside it.
    pkg = tmp_path / "site-packages" / "simulator"
    (pkg / "_bundled" / "topologies").mkdir(parents=True)
    monkeypatch.setattr(bundled, "_PACKAGE", pkg)
    assert bundled.bundled_dir("topologies") == pkg / "_bundled" / "topologies"


def test_bundled_scenario_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path("olmo-2-7b-8xh100") == ROOT / "scenarios" / "olmo-2-7b-8xh100.yaml"
    assert resolve_scenario_path("scenarios/olmo-2-7b-8xh100.yaml") == ROOT / "scenarios" / "olmo-2-7b-8xh100.yaml"
    assert load_scenario("olmo-2-7b-8xh100").name == "olmo-2-7b-8xh100"
    # A file of that name in the working folder is the user's and wins.
    (tmp_path / "olmo-2-7b-8xh100.yaml").write_text("x: 1\n")
    assert resolve_scenario_path("olmo-2-7b-8xh100.yaml") == Path("olmo-2-7b-8xh100.yaml")

