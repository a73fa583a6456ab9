"""Bad input found by a bug bash: each case gives one ``error:`` line naming the field, option or file,
exit code 2, no traceback and no file left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

ROOT = Path(__file__).resolve().parents[1]
ZERO2 = ROOT / "scenarios" / "olmo-2-7b-dgx-a100-zero2.yaml"
runner = CliRunner()


def _error(args: list[str], *expected: str) -> str:
    """Run ``args``; assert one error line (exit 2, no traceback) holding every ``expected`` text."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    for text in expected:
        assert text in result.output, result.output
    return result.output


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\xff\xfe\x00x")
    return path


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "nemo", "accelerate", "fsdp"])
def test_import_of_a_non_utf8_file(binary, fmt):
    _error(["import", fmt, str(binary), "--topology", "dgx-h100"], f"{fmt}:", "not UTF-8")


def test_deepspeed_flops_and_log_readers_refuse_non_utf8(binary, tmp_path):
    _error(["import", "deepspeed", str(binary), "--base", str(ZERO2)], "parallel.deepspeed_config", "not UTF-8")
    _error(["run", str(ZERO2), "--deepspeed", str(binary)], "--deepspeed", "not UTF-8")
    config = tmp_path / "bin.json"
    config.write_bytes(binary.read_bytes())
    _error(["flops", str(config)], "model.hf_config", "not UTF-8")


def test_run_deepspeed_refuses_a_misspelt_key_as_import_does(tmp_path):
    ds = tmp_path / "f.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}))
    hint = "did you mean 'zero_optimization.reduce_bucket_size'"
    _error(["run", str(ZERO2), "--deepspeed", str(ds)], "--deepspeed", hint)
    _error(["import", "deepspeed", str(ds), "--base", str(ZERO2)], hint)
