"""Megatron-Core's uneven pipeline placements: block counts by hand, refusals with the arithmetic,
and the Llama 3.1 405B layout NeMo runs (126 layers on pp = 8 × v = 8)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from simulator.api import simulate
from simulator.config.loader import load_scenario
from simulator.errors import InputError
from simulator.parallel.checks import check_layout
from simulator.parallel.pipeline_split import gpu_stage_chunks, split_error, virtual_stage_layers

FIXTURE = Path(__file__).resolve().parent / "ddp-olmo-8xh100.yaml"


def _par(**kw):
    base = dict(decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
                account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False)
    return SimpleNamespace(**{**base, **kw})


def test_embedding_and_loss_slots_for_llama_405b():
    # 126 + 2 slots = 128 over 8 × 8 = 64 virtual stages: 2 each; the first virtual stage builds one
    # block fewer (embedding), the last one fewer (loss).
    par = _par(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    layers = virtual_stage_layers(126, 8, 8, par)
    assert len(layers) == 64 and sum(layers) == 126
    assert layers[0] == 1 and layers[-1] == 1 and set(layers[1:-1]) == {2}
    # GPU stage 0 holds virtual stages 0, 8, ..., 56: 1 + 7 × 2 = 15 blocks; stage 7 likewise 15.
    assert [sum(c) for c in gpu_stage_chunks(126, 8, 8, par)] == [15, 16, 16, 16, 16, 16, 16, 15]
    assert split_error(126, 8, 8, par) is None


def test_one_slot_per_virtual_stage_leaves_embedding_and_loss_alone():
    # 30 blocks + 2 slots = 32 over 32 stages: one slot each, so the first stage holds only the
    # embedding and the last only the loss (Megatron-Bridge's 405B row on 16 x 8 = 128 for 126 + 2).
    par = _par(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    assert virtual_stage_layers(30, 32, 1, par) == [0] + [1] * 30 + [0]
    assert split_error(30, 32, 1, par) is None
    # and the step plays: 6 blocks + 2 slots on pp = 4 x v = 2 -> virtual stages 0,1,1,1 | 1,1,1,0;
    # GPU stage s holds chunks s and s + 4: 0+1, 1+1, 1+1, 1+0 blocks
    sc = load_scenario(FIXTURE, ["training.global_batch_size=16", "training.seq_len=512", "parallel.pp=4",
                                 "parallel.virtual_stages=2", "model.n_layers=6",
                                 "parallel.account_for_embedding_in_pipeline_split=true",
                                 "parallel.account_for_loss_in_pipeline_split=true"])
    check_layout(sc)
    r = simulate(sc)
    assert r.layout["stage_layers"] == [1, 2, 2, 1] and r.step_time_s > 0


def test_first_and_last_stage_layers():
    par = _par(decoder_first_pipeline_num_layers=14, decoder_last_pipeline_num_layers=16)
    # 126 − 14 − 16 = 96 blocks over the 6 middle stages: 16 each.
    assert [sum(c) for c in gpu_stage_chunks(126, 8, 1, par)] == [14, 16, 16, 16, 16, 16, 16, 16]
    # With v = 2 each GPU stage's blocks split over its two chunks: 7 + 7 on stage 0.
    assert virtual_stage_layers(126, 8, 2, par)[0] == 7 and virtual_stage_layers(126, 8, 2, par)[8] == 7


@pytest.mark.parametrize(("n", "pp", "v", "kw", "needle"), [
    (126, 8, 8, dict(account_for_embedding_in_pipeline_split=True), "127"),
    (126, 8, 1, dict(decoder_first_pipeline_num_layers=15), "111"),
    (126, 8, 4, dict(decoder_first_pipeline_num_layers=14, decoder_last_pipeline_num_layers=16), "not divisible"),
    (126, 8, 1, dict(decoder_first_pipeline_num_layers=14, account_for_loss_in_pipeline_split=True), "combined"),
])
def test_impossible_placements_say_why(n, pp, v, kw, needle):
    assert needle in split_error(n, pp, v, _par(**kw))


def test_uneven_interleaved_layout_is_accepted_and_simulated():
    # 30 blocks do not divide over pp = 2 × v = 4 = 8 virtual stages; 30 + 2 slots = 32 do (4 each).
    base = ["training.global_batch_size=16", "training.seq_len=512", "parallel.pp=2", "parallel.virtual_stages=4",
            "model.n_layers=30"]
    with pytest.raises(InputError, match="account_for_embedding_in_pipeline_split"):
        check_layout(load_scenario(FIXTURE, base))
    sc = load_scenario(FIXTURE, [*base, "parallel.account_for_embedding_in_pipeline_split=true",
                                 "parallel.account_for_loss_in_pipeline_split=true"])
    check_layout(sc)
    r = simulate(sc)
    # Virtual stages 3,4,4,4 | 4,4,4,3 → GPU stage 0: chunks 0,2,4,6 = 3+4+4+4; stage 1: 4+4+4+3.
    assert r.layout["stage_layers"] == [15, 15]
    assert r.memory["stages"][0]["layers"] == 15


def test_first_last_layers_shift_the_simulated_work():
    base = ["training.global_batch_size=16", "training.seq_len=512", "parallel.pp=2"]
    sc = load_scenario(FIXTURE, [*base, "parallel.decoder_first_pipeline_num_layers=12",
                                 "parallel.decoder_last_pipeline_num_layers=20"])
    r = simulate(sc)
    assert r.layout["stage_layers"] == [12, 20]
    assert [row["layers"] for row in r.memory["stages"]] == [12, 20]
