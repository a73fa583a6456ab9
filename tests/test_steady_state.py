"""Steady-state extrapolation (``simulator.steady_state``) against the full simulation.

The reference is the same engine run on every micro-batch (``exact=True``), never a frozen number:
the models under both paths may change, the two paths must keep agreeing (bit-for-bit or within
1e-9 relative; the extrapolated sums differ from the simulated ones only by float rounding).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config.loader import load_scenario, scenario_from_dict
from simulator.parallel.build import build_step_graph, context_for, copies_every_micro_batch
from simulator.steady_state import (
    SEPARATED_MIN,
    Played,
    _combine,
    _separated,
    extrapolate,
    period,
    sample_sizes,
    waits_for_whole,
)

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))
REL = 1e-9


def _mismatches(a, b, scale: float, path: str = "") -> list[str]:
    """Leaves of two report dicts that differ by more than ``REL`` relative (or ``REL·scale`` absolute,
    for figures near zero such as a fully hidden exposed time)."""
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [m for k in a for m in _mismatches(a[k], b[k], scale, f"{path}.{k}")]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [m for i, (x, y) in enumerate(zip(a, b, strict=True)) for m in _mismatches(x, y, scale, f"{path}[{i}]")]
    if isinstance(a, float) and not isinstance(b, bool):
        ok = math.isclose(a, b, rel_tol=REL, abs_tol=REL * scale)
        return [] if ok else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _both(scenario):
    fast, exact = simulate(scenario), simulate(scenario, exact=True)
    assert exact.trace, "the exact path keeps the per-span trace"
    return fast, exact


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenarios_extrapolated_equal_exact(path):
    fast, exact = _both(load_scenario(path))
    assert _mismatches(fast.to_dict(), exact.to_dict(), exact.step_time_s) == []
    n = exact.layout["grad_accum_steps"]
    # 4 + 5 micro-batches of samples: only scenarios with more than 9 can be extrapolated (a pattern
    # that does not settle, e.g. an uneven MoE pipeline, is simulated whole), unless the micro-batches
    # are copies separated in time (samples of 1 and 2, from 4 micro-batches on).
    if fast.trace == ():
        scenario = load_scenario(path)
        assert n > 9 or (n >= SEPARATED_MIN and copies_every_micro_batch(context_for(scenario)))


def _scenario(parallel: dict, global_batch: int, nodes: int = 2, model: str = "olmo-2-1b"):
    return scenario_from_dict({
        "name": "steady", "model": model, "cluster": {"topology": "dgx-h100", "nodes": nodes},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": global_batch},
        "parallel": parallel,
    })


CASES = {
    # 16 GPUs, tp 2 x pp 4 -> dp 2: global batch 2·n micro-batches.
    "1f1b-ddp": ({"framework": "ddp", "tp": 2, "pp": 4}, 64),
    "1f1b-zero1": ({"framework": "deepspeed", "zero_stage": 1, "tp": 2, "pp": 4}, 64),
    "1f1b-fsdp": ({"framework": "fsdp", "tp": 2, "pp": 4}, 64),
    "interleaved": ({"framework": "ddp", "tp": 2, "pp": 4, "virtual_stages": 2}, 128),
    "ddp": ({"framework": "ddp"}, 256),
    "tp-sp-zero1": ({"framework": "deepspeed", "zero_stage": 1, "tp": 8, "sequence_parallel": True}, 32),
    "cp": ({"framework": "fsdp", "cp": 2, "tp": 2}, 64),
    "tp-overlap": ({"framework": "ddp", "tp": 4, "sequence_parallel": True, "tp_comm_overlap": True}, 64),
}


@pytest.mark.parametrize("name", CASES)
def test_schedules_extrapolated_equal_exact(name):
    parallel, batch = CASES[name]
    fast, exact = _both(_scenario(parallel, batch))
    assert fast.trace == (), "these layouts have a steady state long enough to extrapolate"
    assert _mismatches(fast.to_dict(), exact.to_dict(), exact.step_time_s) == []


@pytest.mark.parametrize("limit", [0, 22])
def test_deferred_output_layer_wgrads_are_simulated_whole(limit):
    """The first ``wgrad_deferral_limit`` micro-batches of the last stage run without the output layer's weight
    gradient and the flush grows with their number: two short samples cannot stand for the step (32 micro-batches
    per step here, 22 of them or all deferred)."""
    par = {"framework": "ddp", "tp": 2, "pp": 4, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": limit}
    fast, exact = _both(_scenario(par, 64))
    assert fast.trace != ()
    assert _mismatches(fast.to_dict(), exact.to_dict(), exact.step_time_s) == []


def test_gpipe_is_simulated_whole():
    # All forwards before all backwards: a micro-batch's pattern stretches with n, nothing to extrapolate.
    fast = simulate(_scenario({"framework": "ddp", "tp": 2, "pp": 4, "pipeline_schedule": "gpipe"}, 64))
    assert fast.trace != ()


def test_sample_sizes():
    # No pipeline: warm-up 1, period 1 -> samples of 4 and 5 micro-batches, worth it from 10 on.
    assert sample_sizes(10, 1, "1f1b", 1) == (4, 1, 1)
    assert sample_sizes(9, 1, "1f1b", 1) is None
    # 1F1B on 4 stages: warm-up 4 -> 2·4 + 2 = 10 and 11.
    assert sample_sizes(64, 4, "1f1b", 1) == (10, 1, 4)
    # Interleaved on 4 stages: period 4 micro-batches, warm-up 8 -> 24 and 28; n - 24 must be a multiple of 4.
    assert sample_sizes(64, 4, "interleaved", 2) == (24, 4, 8)
    assert sample_sizes(66, 4, "interleaved", 2) is None
    assert sample_sizes(64, 4, "gpipe", 1) is None


def test_combine_is_linear_per_leaf():
    a = {"t": 1.5, "n": 3, "rows": [{"stage": 0, "x": 2.0}], "name": "s", "fits": True}
    b = {"t": 2.0, "n": 5, "rows": [{"stage": 0, "x": 2.25}], "name": "s", "fits": True}
    # k = 10 periods: 1.5 + 10·0.5 = 6.5; 3 + 10·2 = 23; 2 + 10·0.25 = 4.5.
    assert _combine(a, b, 10) == {"t": 6.5, "n": 23, "rows": [{"stage": 0, "x": 4.5}], "name": "s", "fits": True}
    with pytest.raises(ValueError):
        _combine({"name": "a"}, {"name": "b"}, 2)
    with pytest.raises(ValueError):
        _combine({"x": 1.0}, {"y": 1.0}, 2)


def _played(monkeypatch, scenario, n: int) -> Played:
    """A real sample of ``n`` micro-batches, captured through ``simulate``'s play callback."""
    import simulator.api as api

    seen: list[Played] = []

    def spy(play, *args, **kw):
        seen.append(play(n))
        return seen[-1]

    with monkeypatch.context() as patch:
        patch.setattr(api, "play_step", spy)
        simulate(scenario)
    return seen[0]


