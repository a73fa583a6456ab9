"""The network CLI commands mounted on a local typer app."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from simulator.cli_network import collective, sweep_sizes, topology_app
from simulator.errors import InputError

app = typer.Typer()
app.command()(collective)
app.add_typer(topology_app, name="topology")
runner = CliRunner()


def test_collective_json_single_size():
    res = runner.invoke(app, ["collective", "--topology", "dgx-h100", "--nodes", "2", "--op", "all_reduce",
                              "--bytes", "1G", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["gpus"] == 16
    (row,) = doc["rows"]
    assert row["bytes"] == 2**30
    assert set(row) >= {"bytes", "time_s", "algbw_GBps", "busbw_GBps", "algorithm"}
    assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)


def test_collective_sweep_table():
    res = runner.invoke(app, ["collective", "--topology", "dgx-a100", "--op", "all_gather", "--algo", "ring",
                              "--fidelity", "flow", "--min-bytes", "1M", "--max-bytes", "8M"])
    assert res.exit_code == 0, res.output
    assert "busbw" in res.output and "ring" in res.output
    assert "8388608" in res.output


def test_sweep_sizes_like_nccl_tests():
    assert sweep_sizes(8, 64) == [8, 16, 32, 64]
    with pytest.raises(InputError):
        sweep_sizes(64, 8)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--topology", "dgx-z900"], "topology"),
        (["--topology", "dgx-h100", "--gpus", "12"], "--gpus"),
        (["--topology", "dgx-h100", "--bytes", "lots"], "--bytes"),
        (["--topology", "dgx-h100", "--bytes", "0"], "--bytes"),
        (["--topology", "dgx-h100", "--op", "allreduce"], "--op"),
        (["--topology", "dgx-h100", "--algo", "magic"], "--algo"),
        (["--topology", "dgx-h100", "--fidelity", "packet"], "--fidelity"),
        (["--topology", "dgx-h100", "--nodes", "0"], "--nodes"),
    ],
)
def test_collective_bad_input_exits_2_naming_the_field(args, field):
    res = runner.invoke(app, ["collective", *args, "--bytes", "1M"] if "--bytes" not in args else ["collective", *args])
    assert res.exit_code == 2
    assert f"{field}:" in res.output and "Traceback" not in res.output


def test_topology_show_bad_input_exits_2():
    res = runner.invoke(app, ["topology", "show", "dgx-h100", "--nodes", "0"])
    assert res.exit_code == 2 and "--nodes" in res.output


def test_topology_show_json_and_graphml(tmp_path):
    out = tmp_path / "g.graphml"
    res = runner.invoke(app, ["topology", "show", "dgx-h100", "--nodes", "2", "--json", "--graphml", str(out)])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output)
    assert stats["gpus"] == 16 and stats["nic_GBps_per_gpu"] == 50.0
    assert out.read_text().startswith("<?xml")


def test_topology_show_table():
    res = runner.invoke(app, ["topology", "show", "pcie-rtx4090x8"])
    assert res.exit_code == 0, res.output
    assert "bisection" in res.output


def test_topology_show_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "g.png"
    res = runner.invoke(app, ["topology", "show", "dgx-a100", "--png", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 1000


def test_collective_sharp_flag_runs_collnet_across_nodes():
    res = runner.invoke(app, ["collective", "--topology", "dgx-a100", "--nodes", "16", "--bytes", "1G", "--sharp",
                              "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["rows"]
    assert row["algorithm"].startswith("collnet")


def test_collective_collnet_without_sharp_is_an_input_error():
    res = runner.invoke(app, ["collective", "--topology", "dgx-a100", "--nodes", "4", "--algo", "collnet"])
    assert res.exit_code == 2
    assert "--algo" in res.output and "--sharp" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("nodes", "op", "noted"), [(1, "all_to_all", True), (2, "all_to_all", False),
                                                    (1, "all_reduce", False)])
def test_single_node_all_to_all_names_its_known_gap(nodes, op, noted):
    # docs/network.md: the single-node all-to-all misses both bundled 8 x H100 nccl-tests curves (known_gap);
    # the command says so where the gap applies, on stderr, so that --json stays parseable.
    res = runner.invoke(app, ["collective", "--topology", "dgx-h100", "--nodes", str(nodes), "--op", op,
                              "--bytes", "64M", "--json"])
    assert res.exit_code == 0, res.output
    assert ("known gap" in res.stderr) is noted
    assert json.loads(res.stdout)["op"] == op
