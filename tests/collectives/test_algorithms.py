"""Collective algorithms: byte conservation, small and odd group sizes, concurrency, caching, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.collectives import CollectiveModel
from simulator.collectives import algorithms as alg
from simulator.errors import InputError
from simulator.network import build_cluster, link_loads
from simulator.units import GiB, MiB

S = 256 * MiB


@pytest.fixture(scope="module")
def h100x2(topo):
    return build_cluster(topo("dgx-h100"), 2)


@pytest.fixture(scope="module")
def a100x2(topo):
    return build_cluster(topo("dgx-a100"), 2)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 16])
def test_ring_all_reduce_moves_2_n_minus_1_over_n_per_rank(h100x2, n):
    cm = CollectiveModel(h100x2, algorithm="ring")
    r = cm.run("all_reduce", [list(range(n))], S)
    assert r.algorithm == "ring"
    assert r.bytes_on_wire_per_rank == pytest.approx(2 * (n - 1) / n * S)
    for ph in alg.ring(h100x2, "all_reduce", list(range(n)), S):
        assert all(v == pytest.approx(2 * (n - 1) / n * S) for v in ph.sent.values())
        assert len(ph.sent) == n


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_rs_ag_move_n_minus_1_over_n(h100x2, op, n):
    r = CollectiveModel(h100x2, algorithm="ring").run(op, [list(range(n))], S)
    assert r.bytes_on_wire_per_rank == pytest.approx((n - 1) / n * S)


def test_ring_all_reduce_loads_each_nvlink_port_with_its_volume(h100x2):
    # One DGX H100: every GPU's NVLink egress (4 switch links together) carries 2(n-1)/n * S.
    ph = alg.ring(h100x2, "all_reduce", list(range(8)), S)[0]
    loads = link_loads(ph.transfers, h100x2.graph.number_of_edges())
    for gpu in range(8):
        ids = [d["id"] for _, v, d in h100x2.graph.out_edges(h100x2.gpu_ids[gpu], data=True) if d["link"] == "nvlink"]
        assert loads[ids].sum() == pytest.approx(2 * 7 / 8 * S)


def test_two_gpu_all_reduce_by_hand(h100x2):
    # n = 2: each GPU sends S over NVLink; H100 effective NVLink = 450 GB/s * 20.6/25 (NCCL topo.h).
    # time = NCCL ring/Simple latency (8.4 base + 2 steps * 3.4 us, tuning.cc) + the ring pipeline
    # fill 220 us * (2 steps / the 14 of the 8-GPU all-reduce it was fitted on) * (1 - exp(-S / 24 MiB))
    # + S / 370.8 GB/s.
    r = CollectiveModel(h100x2, algorithm="ring").run("all_reduce", [[0, 1]], 1 * GiB)
    expected = (8.4 + 2 * 3.4) * 1e-6 + 220e-6 * 2 / 14 * (1 - math.exp(-1024 / 24)) + GiB / (450e9 * 20.6 / 25)
    assert r.time_s == pytest.approx(expected, rel=1e-6)
    assert r.busbw_GBps == pytest.approx(GiB / expected / 1e9)  # factor 2(n-1)/n = 1


def test_p2p_cross_node_by_hand(a100x2):
    # GPU 0 -> GPU 8: the HDR NIC limits: 25 GB/s * 0.95 network efficiency = 23.75 GB/s.
    t = CollectiveModel(a100x2).p2p_time(0, 8, GiB)
    assert t == pytest.approx(GiB / 23.75e9, rel=0.01)
    assert CollectiveModel(a100x2).p2p_time(3, 3, GiB) == 0.0


def test_group_of_one_and_zero_bytes_cost_nothing(h100x2):
    cm = CollectiveModel(h100x2)
    assert cm.run("all_reduce", [[3]], GiB).time_s == 0.0
    assert cm.run("all_reduce", [[0, 1, 2]], 0).time_s == 0.0


@pytest.mark.parametrize("fidelity", ["analytical", "flow"])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"])
@pytest.mark.parametrize("n", [2, 3, 6, 8])
def test_every_op_runs_on_small_and_odd_groups(h100x2, fidelity, op, n):
    r = CollectiveModel(h100x2, fidelity=fidelity).run(op, [list(range(n))], 64 * MiB)
    assert r.time_s > 0 and np.isfinite(r.busbw_GBps)


def test_rail_aligned_dp_groups_do_not_slow_each_other(a100x2):
    # TP = 8 on 2 nodes: DP group j = {j, 8 + j} uses rail j only, so 8 concurrent groups take as long as one.
    cm = CollectiveModel(a100x2, algorithm="ring")
    one = cm.run("all_reduce", [[0, 8]], GiB).time_s
    eight = cm.run("all_reduce", [[j, 8 + j] for j in range(8)], GiB).time_s
    assert eight == pytest.approx(one, rel=1e-9)


def test_dp_groups_sharing_one_nic_split_it(topo):
    # 8x RTX 4090, no P2P, one NIC on PCIe switch 0 of each node; DP groups {j, 8 + j} run at once.
    # Host staging makes traffic cross switch 0's uplink (Gen4 x16, 31.5 GB/s * 0.762 = 24.0 GB/s):
    # upwards it carries what GPUs 0 and 1 send (2 S) plus everything arriving from the NIC (8 S) = 10 S,
    # against 2 S for a single group -> 5x slower, limited by 10 S / 24.0 GB/s (the NIC carries 8 S / 23.75).
    c = build_cluster(topo("pcie-rtx4090x8"), 2)
    for fidelity in ("analytical", "flow"):
        cm = CollectiveModel(c, fidelity=fidelity, algorithm="ring")
        one = cm.run("all_reduce", [[0, 8]], GiB).time_s
        eight = cm.run("all_reduce", [[j, 8 + j] for j in range(8)], GiB).time_s
        assert eight / one == pytest.approx(5, rel=0.02)
        assert eight == pytest.approx(10 * GiB / (31.5e9 * 0.762), rel=0.01)


@pytest.mark.parametrize(
    "groups",
    [
        [list(range(8))],  # one node ring: each GPU's NVLink ports carry only its own hop
        [[j, 8 + j] for j in range(8)],  # rail-disjoint DP groups
        [[0, 8]],
    ],
)
def test_analytical_and_flow_agree_without_shared_links(h100x2, groups):
    for algo in ("ring", "nvls", "hierarchical"):
        a = CollectiveModel(h100x2, fidelity="analytical", algorithm=algo).run("all_reduce", groups, GiB)
        f = CollectiveModel(h100x2, fidelity="flow", algorithm=algo).run("all_reduce", groups, GiB)
        assert a.algorithm == f.algorithm
        assert f.time_s == pytest.approx(a.time_s, rel=0.01)


def test_forced_algorithms_run_as_named(h100x2):
    group = [list(range(16))]
    for algo, ran in (("ring", "ring"), ("tree", "tree"), ("hierarchical", "hierarchical"), ("nvls", "nvls_tree")):
        assert CollectiveModel(h100x2, algorithm=algo).run("all_reduce", group, GiB).algorithm == ran


def test_auto_runs_what_nccls_tuner_picks_not_the_fastest(a100x2):
    # 2 x DGX A100, 1 GiB all-reduce. NCCL's tuner (tuning.cc) with 16 channels of 192/16 GB/s:
    #   ring/Simple algbw = 192 * 16 / 30 = 102.4 GB/s; tree/Simple = min(0.92 * 192, 16 * 23.6) * 0.5
    #   = 88.3 GB/s (correction factor 1.0 above 512 MB) -> NCCL picks the ring although a
    #   physically ideal double binary tree would move half the NIC bytes.
    cm = CollectiveModel(a100x2)
    auto = cm.run("all_reduce", [list(range(16))], GiB)
    assert (auto.algorithm, auto.protocol) == ("ring", "Simple")
    # ring busbw is NIC-bound: 8 HDR NICs * ~24 GB/s (nccl-maintainer-hdr200-per-nic) = 192
    assert auto.busbw_GBps == pytest.approx(190, rel=0.05)


def test_inapplicable_forced_algorithm_falls_back(a100x2, h100x2):
    r = CollectiveModel(a100x2, algorithm="nvls").run("all_reduce", [list(range(8))], GiB)
    assert r.algorithm != "nvls"  # A100 has no NVLink SHARP
    r = CollectiveModel(h100x2, algorithm="tree").run("all_gather", [list(range(8))], GiB)
    assert r.algorithm in ("ring", "nvls")


def test_time_grows_with_size(h100x2):
    cm = CollectiveModel(h100x2)
    times = [cm.run("all_reduce", [list(range(16))], s).time_s for s in (MiB, 16 * MiB, 256 * MiB, 4 * GiB)]
    assert times == sorted(times)


def test_results_are_cached_by_shape(h100x2):
    cm = CollectiveModel(h100x2)
    r1 = cm.run("all_reduce", [list(range(8))], GiB)
    assert cm.run("all_reduce", [list(range(8))], GiB) is r1
    assert cm.run("all_reduce", [list(range(8, 16))], GiB) is r1  # node 1 is node 0's mirror image
    assert cm.cache_size() == 1
    cm.run("all_reduce", [list(range(8))], 2 * GiB)
    assert cm.cache_size() == 2


@pytest.mark.parametrize(
    "op, groups, nbytes, field",
    [
        ("all_reduce", [[0, 16]], GiB, "groups"),  # GPU 16 does not exist on 2 nodes
        ("all_reduce", [[0, 0]], GiB, "groups"),
        ("all_reduce", [[0, 1], [2, 3, 4]], GiB, "groups"),
        ("all_reduce", [[0, 1], [1, 2]], GiB, "groups"),
        ("send_recv", [[0, 1, 2]], GiB, "groups"),
        ("all_reduce", [[0, 1]], -1, "nbytes"),
        ("allreduce", [[0, 1]], GiB, "op"),
    ],
)
def test_bad_queries_raise_input_error(h100x2, op, groups, nbytes, field):
    with pytest.raises(InputError) as info:
        CollectiveModel(h100x2).run(op, groups, nbytes)
    assert info.value.field == field


def test_bad_model_options_raise_input_error(h100x2):
    with pytest.raises(InputError):
        CollectiveModel(h100x2, fidelity="packet")
    with pytest.raises(InputError):
        CollectiveModel(h100x2, algorithm="butterfly")


def test_broadcast_and_all_to_all_volumes(h100x2):
    cm = CollectiveModel(h100x2)
    # pipelined chain: every rank but the last forwards the whole buffer
    assert cm.run("broadcast", [list(range(5))], S).bytes_on_wire_per_rank == pytest.approx(S)
    # all-to-all: each rank sends S/n to each of the n-1 others
    assert cm.run("all_to_all", [list(range(6))], S).bytes_on_wire_per_rank == pytest.approx(5 / 6 * S)
    assert cm.run("all_to_all", [list(range(6))], S).busbw_GBps == pytest.approx(
        cm.run("all_to_all", [list(range(6))], S).algbw_GBps * 5 / 6)


def test_multi_node_nvls_is_hierarchical_with_nvls_inside(topo):
    c = build_cluster(topo("dgx-h100"), 2)
    r = CollectiveModel(c, algorithm="nvls").run("all_reduce", [list(range(16))], GiB)
    h = CollectiveModel(c, algorithm="hierarchical").run("all_reduce", [list(range(16))], GiB)
    assert r.algorithm == "nvls_tree" and r.time_s < h.time_s


def test_b200_nvls_scales_with_nvlink5(topo):
    # NVLink5 doubles NVLink4's per-GPU bandwidth; NVLS efficiency drops 0.85 -> 0.74 (tuning.cc) and NCCL's
    # per-link efficiency 0.824 -> 0.802: ratio 2 * (0.74 * 0.802) / (0.85 * 0.824) = 1.695 at large sizes.
    h = build_cluster(topo("dgx-h100"), 1)
    b = build_cluster(topo("dgx-b200"), 1)
    rh = CollectiveModel(h).run("all_reduce", [list(range(8))], 64 * GiB)
    rb = CollectiveModel(b).run("all_reduce", [list(range(8))], 64 * GiB)
    assert rb.busbw_GBps / rh.busbw_GBps == pytest.approx(2 * 0.74 * 0.802 / (0.85 * 0.824), rel=0.01)


def test_groups_of_different_layouts_in_one_query(h100x2):
    # one group inside node 0, one split 2 + 2 over both nodes: only algorithms valid for both are tried
    cm = CollectiveModel(h100x2)
    groups = [[0, 1, 2, 3], [4, 5, 12, 13]]
    assert "hierarchical" not in cm.candidates("all_reduce", groups)
    r = cm.run("all_reduce", groups, GiB)
    alone = cm.run("all_reduce", [[4, 5, 12, 13]], GiB)
    assert r.time_s >= alone.time_s * (1 - 1e-9)


def _sharp(topo, name):
    t = topo(name)
    return t.model_validate({**t.model_dump(), "fabric": {**t.fabric.model_dump(), "sharp": True}})


def test_collnet_only_with_sharp_and_only_all_reduce(topo):
    plain = CollectiveModel(build_cluster(topo("dgx-a100"), 4))
    assert "collnet" not in plain.candidates("all_reduce", [list(range(32))])
    sharp = CollectiveModel(build_cluster(_sharp(topo, "dgx-a100"), 4))
    assert "collnet" in sharp.candidates("all_reduce", [list(range(32))])
    assert "collnet" not in sharp.candidates("all_gather", [list(range(32))])
    assert "collnet" not in sharp.candidates("all_reduce", [list(range(8))])  # one node


def test_collnet_moves_each_shard_once_through_the_nic(topo):
    # SHARP: per GPU 2(p-1)/p S on NVLink (reduce-scatter to the heads + all-gather back) and S/p up
    # through its NIC (the reduced shard comes back down): 1.75 S + 0.125 S = 1.875 S injected.
    cluster = build_cluster(_sharp(topo, "dgx-a100"), 16)
    r = CollectiveModel(cluster, algorithm="collnet").run("all_reduce", [list(range(128))], GiB)
    assert r.algorithm.startswith("collnet")
    assert r.bytes_on_wire_per_rank == pytest.approx((2 * 7 / 8 + 1 / 8) * GiB)
    ph = alg.collnet(cluster, list(range(128)), GiB)[0]
    loads = link_loads(ph.transfers, cluster.graph.number_of_edges())
    # every NIC's link to its leaf switch carries one shard up and one shard down
    for node in range(16):
        for nic in range(8):
            out = [d["id"] for _, v, d in cluster.graph.out_edges(f"n{node}/nic{nic}", data=True) if "n" + str(node) not in str(v)]
            into = [d["id"] for u, _, d in cluster.graph.in_edges(f"n{node}/nic{nic}", data=True) if "n" + str(node) not in str(u)]
            assert loads[out].sum() == pytest.approx(GiB / 8)
            assert loads[into].sum() == pytest.approx(GiB / 8)


def test_collnet_beats_the_ring_across_many_nodes(topo):
    # Ring: every NIC carries 2(N-1)/N x S/8 each way; SHARP: S/8. With NVLink (300 GB/s) much faster
    # than the 8 x 25 GB/s of NICs, SHARP's all-reduce is bound by the in-node legs instead.
    cluster = build_cluster(_sharp(topo, "dgx-a100"), 16)
    ring = CollectiveModel(cluster, algorithm="ring").run("all_reduce", [list(range(128))], 4 * GiB)
    coll = CollectiveModel(cluster).run("all_reduce", [list(range(128))], 4 * GiB)
    assert coll.algorithm == "collnet_direct"
    assert ring.time_s / coll.time_s > 1.3


def test_nccl_view_gives_a_cross_rack_channel_half_a_nic(topo):
    """NCCL's channels cross nodes one NIC each, duplicated two per NIC (connect.cc). Two GB200 NVL72 racks hold
    72 ConnectX-7 NICs each (400 Gb/s, 0.95 of it: 47.5 GB/s), more than the 32-channel cap can use: each
    channel gets half a NIC, 23.75 GB/s, not the rack's 72 x 47.5 shared by 32 channels (106.9). A DGX H100
    pair (8 NICs, 16 channels) gets the same 23.75."""
    for name, ppn in (("gb200-nvl72", 72), ("dgx-h100", 8)):
        view = CollectiveModel(build_cluster(topo(name), 2)).nccl_topo(2 * ppn, 2, ppn)
        assert view.bw_inter_GBps == pytest.approx(400 / 8 * 0.95 / 2)
