"""``dtsim run --kernels``: one micro-batch's compute op by op (``simulator.report.kernel_table``).

The expectations come from elsewhere: GEMM FLOPs worked out by hand from OLMo 2 7B's shape, the 1.72 µs
launch floor measured on an H200 (``simulator.hardware.kernels``), and the engine's own compute time of the
step, which the table's per-call times must add up to on one GPU (no communication to overlap).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.api import simulate
from simulator.cli import app
from simulator.python_api import load
from simulator.report.kernel_table import kernel_table

SEQ, HIDDEN = 4096, 4096  # OLMo 2 7B: d_model 4,096, 32 heads of 128, no GQA (hardware.md §7b)


def _one_gpu(**training):
    return load({"name": "k", "model": "olmo-2-7b", "cluster": {"topology": "dgx-h100", "nodes": 1, "gpus": 1},
                 "training": {"seq_len": SEQ, "micro_batch_size": 1, "global_batch_size": 4, "precision": "bf16",
                              "activation_checkpointing": "full", **training},
                 "parallel": {"framework": "ddp"}})


def _task(rows, name):
    (row,) = [r for r in rows if r.task == name]
    return row


def test_qkv_and_mlp_flops_by_hand():
    rows = kernel_table(_one_gpu())
    fwd = {op.name: op for op in _task(rows, "fwd").ops}
    # Q, K and V projections: 2 FLOP per multiply-add, s x h inputs, 3 h outputs
    assert fwd["qkv"].flops == 2 * SEQ * HIDDEN * 3 * HIDDEN
    # SwiGLU: gate and up projections to 11,008 each, then down
    assert fwd["mlp_up"].flops == 2 * SEQ * HIDDEN * 2 * 11008
    assert fwd["mlp_down"].flops == 2 * SEQ * 11008 * HIDDEN
    assert _task(rows, "fwd").calls == 32  # one per block
    assert fwd["qkv"].bound == "compute"


def test_per_call_times_add_up_to_the_engine_compute_time():
    scenario = _one_gpu()
    rows = kernel_table(scenario)
    report = simulate(scenario, exact=True)
    n_micro = report.layout["grad_accum_steps"]
    per_micro = sum(r.calls * r.time_s for r in rows if r.task != "optimizer")
    step = per_micro * n_micro + _task(rows, "optimizer").time_s
    assert step == pytest.approx(report.breakdown["compute_busy_s"], rel=1e-9)
    assert _task(rows, "recompute").calls == 32  # full recomputation re-runs every block's forward


def test_tiny_kernels_sit_on_the_launch_floor():
    rows = kernel_table(_one_gpu(seq_len=16))
    norm = {op.name: op for op in _task(rows, "fwd").ops}["input_add_norm"]
    assert norm.bound == "launch"
    assert norm.time_s == pytest.approx(1.72e-6 * norm.kernels)


def test_cli_prints_the_table_and_json_carries_it(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: k\nmodel: olmo-2-7b\ncluster: {topology: dgx-h100, nodes: 1, gpus: 1}\n"
        "training: {seq_len: 4096, micro_batch_size: 1, global_batch_size: 4, precision: bf16, "
        "activation_checkpointing: full}\nparallel: {framework: ddp}\n")
    runner = CliRunner()
    text = runner.invoke(app, ["run", str(scenario), "--kernels", "--allow-oom"])
    assert text.exit_code == 0, text.output
    assert "op by op" in text.output and "mlp_up" in text.output
    out = runner.invoke(app, ["run", str(scenario), "--kernels", "--json", "--allow-oom"])
    assert out.exit_code == 0
    tasks = {t["task"]: t for t in json.loads(out.stdout)["kernels"]}
    assert tasks["fwd"]["calls"] == 32
    assert {op["name"] for op in tasks["fwd"]["ops"]} >= {"qkv", "attention", "mlp_down"}
    plain = json.loads(runner.invoke(app, ["run", str(scenario), "--json", "--allow-oom"]).stdout)
    assert "kernels" not in plain
