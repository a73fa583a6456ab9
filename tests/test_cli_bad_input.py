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


def _scenario(tmp_path: Path, extra: str = "", model: str = "olmo-2-7b") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nmodel: {model}\ncluster: {{topology: dgx-a100}}\n"
                    "training: {seq_len: 4096, micro_batch_size: 1, global_batch_size: 64}\n" + extra)
    return path


@pytest.mark.parametrize("value", ["5", "true", "{label: a}"])
def test_compare_section_that_is_not_a_list(tmp_path, value):
    _error(["compare", str(_scenario(tmp_path, f"compare: {value}\n"))], "compare:", "must be a list of variants")


def test_hf_config_that_is_not_a_path(tmp_path):
    _error(["run", str(_scenario(tmp_path, model="{hf_config: 5}"))], "model.hf_config", "got 5")


def test_hf_config_with_values_of_the_wrong_type(tmp_path):
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "vocab_size": 100}
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({**llama, "rope_scaling": 5}))
    _error(["flops", str(config)], "model.hf_config", "rope_scaling must be a JSON object")
    config.write_text(json.dumps({**llama, "layer_types": "full", "sliding_window": 8}))
    _error(["flops", str(config)], "layer_types must be a JSON list")
    config.write_text(json.dumps({"model_type": "mpt", "n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 100,
                                  "expansion_ratio": "x"}))
    _error(["flops", str(config)], "model.hf_config", "wrong type")
    config.write_text(json.dumps({"model_type": ["llama"]}))
    _error(["flops", str(config)], "is not supported")


def test_out_that_is_a_directory_leaves_nothing(tmp_path):
    folder = tmp_path / "x"
    folder.mkdir()
    out = _error(["export", str(ZERO2), "--to", "deepspeed", "--out", str(folder)], "--out", "is a directory")
    assert ".tmp" not in out
    args = tmp_path / "args.txt"
    args.write_text("--tensor-model-parallel-size 2\n")
    _error(["import", "megatron", str(args), "--topology", "dgx-h100", "--model", "olmo-2-7b", "--out", str(folder)],
           "--out", "is a directory")
    _error(["import", "megatron", str(args), "--topology", "dgx-h100", "--model", "olmo-2-7b", "--out", str(args)],
           "--out", "input of this command")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.txt", "x"] and not any(folder.iterdir())


def test_duplicate_yaml_keys_are_refused_with_path_and_line(tmp_path):
    path = tmp_path / "dup.yaml"
    body = ("name: b\nmodel: olmo-2-7b\ncluster:\n  topology: dgx-a100\n  topology: dgx-h100\n"
            "training: {seq_len: 4096, micro_batch_size: 1, global_batch_size: 64}\n")
    path.write_text("name: a\n" + body)
    _error(["run", str(path)], "line 2: key name is given twice (first at line 1)")
    path.write_text(body)
    _error(["run", str(path)], "line 5: key cluster.topology is given twice (first at line 4)")
    _error(["run", str(ZERO2), "--set", "parallel={tp: 1, tp: 2}"], "--set parallel", "duplicate key 'tp'")


def test_yaml_merge_keys_may_still_be_overridden():
    from simulator import yamlio

    assert yamlio.safe_load("b: &b {x: 1, y: 1}\nd:\n  <<: *b\n  x: 2\n")["d"] == {"x": 2, "y": 1}


def test_set_with_an_empty_or_malformed_value():
    _error(["run", str(ZERO2), "--set", "parallel.tp="], "--set parallel.tp", "has no value", "parallel.tp=null")
    out = _error(["run", str(ZERO2), "--set", "parallel.tp=[1,"], "--set parallel.tp", "cannot parse the value '[1,'")
    assert out.count("\n") == 1  # one line, not PyYAML's dump with a caret


def test_topology_messages(tmp_path):
    _error(["run", str(ZERO2), "--set", "cluster.topology=/path/nothere.yaml"],
           "cluster.topology", "topology file /path/nothere.yaml does not exist")
    _error(["run", str(ZERO2), "--set", "cluster.topology=dgx-h10"], "did you mean 'dgx-h100'")
    # A typo inside a discriminated section (intra_node, fabric) lists that section's keys, under the
    # path as written (pydantic's tag 'nvswitch' left out).
    out = _error(["run", str(ZERO2), "--set", "cluster.topology.intra_node.bandwith_GBps_per_gpu=300"],
                 "cluster.topology.intra_node.bandwith_GBps_per_gpu: unknown key",
                 "did you mean 'bandwidth_GBps_per_gpu'", "valid keys here: bandwidth_GBps_per_gpu, kind")
    assert "nvswitch" not in out
    _error(["run", str(ZERO2), "--set", "cluster.topology.fabric.rail_optimzed=true"],
           "cluster.topology.fabric.rail_optimzed", "did you mean 'rail_optimized'", "oversubscription")


