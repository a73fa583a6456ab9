"""Host (CPU) time of eager MoE blocks, CUDA-graph scopes and the Grace host (``simulator.workload.moe_host``,
``simulator.workload.host``, ``HostConfig.dispatch_scale``). Expected values are hand arithmetic on the
measured fractions of ``benchmarks/host_dispatch_moe.py`` (module tables) and the reference block's
493 µs forward and 573 µs backward (``benchmarks/host_dispatch.py``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.catalog import get_gpu
from simulator.config.loader import scenario_from_dict
from simulator.config.topology import load_topology
from simulator.errors import InputError
from simulator.hardware import kernels
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.parallel import work as pwork
from simulator.workload import host, moe_host

H100 = get_gpu("h100-sxm")
MODEL = RooflineComputeModel(H100, "bf16", for_gpu(H100), launch=kernels.EAGER)  # host_dispatch_scale 1
FWD, BWD = 493e-6, 573e-6  # the megatron-flash reference block


def _mixtral(ep=2, precision="bf16", graphs=(), compile_=False, capacity=None, linear="megatron", recipe="delayed"):
    # Megatron-LM's own linears by default: the rebuilt layer's figures (Transformer Engine's mean Megatron-Core's
    # layer, whose code outside the experts costs host.MCORE_HOST["moe"] times as much)
    kern = {"cuda_graphs": list(graphs), "compile": compile_, "linear": linear, "fp8_recipe": recipe}
    sets = ["model.moe.imbalance=1.0"] + ([f"model.moe.capacity_factor={capacity}"] if capacity else [])
    raw = {"name": "t", "model": "mixtral-8x7b", "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": precision,
                        "kernels": kern},
           "parallel": {"framework": "ddp", "distributed_optimizer": True, "ep": ep}}
    return pwork.from_scenario(scenario_from_dict(raw, overrides=sets)).moe


def _h(ops) -> float:
    return MODEL.host_time(tuple(op for op in ops if not op.name.startswith("recompute.")))


def test_an_moe_block_forward_costs_its_code_spread_by_work():
    # Mixtral 8x7B at EP 2: 4 local experts. Attention half 0.464, router and dispatch 0.759 + 0.0055 x 4,
    # experts 0.357 + 0.0397 x 4, combine 0.161 + 0.0015 x 4, all x 493 µs
    mw = _mixtral()
    total = (0.464 + 0.781 + 0.5158 + 0.167) * FWD
    assert _fwd(mw) == pytest.approx(total)
    # spread by work (flops + 200 x bytes): every op carries the same host seconds per unit of work
    ops = mw.pre + mw.experts + mw.post
    rates = {op.host_s / (op.flops + 200.0 * op.bytes) for op in ops}
    assert max(rates) == pytest.approx(min(rates))


def test_megatron_core_code_outside_the_experts_costs_its_measured_factor():
    # benchmarks/host_dispatch_mcore.py: Megatron-Core's MoE layer outside its experts took 1.76x the rebuild's
    # forward host time and 1.99x its backward (medians of three runs), and benchmarks/host_dispatch_te.py: with
    # Transformer Engine's modules 1.23x / 1.24x of that; TEGroupedMLP adds 0.296 + 0.0257 x 4 local experts
    # = 0.3988 of the reference block forward and 0.188 + 0.0292 x 4 = 0.3048 backward to the experts' piece
    mw = _mixtral(linear="te")
    assert _fwd(mw) == pytest.approx(((0.464 + 0.781 + 0.167) * 1.76 * 1.23 + 0.5158 + 0.3988) * FWD)
    total = ((0.376 + 0.1806 + 0.0398) * 1.99 * 1.24 + 0.5278 + 0.3048) * BWD + 13 * 4.5e-6
    assert _h(mw.bwd_pre) + _h(mw.bwd_experts) + _h(mw.bwd_post) == pytest.approx(total)


def test_fp8_under_transformer_engine_costs_its_measured_quantizer_bookkeeping():
    # benchmarks/host_dispatch_te.py under TE's current-scaling recipe: the MoE layer outside its experts took
    # 1.16x / 1.19x its BF16 host time, and TEGroupedMLP adds 0.388 + 0.1470 e / 0.152 + 0.1098 e of the reference
    # block over its BF16 self (medians of three runs); 4 local experts: 0.976 forward and 0.5912 backward
    mw = _mixtral(linear="te", precision="fp8", recipe="current")
    assert _fwd(mw) == pytest.approx(((0.464 + 0.781 + 0.167) * 1.76 * 1.23 * 1.16 + 0.5158 + 0.3988 + 0.976) * FWD)
    total = ((0.376 + 0.1806 + 0.0398) * 1.99 * 1.24 * 1.19 + 0.5278 + 0.3048 + 0.5912) * BWD + 13 * 4.5e-6
    assert _h(mw.bwd_pre) + _h(mw.bwd_experts) + _h(mw.bwd_post) == pytest.approx(total)


def test_the_backward_spreads_the_block_host_time_and_adds_the_gradient_hooks():
    # backward: 0.376 + (0.167 + 0.0034 x 4) + (0.289 + 0.0597 x 4) + (0.037 + 0.0007 x 4) of 573 µs, plus
    # Megatron DDP's 4.5 µs hook on each of 13 parameter tensors (QKV, output, 2 RMSNorms, router,
    # 4 experts x fc1 and fc2)
    mw = _mixtral()
    total = (0.376 + 0.1806 + 0.5278 + 0.0398) * BWD + 13 * 4.5e-6
    assert _h(mw.bwd_pre) + _h(mw.bwd_experts) + _h(mw.bwd_post) == pytest.approx(total)


def _fwd(mw) -> float:
    return _h(mw.pre) + _h(mw.experts) + _h(mw.post)


def test_fp8_adds_each_experts_quantize_and_more_experts_cost_more():
    bf16, fp8 = _mixtral(), _mixtral(precision="fp8")
    # 4 local experts x 0.0140 of the forward reference block more
    assert _fwd(fp8) - _fwd(bf16) == pytest.approx(4 * 0.0140 * FWD)
    one = _mixtral(ep=8)  # 1 local expert: 3 fewer x (0.0055 + 0.0397 + 0.0015)
    assert _fwd(bf16) - _fwd(one) == pytest.approx(3 * 0.0467 * FWD)


def test_cuda_graph_scopes_take_their_share_off_the_host():
    # attn removes the attention half; moe_router 0.53 and moe_preprocess 0.14 of the forward pre's
    # router and dispatch time (0.759 + 0.022); the backward loses the attention half and 0.53 of its pre
    g = _mixtral(graphs=("attn", "moe_router", "moe_preprocess"))
    assert _fwd(g) == pytest.approx((0.781 * (1 - 0.53 - 0.14) + 0.5158 + 0.167) * FWD)
    total = (0.1806 * (1 - 0.53) + 0.5278 + 0.0398) * BWD + 13 * 4.5e-6
    assert _h(g.bwd_pre) + _h(g.bwd_experts) + _h(g.bwd_post) == pytest.approx(total)
    # a full-iteration graph leaves only the gradient hooks, which run outside it
    full = _mixtral(graphs=("full_iteration",))
    assert _fwd(full) == 0.0
    assert _h(full.bwd_pre) + _h(full.bwd_experts) + _h(full.bwd_post) == pytest.approx(13 * 4.5e-6)


def test_a_whole_moe_graph_takes_the_moe_slot_off_the_host():
    # token drop with padding (a capacity factor): Megatron-Core's moe scope captures the router, the
    # dispatcher, the experts and the combine; the attention half stays, 0.464 of the forward and 0.376 of
    # the backward reference block, and the backward keeps Megatron DDP's 13 hooks of 4.5 µs
    g = _mixtral(graphs=("moe",), capacity=1.0)
    assert _fwd(g) == pytest.approx(0.464 * FWD)
    assert _h(g.bwd_pre) + _h(g.bwd_experts) + _h(g.bwd_post) == pytest.approx(0.376 * BWD + 13 * 4.5e-6)
    # with the attention graphed too, the block's whole forward replays as graphs
    assert _fwd(_mixtral(graphs=("attn", "moe"), capacity=1.0)) == 0.0


def test_a_whole_moe_graph_needs_static_shapes():
    # dropless routing changes the experts' token counts every step: Megatron-Core refuses the moe scope
    with pytest.raises(InputError) as err:
        _mixtral(graphs=("moe",))
    assert "training.kernels.cuda_graphs" in str(err.value) and "capacity_factor" in str(err.value)


def test_compiled_moe_blocks_keep_the_per_kernel_dispatch():
    mw = _mixtral(compile_=True)
    assert all(op.host_s is None for op in mw.pre + mw.experts + mw.post)


def _dense(graphs=()):
    raw = {"name": "d", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                        "kernels": {"cuda_graphs": list(graphs)}},
           "parallel": {"framework": "fsdp"}}
    work = pwork.from_scenario(scenario_from_dict(raw))
    # the block's own host time, without FSDP's unit hooks (tests/workload/test_host.py)
    bare = [tuple(op for op in ops if not op.name.startswith("fsdp_unit")) for ops in (work.layer_fwd, work.layer_bwd)]
    return replace(work, layer_fwd=bare[0], layer_bwd=bare[1])


def test_dense_blocks_lose_their_captured_halves():
    # Llama 3 in Megatron style (fused norms, flash): 493 / 573 µs; attn takes 0.464 / 0.376 of them off,
    # attn + mlp all of it
    assert MODEL.host_time(_dense().layer_fwd) == pytest.approx(FWD)
    assert MODEL.host_time(_dense(("attn",)).layer_fwd) == pytest.approx((1 - 0.464) * FWD)
    assert MODEL.host_time(_dense(("attn",)).layer_bwd) == pytest.approx((1 - 0.376) * BWD)
    assert MODEL.host_time(_dense(("attn", "mlp")).layer_fwd) == 0.0
    assert MODEL.host_time(_dense(("full_iteration",)).layer_bwd) == 0.0


def test_grace_hosts_dispatch_at_their_measured_speed():
    # TransformerEngine issue #2053: torch.nn.Linear's forward takes 37.08 µs of CPU on GB200 and 13.48 µs
    # on a DGX H100 (Xeon 8480C): 2.75x; x86 DGX nodes are the reference
    for name in ("gb200-nvl72", "gb300-nvl72"):
        assert load_topology(name).host.dispatch_scale == pytest.approx(37.08 / 13.48, rel=2e-3)
    for name in ("dgx-h100", "dgx-b200"):
        assert load_topology(name).host.dispatch_scale == 1.0
    grace = RooflineComputeModel(H100, "bf16", for_gpu(H100), launch=kernels.EAGER, host_scale=2.75)
    ops = _dense().layer_fwd
    assert grace.host_time(ops) == pytest.approx(2.75 * FWD)


def test_transformer_engines_share_runs_at_its_own_grace_factor():
    # TransformerEngine issue #2053 on GB200: te.Linear 99.66 µs, torch.nn.Linear 37.08 µs per forward, whose
    # difference is 1.88x what benchmarks/host_dispatch_te.py prices it at on x86 (median of six runs); x86 hosts
    # set no separate factor
    for name in ("gb200-nvl72", "gb300-nvl72"):
        assert load_topology(name).host.te_dispatch_scale == 1.88
        assert host.te_share(load_topology(name).host) == pytest.approx(1.88 / (37.08 / 13.48), rel=2e-3)
    assert load_topology("dgx-b200").host.te_dispatch_scale is None
    assert host.te_share(load_topology("dgx-b200").host) == 1.0
    # TEGroupedMLP's additions (forward, current scaling, 4 local experts): TE_EXPERTS 0.296 + 0.0257 x 4 and
    # TE_FP8_EXPERTS 0.388 + 0.1470 x 4 = 1.3748 reference blocks, of which half is left at te_share 0.5
    full = moe_host._host("experts", 0, 4, "current", frozenset(), te=1.0)
    assert full - moe_host._host("experts", 0, 4, "current", frozenset(), te=0.5) == pytest.approx(0.5 * 1.3748)


def _gpt_oss(ep=8, graphs=()):
    raw = {"name": "g", "model": "gpt-oss-120b", "cluster": {"topology": "dgx-h100", "nodes": max(1, ep // 8)},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 128,
                        "kernels": {"cuda_graphs": list(graphs), "linear": "megatron"}},  # as _mixtral
           "parallel": {"framework": "ddp", "distributed_optimizer": True, "ep": ep}}
    return pwork.from_scenario(scenario_from_dict(raw, overrides=["model.moe.imbalance=1.0"])).moe


def test_gpt_oss_blocks_add_their_eager_code():
    # EP 8: 16 local experts. On top of the module table (attention half 0.464; router and dispatch
    # 0.759 + 0.0055 x 16; experts 0.357 + 0.0397 x 16; combine 0.161 + 0.0015 x 16) GPT-OSS's code adds
    # (benchmarks/host_dispatch_gptoss.py) the eager YaRN RoPE 0.215, the clamp and offset tensor 0.070
    # and the per-expert fc2 bias loop 0.056 + 0.0272 x 16 of the forward reference block
    mw = _gpt_oss()
    table = 0.464 + (0.759 + 0.088) + (0.357 + 0.6352) + (0.161 + 0.024)
    assert _fwd(mw) == pytest.approx((table + 0.215 + 0.070 + 0.056 + 0.4352) * FWD)
    # backward: 0.376 + (0.167 + 0.0544) + (0.289 + 0.9552) + (0.037 + 0.0112), the extras 0.144 + 0.079
    # + 0.019 + 0.0333 x 16, and the DDP hook on 2 x 2 (QKV, output, biased) + 2 norms + the router and
    # its bias + 16 experts x 2 biased linears = 71 parameter tensors
    extras = 0.144 + 0.079 + 0.019 + 0.5328
    total = (0.376 + 0.2214 + 1.2442 + 0.0482 + extras) * BWD + 71 * 4.5e-6
    assert _h(mw.bwd_pre) + _h(mw.bwd_experts) + _h(mw.bwd_post) == pytest.approx(total)
    # the attn CUDA graph captures the RoPE with the attention half
    g = _gpt_oss(graphs=("attn",))
    assert _fwd(mw) - _fwd(g) == pytest.approx((0.464 + 0.215) * FWD)


def test_the_gpt_oss_offset_tensor_splits_the_forward_at_its_synchronisation():
    # Megatron-Core's quick-GeGLU builds its offset with a blocking copy before the activation: the forward
    # experts run as two tasks, cut at the activation (after the sort, fc1 and the clamp)
    mw = _gpt_oss()
    assert [op.name for op in mw.experts[:mw.experts_sync]] == ["sort_chunks", "experts_up", "experts_clamp"]
    assert mw.experts[mw.experts_sync].name == "experts_swiglu"
    # the stretch between the dispatcher's synchronisation and this one carries the rest of the router and
    # dispatch piece after the router (0.53) and the preprocessing (0.14), half the experts piece and the
    # clamp: (0.847 x 0.33 + 0.5 x 0.9922 + 0.070) x 493 µs; the rest of the block's host time goes to the
    # other stretch
    permute = next(i for i, op in enumerate(mw.pre) if op.name == "permute")
    between = _h(mw.pre[permute:]) + _h(mw.experts[:mw.experts_sync])
    assert between == pytest.approx((0.847 * 0.33 + 0.5 * 0.9922 + 0.070) * FWD)
    # with one local expert there is no sort: the cut is after fc1 and the clamp
    one = _gpt_oss(ep=128)
    assert [op.name for op in one.experts[:one.experts_sync]] == ["experts_up", "experts_clamp"]
    # a model without the clamped SwiGLU synchronises once per block: one experts task
    assert _mixtral().experts_sync == 0


def test_an_unknown_cuda_graph_scope_is_refused_naming_the_field():
    with pytest.raises(InputError) as err:
        _dense(("ssm",))
    assert "cuda_graphs" in str(err.value)
    with pytest.raises(InputError) as err:  # nor any Mamba layer
        _dense(("mamba",))
    assert "training.kernels.cuda_graphs" in str(err.value)
    with pytest.raises(InputError) as err:  # a dense model has no MoE slot to capture
        _dense(("moe",))
    assert "training.kernels.cuda_graphs" in str(err.value)


def _dsv3(graphs=(), linear="te"):
    raw = {"name": "d", "model": "deepseek-v3", "cluster": {"topology": "dgx-b200", "nodes": 8},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64,
                        "kernels": {"cuda_graphs": list(graphs), "linear": linear}},
           "parallel": {"framework": "ddp", "distributed_optimizer": True, "ep": 8, "pp": 8}}
    return pwork.from_scenario(scenario_from_dict(raw, overrides=["model.moe.imbalance=1.0"])).moe


def test_megatron_core_mla_attention_adds_its_measured_host_time():
    # benchmarks/host_dispatch_mcore.py: Megatron-Core's MLASelfAttention adds 0.97 of the reference block's forward
    # host time and 0.61 of its backward over standard attention. DeepSeek-V3 at EP 8: 32 local experts, one shared
    # expert; forward ((0.464 + (0.759 + 0.0055 x 32) + (0.161 + 0.0015 x 32) + (1 - 0.464)) x 1.76 x 1.23
    # (Megatron-Core's code with Transformer Engine's modules) + 0.357 + 0.0397 x 32 + (0.296 + 0.0257 x 32)
    # (TEGroupedMLP) + 0.97) x 493 µs
    mw = _dsv3()
    shared_f = sum(MODEL.host_time((op,)) for op in mw.shared if not op.name.startswith("recompute."))
    expected = ((0.464 + 0.935 + 0.209 + 0.536) * 1.76 * 1.23 + 1.6274 + 1.1184 + 0.97) * FWD
    assert _fwd(mw) + shared_f == pytest.approx(expected)
    # the attention's CUDA graph captures it with the attention half (0.464 x 1.76 x 1.23 + 0.97 of the
    # reference block)
    g = _dsv3(graphs=("attn",))
    g_shared = sum(MODEL.host_time((op,)) for op in g.shared if not op.name.startswith("recompute."))
    assert (_fwd(mw) + shared_f) - (_fwd(g) + g_shared) == pytest.approx((0.464 * 1.76 * 1.23 + 0.97) * FWD)
    # Megatron-LM's own linears: the rebuild's figures, no MLA extra (unmeasured outside Megatron-Core)
    legacy = _dsv3(linear="megatron")
    l_shared = sum(MODEL.host_time((op,)) for op in legacy.shared if not op.name.startswith("recompute."))
    assert _fwd(legacy) + l_shared == pytest.approx((0.464 + 0.935 + 0.209 + 0.536 + 1.6274) * FWD)
