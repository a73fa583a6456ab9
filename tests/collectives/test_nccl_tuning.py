"""NCCL's tuning model (tuning.cc 2.30.7, formulas.md §3.5) against hand-computed predictions."""

from __future__ import annotations

import pytest

from simulator.collectives import nccl_tuning as nt

GiB = 2**30

# 2 x DGX A100 (AMD EPYC hosts), 16 ranks, 8 per node, 16 channels of 192/16 = 12 GB/s.
A100X2 = nt.NcclTopo(n_ranks=16, n_nodes=2, ppn=8, n_channels=16, bw_intra_GBps=12.0, bw_inter_GBps=12.0,
                     arch="ampere", cpu_vendor="amd")


def test_ring_simple_all_reduce_two_nodes_by_hand():
    # steps 2(16-1) = 30, of which 2(2-1) = 2 cross nodes; intra step max(3.4, 2 us AMD x 3 Simple) = 6;
    # inter 14; base 8.4 -> 8.4 + 28*6 + 2*14 = 204.4 us, x1.4 multi-node Simple plateau = 286.16 us.
    assert nt.latency_us("all_reduce", "ring", "Simple", A100X2, GiB) == pytest.approx(286.16)
    # busBw = 16 ch * 12 = 192; algbw = 192 * 16 / 30 = 102.4 GB/s
    assert nt.bus_bandwidth_GBps("all_reduce", "ring", "Simple", A100X2, GiB) == pytest.approx(102.4)
    t = nt.predicted_time_s("all_reduce", "ring", "Simple", A100X2, GiB)
    assert t == pytest.approx((286.16 + GiB / (1000 * 102.4)) * 1e-6)


def test_tree_simple_all_reduce_two_nodes_by_hand():
    # min(0.92 * 192, 16 * 23.6 (Ampere, 2 nodes)) = 176.64, x0.5 up-and-down = 88.32 GB/s; at 1 GiB
    # log2(2^30 / 64) = 24 >= 23: no correction factor.
    assert nt.bus_bandwidth_GBps("all_reduce", "tree", "Simple", A100X2, GiB) == pytest.approx(88.32)
    # 8.4 + 2 * ((8 - 1) * 4.0 + log2(2) * 14) = 92.4 us
    assert nt.latency_us("all_reduce", "tree", "Simple", A100X2, GiB) == pytest.approx(92.4)


def test_tree_correction_factor_at_1_MiB():
    # log2(2^20 / 64) = 14 -> Simple factor 0.5: 88.32 * 0.5
    assert nt.bus_bandwidth_GBps("all_reduce", "tree", "Simple", A100X2, 2**20) == pytest.approx(44.16)


def test_nccl_prefers_ring_for_large_and_tree_for_mid_sizes_on_two_nodes():
    assert nt.choose("all_reduce", A100X2, 8 * GiB)[:2] == ("ring", "Simple")
    algo, _, _ = nt.choose("all_reduce", A100X2, 4 * 2**20)
    assert algo == "tree"


def test_nvls_single_node_h100_by_hand():
    # 8 x H100, NVLS graph 370.8 GB/s, 16 NVLS channels, eff 0.85: 370.8 * 0.85 * 15/16 * 2 = 590.96
    # busBw; algbw = busBw * 8 / 14. Latency: NVLink NVLS 25 us, no base.
    t = nt.NcclTopo(n_ranks=8, n_nodes=1, ppn=8, n_channels=18, bw_intra_GBps=370.8 / 18,
                    bw_inter_GBps=370.8 / 18, arch="hopper", nvls=True, nvls_bw_GBps=370.8)
    assert nt.bus_bandwidth_GBps("all_reduce", "nvls", "Simple", t, GiB) == pytest.approx(370.8 * 0.85 * 15 / 16 * 2 * 8 / 14)
    assert nt.latency_us("all_reduce", "nvls", "Simple", t, GiB) == pytest.approx(25.0)
    assert nt.choose("all_reduce", t, GiB)[0] == "nvls"
    assert not nt.enabled("all_reduce", "nvls", "LL128", t)


def test_pat_only_with_one_gpu_per_node():
    t = nt.NcclTopo(n_ranks=64, n_nodes=64, ppn=1, n_channels=2, bw_intra_GBps=23.75, bw_inter_GBps=23.75,
                    arch="hopper")
    assert nt.enabled("all_gather", "pat", "Simple", t)
    assert not nt.enabled("all_reduce", "pat", "Simple", t)
    # 8.0 + log2(64) * 14 / 3.5 + 2.8 * 64 = 8 + 24 + 179.2 = 211.2 us
    assert nt.latency_us("all_gather", "pat", "Simple", t, GiB) == pytest.approx(211.2)
    assert not nt.enabled("all_gather", "pat", "Simple", A100X2)


# 16 x DGX A100 with SHARP: CollNet graph of one channel per HDR NIC, 22.5 GB/s each (an example value).
A100X16_SHARP = nt.NcclTopo(n_ranks=128, n_nodes=16, ppn=8, n_channels=16, bw_intra_GBps=11.25,
                            bw_inter_GBps=11.25, arch="ampere", cpu_vendor="amd", collnet=True,
                            collnet_channels=8, collnet_bw_GBps=22.5)


