"""training.recompute_layers: full recomputation of some blocks only (simulator.workload.recompute)."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.errors import InputError
from simulator.interop import megatron, megatron_export, torchtitan
from simulator.workload import flops, memory

BASE = dict(seq_len=4096, micro_batch_size=2, global_batch_size=16)


def test_activations_mix_checkpointed_and_kept_blocks(new_scenario, shapes):
    # Llama 3 8B, s=4096, b=2, bf16, FlashAttention, no dropout (Korthikanti Sec. 4 generalised):
    # kept block = norm/residual inputs 4·2·sbh + Q,K,V,O 2·(2·4096 + 2·1024)/4096 sbh = 5 sbh
    #   + SwiGLU gate, up, act 2·3·14336/4096 sbh = 21 sbh + log-sum-exp 4·32·sb  = 34 sbh + 128 sb;
    # checkpointed block = its input 2 sbh. 8 of 32 checkpointed:
    sc = new_scenario(shapes["llama3_8b"], training={**BASE, "activation_checkpointing": "full", "recompute_layers": 8})
    sb = 4096 * 2
    sbh = sb * 4096
    act = memory.activations(sc)
    assert act.layers == 8 * 2 * sbh + 24 * (34 * sbh + 128 * sb)
    assert act.recompute_transient == 34 * sbh + 128 * sb  # the block being recomputed


def test_recompute_flops_scale_with_the_share_of_blocks(new_scenario, shapes):
    def extra(**training):
        f = flops.for_scenario(new_scenario(shapes["llama3_8b"], training={**BASE, **training}))
        return f.hardware_flops - f.model_flops

    everything = extra(activation_checkpointing="full")
    assert extra(activation_checkpointing="full", recompute_layers=8) == pytest.approx(everything * 8 / 32)
    assert extra(activation_checkpointing="full", recompute_layers=32) == pytest.approx(everything)


def test_step_time_is_linear_in_the_recomputed_blocks(new_scenario, shapes):
    # One GPU, no communication: each recomputed block adds one block forward.
    def step(**training):
        sc = new_scenario(shapes["llama3_8b"], gpus=1, training={**BASE, "global_batch_size": 2, **training},
                          parallel={"framework": "ddp"})
        return simulate(sc).step_time_s

    none, full = step(), step(activation_checkpointing="full")
    half = step(activation_checkpointing="full", recompute_layers=16)
    assert none < half < full
    assert half == pytest.approx((none + full) / 2, rel=0.01)


def test_pipeline_chunks_count_per_chunk(new_scenario, shapes):
    # pp 4: 8 blocks per stage; 3 per chunk recompute on every stage: 12 of 32 blocks
    sc = new_scenario(shapes["llama3_8b"], parallel={"pp": 4},
                      training={**BASE, "global_batch_size": 8, "activation_checkpointing": "full",
                                "recompute_layers": 3})
    from simulator.workload import recompute

    assert recompute.stage_counts(sc) == [3, 3, 3, 3]
    assert recompute.fraction(sc) == 12 / 32


@pytest.mark.parametrize(("training", "parallel", "needle"), [
    ({"recompute_layers": 4}, {}, "needs training.activation_checkpointing: full"),
    ({"activation_checkpointing": "full", "recompute_layers": 9}, {"pp": 4}, "exceeds the 8 blocks"),
])
def test_impossible_settings_name_the_field(new_scenario, shapes, training, parallel, needle):
    with pytest.raises(InputError, match="training.recompute_layers") as exc:
        new_scenario(shapes["llama3_8b"], training={**BASE, **training}, parallel=parallel)
    assert needle in str(exc.value)


def test_megatron_block_method_round_trips():
    shape = "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
    imported = megatron.import_args(shape + "--recompute-granularity full --recompute-method block --recompute-num-layers 4")
    assert imported.get("training.activation_checkpointing") == "full"
    assert imported.get("training.recompute_layers") == 4
    uniform = megatron.import_args(shape + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    assert uniform.get("training.recompute_layers") is None


def test_megatron_export_writes_the_block_method(new_scenario, shapes):
    sc = new_scenario(shapes["llama3_8b"], training={**BASE, "activation_checkpointing": "full", "recompute_layers": 5})
    text = megatron_export.export_args(sc).text
    assert "--recompute-method block" in text and "--recompute-num-layers 5" in text


def test_torchtitan_per_layer_option_checkpoints_every_kth_block():
    # torchtitan Llama 3 8B: 32 blocks; selective_ac_option "2" wraps blocks 2, 4, ..., 32: 16 of them
    imported = torchtitan.import_toml('[model]\nname = "llama3"\nflavor = "8B"\n'
                                      '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n')
    assert imported.get("training.activation_checkpointing") == "full"
    assert imported.get("training.recompute_layers") == 16
    every = torchtitan.import_toml('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "1"\n')
    assert every.get("training.activation_checkpointing") == "full"
    assert every.get("training.recompute_layers") is None
    # no option: torchtitan's default "2" (job_config.py), not Megatron's attention-core policy
    default = torchtitan.import_toml('[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\nmode = "selective"\n')
    assert (default.get("training.activation_checkpointing"), default.get("training.recompute_layers")) == ("full", 16)


def _llama_full(new_scenario, shapes, **kwargs):
    training = {**BASE, "activation_checkpointing": "full", **kwargs.pop("training", {})}
    return new_scenario(shapes["llama3_8b"], training=training, **kwargs)


def test_early_stop_skips_the_down_projection_of_each_recomputed_block(new_scenario, shapes):
    # PyTorch's non-reentrant checkpoint stops once the down projection packs its input: per block
    # the recompute leaves out 2·b·s·f·h = 2 · 2 · 4096 · 14336 · 4096 FLOPs (Llama 3 8B, b=2, s=4096)
    down = 2 * 2 * 4096 * 14336 * 4096

    def extra(sc):
        f = flops.for_scenario(sc)
        return f.hardware_flops - f.model_flops

    fsdp = _llama_full(new_scenario, shapes, parallel={"framework": "fsdp"})
    megatron = _llama_full(new_scenario, shapes, parallel={"framework": "ddp"})
    n_micro = fsdp.training.global_batch_size // fsdp.training.micro_batch_size
    assert extra(megatron) - extra(fsdp) == pytest.approx(32 * down * n_micro)
    off = _llama_full(new_scenario, shapes, parallel={"framework": "fsdp"},
                      training={"kernels": {"checkpoint_early_stop": False}})
    assert extra(off) == pytest.approx(extra(megatron))


def test_early_stop_recompute_ops_end_before_the_down_projection(new_scenario, shapes):
    from simulator.parallel.work import from_scenario

    work = from_scenario(_llama_full(new_scenario, shapes, parallel={"framework": "fsdp"}))
    names = [op.name.removeprefix("recompute.") for op in work.layer_recompute]
    assert "mlp_down" not in names and "mlp_up" in names and names[-1] == "mlp_swiglu"
    assert work.recompute_full


def test_early_stop_shortens_the_recomputed_step(new_scenario, shapes):
    def step(**kernels):
        sc = _llama_full(new_scenario, shapes, gpus=1, training={"global_batch_size": 2, "kernels": kernels},
                         parallel={"framework": "fsdp"})
        return simulate(sc).step_time_s

    assert step() < step(checkpoint_early_stop=False)
    # with tensor parallelism the block's collectives are re-run in full: no early stop
    from simulator.workload import recompute

    tp = _llama_full(new_scenario, shapes, parallel={"framework": "fsdp", "tp": 2})
    assert not recompute.early_stop(tp)
