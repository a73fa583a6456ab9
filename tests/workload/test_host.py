"""Host (CPU) time of eager transformer blocks: the measured figures, their spread over a block's ops,
and the CPU-bound step they make of small models (``simulator.workload.host``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.api import simulate
from simulator.catalog import get_gpu
from simulator.config.loader import scenario_from_dict
from simulator.hardware import kernels
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.parallel import work as pwork
from simulator.workload import host

A100 = get_gpu("a100-80gb")
#: The A100 efficiencies with the CPU-only benchmark's host figures (``host_dispatch_scale`` 1): the tests
#: of the measured table check those figures; ``test_the_host_scale_*`` checks the scale.
CPU_ONLY = replace(for_gpu(A100), host_dispatch_scale=1.0)


def _scenario(h=1024, mbs=1, tp=1, flash=False, compile_=False, mlp="gelu", norm="layernorm", fused=True,
              checkpointing="none", framework="ddp", linear=None, topology="dgx-a100", precision="bf16", gpus=None):
    # Megatron-LM's own linears under ddp by default: the legacy layer the reference blocks rebuild (Transformer
    # Engine's linears mean Megatron-Core's layer, whose code costs host.MCORE_HOST times as much)
    linear = linear or ("megatron" if framework == "ddp" else "auto")
    model = {"name": f"gpt-h{h}", "n_layers": 24, "hidden_size": h, "n_heads": h // 64, "ffn_hidden_size": 4 * h,
             "vocab_size": 50304, "mlp": mlp, "norm": norm, "linear_bias": mlp == "gelu",
             "position_embedding": "learned" if mlp == "gelu" else "rope", "max_position_embeddings": 1024,
             "tied_embeddings": True}
    cluster = {"topology": topology, "nodes": 1} | ({"gpus": gpus} if gpus else {})
    raw = {"name": "small", "model": model, "cluster": cluster,
           "training": {"seq_len": 1024, "micro_batch_size": mbs, "global_batch_size": 4 * mbs * (8 // tp),
                        "precision": precision, "activation_checkpointing": checkpointing,
                        "kernels": {"flash_attention": flash, "compile": compile_, "fused_norm_residual": fused,
                                    "linear": linear, "fp8_recipe": "mxfp8" if precision == "fp8" else "delayed"}},
           "parallel": {"framework": framework, "tp": tp}}
    return scenario_from_dict(raw)


def _host(model, ops):
    return model.host_time(tuple(ops))


def test_a_megatron_block_costs_its_measured_host_time():
    # benchmarks/host_dispatch.py measured Megatron-LM's legacy block (its own linears) at 714 µs forward and 667 µs backward
    # (unfused attention core), 493 and 573 µs with SDPA; Megatron DDP's gradient hook adds 4.5 µs in the
    # backward for each of the block's 12 parameter tensors (QKV, projection, fc1, fc2: weight and bias;
    # two LayerNorms: weight and bias): 12 × 4.5 = 54 µs
    work = pwork.from_scenario(_scenario())
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    assert _host(model, work.layer_fwd) == pytest.approx(714e-6)
    assert _host(model, work.layer_bwd) == pytest.approx(667e-6 + 54e-6)
    flash = pwork.from_scenario(_scenario(flash=True))
    assert _host(model, flash.layer_fwd) == pytest.approx(493e-6)
    assert _host(model, flash.layer_bwd) == pytest.approx(573e-6 + 54e-6)
    # the roofline launch model has no host costs at all
    bare = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.NONE)
    assert _host(bare, work.layer_fwd) == 0.0


def test_megatron_softmax_fallback_adds_its_three_calls_each_way():
    # 16 heads at TP 8 and micro-batch 1: 2 attention batches, not a multiple of 4, so Megatron runs
    # .float(), * scale, masked_fill_, softmax, .half(): 3 calls more than the reference block's
    # masked_fill + softmax, at its 8.5 µs per call, forward and (autograd nodes) backward
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    tp8 = pwork.from_scenario(_scenario(tp=8))
    assert "attn_softmax_fp32_fallback" in {op.name for op in tp8.layer_fwd}
    assert _host(model, tp8.layer_fwd) == pytest.approx(714e-6 + 3 * 8.5e-6)
    assert _host(model, tp8.layer_bwd) == pytest.approx(667e-6 + 54e-6 + 3 * 8.5e-6)
    two = pwork.from_scenario(_scenario(tp=8, mbs=2))  # 4 attention batches: the fused kernel again
    assert _host(model, two.layer_fwd) == pytest.approx(714e-6)


def test_eager_llama_code_and_compiled_blocks():
    # torchtitan-style eager block (RMSNorm as torch code): 540 µs forward, 696 µs backward (here under
    # framework ddp, dtsim's Megatron-LM engine: no FSDP unit hooks, a gradient hook per weight, 6 of them)
    llama = pwork.from_scenario(_scenario(mlp="swiglu", norm="rmsnorm", fused=False, flash=True, framework="ddp"))
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    assert _host(model, llama.layer_fwd) == pytest.approx(540e-6)
    assert _host(model, llama.layer_bwd) == pytest.approx(696e-6 + 6 * host.GRAD_HOOK_S)
    # compiled: Inductor's wrapper, the per-kernel dispatch (3 µs per kernel)
    compiled = pwork.from_scenario(_scenario(compile_=True, flash=True))
    assert all(op.host_s is None for op in compiled.layer_fwd + compiled.layer_bwd)
    cmodel = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.COMPILED)
    assert _host(cmodel, compiled.layer_fwd) == pytest.approx(3e-6 * sum(op.launches for op in compiled.layer_fwd))


def test_the_host_scale_multiplies_the_measured_block_time_not_the_per_kernel_dispatch():
    # host_dispatch_scale 1.5: the Megatron block's 714 µs measured on the CPU alone cost 1,071 µs on the
    # training host; a compiled block's 3 µs per kernel (a GPU-host figure already) is not scaled.
    scaled = replace(CPU_ONLY, host_dispatch_scale=1.5)
    work = pwork.from_scenario(_scenario())
    eager = RooflineComputeModel(A100, "bf16", scaled, launch=kernels.EAGER)
    assert _host(eager, work.layer_fwd) == pytest.approx(1.5 * 714e-6)
    compiled = pwork.from_scenario(_scenario(compile_=True, flash=True))
    cmodel = RooflineComputeModel(A100, "bf16", scaled, launch=kernels.COMPILED)
    assert _host(cmodel, compiled.layer_fwd) == pytest.approx(3e-6 * sum(op.launches for op in compiled.layer_fwd))
    # a host-bound task takes its host time: hidden 1,024, TP 8, micro-batch 2 forward (GPU ~0.2 ms)
    tiny = pwork.from_scenario(_scenario(tp=8, mbs=2)).layer_fwd
    assert eager.time(tiny) == pytest.approx(1.5 * 714e-6)


def test_the_a100_platform_has_its_fitted_host_scale_and_others_the_cpu_only_figure():
    # efficiency.yaml's generated host block: fitted for ampere (benchmarks/calibrate_host.py), inside its
    # physical box 1.0-3.0 and not on an edge; Hopper keeps the CPU-only figure
    from simulator.validation import host_calibration as hc

    scale = for_gpu(A100).host_dispatch_scale
    assert 1.0 < scale < 3.0
    assert hc.on_bound({"host_dispatch_scale": scale}) == []
    assert for_gpu(get_gpu("h100-sxm")).host_dispatch_scale == 1.0


def test_host_time_follows_the_work_so_every_piece_keeps_the_block_ratio():
    ops = pwork.from_scenario(_scenario()).layer_fwd
    total = sum(op.flops + host.RIDGE_FLOP_PER_BYTE * op.bytes for op in ops)
    for op in ops:
        share = (op.flops + host.RIDGE_FLOP_PER_BYTE * op.bytes) / total
        assert op.host_s == pytest.approx(714e-6 * share)


def test_full_recompute_replays_the_forward_host_time():
    work = pwork.from_scenario(_scenario(checkpointing="full"))
    assert sum(op.host_s for op in work.layer_recompute) == pytest.approx(714e-6)


def test_a_1024_hidden_model_at_tp8_is_cpu_bound():
    # Hidden 1,024, micro-batch 1, TP 8: a block's GEMMs take a few µs each, far below the CPU's
    # 714 + 667 = 1,381 µs per block and micro-batch. 24 blocks × 4 micro-batches: the step takes at
    # least 24 · 4 · 1.381 ms = 133 ms of host time.
    step = simulate(_scenario(tp=8)).step_time_s
    assert step >= 24 * 4 * 1381e-6 * for_gpu(A100).host_dispatch_scale
    # while the same model with no launch costs (the pure roofline) is at least twice as fast
    bare = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.NONE)
    assert simulate(_scenario(tp=8), compute_model=bare).step_time_s < step / 2


def test_per_parameter_gradient_hooks_are_megatron_and_deepspeed_host_work_not_fsdp():
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    fsdp = pwork.from_scenario(_scenario(framework="fsdp"))
    # FSDP reduces per unit, not per parameter: the block's 667 µs plus FSDP1's unit hooks, 1.89 x the
    # Llama reference block's 696 µs backward (benchmarks/host_dispatch_fsdp.py)
    assert _host(model, fsdp.layer_bwd) == pytest.approx(667e-6 + 1.89 * 696e-6)
    ddp = pwork.from_scenario(_scenario())
    assert _host(model, ddp.layer_bwd) == pytest.approx(667e-6 + 12 * host.GRAD_HOOK_S)
    # a Llama block (no biases, RMSNorm): 4 weights + 2 norm weights = 6 tensors
    llama = scenario_from_dict({"name": "l", "model": "llama-3-8b", "cluster": {"topology": "dgx-a100", "nodes": 1},
                                "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 8},
                                "parallel": {"framework": "ddp"}})
    assert host.block_param_tensors(llama.model) == 6


def test_fsdp_units_add_their_hooks_host_time_compiled_or_not():
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    for version, (fwd, bwd) in ((1, (2.12, 1.89)), (2, (1.48, 1.17))):
        sc = _scenario(framework="fsdp")
        sc = sc.model_copy(update={"parallel": sc.parallel.model_copy(update={"fsdp_version": version})})
        work = pwork.from_scenario(sc)
        # eager Megatron-style block: 714 µs forward, plus the unit's pre-forward and post-forward hooks
        assert _host(model, work.layer_fwd) == pytest.approx(714e-6 + fwd * 540e-6)
        assert _host(model, work.layer_bwd) == pytest.approx(667e-6 + bwd * 696e-6)
    # a compiled block keeps its per-kernel dispatch and still runs FSDP's Python hooks
    # (less Megatron's QKV bias-add kernel, which PyTorch's nn.Linear folds into addmm)
    plain, fsdp = (pwork.from_scenario(_scenario(compile_=True, framework=f)) for f in ("ddp", "fsdp"))
    megatron_add = [op for op in plain.layer_fwd if op.name == "qkv_bias_add"]
    assert _host(model, fsdp.layer_fwd) - _host(model, plain.layer_fwd) + _host(model, megatron_add) == (
        pytest.approx(2.12 * 540e-6))
    # the unit's hooks carry no GPU work of their own
    unit = fsdp.layer_fwd[0]
    assert unit.name == "fsdp_unit" and model.op_time(unit) == 0.0
    # Megatron-FSDP (its gradient_reduce_div_fusion switch set) runs its own hooks, not PyTorch FSDP's
    sc = _scenario(framework="fsdp")
    megatron_fsdp = sc.model_copy(update={"parallel": sc.parallel.model_copy(update={"gradient_reduce_div_fusion": True})})
    assert not any(op.name.startswith("fsdp_unit") for op in pwork.from_scenario(megatron_fsdp).layer_fwd)


def test_packed_documents_shrink_the_fused_attention_kernel_and_its_key_length():
    # 8 documents of 128 tokens in a 1,024-token sequence: the kernel does 1/8 of the causal work, its
    # main loop runs over 128 keys, not 1,024; the GEMMs stay.
    def ops(doc):
        raw = {"name": "p", "model": "llama-3-8b", "cluster": {"topology": "dgx-a100", "nodes": 1},
               "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 8,
                            **({"document_tokens": doc} if doc else {})}, "parallel": {"framework": "fsdp"}}
        return {op.name: op for op in pwork.from_scenario(scenario_from_dict(raw)).layer_fwd}

    one, packed = ops(None), ops(128)
    assert packed["attention"].flops == pytest.approx(one["attention"].flops / 8)
    assert (one["attention"].k, packed["attention"].k) == (1024, 128)
    assert packed["qkv"].flops == one["qkv"].flops


def test_a_document_longer_than_the_sequence_is_refused():
    from simulator.errors import InputError

    raw = {"name": "p", "model": "llama-3-8b", "cluster": {"topology": "dgx-a100", "nodes": 1},
           "training": {"seq_len": 1024, "document_tokens": 2048, "micro_batch_size": 1, "global_batch_size": 8}}
    with pytest.raises((InputError, ValueError), match="document_tokens"):
        scenario_from_dict(raw)


def test_the_report_names_the_cpu_bound_part_of_compute():
    # hidden 1,024 at TP 8 and micro-batch 2: a block's forward is 0.2 ms of GPU work against 714 µs of
    # host time, so its task is host-bound by the difference; a 4,096-token micro-batch of a 7B model
    # is GPU-bound (0 µs)
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    tiny = pwork.from_scenario(_scenario(tp=8, mbs=2)).layer_fwd
    gpu = sum(model.op_time(op) for op in tiny)
    assert gpu < 714e-6 and model.host_bound(tiny) == pytest.approx(714e-6 - gpu)
    big = pwork.from_scenario(_scenario(h=4096, mbs=4)).layer_fwd
    assert model.host_bound(big) == 0.0
    # the step report sums it over the compute tasks: part of the busy time, none for the GPU-bound run
    small = simulate(_scenario(tp=8, mbs=2)).breakdown
    busy = small["forward_s"] + small["backward_s"] + small["recompute_s"] + small["optimizer_s"]
    assert 0 < small["host_bound_s"] < busy
    assert simulate(_scenario(h=4096, mbs=4)).breakdown["host_bound_s"] == 0.0


def test_megatron_core_code_costs_its_measured_factor_over_the_rebuild():
    # benchmarks/host_dispatch_mcore.py: Megatron-Core's TransformerLayer took 1.68x the rebuild's forward host time
    # and 1.08x its backward (medians of three runs), and benchmarks/host_dispatch_te.py: its Transformer Engine
    # modules 1.29x / 1.27x of that layer; with Transformer Engine's linears (Megatron-Core) the SDPA block's
    # 493 / 573 µs become 493 × 1.68 × 1.29 = 1,068.4296 and 573 × 1.08 × 1.27 = 785.9268 µs; the gradient
    # hooks (12 × 4.5 µs) are not layer code
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    mcore = pwork.from_scenario(_scenario(flash=True, linear="te"))
    assert _host(model, mcore.layer_fwd) == pytest.approx(1068.4296e-6)
    assert _host(model, mcore.layer_bwd) == pytest.approx(785.9268e-6 + 54e-6)
    # Megatron-LM's own linears: the legacy layer, the rebuild's figures
    legacy = pwork.from_scenario(_scenario(flash=True, linear="megatron"))
    assert _host(model, legacy.layer_fwd) == pytest.approx(493e-6)
    # torchtitan-style code under ddp is not Megatron-Core's layer, whatever its linears
    llama = pwork.from_scenario(_scenario(mlp="swiglu", norm="rmsnorm", fused=False, flash=True, linear="te"))
    assert _host(model, llama.layer_fwd) == pytest.approx(540e-6)


def test_fp8_under_transformer_engine_costs_its_measured_factor():
    # benchmarks/host_dispatch_te.py under TE's MXFP8 recipe: the TE-spec layer took 1.49x / 1.54x its BF16 host
    # time (medians of three runs): 493 × 1.68 × 1.29 × 1.49 = 1,591.960104 and 573 × 1.08 × 1.27 × 1.54 =
    # 1,210.327272 µs, and the gradient hooks (12 × 4.5 µs)
    model = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER)
    fp8 = pwork.from_scenario(_scenario(flash=True, linear="te", topology="dgx-b200", precision="fp8"))
    assert _host(model, fp8.layer_fwd) == pytest.approx(1591.960104e-6)
    assert _host(model, fp8.layer_bwd) == pytest.approx(1210.327272e-6 + 54e-6)


def test_transformer_engines_share_costs_the_grace_te_factor():
    # On a GB200 rack (host.dispatch_scale 2.75, te_dispatch_scale 1.88) the MXFP8 Megatron-Core layer's local-spec
    # code runs at 2.75x and what Transformer Engine adds over it (1.29 x 1.49 - 1 forward, 1.27 x 1.54 - 1
    # backward) at 1.88x: 493 µs x 1.68 x (2.75 + 0.9221 x 1.88) = 3,713.4... µs forward; 573 µs x 1.08 x (2.75 +
    # 0.9558 x 1.88) and the 12 gradient hooks of 4.5 µs at 2.75x backward
    work = pwork.from_scenario(_scenario(flash=True, linear="te", topology="gb200-nvl72", precision="fp8", gpus=8))
    grace = RooflineComputeModel(A100, "bf16", CPU_ONLY, launch=kernels.EAGER, host_scale=2.75)
    assert _host(grace, work.layer_fwd) == pytest.approx(493e-6 * 1.68 * (2.75 + (1.29 * 1.49 - 1) * 1.88))
    assert _host(grace, work.layer_bwd) == pytest.approx(573e-6 * 1.08 * (2.75 + (1.27 * 1.54 - 1) * 1.88)
                                                         + 2.75 * 54e-6)


def test_mla_attention_host_extra_applies_to_eager_megatron_core_blocks_only():
    # Megatron-Core's MLASelfAttention over standard attention: 0.97 x 493 µs forward, 0.61 x 573 µs backward
    # (benchmarks/host_dispatch_mcore.py); an attn CUDA graph captures it; outside Megatron-Core it is unmeasured
    def sc(framework="ddp", graphs=()):
        raw = {"name": "d", "model": "deepseek-v3", "cluster": {"topology": "dgx-b200", "nodes": 8},
               "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64,
                            "kernels": {"cuda_graphs": list(graphs)}},
               "parallel": {"framework": framework, "ep": 8, "pp": 8}}
        s = scenario_from_dict(raw)
        return s.model, s.training.kernels, s.parallel.framework
    assert host.mla_host_s(*sc()) == pytest.approx((0.97 * 493e-6, 0.61 * 573e-6))
    assert host.mla_host_s(*sc(graphs=("attn",))) == (0.0, 0.0)
    assert host.mla_host_s(*sc(framework="fsdp")) == (0.0, 0.0)


def test_dispatch_overrides_keep_transformer_engines_share():
    from simulator.config.topology import load_topology
    from simulator.workload.host import dispatch_overrides

    # gb200-nvl72: dispatch 2.75, Transformer Engine 1.88; at 1.5 TE's goes to 1.5 x 1.88 / 2.75 = 1.02545...
    grace = load_topology("gb200-nvl72").host
    sets = dispatch_overrides(grace, 1.5)
    assert sets[0] == "cluster.topology.host.dispatch_scale=1.5"
    assert float(sets[1].split("=")[1]) == pytest.approx(1.5 * 1.88 / 2.75)
    # an x86 DGX sets no TE factor: one override only
    assert dispatch_overrides(load_topology("dgx-b200").host, 2.0) == ("cluster.topology.host.dispatch_scale=2.0",)