def test_collnet_direct_by_hand():
    # tuning.cc: busBw = 8 ch x 22.5 = 180; GPU/NIC factor 8/8 = 1 -> no penalty; Ampere: no 0.85;
    # all-reduce algbw = busBw x 0.5 = 90 GB/s.
    assert nt.bus_bandwidth_GBps("all_reduce", "collnet_direct", "Simple", A100X16_SHARP, GiB) == pytest.approx(90.0)
    # latency: base 0 + 2 x (min(1, 7) x 3.7 (NVLink CollNetDirect Simple) + 0.4 x 7) + 31 (net) = 44 us
    assert nt.latency_us("all_reduce", "collnet_direct", "Simple", A100X16_SHARP, GiB) == pytest.approx(44.0)
    # Chain: x 0.75 -> 67.5
    assert nt.bus_bandwidth_GBps("all_reduce", "collnet_chain", "Simple", A100X16_SHARP, GiB) == pytest.approx(67.5)


def test_collnet_direct_gpu_per_nic_penalty_and_hopper_factor():
    # 8 GPUs on 4 NICs: factor 2 - (2 - 1)/2 = 1.5; Hopper x 0.85: 4 x 50 / 1.5 x 0.85 x 0.5 = 56.67 GB/s
    t = nt.NcclTopo(n_ranks=64, n_nodes=8, ppn=8, n_channels=8, bw_intra_GBps=25.0, bw_inter_GBps=25.0,
                    arch="hopper", collnet=True, collnet_channels=4, collnet_bw_GBps=50.0)
    assert nt.bus_bandwidth_GBps("all_reduce", "collnet_direct", "Simple", t, GiB) == pytest.approx(200 / 1.5 * 0.85 * 0.5)


def test_collnet_needs_sharp_and_is_all_reduce_only():
    off = nt.NcclTopo(n_ranks=128, n_nodes=16, ppn=8, n_channels=16, bw_intra_GBps=11.25, bw_inter_GBps=11.25,
                      arch="ampere")
    assert not nt.enabled("all_reduce", "collnet_direct", "Simple", off)
    assert nt.enabled("all_reduce", "collnet_direct", "Simple", A100X16_SHARP)
    assert not nt.enabled("all_gather", "collnet_direct", "Simple", A100X16_SHARP)
    assert not nt.enabled("all_reduce", "collnet_direct", "LL", A100X16_SHARP)


# 4 x DGX B200 (x86 hosts): 32 ranks, 16 channels of 23.75 GB/s across nodes, NVLS graph 721.8 GB/s.
B200X4 = dict(n_ranks=32, n_nodes=4, ppn=8, n_channels=16, bw_intra_GBps=23.75, bw_inter_GBps=23.75,
              arch="blackwell", nvls=True, nvls_channels=16, nvls_bw_GBps=721.8)


def test_nvls_tree_all_reduce_takes_the_tree_correction_on_blackwell_x86_only():
    """nvls.cc ncclTuningNvlsModelSim (formulas.md §3.5): on sm >= 100 with an x86 host the NVLSTree
    all-reduce bandwidth takes treeCorrectionFactor[proto][log2i(bytes/64)] for i < 24."""
    # busBw = min(721.8 x 0.74 x 15/16 x 2, 16 x 23.75 (> 2 nodes: x1), 16 x 80.0) = 380; algbw x 32/62.
    full = 380 * 32 / 62
    intel, grace = nt.NcclTopo(**B200X4, cpu_vendor="intel"), nt.NcclTopo(**B200X4, cpu_vendor="arm")
    # 64 MiB: i = log2(2^26 / 64) = 20 -> Simple 0.8; 256 MiB: i = 22 -> 0.9; 1 GiB: i = 24, none
    for nbytes, factor in ((2**26, 0.8), (2**28, 0.9), (GiB, 1.0)):
        assert nt.bus_bandwidth_GBps("all_reduce", "nvls_tree", "Simple", intel, nbytes) == pytest.approx(full * factor)
        assert nt.bus_bandwidth_GBps("all_reduce", "nvls_tree", "Simple", grace, nbytes) == pytest.approx(full)
    hopper = nt.NcclTopo(**{**B200X4, "arch": "hopper"})  # sm 90: no correction; eff 0.85, cap 16 x 45.5
    assert nt.bus_bandwidth_GBps("all_reduce", "nvls_tree", "Simple", hopper, 2**26) == pytest.approx(380 * 32 / 62)


def test_tree_latency_counts_whole_levels():
    """NCCL's log2i: 3 nodes are one tree level, 6 nodes two (8.4 + 2 x ((8 - 1) x 4.0 + levels x 14) us)."""
    for nodes, levels in ((3, 1), (6, 2), (8, 3)):
        t = nt.NcclTopo(n_ranks=8 * nodes, n_nodes=nodes, ppn=8, n_channels=16, bw_intra_GBps=12.0,
                        bw_inter_GBps=12.0, arch="ampere", cpu_vendor="amd")
        assert nt.latency_us("all_reduce", "tree", "Simple", t, GiB) == pytest.approx(8.4 + 2 * (28.0 + levels * 14))
