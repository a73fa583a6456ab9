"""Rank placement, ``--show-placement``, bad layouts → exit 2 naming the field, layout enumeration."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.loader import load_scenario
from simulator.errors import InputError
from simulator.parallel.checks import check_layout, check_supported
from simulator.parallel.layouts import enumerate_layouts
from simulator.parallel.mesh import RankMesh
from simulator.parallel.placement import placement_lines

FIXTURE = Path(__file__).resolve().parent / "ddp-olmo-8xh100.yaml"
runner = CliRunner()


def test_mesh_order_tp_cp_dp_pp():
    mesh = RankMesh(tp=2, dp=2, pp=2, gpus_per_node=8, cp=2)
    # rank = t + 2·(c + 2·(d + 2·p))
    assert mesh.groups("tp")[:2] == [[0, 1], [2, 3]]
    assert mesh.groups("cp")[0] == [0, 2]
    # Gradients reduce over data x context parallel ranks (Megatron with_context_parallel=True).
    assert mesh.groups("dp")[0] == [0, 2, 4, 6] and mesh.size("dp") == 4 and mesh.dp == 2
    assert mesh.groups("pp")[0] == [0, 8]
    assert mesh.n_gpus == 16
    for kind in ("tp", "cp", "dp", "pp"):
        flat = sorted(x for g in mesh.groups(kind) for x in g)
        assert flat == list(range(16))  # every GPU in exactly one group of each kind


def test_placement_flags_tp_groups_across_nodes():
    inside = placement_lines(RankMesh(tp=8, dp=2, pp=2, gpus_per_node=8))
    assert not any("WARNING" in line for line in inside)
    assert "TP groups (4 of 8):" in inside
    assert "  [0, 1, 2, 3, 4, 5, 6, 7] (node 0)" in inside
    assert any(line.startswith("stage 1: GPUs 16-31") for line in inside)
    across = placement_lines(RankMesh(tp=16, dp=1, pp=1, gpus_per_node=8))
    assert any("WARNING" in line and "span nodes" in line for line in across)


def test_show_placement_cli():
    result = runner.invoke(app, ["run", str(FIXTURE), "--set", "parallel.tp=2", "--set", "parallel.pp=2",
                                 "--show-placement"])
    assert result.exit_code == 0, result.output
    assert "TP groups (4 of 2):" in result.output
    assert "stage 1: GPUs 4-7" in result.output


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["model=megatron-gpt-1.7b", "cluster.nodes=3", "parallel.tp=3"], "parallel.tp"),  # 3 ∤ 8 GPUs/node
        (["model=megatron-gpt-1.7b", "cluster.nodes=2", "parallel.tp=16"], "parallel.tp"),  # 16 ∤ 24 heads
        (["parallel.pp=64"], "parallel.pp"),  # more stages than 32 layers (schema)
        (["parallel.pp=4", "parallel.virtual_stages=3"], "parallel.virtual_stages"),  # 3 ∤ 8 layers per stage
        (["parallel.pp=2", "parallel.virtual_stages=2", "parallel.pipeline_schedule=1f1b"], "parallel.virtual_stages"),
        (["parallel.pp=4", "parallel.virtual_stages=2", "training.global_batch_size=4"], "parallel.virtual_stages"),
        (["parallel.cp=2", "training.seq_len=1022"], "parallel.cp"),  # 2·cp ∤ seq_len
        (["parallel.cp=2", "parallel.framework=deepspeed"], "parallel.cp"),  # Ulysses: not simulated
        (["parallel.distributed_optimizer=true", "parallel.framework=deepspeed"], "parallel.distributed_optimizer"),
        (["parallel.framework=deepspeed", "parallel.zero_stage=1", "parallel.pp=2", "parallel.virtual_stages=2"],
         "parallel.pipeline_schedule"),  # DeepSpeed pipelines are 1F1B only
    ],
)
def test_bad_layouts_exit_2_naming_the_field(sets, field):
    args = ["run", str(FIXTURE)]
    for s in sets:
        args += ["--set", s]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert field in result.output
    assert "Traceback" not in result.output


def test_check_supported_raises_input_error_for_cp_with_deepspeed():
    sc = load_scenario(FIXTURE, ["parallel.cp=2", "parallel.framework=deepspeed"])
    check_layout(sc)  # a valid layout...
    with pytest.raises(InputError, match="not simulated"):
        check_supported(sc)  # ...that the step simulation refuses (dtsim validate lists it as skipped)


def test_virtual_stages_imply_interleaved():
    sc = load_scenario(FIXTURE, ["parallel.pp=2", "parallel.virtual_stages=2"])
    assert sc.parallel.pipeline_schedule == "interleaved"


def test_enumerate_layouts_small_case_by_hand():
    # 2 GPUs, global batch 2: (tp, cp, pp) ∈ {(1,1,1): dp 2, b 1; (1,1,2): dp 1, b 1|2; (2,1,1): dp 1, b 1|2;
    # (1,2,1): dp 1, b 1|2 (seq 8192 divisible by 2·cp = 4, 4,096 tokens per CP rank = MIN_CP_TOKENS)}
    # = 7 1F1B layouts, plus interleaved for (1,1,2), b=1 (G = 2 divisible by pp): v ∈ {2,4,8} | 16 → 10.
    sc = load_scenario(FIXTURE, ["cluster.gpus=2", "training.global_batch_size=2", "training.seq_len=8192"])
    layouts = enumerate_layouts(sc)
    assert len(layouts) == 10
    assert {"parallel.tp": 1, "parallel.pp": 2, "training.micro_batch_size": 1, "parallel.cp": 1,
            "parallel.pipeline_schedule": "interleaved", "parallel.virtual_stages": 4} in layouts
    assert {"parallel.tp": 1, "parallel.pp": 1, "training.micro_batch_size": 2, "parallel.cp": 2,
            "parallel.pipeline_schedule": "1f1b", "parallel.virtual_stages": 1} in layouts


def test_enumerated_layouts_are_all_valid():
    sc = load_scenario(FIXTURE, [])
    layouts = enumerate_layouts(sc)
    assert len(layouts) > 20
    assert len({tuple(sorted(d.items())) for d in layouts}) == len(layouts)
    for lay in layouts:
        variant = load_scenario(FIXTURE, [f"{k}={v}" for k, v in lay.items()])
        check_supported(variant)
        assert variant.dp * lay["parallel.tp"] * lay["parallel.cp"] * lay["parallel.pp"] == 8


def test_enumerate_layouts_respects_deepspeed_zero3():
    sc = load_scenario(FIXTURE, ["parallel.framework=deepspeed", "parallel.zero_stage=3"])
    layouts = enumerate_layouts(sc)
    assert all(lay["parallel.pp"] == 1 for lay in layouts)
    assert all("parallel.cp" not in lay for lay in layouts)  # DeepSpeed's Ulysses is not simulated


def test_enumerate_layouts_includes_context_parallel_degrees():
    # 8 GPUs, seq 32,768: cp ∈ {1, 2, 4, 8} all divide 8, 2·cp divides the sequence and each CP rank
    # keeps >= 4,096 tokens (32,768 / 8); with tp = 2, cp ≤ 4.
    sc = load_scenario(FIXTURE, ["training.seq_len=32768"])
    cps = {(lay["parallel.tp"], lay["parallel.cp"]) for lay in enumerate_layouts(sc)}
    assert {(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (8, 1)} <= cps and (2, 8) not in cps
    # At 16,384 tokens cp = 8 would leave 2,048 per rank, below MIN_CP_TOKENS: not enumerated.
    short = load_scenario(FIXTURE, ["training.seq_len=16384"])
    assert max(lay["parallel.cp"] for lay in enumerate_layouts(short)) == 4
    # Without FlashAttention ring attention is not simulated: cp stays 1.
    plain = load_scenario(FIXTURE, ["training.kernels.flash_attention=false"])
    assert {lay.get("parallel.cp", 1) for lay in enumerate_layouts(plain)} == {1}


def test_tp_across_nodes_runs_with_a_warning():
    from simulator.api import simulate

    report = simulate(load_scenario(FIXTURE, ["cluster.nodes=2", "parallel.tp=16", "training.global_batch_size=16"]))
    assert any("span nodes" in w for w in report.warnings)


def test_layouts_auto_keeps_tp_up_to_72_inside_an_nvl72_rack():
    # GPT-3 175B: 96 heads (MHA), 96 layers. On an NVL72 rack the NVLink domain is 72 GPUs, so tp may be
    # any common divisor of 72 and 96 (1, 2, 3, 4, 6, 8, 12, 24); on 8-GPU DGX nodes at most 8.
    over = ["model=gpt3-175b", "training.global_batch_size=144", "parallel.framework=ddp"]
    rack = load_scenario(FIXTURE, over + ["cluster.topology=gb200-nvl72", "cluster.nodes=2"])
    tps = {lay["parallel.tp"] for lay in enumerate_layouts(rack, micro_batch_sizes=(1,))}
    assert tps == {1, 2, 3, 4, 6, 8, 12, 24}
    dgx = load_scenario(FIXTURE, over + ["cluster.topology=dgx-b200", "cluster.nodes=18"])
    assert max(lay["parallel.tp"] for lay in enumerate_layouts(dgx, micro_batch_sizes=(1,))) == 8
