"""Muon (``training.optimizer: muon``): Newton-Schulz FLOPs, the matrices it orthogonalises, its states and its
layer-wise distributed gradient all-reduce, against hand arithmetic and the configs they come from."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.catalog import get_model
from simulator.config.loader import scenario_from_dict
from simulator.workload import memory, muon, params
from simulator.workload.optimizer_ops import optimizer_ops
from tests.parallel.fakes import work
from tests.parallel.helpers import ctx, volume


def test_newton_schulz_flops_by_hand():
    # Kimi K2's fused expert fc1 (2 x 2,048 rows x 7,168): X is 4,096 x 7,168 after the transpose to the short
    # side; per iteration X.Xt 2*4096^2*7168, A.A 2*4096^3, B.X 2*4096^2*7168
    per_step = 2 * 4096**2 * 7168 + 2 * 4096**3 + 2 * 4096**2 * 7168
    assert per_step == 618_475_290_624
    assert muon.ns_flops(4096, 7168, 5) == muon.ns_flops(7168, 4096, 5) == 5 * 618_475_290_624


def test_kimi_k2_matrices_from_its_config():
    """config.json: hidden 7,168, 64 heads, q_lora_rank 1,536, kv_lora_rank 512, qk nope / rope 128 / 64, v 128,
    384 routed experts of 2,048 and one shared expert, SwiGLU (gate and up fused into fc1)."""
    m = get_model("kimi-k2")
    dense, experts = muon.block_matrices(m, True)
    assert experts == [(2 * 2048, 7168, 1), (7168, 2048, 1)]
    assert dense == [(1536, 7168, 1), (64 * 192, 1536, 1), (512 + 64, 7168, 1), (64 * 256, 512, 1),
                     (7168, 64 * 128, 1), (384, 7168, 1), (2 * 2048, 7168, 1), (7168, 2048, 1)]
    # the first block is dense: its MLP of 18,432, and no experts
    dense0, none = muon.block_matrices(m, False)
    assert dense0[-2:] == [(2 * 18432, 7168, 1), (7168, 18432, 1)] and none == []


def test_tensor_parallel_shards_are_orthogonalised_blockwise():
    # Llama 3 8B at TP 2: fused QKV (4,096 + 2 x 1,024) / 2 rows, output 4,096 x 2,048, fc1 2 x 14,336 / 2, fc2 4,096 x 7,168
    m = get_model("llama-3-8b")
    dense, _ = muon.block_matrices(m, False, tp=2)
    assert dense == [(3072, 4096, 1), (4096, 2048, 1), (14336, 4096, 1), (4096, 7168, 1)]
    assert sum(r * c for r, c, _ in dense) == pytest.approx(params.layer(m).sharded / 2)


def test_optimizer_ops_split_adam_and_muon():
    m = get_model("llama-3-8b")
    dense, experts = muon.costs(m, 5)
    assert experts is None
    flops = sum(muon.ns_flops(r, c, 5) for r, c, _ in muon.block_matrices(m, False)[0])
    assert dense.flops_per_param == pytest.approx(flops / params.layer(m).sharded)
    ops = {o.name: o for o in optimizer_ops(1e9, True, muon=(dense, experts, 5), adam_params=2e8)}
    assert ops["muon_newton_schulz"].flops == pytest.approx(8e8 * dense.flops_per_param)
    assert ops["muon_update"].bytes == pytest.approx(8e8 * 82)
    assert ops["adam"].bytes == pytest.approx(2e8 * 30)  # fused Adam's 30 B per parameter


def _llama(optimizer: str, **par):
    return scenario_from_dict({
        "name": "m", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64, "optimizer": optimizer},
        "parallel": {"framework": "ddp", "distributed_optimizer": True, **par}})


def test_muon_keeps_one_fp32_state_fewer_than_adam():
    """Adam's master, m and v (12 B) against Muon's master and momentum (8 B) on the blocks; the embedding and
    output layer keep Adam's, all sharded over the 8 data-parallel ranks."""
    adam, mu = (memory.model_states(_llama(o, grad_reduce_in_fp32=True)) for o in ("adam", "muon"))
    sc = _llama("adam")
    psi = params.local(sc.model, 1, 1)
    outside = params.outside_local(sc.model, 1, 1)
    assert adam.optimizer_bytes - mu.optimizer_bytes == pytest.approx(4 * (psi - outside) / 8)
    assert (adam.params_bytes, adam.grads_bytes) == (mu.params_bytes, mu.grads_bytes)


