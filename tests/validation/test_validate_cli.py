"""``dtsim validate`` end to end on a local typer app (registered in simulator/cli.py).

Runs the pure data-parallel part of the suite (a few seconds); the full suite, with the large
pipeline runs, is ``dtsim validate`` by hand (minutes).
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from simulator.cli_validate import validate_command
from simulator.validation.suite import load_runs
from simulator.validation.summary import SIZE_CLASSES, size_class

pytestmark = pytest.mark.validation

app = typer.Typer()
app.command("validate")(validate_command)


@app.command("version")
def _version() -> None:  # a second command keeps typer from collapsing the app into one command
    """unused"""


runner = CliRunner()

#: Issue-7 target: pure data-parallel FSDP / ZeRO runs, MAPE on the held-out part of the calibration set.
HELD_OUT_TARGET = 0.10


@pytest.fixture(scope="module")
def pure_dp() -> dict:
    result = runner.invoke(app, ["validate", "--kind", "pure_dp", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_rows_and_summary(pure_dp):
    rows, summary = pure_dp["rows"], pure_dp["summary"]
    n_pure_dp = sum(r.parallelism == "pure_dp" for r in load_runs())  # runs.yaml (33) + runs_corpus.yaml
    assert summary["runs"] == n_pure_dp == len(rows)
    assert summary["simulated"] + summary["skipped"] == n_pure_dp
    assert {s["id"] for s in summary["skipped_runs"]} >= {"olmo-core-13b-h100-bf16", "fsdp-paper-gpt175b-bs1"}
    for r in rows:
        if "error" in r:
            assert r["error"] == pytest.approx(r["predicted_tokens_per_s_per_gpu"] / r["measured_tokens_per_s_per_gpu"] - 1)
    assert set(summary["by_framework"]) <= {"FSDP", "DeepSpeed", "Megatron", "DDP"}
    assert len(summary["worst"]) == 5


def test_every_simulated_run_is_checked_against_its_gpu_memory(pure_dp):
    # a published run ran, so its simulated peak over the usable HBM is listed as an overestimate
    rows, fit = pure_dp["rows"], pure_dp["summary"]["fit_check"]
    simulated = [r for r in rows if "error" in r]
    assert fit["runs"] == len(simulated) and all(r["memory_of_usable"] > 0 for r in simulated)
    assert {o["id"] for o in fit["over"]} == {r["id"] for r in simulated if r["memory_of_usable"] > 1}


def test_model_size_and_precision_groups(pure_dp):
    rows = {r["id"]: r for r in pure_dp["rows"] if "error" in r}
    # Megatron SC'21 Table 1: the 1.7B GPT; MPT-350M (llm-foundry): below 1B; both trained in 16-bit
    assert rows["megatron-sc21-t1-1.7B"]["model_size"] == "1-10B"
    assert 1.6e9 < rows["megatron-sc21-t1-1.7B"]["model_params"] < 1.8e9
    assert rows["llmfoundry-mpt350m-a100_80gb-8gpu-seq2048"]["model_size"] == "≤ 1B"
    assert rows["megatron-sc21-t1-1.7B"]["precision"] == "FP16"
    groups = pure_dp["summary"]["by_model_size"]
    assert set(groups) <= {label for _, label in SIZE_CLASSES}
    assert sum(g["n"] for g in groups.values()) == pure_dp["summary"]["simulated"]
    assert size_class(1e9) == "≤ 1B" and size_class(1.01e9) == "1-10B" and size_class(4.05e11) == "> 100B"


def test_bias_is_the_mean_signed_error_by_group():
    """MAPE hides direction: the summary also gives each group's mean signed error, and groups dense and MoE."""
    from simulator.validation.render import markdown
    from simulator.validation.summary import summarize

    base = {"gpu": "H100", "framework": "Megatron", "parallelism": "TP/PP", "split": None, "model_size": "> 100B",
            "precision": "BF16", "publication": "p", "arch": "hopper", "parallel_framework": "ddp"}
    errors = {"a": (0.30, True), "b": (0.10, True), "c": (-0.20, False)}
    rows = [{**base, "id": k, "error": e, "moe": moe, "measured_tokens_per_s_per_gpu": 100.0,
             "predicted_tokens_per_s_per_gpu": 100.0 * (1 + e)} for k, (e, moe) in errors.items()]
    s = summarize(rows, intervals=False)
    # hand arithmetic: MoE (+0.30 + 0.10) / 2 = +0.20 with MAPE 0.20; dense -0.20; all (0.30 + 0.10 - 0.20) / 3
    assert s["by_architecture"]["MoE"] == {"n": 2, "mape": pytest.approx(0.20), "bias": pytest.approx(0.20)}
    assert s["by_architecture"]["dense"]["bias"] == pytest.approx(-0.20)
    assert s["bias"] == pytest.approx(0.20 / 3) and s["mape"] == pytest.approx(0.60 / 3)
    text = markdown(rows, s, "dtsim validate")
    assert "| group | value | runs | MAPE | bias |" in text
    assert "| architecture | MoE | 2 | 20.0% | +20.0% |" in text and "| architecture | dense | 1 | 20.0% | -20.0% |" in text


