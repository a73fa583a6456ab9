"""Every output writer checks its path before simulating: a directory, a missing folder, an
unwritable location, a wrong suffix or an input file of the same command is one ``error:`` line,
exit 2, nothing printed on stdout and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"
SMALL = ["--set", "training.global_batch_size=8"]
runner = CliRunner()

#: (command before the output option, option, a good suffix)
WRITERS = [
    (["run", str(SCENARIO), *SMALL, "--allow-oom"], "--trace", ".json"),
    (["run", str(SCENARIO), *SMALL, "--allow-oom"], "--png", ".png"),
    (["sweep", str(SCENARIO), *SMALL, "--grid", "training.micro_batch_size=1"], "--out", ".csv"),
    (["sweep", str(SCENARIO), *SMALL, "--grid", "training.micro_batch_size=1"], "--png", ".png"),
    (["compare", str(SCENARIO), *SMALL, "--vary", "training.micro_batch_size=1"], "--png", ".png"),
    (["topology", "show", "dgx-h100"], "--png", ".png"),
    (["topology", "show", "dgx-h100"], "--graphml", ".graphml"),
    (["validate", "--only", "megatron-sc21-t1-1.7B"], "--markdown", ".md"),
    (["validate", "--only", "megatron-sc21-t1-1.7B"], "--png", ".png"),
    (["validate", "--only", "megatron-sc21-t1-1.7B"], "--intervals", ".yaml"),
]


def _refused(args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    assert needle in result.output
    assert result.stdout.strip() == "" or result.stdout.strip().startswith("error:")


@pytest.mark.parametrize(("cmd", "option", "suffix"), WRITERS, ids=lambda x: x if isinstance(x, str) else None)
def test_bad_output_paths_are_refused_before_any_work(tmp_path, cmd, option, suffix):
    before = set(tmp_path.iterdir())
    _refused([*cmd, option, str(tmp_path)], "is a directory")
    _refused([*cmd, option, str(tmp_path / "missing" / f"x{suffix}")], "does not exist")
    _refused([*cmd, option, f"/proc/x{suffix}"], "cannot write")
    _refused([*cmd, option, str(tmp_path / "noext")], "ending in")
    assert set(tmp_path.iterdir()) == before


def test_interval_table_needs_the_whole_suite(tmp_path):
    """dtsim run's interval table comes from every validated run: a filtered pass may not write it."""
    _refused(["validate", "--only", "megatron-sc21-t1-1.7B", "--intervals", str(tmp_path / "i.yaml")],
             "drop --only / --kind")
    assert not list(tmp_path.iterdir())


def test_trace_would_overwrite_the_scenario(tmp_path):
    scenario = tmp_path / "base.json"  # a scenario file that happens to end in .json
    scenario.write_text(SCENARIO.read_text())
    text = scenario.read_text()
    _refused(["run", str(scenario), *SMALL, "--trace", str(scenario)], "input of this command")
    assert scenario.read_text() == text


def test_good_outputs_are_written(tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "p.png"
    result = runner.invoke(app, ["run", str(SCENARIO), *SMALL, "--allow-oom", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert trace.stat().st_size > 0 and not png.exists()


def test_drawing_a_huge_cluster_is_refused_up_front(tmp_path):
    _refused(["topology", "show", "dgx-h100", "--nodes", "100000", "--png", str(tmp_path / "t.png")], "at most")


def test_topology_drawing_labels_every_link_kind_with_its_bandwidth(tmp_path, monkeypatch):
    import matplotlib.axes

    from simulator.config.topology import load_topology
    from simulator.network import build_cluster
    from simulator.report.topology_png import write_topology_png

    labels: list[str] = []
    original = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        if kwargs.get("label"):
            labels.append(kwargs["label"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    cluster = build_cluster(load_topology("dgx-h100"), 2)
    write_topology_png(cluster, tmp_path / "t.png")
    kinds = {(d["link"], d["bandwidth_Bps"]) for u, v, d in cluster.graph.edges(data=True)
             if cluster.graph.nodes[u].get("node") == 0 and cluster.graph.nodes[v].get("node") == 0}
    for kind, bw in kinds:
        assert any(label.startswith(f"{kind}: {bw / 1e9:g} GB/s per direction") for label in labels), (kind, labels)
    assert any(label.startswith("NIC–leaf") for label in labels)
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_a_closed_pipe_keeps_the_files_and_exits_0(tmp_path):
    # `dtsim run X --png p.png | head -1`: files are written before printing; the closed pipe is not an error.
    import os
    import subprocess
    import sys

    png = tmp_path / "p.png"
    cmd = [sys.executable, "-m", "simulator", "run", str(SCENARIO), *SMALL, "--allow-oom", "--png", str(png)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()  # the reader goes away before anything is printed (the pipe buffer would hide it later)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and png.read_bytes()[:4] == b"\x89PNG"
