"""Megatron-Core ``pipeline_model_parallel_layout``: parsing by hand, refusals naming the key, and the
DeepSeek-V3 layout Megatron-Bridge runs on pp = 8 × v = 2 (61 blocks, which no equal or first/last
split can place on 16 virtual stages)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from simulator.api import simulate
from simulator.cli import app
from simulator.config.loader import load_scenario
from simulator.errors import InputError
from simulator.parallel.checks import check_layout
from simulator.parallel.pipeline_split import (
    gpu_stage_chunks,
    layout_stages,
    split_error,
    virtual_stage_layers,
)

FIXTURE = Path(__file__).resolve().parent / "ddp-olmo-8xh100.yaml"
DSV3 = "Etttt|(tttt|)*14tmL"  # Megatron-Bridge recipes/deepseek/deepseek_v3.py, layout_map[(8, 2)]


def _par(layout, **kw):
    base = dict(decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
                account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False,
                pipeline_layout=layout)
    return SimpleNamespace(**{**base, **kw})


def test_parse_unrolls_like_megatron():
    # Megatron's own docstring example: "Ettt|(tt|)*29,m|L" → [E,t,t,t] + [t,t] × 29 + [m] + [L].
    stages = layout_stages("Ettt|(tt|)*29,m|L")
    assert stages == ["Ettt", *["tt"] * 29, "m", "L"]
    assert layout_stages("Et*3|t*2L") == ["Ettt", "ttL"]


def test_deepseek_v3_layout_by_hand():
    par = _par(DSV3)
    # 16 virtual stages: the first holds E + 4 blocks, 14 hold 4, the last 1 block + MTP + loss.
    layers = virtual_stage_layers(61, 8, 2, par)
    assert layers == [4] * 15 + [1] and sum(layers) == 61
    # GPU stage s holds virtual stages s and s + 8: 4 + 4 = 8 on stages 0..6, 4 + 1 = 5 on stage 7.
    assert [sum(c) for c in gpu_stage_chunks(61, 8, 2, par)] == [8, 8, 8, 8, 8, 8, 8, 5]
    assert split_error(61, 8, 2, par) is None
    # The same 61 blocks cannot go on 16 chunks by first/last counts: each must divide by v = 2.
    assert "not divisible" in split_error(61, 8, 2, SimpleNamespace(
        **{**vars(_par(None)), "decoder_first_pipeline_num_layers": 5, "decoder_last_pipeline_num_layers": 2}))


@pytest.mark.parametrize(("layout", "needle"), [
    ("Ettttt|(tttt|)*14tmL", "62 transformer blocks"),
    ("tEttt|(tttt|)*14tmL", "exactly one E"),
    ("Etttt|(tttt|)*14tLm", "exactly one L"),
    ("Etttt|(tttt|)*13tttmt|tL", "after every transformer block"),
    ("Etttt|(tttt|)*13tttmL", "15 stages"),
])
def test_bad_layouts_say_why(layout, needle):
    assert needle in split_error(61, 8, 2, _par(layout))


def test_layout_refuses_other_uneven_options():
    assert "replaces" in split_error(61, 8, 2, _par(DSV3, decoder_first_pipeline_num_layers=4))


def test_layout_places_the_simulated_work():
    # 32 blocks on pp = 2 × v = 2: virtual stages 10, 6, 6, 10 → GPU stage 0: 10 + 6, stage 1: 6 + 10.
    base = ["training.global_batch_size=16", "training.seq_len=512", "parallel.pp=2", "parallel.virtual_stages=2",
            "model.n_layers=32"]
    sc = load_scenario(FIXTURE, [*base, "parallel.pipeline_layout=Et*10|t*6|t*6|t*10L"])
    check_layout(sc)
    r = simulate(sc)
    assert r.layout["stage_layers"] == [16, 16]
    sc = load_scenario(FIXTURE, [*base, "parallel.pipeline_layout=Et*4|t*12|t*4|t*12L"])
    r = simulate(sc)
    assert r.layout["stage_layers"] == [8, 24]
    assert [row["layers"] for row in r.memory["stages"]] == [8, 24]
    with pytest.raises(InputError, match="pipeline_layout"):
        check_layout(load_scenario(FIXTURE, [*base, "parallel.pipeline_layout=Et*4|t*12|t*4|t*11L"]))


def test_stage_count_must_match_virtual_stages():
    with pytest.raises(InputError, match="4 stages but pp x virtual_stages = 2 x 1"):
        load_scenario(FIXTURE, ["parallel.pp=2", "parallel.pipeline_layout=Et*8|t*8|t*8|t*8L"])


def test_cli_bad_layout_is_one_error_line():
    res = CliRunner().invoke(app, ["run", "scenarios/deepseek-v3-ep32-pp8-256xh100.yaml", "--set",
                                   "parallel.pipeline_layout=Etttx|t"])
    assert res.exit_code == 2
    assert "error:" in res.output and "pipeline_layout" in res.output and "'x'" in res.output
    assert "Traceback" not in res.output


def test_megatron_export_and_import_carry_the_layout():
    from simulator.config.loader import load_raw
    from simulator.interop.pipeline import export_scenario, import_scenario

    path = Path(__file__).resolve().parents[2] / "scenarios" / "deepseek-v3-ep32-pp8-256xh100.yaml"
    sc = load_scenario(path)
    text = export_scenario(sc, "megatron").text
    assert f"--pipeline-model-parallel-layout '{DSV3}'" in text
    back, _, _ = import_scenario("megatron", text=text, base_raw={"cluster": load_raw(path)["cluster"]},
                                 base_dir=path.parent)
    assert back.parallel.pipeline_layout == DSV3 and back.parallel.virtual_stages == 2
