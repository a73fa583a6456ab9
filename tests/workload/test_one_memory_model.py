"""One memory model: ``dtsim memory`` and ``dtsim run --json`` report the same memory block, for every
bundled scenario and for the pipeline / sequence / context parallel variants that once differed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.loader import load_scenario
from simulator.workload import memory, params

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "scenarios").glob("*.yaml"))
DDP = ROOT / "tests" / "parallel" / "ddp-olmo-8xh100.yaml"
SMALL = ["training.global_batch_size=16", "training.seq_len=1024"]
VARIANTS = {
    "1f1b": ["parallel.pp=4"],
    "gpipe": ["parallel.pp=4", "parallel.pipeline_schedule=gpipe"],
    "interleaved": ["parallel.pp=2", "parallel.virtual_stages=2"],
    "sp": ["parallel.tp=4", "parallel.sequence_parallel=true"],
    "cp": ["parallel.cp=2", "training.seq_len=2048"],
    "fsdp-pp": ["parallel.pp=2", "parallel.framework=fsdp"],
    "dist-opt-pp": ["parallel.pp=2", "parallel.tp=2", "parallel.distributed_optimizer=true"],
}
runner = CliRunner()


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code in (0, 3), result.output
    return json.loads(result.stdout)


def _sets(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_memory_command_equals_run_for_bundled_scenarios(path: Path):
    # The run side is cut to 2 micro-batches (memory with pp = 1 does not depend on their number), or
    # pp of them for the interleaved schedule (which needs the micro-batches divisible by pp).
    sc = load_scenario(path)
    dp_b = sc.training.micro_batch_size * sc.dp
    n = sc.parallel.pp if sc.parallel.pipeline_schedule == "interleaved" else 2
    sets = _sets([f"training.global_batch_size={n * dp_b}"])
    mem = _json(["memory", str(path), *sets])
    run = _json(["run", str(path), *sets, "--allow-oom"])
    assert run["memory"] == mem


@pytest.mark.parametrize("name", VARIANTS)
def test_memory_command_equals_run_for_layout_variants(name: str):
    sets = _sets(SMALL + VARIANTS[name])
    mem = _json(["memory", str(DDP), *sets])
    run = _json(["run", str(DDP), *sets, "--allow-oom"])
    assert run["memory"] == mem


def test_gpipe_keeps_every_micro_batch_in_flight():
    # 8 GPUs, pp = 4: dp = 2, m = 16 / (1 · 2) = 8. GPipe holds all m = 8 micro-batches on every
    # stage, 1F1B min(p − s, m) = 4 on stage 0 and 3 on stage 1 (Narayanan et al. SC'21 §2.2).
    base = [*SMALL, "parallel.pp=4"]
    one = memory.stage_activations(load_scenario(DDP, base))
    gpipe = memory.stage_activations(load_scenario(DDP, [*base, "parallel.pipeline_schedule=gpipe"]))
    assert one[0].in_flight == 4 and one[1].in_flight == 3 and gpipe[0].in_flight == 8
    assert gpipe[1].layers == pytest.approx(one[1].layers * 8 / 3)


def test_memory_reports_the_most_loaded_stage_with_every_stage_listed():
    sc = load_scenario(DDP, [*SMALL, "parallel.pp=4"])
    bd = memory.breakdown(sc)
    assert [r["stage"] for r in bd.stages] == [0, 1, 2, 3]
    assert bd.total_bytes == max(r["total_bytes"] for r in bd.stages)
    # OLMo 2 7B: 32 blocks, 8 per stage; stage 0 keeps 4 micro-batches in flight, so it is the peak.
    assert [r["layers"] for r in bd.stages] == [8, 8, 8, 8]
    assert bd.stages[0]["total_bytes"] == bd.total_bytes


def test_distributed_optimizer_is_megatrons_6_plus_12_over_d_bytes_per_parameter():
    # Megatron-LM theoretical_memory_usage.py: 6 + 12/d bytes per parameter with the distributed
    # optimizer (16-bit weights, fp32 main_grad, fp32 master + Adam m, v sharded over d = dp).
    sc = load_scenario(DDP, [*SMALL, "parallel.pp=2", "parallel.tp=2", "parallel.distributed_optimizer=true"])
    st = memory.model_states(sc, 1e9)
    assert sc.dp == 2
    assert st.total_bytes == pytest.approx(1e9 * (6 + 12 / 2))


def test_16bit_gradient_buffer_is_4_plus_12_over_d_bytes_and_an_fp32_copy_for_the_step():
    # grad_reduce_in_fp32 False: 2 B weights + 2 B main_grad beside the fp32 master and Adam m, v (12 B) over
    # d = dp = 2: 4 + 12/2 = 10 B. Each rank casts its shard of the gradients to fp32 for the step (4/d B,
    # Megatron's _copy_model_grads_to_main_grads: shard_model_grad.float()), freed by the next zero_grad
    # before the forward: a transient of the optimizer step, not a state.
    sc = load_scenario(DDP, [*SMALL, "parallel.pp=2", "parallel.tp=2", "parallel.distributed_optimizer=true",
                             "parallel.grad_reduce_in_fp32=false"])
    st = memory.model_states(sc, 1e9)
    assert st.grads_bytes == pytest.approx(2e9)
    assert st.total_bytes == pytest.approx(1e9 * (4 + 12 / 2))
    assert memory.buffers(sc, 1e9).optimizer_step == pytest.approx(1e9 * 4 / 2)
    # plain DDP keeps fp32 weights and Adam states; only the gradients halve: 4 + 2 + 8 B
    plain = load_scenario(DDP, [*SMALL, "parallel.grad_reduce_in_fp32=false"])
    assert memory.model_states(plain, 1e9).total_bytes == pytest.approx(1e9 * (4 + 2 + 8))


def test_megatron_without_the_distributed_optimizer_is_18_bytes_per_parameter():
    # Megatron-LM theoretical_memory_usage.py: num_bytes_per_parameter = 18 without the distributed optimizer
    # (2 B 16-bit weights, 4 B fp32 main_grad, 4 B fp32 master, 8 B Adam m, v); the main_grad buffer is the
    # reduction bucket, so no bucket copy either. Tensor parallelism runs only under Megatron.
    sc = load_scenario(DDP, [*SMALL, "parallel.pp=2", "parallel.tp=2"])
    assert memory.model_states(sc, 1e9).total_bytes == pytest.approx(18e9)
    assert memory.buffers(sc, 1e9).communication == 0


def test_fsdp_under_a_pipeline_keeps_the_stage_unsharded():
    # torchtitan PP + FSDP: the stage's parameters stay gathered and its gradients accumulate
    # unsharded; param_dtype and reduce_dtype unset → the bf16 training precision, 2 B each.
    sc = load_scenario(DDP, [*SMALL, "parallel.pp=2", "parallel.framework=fsdp"])
    psi = params.stage_local(sc.model, 1, 2, 0, 16)
    buf = memory.buffers(sc, psi, 16)
    assert buf.gathered_params == pytest.approx(2 * psi)
    assert buf.communication == pytest.approx(2 * psi)


def test_cp_counts_out_of_dp_so_small_batches_are_accepted():
    # 8 GPUs, cp = 2: dp = 8 / 2 = 4 ranks split the batch, so a global batch of 4 sequences is valid
    # (the schema once counted cp as data parallel and required 8).
    sc = load_scenario(DDP, ["training.global_batch_size=4", "training.seq_len=2048", "parallel.cp=2"])
    assert sc.dp == 4 and sc.grad_accum_steps == 1
