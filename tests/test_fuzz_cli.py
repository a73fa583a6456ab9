"""Fuzzing the command line (hypothesis): scenario files with hostile values at real keys, raw bytes,
and CLI arguments. Whatever the input: the exit code is 0, 2 or 3, there is never a traceback, and
a refused command writes no output file. Bounded (a few seconds in all) and derandomized, so the
suite gives the same result on every machine."""

from __future__ import annotations

import json
from pathlib import Path

import typer.testing
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import app

ROOT = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml").read_text())
_COMMAND = typer.testing._get_command(app)


class _Runner(typer.testing.CliRunner):
    """Builds the click command once (typer rebuilds it on every invoke: ~0.1 s each)."""

    def invoke(self, app_, *args, **kwargs):
        original = typer.testing._get_command
        typer.testing._get_command = lambda _app: _COMMAND
        try:
            return super().invoke(app_, *args, **kwargs)
        finally:
            typer.testing._get_command = original


runner = _Runner()

PATHS = [
    "name", "model", "cluster.topology", "cluster.nodes", "cluster.gpus", "cluster.gpu", "cluster.network_fidelity",
    "cluster.collective_algorithm", "training.seq_len", "training.micro_batch_size", "training.global_batch_size",
    "training.precision", "training.activation_checkpointing", "training.total_tokens", "training.attention_flops",
    "parallel.tp", "parallel.pp", "parallel.cp", "parallel.framework", "parallel.zero_stage",
    "parallel.virtual_stages", "parallel.pipeline_schedule", "parallel.sequence_parallel",
    "parallel.distributed_optimizer", "parallel.account_for_embedding_in_pipeline_split",
    "parallel.decoder_first_pipeline_num_layers", "memory.fragmentation", "reliability.gpu_mtbf_hours",
    "cost.usd_per_gpu_hour", "sweep", "compare", "parallel", "training",
]

hostile = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["dgx-a100", "h100-sxm", "llama-3-8b", "fsdp", "interleaved", "[/]", "1e30"]),
    st.lists(st.integers(-2, 64), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(0, 8), max_size=2),
)
small = st.one_of(st.integers(0, 64), st.booleans(), st.sampled_from(["1f1b", "gpipe", "fsdp", "ddp", "bf16", "full"]))


def _set(raw: dict, path: str, value) -> dict:
    out = yaml.safe_load(yaml.safe_dump(raw))
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value
    return out


def _check(result, written: list[Path]) -> None:
    assert result.exit_code in (0, 2, 3), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert not any(p.exists() for p in written), "a refused command wrote a file"


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), hostile), min_size=1, max_size=3))
def test_memory_on_hostile_scenarios(tmp_path, edits):
    raw = BASE
    for path, value in edits:
        raw = _set(raw, path, value)
    scenario = tmp_path / "s.yaml"
    try:
        scenario.write_text(yaml.safe_dump(raw))
    except (ValueError, OverflowError):
        return
    _check(runner.invoke(app, ["memory", str(scenario), "--json"]), [])


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64))
def test_memory_on_raw_bytes(tmp_path, data):
    scenario = tmp_path / "b.yaml"
    scenario.write_bytes(data)
    _check(runner.invoke(app, ["memory", str(scenario)]), [])


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(st.tuples(st.sampled_from(PATHS[3:25]), small), max_size=3),
       out_name=st.sampled_from(["t.json", "t.yaml", "", "sub/t.json"]))
def test_run_with_hostile_overrides_and_outputs(tmp_path, sets, out_name):
    args = ["run", str(ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"), "--set",
            "training.global_batch_size=8", "--set", "training.seq_len=256"]
    for path, value in sets:
        args += ["--set", f"{path}={str(value).lower() if isinstance(value, bool) else value}"]
    trace = tmp_path / out_name if out_name else tmp_path
    before = set(tmp_path.rglob("*"))
    result = runner.invoke(app, [*args, "--trace", str(trace)])
    _check(result, [])
    if result.exit_code == 2:
        assert set(tmp_path.rglob("*")) == before


def test_the_base_scenario_is_accepted():
    # The fuzz starts from a valid scenario, so single edits exercise the model, not only the parser.
    result = runner.invoke(app, ["memory", str(ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["total_bytes"] > 0
