"""api.simulate, StepReport, `dtsim run` (exit codes, JSON keys, Chrome trace) on bundled scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.api import WhatIf, simulate
from simulator.cli_run import run_command
from simulator.config.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
#: Every scenario a user can copy runs in CI (issue 4: "Each runs in CI").
BUNDLED = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
# A small, fast variant for the CLI and invariant tests.
FAST = ["training.global_batch_size=32", "training.seq_len=2048"]

app = typer.Typer()
app.command("run")(run_command)
app.command("noop")(lambda: None)  # keeps "run" a sub-command, as in the main app
runner = CliRunner()


@pytest.fixture(scope="module")
def small():
    return load_scenario(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml", FAST)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenario_runs_and_fits(name):
    report = simulate(load_scenario(SCENARIOS / name))
    assert report.step_time_s > 0 and report.fits
    # HFU counts executed FLOPs (causal attention with FlashAttention), MFU the scenario's convention.
    assert 0.05 < report.mfu < 1.0 and 0.05 < report.hfu <= 1.0


def test_report_numbers_are_consistent(small):
    r = simulate(small)
    d = r.to_dict()
    assert d["tokens_per_s"] == pytest.approx(small.tokens_per_step / d["step_time_s"])
    assert d["tokens_per_s_per_gpu"] == pytest.approx(d["tokens_per_s"] / 8)
    bd = d["breakdown"]
    for kind in ("param_allgather", "grad_reduce", "post_step_gather", "tp", "pp"):
        comm = bd["communication"][kind]
        assert 0 <= comm["exposed_s"] <= comm["on_link_s"] + 1e-12
    busy = bd["forward_s"] + bd["backward_s"] + bd["recompute_s"] + bd["optimizer_s"]
    assert busy <= d["step_time_s"] + 1e-9
    assert {"total_bytes", "fits"} <= set(d["memory"])
    # ZeRO-3, G micro-batches: G·3φΨ·2 bytes (formulas.md §4.2), minus persistent norms.
    g, phi = small.grad_accum_steps, 7 / 8
    psi = 7.30e9
    assert sum(d["bytes_per_rank"].values()) == pytest.approx(g * 3 * phi * psi * 2, rel=0.01)
    # One reduce-scatter bucket set per micro-batch; 34 units gathered twice, an OLMo 2 block module
    # by module as DeepSpeed fetches it: q, k, v, o, gate, up, down = 7 all-gathers.
    assert set(d["collective_calls"]) == set(d["bytes_per_rank"])
    assert d["collective_calls"]["param_allgather"] == g * 2 * (32 * 7 + 2)


def test_same_input_same_output_bit_for_bit(small):
    a = json.dumps(simulate(small).to_dict(), sort_keys=True)
    b = json.dumps(simulate(small).to_dict(), sort_keys=True)
    assert a == b


@pytest.mark.parametrize("what_if", [WhatIf(network_scale=2.0), WhatIf(flops_scale=2.0), WhatIf(hbm_scale=2.0)])
def test_more_bandwidth_or_flops_never_slows_the_real_stack(small, what_if):
    assert simulate(small, what_if=what_if).step_time_s <= simulate(small).step_time_s


def test_pipeline_parallel_is_refused_with_a_message(small):
    scenario = load_scenario(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml", [*FAST, "parallel.pp=2"])
    with pytest.raises(ValueError, match="parallel.pp"):
        simulate(scenario)


# --- CLI -----------------------------------------------------------------------------------------
def _run(*args: str):
    return runner.invoke(app, ["run", *args])


def test_cli_json_keys_and_trace(tmp_path):
    trace = tmp_path / "trace.json"
    res = _run(str(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml"), *sum((["--set", s] for s in FAST), []),
               "--json", "--trace", str(trace))
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "breakdown", "memory"} <= set(data)
    assert {"forward_s", "backward_s", "recompute_s", "optimizer_s", "offload", "communication"} <= set(data["breakdown"])
    events = json.loads(trace.read_text())["traceEvents"]
    threads = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"compute", "comm"} <= threads
    gathers = [e for e in events if e.get("ph") == "X" and e["cat"].endswith("param_allgather")]
    assert gathers and {"bytes", "algorithm"} <= set(gathers[0]["args"])


def test_cli_table_output():
    res = _run(str(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml"), "--set", FAST[0], "--set", FAST[1])
    assert res.exit_code == 0, res.output
    assert "step time" in res.stdout and "param all-gather" in res.stdout


def test_cli_oom_exits_3_unless_allowed():
    args = [str(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml"), "--set", "training.micro_batch_size=16",
            "--set", "training.global_batch_size=128", "--json"]
    res = _run(*args)
    assert res.exit_code == 3
    assert "does not fit" in res.output
    assert _run(*args, "--allow-oom").exit_code == 0


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("parallel.reduce_bucket_size=0", "reduce_bucket_size"),
        ("training.global_batch_size=12", "global_batch_size"),
        ("parallel.offload_param=cpu", "offload_param"),
        ("parallel.bucket_cap_mb=25", "bucket_cap_mb"),
    ],
)
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, override, field):
    trace = tmp_path / "t.json"
    scenario = "olmo-2-7b-dgx-a100-zero2.yaml"
    res = _run(str(SCENARIOS / scenario), "--set", override, "--trace", str(trace))
    assert res.exit_code == 2, res.output
    assert field in res.output
    assert not trace.exists()


def test_cli_unreadable_deepspeed_json_exits_2(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{not json")
    res = _run(str(SCENARIOS / "olmo-2-7b-dgx-a100-zero2.yaml"), "--deepspeed", str(bad))
    assert res.exit_code == 2
    assert "--deepspeed" in res.output  # the option that named the file


def test_cli_deepspeed_json_applies_and_warns(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "stage3_prefetch_bucket_size": 1e8},
        "optimizer": {"type": "AdamW"}, "steps_per_print": 10,
    }))
    res = _run(str(SCENARIOS / "olmo-2-7b-dgx-a100-zero2.yaml"), "--deepspeed", str(ds), "--json",
               "--set", "training.seq_len=1024")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["layout"]["zero_stage"] == 3 and data["layout"]["grad_accum_steps"] == 4
    assert "steps_per_print" in res.output and "optimizer" in res.output


def test_scenario_deepspeed_config_key_is_relative_to_the_scenario(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_batch_size": 64}))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: olmo-2-1b\ncluster: {topology: dgx-h100}\n"
        "training: {seq_len: 1024, micro_batch_size: 2, global_batch_size: 16}\n"
        "parallel: {framework: deepspeed, deepspeed_config: ds.json}\n"
    )
    res = _run(str(scenario), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["layout"]["zero_stage"] == 1 and data["layout"]["grad_accum_steps"] == 4
    assert data["bytes_per_rank"]["post_step_gather"] > 0


def test_pipeline_with_data_parallel_runs_and_reports_stages():
    scenario = load_scenario(SCENARIOS / "olmo-2-7b-dgx-a100-zero2.yaml",
                             [*FAST, "parallel.zero_stage=1", "parallel.pp=2", "parallel.tp=2"])
    report = simulate(scenario, exact=True)
    d = report.to_dict()
    assert [s["stage"] for s in d["breakdown"]["stages"]] == [0, 1]
    assert d["bytes_per_rank"]["pp"] > 0 and d["bytes_per_rank"]["tp"] > 0
    assert d["breakdown"]["communication"]["pp"]["on_link_s"] > 0
    pids = {s.device for s in report.trace}
    assert pids == {0, 1}


def test_cli_pipeline_trace_has_a_track_per_stage_and_dimension_split(tmp_path):
    trace = tmp_path / "trace.json"
    megatron = ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"  # framework ddp (Megatron-style)
    res = _run(str(megatron), "--set", "parallel.pp=4", "--set", "parallel.tp=2", "--set", "parallel.virtual_stages=2",
               "--set", "parallel.distributed_optimizer=true", "--json", "--trace", str(trace))
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    bd = data["breakdown"]
    assert set(bd["by_dimension"]) == {"tp", "cp", "pp", "dp"} and bd["bubble_s"] > 0
    assert [s["stage"] for s in bd["stages"]] == [0, 1, 2, 3]
    assert data["layout"]["schedule"] == "interleaved" and data["layout"]["virtual_stages"] == 2
    assert len(data["memory"]["stages"]) == 4
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {f"{data['scenario']} rank 0 stage {s}" for s in range(4)} <= names


def test_selective_recompute_with_flash_attention_reruns_the_core():
    """Megatron-Core checkpoints the core attention whatever kernel runs it (``_checkpointed_attention_forward``
    around Transformer Engine's fused and flash kernels too), so with FlashAttention selective recomputation
    still re-runs one causal forward of the core: 4·s·q_dim FLOPs per token and block, half of them
    under the causal mask; Llama 3 8B (32 blocks, q_dim 4,096) at 8,192 tokens: 2·32·8,192·4,096 per token.
    Other frameworks have no such policy with a fused core (legacy Megatron-LM and Megatron-DeepSpeed skip
    the checkpoint with flash): nothing re-runs."""
    from simulator.api import simulate
    from simulator.config.loader import scenario_from_dict
    from simulator.workload import flops

    def scenario(mode: str, framework: str = "ddp"):
        return scenario_from_dict({
            "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
            "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 8,
                         "activation_checkpointing": mode, "attention_flops": "causal"},
            "parallel": {"framework": framework}})

    sel, none = scenario("selective"), scenario("none")
    hw_sel, hw_none = (flops.for_scenario(s, executed=True) for s in (sel, none))
    assert (hw_sel.hardware_flops - hw_none.hardware_flops) / hw_sel.tokens == pytest.approx(2 * 32 * 8192 * 4096)
    assert hw_sel.model_flops == hw_none.model_flops
    with_core, without = simulate(sel), simulate(none)
    assert with_core.hfu > with_core.mfu == pytest.approx(without.mfu * without.step_time_s / with_core.step_time_s)
    assert with_core.step_time_s > without.step_time_s
    fsdp = flops.for_scenario(scenario("selective", "fsdp"), executed=True)
    assert fsdp.hardware_flops == flops.for_scenario(scenario("none", "fsdp"), executed=True).hardware_flops


def test_bf16_at_zero_stage_0_reports_the_bf16_optimizer():
    """bf16 at ZeRO stage 0 runs DeepSpeed's BF16_Optimizer: the layout says so and the header names it;
    fp16 at stage 0 is the plain all-reduce engine."""
    res = _run(str(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml"), "--set", FAST[0], "--set", FAST[1],
               "--set", "parallel.zero_stage=0")
    assert res.exit_code in (0, 3), res.output
    assert "ZeRO-0 (BF16_Optimizer)" in " ".join(res.stdout.split())
    fp16 = load_scenario(SCENARIOS / "olmo-2-7b-dgx-h100-zero3.yaml",
                         [*FAST, "parallel.zero_stage=0", "training.precision=fp16"])
    assert "bf16_optimizer" not in simulate(fp16).layout


def test_run_counts_the_attention_packed_documents_and_windows_leave():
    """MFU and HFU of `dtsim run` read the same FLOP count as `dtsim flops` (workload.flops.for_scenario):
    per-document masking keeps d/s of the causal attention core. Llama 3 8B, 8 sequences of 4,096
    tokens packed with 1,024-token documents: the core per block and sequence is QKᵀ + ·V =
    2 · 2 · 4,096² · 4,096 / 2 (causal), of which 3/4 is masked; 32 blocks, × 3 for forward and backward.
    Found by a bug bash: `run` counted the whole causal core (MFU 119%, HFU 157% at 131k tokens with
    512-token documents)."""
    base = ["training.attention_flops=causal", "training.seq_len=4096", "training.micro_batch_size=1",
            "training.global_batch_size=8", "training.activation_checkpointing=none", "cluster.nodes=1"]
    path = "scenarios/llama-3-8b-fsdp-8xdgx-h100.yaml"
    whole = simulate(load_scenario(path, base))
    packed = simulate(load_scenario(path, [*base, "training.document_tokens=1024"]))
    core = 2 * 2 * 4096**2 * 4096 / 2
    saved = 3 * 8 * 32 * 0.75 * core
    assert whole.model_flops - packed.model_flops == pytest.approx(saved, rel=1e-12)
    assert whole.hardware_flops - packed.hardware_flops == pytest.approx(saved, rel=1e-12)
    long = simulate(load_scenario(path, ["training.attention_flops=causal", "training.seq_len=131072",
                                         "training.micro_batch_size=1", "training.global_batch_size=8",
                                         "training.activation_checkpointing=full", "parallel.cp=8",
                                         "training.document_tokens=512", "cluster.nodes=1"]))
    assert long.mfu < 1 and long.hfu < 1


def test_the_pipeline_bubble_does_not_count_in_pass_expert_waits():
    """The compute stream's idle time holds the exposed in-pass communication and the pipeline bubble:
    an exposed expert all-to-all is a wait inside a pass, like a TP collective, so the two add up to at
    most the idle time (a bug bash found DeepSeek-V3's table summing to 135%: the bubble counted the
    exposed all-to-alls again)."""
    report = simulate(load_scenario("scenarios/mixtral-8x7b-ep8-16xh100.yaml",
                                    ["training.global_batch_size=64"]))
    bd = report.breakdown
    assert bd["bubble_s"] > 0 and bd["communication"]["ep"]["exposed_s"] > 0
    assert bd["bubble_s"] + bd["communication"]["ep"]["exposed_s"] <= bd["idle_s"] * (1 + 1e-9)


def test_a_gpu_of_another_vendor_in_a_chassis_warns():
    """An MI300X in a DGX H100 chassis is a what-if no vendor builds: simulated, with a warning naming both
    (a bug bash found it silent); an H800 in the same chassis (NVIDIA, NVLink bounded) is a real part swap."""
    from simulator.api import simulate
    from simulator.config.loader import load_scenario

    fast = ["training.global_batch_size=16", "training.total_tokens=null"]
    amd = simulate(load_scenario("scenarios/olmo-2-7b-8xh100.yaml", [*fast, "cluster.gpu=mi300x"]))
    assert any("mi300x (amd) in dgx-h100" in w and "h100-sxm (nvidia)" in w for w in amd.warnings)
    h800 = simulate(load_scenario("scenarios/olmo-2-7b-8xh100.yaml", [*fast, "cluster.gpu=h800"]))
    assert not any("chassis" in w for w in h800.warnings)


def test_tiny_gradient_buckets_warn():
    """A bucket under 1 MiB (a bug bash's reduce_bucket_size 1 gave an 11-day step without a word) warns,
    naming the key; the defaults do not."""
    from simulator.api import simulate
    from simulator.config.loader import load_scenario

    fast = ["training.global_batch_size=16", "training.total_tokens=null"]
    tiny = simulate(load_scenario("scenarios/olmo-2-7b-dgx-h100-zero3.yaml", [*fast, "parallel.reduce_bucket_size=1000"]))
    assert any("parallel.reduce_bucket_size 1000" in w and "latency-bound" in w for w in tiny.warnings)
    plain = simulate(load_scenario("scenarios/olmo-2-7b-dgx-h100-zero3.yaml", fast))
    assert not any("latency-bound" in w for w in plain.warnings)
    # Megatron-Core's DDP bucket is in elements: 1,000 of them (2 kB in 16 bits) warn, its default does not
    moe = ["training.global_batch_size=32", "training.total_tokens=null"]
    tiny = simulate(load_scenario("scenarios/mixtral-8x7b-ep8-16xh100.yaml", [*moe, "parallel.ddp_bucket_size=1000"]))
    assert any("parallel.ddp_bucket_size 1000" in w for w in tiny.warnings)
    plain = simulate(load_scenario("scenarios/mixtral-8x7b-ep8-16xh100.yaml", moe))
    assert not any("latency-bound" in w for w in plain.warnings)


def test_a_geforce_part_of_a_calibrated_architecture_warns():
    """An RTX 3090 is Ampere, whose fit comes from A100 runs: the step is an estimate and says so (a bug
    bash found it silent, while the Ada parts warned as uncalibrated)."""
    from simulator.api import simulate
    from simulator.config.loader import scenario_from_dict

    report = simulate(scenario_from_dict({
        "model": {"n_layers": 2, "hidden_size": 256, "n_heads": 4, "ffn_hidden_size": 1024, "vocab_size": 1000},
        "cluster": {"topology": "pcie-rtx4090x8", "nodes": 1, "gpu": "rtx-3090"},
        "training": {"seq_len": 512, "micro_batch_size": 1, "global_batch_size": 8, "precision": "fp16"},
        "parallel": {"framework": "ddp"}}))
    assert any("rtx-3090" in w and "data-center" in w for w in report.warnings)