def test_tflops_converted_with_the_sources_convention(pure_dp):
    row = next(r for r in pure_dp["rows"] if r["id"] == "megatron-sc21-t1-1.7B")
    # the TFLOP/s ratio equals the throughput ratio (one FLOP count per token on both sides), to the JSON's
    # rounding; compared as ratios, since the error itself may be near zero
    ratio = row["predicted_tflops_per_gpu"] / row["measured_tflops_per_gpu"]
    assert ratio == pytest.approx(1 + row["error"], rel=1e-5)


def test_pure_dp_held_out_mape_meets_the_target(pure_dp):
    held = pure_dp["summary"]["held_out_pure_dp"]
    assert held["n"] >= 8
    assert held["mape"] <= HELD_OUT_TARGET, f"held-out pure-DP MAPE {held['mape']:.1%}"


def test_max_mape_exit_code_and_writers(tmp_path):
    md, png = tmp_path / "v.md", tmp_path / "v.png"
    result = runner.invoke(app, ["validate", "--only", "llmfoundry-mpt7b-*", "--max-mape", "0.001",
                                 "--markdown", str(md), "--png", str(png)])
    assert result.exit_code == 1
    assert "exceeds --max-mape" in result.output
    assert "| llmfoundry-mpt7b-h100-8gpu-seq2048 |" in md.read_text()
    assert png.read_bytes()[:4] == b"\x89PNG"
    ok = runner.invoke(app, ["validate", "--only", "llmfoundry-mpt7b-*", "--max-mape", "1000"])
    assert ok.exit_code == 0, ok.output


def test_bad_input_exits_2():
    assert runner.invoke(app, ["validate", "--only", "no-such-run"]).exit_code == 2
    assert runner.invoke(app, ["validate", "--kind", "3d"]).exit_code == 2


def test_unexpressible_runs_are_listed_as_skipped():
    result = runner.invoke(app, ["validate", "--only", "mlperf-*", "--json"])
    out = json.loads(result.stdout)
    assert out["summary"]["simulated"] == 0 and out["summary"]["skipped"] == 2
    assert result.exit_code == 1 and "no run was simulated" in result.output  # nothing validated: a failure
    assert all(s["reason"].startswith("not expressible") for s in out["summary"]["skipped_runs"])


