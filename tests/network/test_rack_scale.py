"""Rack-scale NVLink (GB200/GB300 NVL72) and the new 8-GPU nodes: counts and bandwidths by hand
(numbers from the topology files' sources), NVLink-C2C host links, rails, multi-plane fabrics."""

from __future__ import annotations

import pytest

from simulator.collectives import CollectiveModel
from simulator.config.topology import parse_topology
from simulator.errors import InputError
from simulator.network import build_cluster

GiB = 2**30


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72", "hgx-b300", "mi325x-8", "mi355x-8", "dgx-b200"])
def test_new_topologies_build_and_validate(topo, name):
    c = build_cluster(topo(name), 2)
    s = c.stats()
    assert s["gpus"] == 2 * topo(name).gpus_per_node
    assert s["gpu"] == topo(name).gpu


def test_nvl72_is_one_nvlink_domain_per_rack(topo):
    c = build_cluster(topo("gb200-nvl72"), 2)
    s = c.stats()
    assert s["node_unit"] == "rack" and s["gpus"] == 144
    assert s["nvlink_domain_gpus"] == 72 and s["nvlink_domains"] == 2
    # 18 NVLink5 switch chips per rack (9 trays x 2 ASICs [S26]); each GPU one 50 GB/s/dir link to each.
    assert s["node_counts"]["nvswitch"] == 2 * 18
    # links: 72 x 18 GPU-switch NVLink bundles and 72 GPU-Grace NVLink-C2C links per rack.
    assert s["link_counts"]["nvlink"] == 2 * 72 * 18 and s["link_counts"]["c2c"] == 2 * 72
    assert s["scale_up_GBps_per_gpu"] == pytest.approx(18 * 50)
    # Non-blocking NVLink domain: bisection = 36 GPUs x 900 GB/s per direction = 32.4 TB/s.
    assert s["nvlink_bisection_GBps"] == pytest.approx(36 * 900)
    # One ConnectX-7 400 Gb/s per GPU: 50 GB/s; NIC bisection of 2 racks = 72 NICs x 50 GB/s.
    assert s["nic_GBps_per_gpu"] == pytest.approx(50)
    assert s["bisection_GBps"] == pytest.approx(72 * 50)
    # 4 rails (NIC position in the tray); a 64-port leaf has 32 down ports and takes 72/4 = 18 NICs of
    # a rack, so one rack per block: 2 blocks x 4 rails = 8 leaves; spines = ceil(8 x 32 / 64) = 4.
    assert s["leaves"] == 8 and s["spines"] == 4


def test_nvl72_host_memory_over_nvlink_c2c(topo):
    c = build_cluster(topo("gb200-nvl72"), 1)
    # NVLink-C2C: 900 GB/s bidirectional per Grace + 2 GPUs [S26] -> 450 per direction / 2 GPUs.
    assert c.host_link == "c2c"
    assert c.host_bandwidth_Bps_per_gpu == pytest.approx(900e9 / 2 / 2)
    # DGX B200: PCIe Gen5 x16 (63 GB/s/dir), 2 GPUs per PCIe switch sharing a 63 GB/s uplink.
    b = build_cluster(topo("dgx-b200"), 1)
    assert b.host_link == "pcie" and b.host_bandwidth_Bps_per_gpu == pytest.approx(63e9 / 2)


def test_dgx_nvlink_bisection_by_hand(topo):
    # DGX H100: 8 GPUs x 450 GB/s/dir on NVSwitch: (8/2) x 450 = 1.8 TB/s per direction (3.6 TB/s
    # bidirectional, hardware.md §2 [S2]).
    assert build_cluster(topo("dgx-h100"), 1).nvlink_bisection_Bps() == pytest.approx(4 * 450e9)
    # MI355X full mesh, 76.8 GB/s per pair [G14]: 4 x 4 pairs cross the cut.
    assert build_cluster(topo("mi355x-8"), 1).nvlink_bisection_Bps() == pytest.approx(16 * 76.8e9)