def test_check_rejects_a_pattern_that_does_not_repeat(monkeypatch):
    sc = _scenario({"framework": "ddp"}, 256)
    small, large = _played(monkeypatch, sc, 4), _played(monkeypatch, sc, 5)
    assert period(large, 1, 1) is not None
    assert extrapolate(small, large, 32, 1, 1) is not None
    # Delay one steady micro-batch's last span by 1 µs: the pattern no longer repeats, no extrapolation.
    spans = list(large.trace.spans)
    tasks = large.graph.tasks
    i = max(k for k, s in enumerate(spans) if tasks[s.task_id].micro_batch == 2)
    spans[i] = dataclasses.replace(spans[i], end_s=spans[i].end_s + 1e-6)
    broken = dataclasses.replace(large, trace=dataclasses.replace(large.trace, spans=tuple(spans)))
    assert period(broken, 1, 1) is None
    assert extrapolate(small, broken, 32, 1, 1) is None
    # Samples whose step times disagree with the period are refused too.
    late = dataclasses.replace(large, summary={**large.summary, "step_time_s": large.summary["step_time_s"] + 1e-3})
    assert extrapolate(small, late, 32, 1, 1) is None


def test_cli_exact_flag_gives_the_same_json(monkeypatch):
    import json

    import typer
    from typer.testing import CliRunner

    import simulator.cli_run as cli_run
    from simulator.cli_run import run_command

    seen: list[bool] = []
    run_scenario = cli_run.run_scenario

    def spy(scenario, profile=None, exact=False):
        seen.append(exact)
        return run_scenario(scenario, profile, exact=exact)

    monkeypatch.setattr(cli_run, "run_scenario", spy)

    app = typer.Typer()
    app.command("run")(run_command)
    app.command("other")(lambda: None)  # two commands: typer keeps "run" as a subcommand
    path = str(SCENARIOS[0].parent / "olmo-2-7b-dgx-a100-zero2.yaml")
    runner = CliRunner()
    fast = runner.invoke(app, ["run", path, "--json"])
    exact = runner.invoke(app, ["run", path, "--json", "--exact"])
    assert fast.exit_code == 0 and exact.exit_code == 0, fast.output + exact.output
    a, b = json.loads(fast.stdout), json.loads(exact.stdout)
    assert a["layout"]["grad_accum_steps"] == 32  # extrapolated by default
    assert _mismatches(a, b, b["step_time_s"]) == []
    assert seen == [False, True]