def test_readme_section_is_regenerated_between_markers(tmp_path):
    """The README's validation report is written by the command, between its markers."""
    from typer.testing import CliRunner

    from simulator.cli import app

    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- validation:start -->\nstale\n<!-- validation:end -->\ntail\n")
    result = CliRunner().invoke(app, ["validate", "--only", "megatron-sc21-t1-1.7B", "--readme", str(readme)])
    assert result.exit_code == 0, result.output
    text = readme.read_text()
    assert "stale" not in text and text.startswith("intro\n") and text.endswith("tail\n")
    assert "megatron-sc21-t1-1.7B" in text and "## dtsim validation report" in text
    # the README keeps the summary and the misses; the per-run and skipped tables are the report's
    assert "### Summary" in text and "### Runs\n" not in text and "### Skipped" not in text
    assert "the report `--markdown` writes" in text
    readme.write_text("<!-- validation:start -->\n<!-- validation:end -->\n")
    report = tmp_path / "report.md"
    both = ["validate", "--only", "megatron-sc21-t1-1.7B", "--markdown", str(report), "--readme", str(readme)]
    assert CliRunner().invoke(app, both).exit_code == 0
    assert f"[{report.as_posix()}]({report.as_posix()})" in readme.read_text()  # the README links the report
    assert "## Runs\n" in report.read_text()
    no_markers = tmp_path / "other.md"
    no_markers.write_text("nothing\n")
    bad = CliRunner().invoke(app, ["validate", "--only", "megatron-sc21-t1-1.7B", "--readme", str(no_markers)])
    assert bad.exit_code == 2 and "markers" in bad.output and no_markers.read_text() == "nothing\n"


def test_every_stored_fold_is_reported_with_its_held_out_runs(pure_dp):
    # issue 12 item 5: every publication held out once, every fold in the report
    from simulator.validation.calibrated import stored_folds
    from simulator.validation.render import markdown

    summary, rows = pure_dp["summary"], {r["id"]: r for r in pure_dp["rows"] if "error" in r}
    assert {(f["arch"], f["source"]) for f in summary["folds"]} == {(f["arch"], f["source"]) for f in stored_folds()}
    for f in summary["folds"]:  # this pass is pure DP only: a fold's long-sequence TP/PP runs are not in it
        errors = [abs(rows[i]["error"]) for i in f["held_out"] if i in rows]
        assert f["runs"] == len(errors) and f["mape"] == pytest.approx(sum(errors) / len(errors))
    text = markdown(pure_dp["rows"], summary, "dtsim validate")
    assert "Leave-one-source-out folds" in text and "| hopper | mosaicml/llm-foundry |" in text


def test_a_cause_shared_by_several_runs_is_printed_once():
    """A cause named by a glob (several runs) stands once below its table, the rows by its number."""
    from simulator.validation.render import markdown, shared_texts

    a, b = "a" * 100, "b" * 100
    assert shared_texts([a, b, a, "c" * 100, b]) == {a: 1, b: 2}
    assert shared_texts(["no named cause", "no named cause"]) == {}  # a short text stays in its rows
    long_cause = "GPT-OSS: not identified | " + "x" * 500
    summary = {"pure_dp": {"mape": 0.1, "n": 1}, "held_out_pure_dp": {"mape": 0.1, "n": 1, "max_abs_error": 0.1},
               "mape": 0.3, "simulated": 3, "skipped": 0, "runs": 3, "by_gpu": {}, "by_framework": {},
               "by_parallelism": {}, "by_model_size": {}, "by_precision": {}, "skipped_runs": [],
               "misses": [{"id": "r1", "error": 0.4, "cause": long_cause}, {"id": "r2", "error": 0.2, "cause": "own"},
                          {"id": "r3", "error": -0.3, "cause": long_cause}]}
    text = markdown([], summary, "dtsim validate")
    assert text.count("x" * 500) == 1 and "GPT-OSS: not identified | " in text  # once, outside the table
    assert "| r1 | +40.0% | shared cause 1 (below) |" in text and "| r3 | -30.0% | shared cause 1 (below) |" in text
    assert "| r2 | +20.0% | own |" in text and "**Shared cause 1.** GPT-OSS" in text