def test_typo_of_a_bundled_scenario_name():
    _error(["run", "olmo-2-7b-8xh10"], "SCENARIO", "file not found", "did you mean the bundled scenario 'olmo-2-7b-8xh100'")


@pytest.mark.parametrize(("row", "expected"), [
    ("log: l.log\n    skip: many", "runs[0].skip: Input should be a valid integer"),
    ("log: l.log\n    skip: -3", "runs[0].skip: Input should be greater than or equal to 0"),
    ("measured: {step_time_s: 80}\n    splt: test", "runs[0].splt: unknown key (did you mean 'split'?)"),
    ("measured: {step_time_s: 80}\n    set: parallel.tp=2", "runs[0].set: give a list of overrides, set: [parallel.tp=2]"),
    ("measured: {step_time_s: 80}\n    split: dev", "runs[0].split: Input should be 'train' or 'test'"),
])
def test_calibrate_rows_are_validated(tmp_path, row, expected):
    (tmp_path / "l.log").write_text("tps: 100\n" * 5)
    runs = tmp_path / "m.yaml"
    runs.write_text(f"runs:\n  - scenario: {ZERO2}\n    {row}\n")
    out = tmp_path / "p.yaml"
    _error(["calibrate", "--measured", str(runs), "--out", str(out)], "--measured", expected)
    assert not out.exists()


_PARAMS = "{gemm_sustained_of_mamf: %s, attention_sustained_of_bench: 0.7, compute_slowdown_during_comm: 0.35}"
_GROUP = "{n: 2, mu: 0.0, sigma: 0.05, residuals: [0.05, -0.05]}"


def _profile(tmp_path: Path, gemm: str = "0.76", group: str = _GROUP) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"profile_version: 1\nhopper: {_PARAMS % gemm}\nintervals: {{source: x, groups: {{all: {group}}}}}\n")
    return path