def test_cli_trace_has_every_micro_batch(tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from simulator.cli_run import run_command

    app = typer.Typer()
    app.command("run")(run_command)
    app.command("other")(lambda: None)
    trace = tmp_path / "trace.json"
    path = str(SCENARIOS[0].parent / "olmo-2-7b-dgx-a100-zero2.yaml")
    res = CliRunner().invoke(app, ["run", path, "--json", "--trace", str(trace)])
    assert res.exit_code == 0, res.output
    names = {e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"}
    # 32 micro-batches: the trace implies --exact, so the last one is there, not only the samples' 4 and 5.
    assert any(name.endswith(" mb31") for name in names)


# --- Separated micro-batches: samples of 1 and 2 ---------------------------------------------------


def test_copies_every_micro_batch_by_framework():
    # ZeRO-2/3 and FSDP reduce in every micro-batch: each issues the first one's tasks. DDP and ZeRO-1
    # reduce in the last one only; a pipeline interleaves micro-batches.
    def copies(parallel, batch=64):
        return copies_every_micro_batch(context_for(_scenario(parallel, batch)))

    assert copies({"framework": "deepspeed", "zero_stage": 3})
    assert copies({"framework": "deepspeed", "zero_stage": 2})
    assert copies({"framework": "fsdp"})
    assert not copies({"framework": "deepspeed", "zero_stage": 1})
    assert not copies({"framework": "ddp"})
    assert not copies({"framework": "fsdp", "tp": 2, "pp": 4})
    assert not copies({"framework": "deepspeed", "zero_stage": 3}, batch=16)  # one micro-batch


def test_waits_for_whole_follows_deps_and_stream_order():
    from simulator.parallel.ir import COMM, CollectiveTask, ComputeTask, StepGraph

    def graph(next_compute_waits_for_gather: bool):
        # mb0: forward, then its reduce on the comm stream. mb1: a gather on the comm stream (after
        # mb0's reduce in stream order), its forward after mb0's forward in stream order.
        deps = (2,) if next_compute_waits_for_gather else ()
        return StepGraph((
            ComputeTask(0, "fwd mb0", "forward", (), micro_batch=0),
            CollectiveTask(1, "rs mb0", "grad_reduce", "reduce_scatter", "dp", 1.0, stream=COMM, deps=(0,),
                           micro_batch=0),
            CollectiveTask(2, "ag mb1", "param_allgather", "all_gather", "dp", 1.0, stream=COMM, micro_batch=1),
            ComputeTask(3, "fwd mb1", "forward", (), deps=deps, micro_batch=1),
            ComputeTask(4, "opt", "optimizer", (), deps=(2,)),  # untagged: not part of either
        ))

    # The gather waits for the reduce (stream order), the reduce for the forward: the whole of mb0.
    # Without the dependency, mb1's forward waits only for mb0's forward, not for its reduce.
    assert waits_for_whole(graph(True), 0)
    assert not waits_for_whole(graph(False), 0)
    assert not waits_for_whole(graph(True), 1)  # no micro-batch 2


def test_separated_samples_on_a_short_zero3_step(monkeypatch):
    # 16 GPUs, dp 16, global batch 128: 8 micro-batches, fewer than the 4 + 5 samples need.
    sc = _scenario({"framework": "deepspeed", "zero_stage": 3}, 128)
    fast, exact = _both(sc)
    assert exact.layout["grad_accum_steps"] == 8
    assert fast.trace == (), "8 separated micro-batches are extrapolated from samples of 1 and 2"
    assert _mismatches(fast.to_dict(), exact.to_dict(), exact.step_time_s) == []
    # A micro-batch that starts before the previous one ends is not separated: refused.
    two = _played(monkeypatch, sc, 2)
    assert _separated(two)
    spans = list(two.trace.spans)
    tasks = two.graph.tasks
    i = min(k for k, s in enumerate(spans) if tasks[s.task_id].micro_batch == 1)
    end0 = max(s.end_s for s in spans if tasks[s.task_id].micro_batch == 0)
    spans[i] = dataclasses.replace(spans[i], start_s=end0 - 1e-6)
    assert not _separated(dataclasses.replace(two, trace=dataclasses.replace(two.trace, spans=tuple(spans))))


def test_overlapping_micro_batches_are_not_separated():
    # ZeRO-2 with overlapped reduction (``overlap_comm``): micro-batch g's reduce-scatters run under
    # g + 1's forward, so 8 micro-batches (too few for 4 + 5) are simulated whole; FSDP's are separated.
    zero2 = _scenario({"framework": "deepspeed", "zero_stage": 2, "overlap_comm": True,
                       "reduce_bucket_size": 5e7}, 128)
    assert not waits_for_whole(build_step_graph(dataclasses.replace(context_for(zero2), n_micro=2)), 0)
    assert simulate(zero2).trace != ()
    fast, exact = _both(_scenario({"framework": "fsdp"}, 80))  # 5 micro-batches
    assert fast.trace == ()
    assert _mismatches(fast.to_dict(), exact.to_dict(), exact.step_time_s) == []
