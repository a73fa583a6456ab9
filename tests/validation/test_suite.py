"""The bundled validation suite: complete, consistent with the calibration set, every scenario valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.validation.suite import load_runs, scenario_for, select

SHARED = Path(__file__).resolve().parents[3] / "shared" / "reference" / "published_runs.yaml"


def test_all_72_runs_with_unique_ids_and_33_pure_dp():
    runs = load_runs(files=("runs.yaml",))
    assert len(runs) == 72
    assert len({r.id for r in runs}) == 72
    assert sum(r.parallelism == "pure_dp" for r in runs) == 33


def test_every_run_has_a_scenario_or_a_reason_and_a_throughput_figure():
    for run in load_runs():
        assert run.expressible != bool(run.not_expressible), run.id
        if run.expressible:
            assert run.measured["tokens_per_s_per_gpu"] > 0, run.id
            assert run.framework in ("FSDP", "DeepSpeed", "Megatron", "DDP"), run.id


def test_every_scenario_validates():
    for run in load_runs():
        if run.expressible:
            assert scenario_for(run).n_gpus > 0, run.id


def test_split_covers_the_pure_dp_runs_and_only_them():
    for run in load_runs(files=("runs.yaml",)):
        if run.parallelism == "pure_dp" and run.expressible and "calibration_excluded" not in run.extra:
            assert run.split in ("train", "test"), run.id
        else:
            assert run.split is None, run.id


def test_flops_per_token_reproduces_the_sources_tflops():
    """The stored source-convention FLOP/token turns the measured tokens/s back into the reported TFLOP/s."""
    for run in load_runs():
        if run.flops_per_token and "tflops_per_gpu" in run.measured:
            tflops = run.measured_tokens_per_s_per_gpu * run.flops_per_token / 1e12
            assert tflops == pytest.approx(run.measured["tflops_per_gpu"], rel=1e-4), run.id


def test_megatron_eq3_convention_by_hand():
    """SC'21 1.7B: F/token = 96·l·h²·(1 + s/6h + V/16lh) per sequence of s tokens (Eq. 3)."""
    run = next(r for r in load_runs() if r.id == "megatron-sc21-t1-1.7B")
    layers, h, s, v = 24, 2304, 2048, 51200
    per_token = 96 * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    assert run.flops_per_token == pytest.approx(per_token, rel=2e-3)


def test_select_by_glob():
    runs = load_runs()
    assert [r.id for r in select(runs, "ibm-fsdp-*70b")] == ["ibm-fsdp-a100-llama270b", "ibm-fsdp-h100-llama270b"]
    assert len(select(runs, "ibm-*,megatron-sc21-t1-1.7B")) == 9  # IBM's 4 A100 and 4 H100 rows, and one
    assert select(runs, None) == list(runs)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared not present")
def test_measured_figures_match_the_calibration_set():
    source = {r["id"]: r for r in yaml.safe_load(SHARED.read_text())["runs"]}
    for run in load_runs(files=("runs.yaml",)):
        src = source[run.id]
        assert run.parallelism == ("pure_dp" if src["pure_data_parallel"] else "tp_pp")
        for key in ("tflops_per_gpu", "mfu", "hfu"):
            if key in run.measured:
                assert run.measured[key] == src["measured"][key], (run.id, key)
        tok = src["measured"].get("tokens_per_sec_per_gpu") or (src.get("derived") or {}).get("tokens_per_sec_per_gpu")
        if "tokens_per_s_per_gpu" in run.measured:
            assert run.measured["tokens_per_s_per_gpu"] == tok, run.id


def test_llm_foundry_rows_run_its_triton_flash_attention():
    # llm-foundry's benchmark script defaulted to attn_impl triton (submit_benchmarks.py), for A100 and H100 alike
    rows = [r for r in load_runs() if r.id.startswith("llmfoundry-") and r.expressible]
    assert len(rows) == 64
    assert all(r.scenario["training"]["kernels"]["attention"] == "triton" for r in rows)