def test_a_valid_hand_written_profile_is_used(tmp_path):
    result = runner.invoke(app, ["run", "olmo-2-7b-8xh100", "--efficiency", str(_profile(tmp_path)), "--allow-oom"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("gemm", ["fast", "0", "-0.71", "7.1", "true"])
def test_profile_values_outside_their_physical_range(tmp_path, gemm):
    trace = tmp_path / "t.json"
    _error(["run", "olmo-2-7b-8xh100", "--efficiency", str(_profile(tmp_path, gemm)), "--trace", str(trace)],
           "--efficiency", "hopper.gemm_sustained_of_mamf must be a number from 0.6 to 0.95")
    assert not trace.exists()


@pytest.mark.parametrize(("group", "expected"), [
    ("{n: 2, mu: 0.0, sigma: -1, residuals: [0.05, -0.05]}", "intervals.groups.all.sigma: Input should be greater"),
    ('{n: 2, mu: 0.0, sigma: 0.05, residuals: "abc"}', "intervals.groups.all.residuals: Input should be a valid list"),
    ("{n: 3, mu: 0.0, sigma: 0.05, residuals: [1, 2]}", "n is 3 but 2 residuals are listed"),
    ("{n: 2, mu: 0.0, sigma: 0.05, residual: [1, 2]}", "did you mean 'residuals'?); valid keys here: mu, n, residuals"),
])
def test_profile_interval_groups_are_validated(tmp_path, group, expected):
    _error(["run", "olmo-2-7b-8xh100", "--efficiency", str(_profile(tmp_path, group=group))], "--efficiency", expected)


# --- a second bug bash (CLI probe): each case once gave a traceback, a silent wrong result or a
# --- four-line usage box.


def test_sweep_section_keys_and_objective_type(tmp_path):
    _error(["sweep", str(_scenario(tmp_path, "sweep: {objective: [cost]}\n")), "--grid",
            "training.micro_batch_size=1,2"], "sweep.objective", "unknown objective ['cost']")
    _error(["sweep", str(_scenario(tmp_path, "sweep: {grdi: {training.micro_batch_size: [1, 2]}}\n"))],
           "sweep:", "unknown key 'grdi'", "valid: grid, objective")


def test_layouts_auto_and_a_grid_on_the_same_key(tmp_path):
    out = tmp_path / "r.csv"
    _error(["sweep", str(_scenario(tmp_path)), "--layouts", "auto", "--grid", "parallel.tp=1,2", "--out", str(out)],
           "--grid", "--layouts auto already varies parallel.tp")
    assert not out.exists()


@pytest.mark.parametrize("value", [".inf", ".nan", "-1", "fast"])
def test_calibrate_measured_values_must_be_finite_and_positive(tmp_path, value):
    runs = tmp_path / "m.yaml"
    runs.write_text(f"runs:\n  - scenario: {ZERO2}\n    measured: {{step_time_s: {value}}}\n")
    _error(["calibrate", "--measured", str(runs)], "runs[0].measured.step_time_s", "positive, finite number")


def test_calibrate_reads_a_measured_value_yaml_leaves_as_text(tmp_path):
    from simulator.user_calibration import load_cases

    runs = tmp_path / "m.yaml"
    runs.write_text(f"runs:\n  - scenario: {_scenario(tmp_path)}\n    measured: {{step_time_s: 1e5}}\n")
    # 64 sequences x 4,096 tokens per step over 1e5 s, on 8 GPUs (one DGX A100)
    assert load_cases(runs)[0].measured_tokens_per_s_per_gpu == pytest.approx(64 * 4096 / 1e5 / 8)


def test_calibrate_out_may_not_overwrite_a_scenario_it_reads(tmp_path):
    scenario = _scenario(tmp_path)
    before = scenario.read_text()
    runs = tmp_path / "m.yaml"
    runs.write_text("runs:\n  - scenario: s.yaml\n    measured: {step_time_s: 90}\n")
    _error(["calibrate", "--measured", str(runs), "--out", str(scenario)], "--out", "input of this command")
    assert scenario.read_text() == before


@pytest.mark.parametrize(("value", "expected"), [
    ("true", "reduce_bucket_size: expected a number, got true"),
    ("0.5", "parallel.reduce_bucket_size: Input should be greater than or equal to 1"),
])
def test_bucket_sizes_are_whole_elements_not_flags(value, expected):
    _error(["run", str(ZERO2), "--set", f"parallel.reduce_bucket_size={value}"], expected)


def test_import_refuses_a_model_that_contradicts_the_config_shape():
    flags = "--num-layers 4 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 --micro-batch-size 1 " \
            "--global-batch-size 8 --bf16"
    _error(["import", "megatron", "--args", flags, "--model", "llama-3-8b", "--topology", "dgx-h100"],
           "--model", "model.n_layers is 4 in the megatron arguments but 32 in --model llama-3-8b")
    # the same shape as the catalog's Llama 3 8B: --model supplies the rest (vocabulary, SwiGLU, ...)
    same = runner.invoke(app, ["import", "megatron", "--args", flags.replace("--num-layers 4", "--num-layers 32"),
                               "--model", "llama-3-8b", "--topology", "dgx-h100"])
    assert same.exit_code == 0 and "model: llama-3-8b" in same.output, same.output


def test_compare_vary_of_one_path_twice():
    _error(["compare", str(ZERO2), "--vary", "training.micro_batch_size=1,2", "--vary",
            "training.micro_batch_size=4"], "--vary", "training.micro_batch_size is given twice")


@pytest.mark.parametrize(("args", "expected"), [
    (["flops", "olmo-2-7b", "--tokens", "inf"], "'--tokens': must be a finite number, got inf"),
    (["validate", "--max-mape", "nan"], "'--max-mape'"),
    (["validate", "--max-mape", "-5"], "'--max-mape'"),
    (["sweep", str(ZERO2), "--workers", "0"], "'--workers'"),
    (["sweep"], "Missing argument"),
    (["run", str(ZERO2), "--no-such-option"], "No such option: --no-such-option"),
])
def test_option_errors_are_one_line(args, expected):
    out = _error(args, expected, f"(see: dtsim {args[0]} --help)")
    assert out.count("\n") == 1 and "Usage:" not in out, out
