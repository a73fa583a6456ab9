"""vTrain's measured Megatron-DeepSpeed steps as validation runs, and the host layer fitted on them."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.validation import calibration as cal
from simulator.validation import host_calibration as hc
from simulator.validation import vtrain
from simulator.validation.suite import load_runs, scenario_for


def test_the_tables_as_published():
    single, multi = vtrain.rows("single"), vtrain.rows("multi")
    assert (len(single), len(multi)) == (1440, 109)
    # first data row of ground_truth_single.csv: "2,16,8,1024,16,24,1024,1,1,2,372.160408"
    r = single[0]
    assert (r.gpus, r.global_batch, r.micro_batch, r.hidden, r.heads, r.layers, r.seq_len, r.tp, r.dp, r.pp) == (
        2, 16, 8, 1024, 16, 24, 1024, 1, 1, 2)
    assert r.iteration_time_s == pytest.approx(0.372160408)
    # 16 sequences × 1,024 tokens in 0.372160408 s on 2 GPUs: 22,012.6 tokens/s per GPU
    assert r.tokens_per_s_per_gpu == pytest.approx(16 * 1024 / (0.372160408 * 2))
    # first row of ground_truth_multi.csv: "3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5"
    m = multi[0]
    assert (m.gpus, m.global_batch, m.micro_batch, m.hidden, m.heads, m.layers, m.seq_len, m.tp, m.dp, m.pp) == (
        64, 512, 8, 3072, 32, 30, 2048, 1, 64, 1)
    for row in single + multi:
        assert row.tp * row.dp * row.pp == row.gpus, row


def test_a_row_becomes_its_layout_on_a100_nodes():
    small = vtrain.rows("single")[0]  # 2 GPUs of one node, PP 2
    s = scenario_from_dict({"name": "v", **vtrain.scenario(small)})
    assert (s.n_gpus, s.parallel.tp, s.parallel.pp, s.dp) == (2, 1, 2, 1)
    assert (s.training.precision, s.training.activation_checkpointing, s.training.kernels.flash_attention) == (
        "fp16", "full", False)
    big = vtrain.rows("multi")[0]  # 64 GPUs = 8 nodes, 8 NICs of 100 Gb/s each (800 Gb/s per node)
    s = scenario_from_dict({"name": "v", **vtrain.scenario(big)}, overrides=list(vtrain.overrides(big)))
    assert (s.cluster.nodes, s.n_gpus, s.dp) == (8, 64, 64)
    assert s.cluster.topology.nics.bandwidth_Gbps * s.cluster.topology.nics.per_node == 800


def test_the_validation_suite_shows_the_held_out_8_gpu_batch_16_runs_and_one_per_multi_node_layout():
    runs = [r for r in load_runs() if r.id.startswith("vtrain-")]
    single = [r for r in runs if r.id.startswith("vtrain-single-")]
    # 8 GPUs, 24 layers, global batch 16: 26 (micro-batch, TP, PP) combinations × 2 hidden sizes
    assert len(single) == 52
    assert all("-8gpu-" in r.id and "-l24-" in r.id and r.id.endswith("-gbs16") for r in single)
    # 31 distinct (model, TP, DP, PP) layouts in the multi-node table
    assert len(runs) - len(single) == 31
    for r in runs:
        assert r.extra["calibration_excluded"] and r.source_key == "arXiv:2312.12391"
        assert scenario_for(r).n_gpus == int(r.id.split("gpu-")[0].rsplit("-", 1)[1])
    # excluded from the compute fit: no vTrain run among the fitting cases
    assert not any(c.run.id.startswith("vtrain-") for cs in cal.fitting_cases(runs).values() for c in cs)


def test_the_host_fit_and_its_held_out_runs_split_the_single_node_grid_by_gpu_count():
    fit, held = vtrain.host_fit_rows(), vtrain.host_test_rows()
    assert (len(fit), len(held)) == (720, 720)
    assert {r.gpus for r in fit} == {2, 4} and {r.gpus for r in held} == {8}


def test_host_grid_points():
    assert hc.values((156,)) == {"host_dispatch_scale": 1.56}
    assert hc.point_of({"host_dispatch_scale": 1.56}) == (156,)
    assert hc.on_bound({"host_dispatch_scale": 1.0}) == ["host_dispatch_scale"]
    assert hc.on_bound({"host_dispatch_scale": 1.56}) == []


def test_the_host_fit_recovers_a_known_scale():
    # Synthetic recovery on six host-bound runs (hidden 1,024, micro-batch 1): their "measured" times are
    # dtsim's at scale 1.30; the descent from 1.0 must come back to 1.30 exactly on its 0.01 grid.
    rows = [r for r in vtrain.host_fit_rows() if r.hidden == 1024 and r.micro_batch == 1 and r.layers == 24][:6]
    truth = {"host_dispatch_scale": 1.30}
    cases = hc.cases(rows)
    measured = [c.simulate(truth).tokens_per_s_per_gpu for c in cases]
    synthetic = [hc.HostCase(vtrain.Row(**{**r.__dict__, "iteration_time_s":
                                            r.global_batch * r.seq_len / (m * r.gpus)}))
                 for r, m in zip(rows, measured, strict=True)]
    assert hc.fit(synthetic).params == truth