def test_nvl72_all_reduce_against_nvlink5_and_published_runs(topo):
    c = build_cluster(topo("gb200-nvl72"), 1)
    model = CollectiveModel(c)
    full = model.run("all_reduce", [list(range(72))], GiB)
    # NVLink5 line rate is 900 GB/s per direction per GPU: an all-reduce's algbw cannot exceed it.
    assert full.algorithm == "nvls" and full.algbw_GBps < 900
    # CoreWeave nccl-tests on a full NVL72 rack [G6], 1 GiB: algbw 345.4 (out of place) - 367.1 (in
    # place) GB/s. The NCCL model over-predicts the 72-GPU NVLS all-reduce (docs/network.md, "Rack-scale
    # NVLink"); this bounds the error until the collective model carries NVLS group-size effects.
    assert 345.4 <= full.algbw_GBps <= 1.6 * 367.1
    # 8 GPUs on 2 compute trays over multi-node NVLink: 811 GB/s busbw measured [G7].
    eight = model.run("all_reduce", [list(range(8))], GiB)
    assert eight.busbw_GBps == pytest.approx(811, rel=0.05)


def test_partial_rack_needs_whole_trays(topo, tmp_path):
    from simulator.config.loader import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\nmodel: llama-3-8b\ncluster: {topology: gb200-nvl72, nodes: 2, gpus: 100}\n"
        "training: {seq_len: 1024, micro_batch_size: 1, global_batch_size: 100}\nparallel: {framework: fsdp}\n")
    sc = load_scenario(path, [])
    assert sc.n_gpus == 100  # one full rack + 7 trays of the second
    with pytest.raises(InputError, match="cluster.gpus"):
        load_scenario(path, ["cluster.gpus=102", "training.global_batch_size=102"])


def _fabric_variant(topo, name="gb200-nvl72", **fabric):
    data = topo(name).model_dump()
    data["fabric"].update(fabric)
    return parse_topology(data)


def test_multi_plane_and_dual_tor_change_switch_counts_not_bandwidth(topo):
    base = build_cluster(topo("hgx-b300"), 2)
    planes = build_cluster(_fabric_variant(topo, "hgx-b300", planes=2), 2)
    dual = build_cluster(_fabric_variant(topo, "hgx-b300", dual_tor=True), 2)
    for variant in (planes, dual):
        s = variant.stats()
        assert s["fabric_planes"] == 2
        assert s["leaves"] == 2 * base.stats()["leaves"] and s["spines"] == 2 * base.stats()["spines"]
        # every transfer spreads evenly over identical parallel paths: same collective time
        t0 = CollectiveModel(base).run("all_reduce", [list(range(16))], GiB).time_s
        assert CollectiveModel(variant).run("all_reduce", [list(range(16))], GiB).time_s == t0


def test_rails_must_divide_the_nics(topo):
    with pytest.raises(InputError, match="rails"):
        _fabric_variant(topo, rails=5)


def test_cli_topology_show_and_collective_on_nvl72():
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["topology", "show", "gb200-nvl72", "--nodes", "2", "--json"])
    assert out.exit_code == 0, out.output
    stats = json.loads(out.output)
    assert stats["nvlink_domain_gpus"] == 72 and stats["nvlink_bisection_GBps"] == pytest.approx(36 * 900)
    out = runner.invoke(app, ["collective", "--topology", "gb200-nvl72", "--gpus", "102", "--bytes", "1M"])
    assert out.exit_code == 2 and "error:" in out.output and "--gpus" in out.output


def test_any_two_gpus_of_a_rack_talk_at_full_nvlink5(topo):
    c = build_cluster(topo("gb200-nvl72"), 2)
    # GPUs 0 and 71 sit on different compute trays of rack 0: spread over the 18 switch chips, one
    # 50 GB/s link each = 900 GB/s per direction. GPU 72 is on rack 1: one 400 Gb/s NIC = 50 GB/s.
    assert c.path_bandwidth_Bps(0, 71) == pytest.approx(18 * 50e9)
    assert c.path_bandwidth_Bps(0, 72) == pytest.approx(400e9 / 8)