def test_layer_wise_muon_all_reduces_the_gradients():
    # Megatron's distributed optimizer reduce-scatters phi*Psi of fp32 gradients; Muon's layer-wise one
    # all-reduces them (2 phi Psi), each rank stepping whole matrices; both gather the bf16 weights back
    n, g, psi = 4, 3, 4e6
    w = work(n_layers=4, layer_params=1e6)
    phi = (n - 1) / n
    rs = volume(ctx(n, g, w=w, framework="ddp", distributed_optimizer=True))
    ar = volume(ctx(n, g, w=replace(w, grads_all_reduced=True), framework="ddp", distributed_optimizer=True))
    assert rs["grad_reduce"] == pytest.approx(phi * psi * 4)
    assert ar["grad_reduce"] == pytest.approx(2 * phi * psi * 4)
    assert ar["post_step_gather"] == rs["post_step_gather"] == pytest.approx(phi * psi * 2)


def test_muon_outside_megatron_is_refused():
    with pytest.raises(ValueError, match="training.optimizer muon is modelled as Megatron-Core's Muon"):
        _llama("muon", framework="fsdp", distributed_optimizer=False)


def test_muon_adds_its_newton_schulz_time_to_the_step():
    from simulator.api import simulate

    adam, mu = (simulate(_llama(o)) for o in ("adam", "muon"))
    assert mu.breakdown["optimizer_s"] > adam.breakdown["optimizer_s"]
    assert mu.step_time_s > adam.step_time_s


def test_an_interleaved_stage_steps_its_experts_once():
    """A GPU stage of an interleaved pipeline runs one optimizer task per model chunk; each steps its own MoE
    blocks' experts (``MoEWork.optimizer_params``), so two chunks of 12 blocks step what one stage of 24 does
    (until 6 December 2026 every chunk stepped the whole stage's experts)."""
    from simulator.api import simulate

    def opt(vp: int) -> float:
        sc = scenario_from_dict({
            "name": "q", "model": "qwen3-30b-a3b", "cluster": {"topology": "dgx-h100", "nodes": 1},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64},
            "parallel": {"framework": "ddp", "distributed_optimizer": True, "pp": 2, "ep": 4,
                         **({"pipeline_schedule": "interleaved", "virtual_stages": vp} if vp > 1 else {})}})
        return simulate(sc).breakdown["optimizer_s"]

    assert opt(2) == pytest.approx(opt(1), rel=0.02)


def test_muon_state_bytes_by_hand():
    """Without the distributed optimizer nothing is sharded: a block-only stage keeps 8 B of Muon state per
    parameter, an all-embedding one Adam's 12; a 16-bit gradient buffer adds the step's fp32 copy (4 B), a
    transient of the optimizer step."""
    psi = 1e9
    for fp32, cast in ((True, 0), (False, 4)):
        sc = _llama("muon", distributed_optimizer=False, grad_reduce_in_fp32=fp32)
        blocks, embed = memory.model_states(sc, psi, 0.0), memory.model_states(sc, psi, psi)
        assert blocks.optimizer_bytes == pytest.approx(8 * psi)
        assert embed.optimizer_bytes == pytest.approx(12 * psi)
        assert blocks.params_bytes == 2 * psi and blocks.grads_bytes == (4 if fp32 else 2) * psi
        assert memory.buffers(sc, psi).optimizer_step == pytest.approx(cast * psi)


def test_the_mtp_projection_is_muons_not_adams():
    """The MTP module's eh_proj (2h -> h) sits in the output stage's parameters beside the output layer; Muon
    steps it (a weight matrix), so the Adam share the step gets excludes it: 2 x 7,168^2 + 2 x 7,168 for
    DeepSeek-V3's one MTP module (eh_proj and its two norms)."""
    from simulator.parallel.work import from_scenario

    sc = scenario_from_dict({
        "name": "d", "model": "deepseek-v3", "cluster": {"topology": "dgx-h100", "nodes": 32},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 1024, "optimizer": "muon"},
        "parallel": {"framework": "ddp", "distributed_optimizer": True, "pp": 8, "ep": 32}},
        overrides=["model.mtp_layers=1"])
    assert from_scenario(sc).head_mtp_params == 2 * 7168**2 + 2 * 7168 == 102_774_784
