"""The command line end to end: JSON keys, numbers from hand arithmetic, bad input → exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
runner = CliRunner()


def _json(args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_flops_llama3_8b_by_hand():
    out = _json(["flops", "llama-3-8b", "--seq-len", "2048"])
    assert out["n_params"] == 8_030_261_248
    s, h, layers, vocab = 2048, 4096, 32, 128256
    matrices = h * h + 2 * h * 1024 + h * h + 3 * h * 14336  # q, k+v (8 KV heads × 128), o, SwiGLU
    attention_core = 4 * s * h  # QKᵀ and AV, 2·s·h each per token per layer (full convention)
    forward = 2 * matrices * layers + attention_core * layers + 2 * h * vocab
    assert out["train_flops_per_token"] == pytest.approx(3 * forward, rel=1e-12)
    causal = _json(["flops", "llama-3-8b", "--seq-len", "2048", "--convention", "causal"])
    assert out["forward_flops_per_token"] - causal["forward_flops_per_token"] == pytest.approx(
        attention_core * layers / 2
    )


def test_flops_gpt_oss_counts_its_sliding_windows():
    # GPT-OSS 120B at 4,096 tokens, full convention: each block's attention core is 4·s·(64·64) = 67,108,864
    # FLOPs per token forward; its 18 windowed blocks (128 tokens) keep 2·128/4096 − (128/4096)² = 0.0615234375
    # of it, so the windows take 18 × (1 − 0.0615234375) × 67,108,864 off the full-attention count.
    win = _json(["flops", "gpt-oss-120b", "--seq-len", "4096"])["forward_flops_per_token"]
    core = 4 * 4096 * 64 * 64
    # per block: q, k, v, o (2880·(4096 + 512 + 512 + 4096)), router 2880·128, 4 experts of 2880·5760 + 2880·2880
    block = 2880 * (4096 + 1024 + 4096) + 2880 * 128 + 4 * (2880 * 5760 + 2880 * 2880)
    full = 2 * block * 36 + core * 36 + 2 * 2880 * 201088
    assert win == pytest.approx(full - 18 * (1 - 0.0615234375) * core, rel=1e-12)
    result = runner.invoke(app, ["flops", "gpt-oss-120b", "--seq-len", "4096"])
    assert "18 of 36 blocks attend 128 tokens" in " ".join(result.stdout.split())


def test_writeup_example_corrected():
    """The write-up's shape: ~3.4B params (tied), ~6.9e21 FLOPs, ~80 days on 8×A100 at 40%."""
    out = _json(["flops", str(SCENARIOS / "writeup-example.yaml"), "--mfu", "0.4"])
    layers, h, f, vocab, s = 40, 2560, 10240, 100352, 2048
    per_layer = 4 * h * h + 2 * h * f + 2 * h  # attention, GELU MLP, two RMSNorm weights
    assert out["n_params"] == layers * per_layer + vocab * h + h
    est = out["estimate"]
    # 6·N·D alone is 6 × 3.40e9 × 3e11 = 6.1e21; with attention (full) and logits ≈ 6.9e21.
    forward_per_token = 2 * layers * (4 * h * h + 2 * h * f) + 4 * s * h * layers + 2 * h * vocab
    assert est["train_flops_total"] == pytest.approx(3 * forward_per_token * 3e11, rel=1e-9)
    assert 6.8e21 < est["train_flops_total"] < 6.9e21
    seconds = est["train_flops_total"] / (8 * 312e12 * 0.4)
    assert est["duration_s"] == pytest.approx(seconds)
    assert 79 < est["duration_days"] < 81  # not 32.5 hours


def test_memory_json_keys():
    out = _json(["memory", str(SCENARIOS / "olmo-2-7b-8xh100.yaml")])
    for key in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "total_bytes",
                "hbm_bytes", "fits"):
        assert key in out
    assert out["hbm_bytes"] == 84_810_924_032


def test_memory_does_not_fit_is_a_result():
    out = _json(["memory", str(SCENARIOS / "olmo-2-7b-8xh100.yaml"), "--set", "parallel.zero_stage=0",
                 "--set", "training.micro_batch_size=16", "--set", "training.global_batch_size=1024"])
    # ZeRO-0 keeps 16 bytes/param of model states: 16 × 7.3e9 ≈ 117 GB > 85 GB usable.
    assert out["fits"] is False


def test_catalog_json():
    gpus = _json(["catalog", "gpus"])
    assert gpus["h100-sxm"]["peak_tflops"]["bf16"] == 989.5
    models = _json(["catalog", "models"])
    assert models["llama-3-8b"]["n_params"] == 8_030_261_248


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["flops", "llama-9b"], "unknown model"),
        (["flops", "llama-3-8b", "--convention", "half"], "--convention"),
        (["memory", "absent.yaml"], "file not found"),
        (["memory", str(SCENARIOS / "olmo-2-7b-8xh100.yaml"), "--set", "parallel.tpp=2"], "unknown key"),
        (["memory", str(SCENARIOS / "olmo-2-7b-8xh100.yaml"), "--set", "parallel.tp"], "dotted.path=value"),
        (["flops", "llama-3-8b", "--mfu", "0.4"], "--tokens"),
    ],
)
def test_bad_input_exits_2_without_traceback(args, needle):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "simulator", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "flops" in proc.stdout


def test_run_without_failures_says_the_run_checkpoints_once_at_its_end():
    """With reliability off there is nothing to guard against: no Daly interval, the run saves once at
    its end (Daly's model with M → ∞: T_s + δ, reliability.expected_wall_clock), and the text says so
    instead of 'no checkpoints' beside a charged stall (found by a bug bash)."""
    args = ["run", str(SCENARIOS / "olmo-2-7b-8xh100.yaml"), "--set", "reliability.enabled=false",
            "--set", "training.global_batch_size=64"]
    text = runner.invoke(app, args).output
    assert "no failures modelled" in text and "one checkpoint, at the end" in text
    run = _json(args)["run"]
    assert run["wall_clock_s"] == pytest.approx(run["duration_s"] + run["checkpoint_stall_s"], rel=1e-12)


def test_run_json_flops_carry_their_units():
    """MFU = model FLOP per step / (step time x GPUs x peak FLOP/s per GPU); the JSON keys name each unit.
    H100 SXM dense BF16 peak: 989.5 TFLOP/s (NVIDIA H100 datasheet: 1,979 with sparsity)."""
    out = _json(["run", str(SCENARIOS / "olmo-2-7b-8xh100.yaml"), "--set", "training.global_batch_size=64"])
    assert out["peak_flops_per_s_per_gpu"] == 989.5e12
    assert out["mfu"] == pytest.approx(
        out["model_flops_per_step"] / (out["step_time_s"] * out["n_gpus"] * out["peak_flops_per_s_per_gpu"]), rel=1e-9)
    assert out["hfu"] == pytest.approx(
        out["hardware_flops_per_step"] / (out["step_time_s"] * out["n_gpus"] * out["peak_flops_per_s_per_gpu"]),
        rel=1e-9)
    assert not {"model_flops", "hardware_flops", "peak_flops_per_gpu"} & set(out)
