"""``dtsim validate --memory``: measured peak memory per GPU against the one memory model, misses
reported with their cause."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.validation import memory_suite

runner = CliRunner()

#: torchtitan benchmarks/llama3_h100_202412_torchtitan.md, "Memory(GiB)" of Tables 1-6 (the rows the
#: corpus expresses), in corpus order.
TORCHTITAN_GIB = [82.4, 67.0, 71.9, 82.5, 83.9, 84.2, 84.0, 84.5, 75.3, 75.9, 77.1, 84.9]


@pytest.fixture(scope="module")
def report() -> dict:
    result = runner.invoke(app, ["validate", "--memory", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_corpus_holds_the_published_figures():
    sources, runs = memory_suite.load()
    assert [r.measured_GiB for r in runs] == TORCHTITAN_GIB
    assert all(r.source in sources for r in runs)


def test_mape_and_misses_are_reported_numbers(report):
    rows, summary = report["rows"], report["summary"]
    done = [r for r in rows if "error" in r]
    assert summary["simulated"] == len(done) == 12
    assert summary["mape"] == pytest.approx(sum(abs(r["error"]) for r in done) / len(done))
    beyond = {r["id"] for r in done if abs(r["error"]) > memory_suite.TOLERANCE}
    assert {m["id"] for m in summary["misses"]} == beyond
    assert all(m["cause"] != "no named cause" for m in summary["misses"])


def test_405b_4d_at_32k_is_within_tolerance(report):
    # FSDP 8 × TP 8 × PP 8, 1F1B, full AC, 32,768 tokens: 75.3 GiB measured (Table 6).
    row = next(r for r in report["rows"] if r["id"] == "torchtitan-405b-fsdp8-cp1-32k")
    assert abs(row["error"]) <= memory_suite.TOLERANCE


def test_memory_validation_exit_codes():
    assert runner.invoke(app, ["validate", "--memory", "--only", "nothing-*"]).exit_code == 2
    result = runner.invoke(app, ["validate", "--memory", "--only", "torchtitan-8b-fsdp8-sac", "--max-mape", "5"])
    assert result.exit_code == 1 and "exceeds --max-mape" in result.output


def test_fit_boundaries(report):
    # torchtitan on 64 A100 80GB: Llama 2 70B at local batch 2 with selective AC ran out of memory, with
    # full AC it trained; 405B FSDP-only on 128 H100 ran out of memory. One disagreement, with its cause.
    bounds = {b["id"]: b for b in report["boundaries"]}
    assert bounds["torchtitan-llama2-70b-fsdp64-lbs2-sac-oom"]["predicted"] == "oom"
    assert bounds["torchtitan-llama2-70b-fsdp64-lbs2-full"]["predicted"] == "fits"
    assert bounds["torchtitan-llama31-405b-fsdp128-lbs2-full-oom"]["predicted"] == "oom"
    b = report["summary"]["boundaries"]
    assert b["n"] == 6 and b["agree"] == 5
    assert [d["id"] for d in b["disagree"]] == ["torchtitan-llama2-70b-fsdp64-lbs1-sac"]


def test_no_run_is_skipped_for_context_parallelism():
    # parallel.cp is simulated: no validation run may give "context parallelism is not simulated" as its reason.
    from simulator.validation.suite import load_runs

    assert not [r.id for r in load_runs() if "is not simulated" in (r.not_expressible or "")
                and "context parallel" in (r.not_expressible or "")]
