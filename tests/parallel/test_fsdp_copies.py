"""FSDP's copies around its collectives: FSDP2's copy-out/copy-in, the cast to reduce_dtype and the
in-place gradient divides of FSDP1 (and of FSDP2 with an fp16 reduction)."""

from __future__ import annotations

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.fsdp import divide_factors, gradient_divide_bytes
from simulator.parallel.ir import ComputeTask
from simulator.workload import host

# 2 blocks of h=1024 (12·h² = 12,582,912 weights each, no biases counted here: read from the work)
TINY = {"name": "tiny", "n_layers": 2, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
        "vocab_size": 32000}


def _sc(*sets):
    raw = {"name": "t", "model": TINY, "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 16, "precision": "bf16"},
           "parallel": {"framework": "fsdp", "param_dtype": "bf16"}}
    return scenario_from_dict(raw, overrides=list(sets))


def _copies(sc):
    ctx = context_for(sc)
    g = build_step_graph(ctx)
    tasks = [t for t in g.tasks if isinstance(t, ComputeTask) and t.name.startswith(("copy-out", "copy-in"))]
    return ctx, tasks


def test_divide_factors_follow_torchs_predivide_rule():
    # torch _get_gradient_predivide_factor: double f while n % f == 0 and n / f > f; post = n / f.
    # n = 8: f = 1 -> 2 (8 > 1) -> 4 (4 > 2), stop at 4 (2 > 4 fails): (4, 2).
    assert divide_factors(1) == (1, 1)
    assert divide_factors(2) == (2, 1)
    assert divide_factors(4) == (2, 2)
    assert divide_factors(8) == (4, 2)
    assert divide_factors(16) == (4, 4)
    assert divide_factors(128) == (16, 8)
    assert divide_factors(96) == (16, 6)  # 96/8 = 12 > 8 -> 16; 96/16 = 6 < 16 stops


def test_gradient_divide_bytes_by_hand():
    p = 1_000_000
    assert gradient_divide_bytes(p, 1, 4) == 0.0  # nothing to average
    assert gradient_divide_bytes(p, 2, 2) == 2 * 2 * p  # pre-divide only (post factor 1)
    assert gradient_divide_bytes(p, 8, 4) == 2 * 4 * p + 2 * 4 * p / 8  # full gradient, then the shard


def test_fsdp1_bf16_reduction_divides_the_gradient_in_place():
    ctx, tasks = _copies(_sc("parallel.reduce_dtype=bf16"))
    assert ctx.n_micro == 2
    assert len(tasks) == 2 * 3
    (op,) = next(t for t in tasks if t.name == "copy-in grads 0 mb0").ops
    assert op.name == "fsdp_grad_divide"
    p = ctx.work.layer_params
    assert op.bytes == 2 * 2 * p * (1 + 1 / 8)  # 8 ranks: /4 before (read+write bf16), /2 on the shard


def test_fsdp1_fp32_reduction_casts_then_divides_each_gradient():
    ctx, tasks = _copies(_sc("parallel.reduce_dtype=fp32"))
    # 16 sequences / 8 GPUs = 2 micro-batches; each reduces 2 blocks + the root
    assert ctx.n_micro == 2
    assert len(tasks) == 2 * 3
    cast, divide = next(t for t in tasks if t.name == "copy-in grads 0 mb0").ops
    assert cast.bytes == ctx.work.layer_params * (2 + 4)  # read bf16, write fp32
    assert divide.bytes == 2 * 4 * ctx.work.layer_params * (1 + 1 / 8)


def test_fsdp2_divides_only_an_fp16_reduction():
    # fp32/bf16 reduce with NCCL's AVG; fp16 pre/post-divides like FSDP1
    _, bf16 = _copies(_sc("parallel.fsdp_version=2", "parallel.reduce_dtype=bf16"))
    assert all(op.name != "fsdp_grad_divide" for t in bf16 for op in t.ops)
    ctx, fp16 = _copies(_sc("parallel.fsdp_version=2", "parallel.param_dtype=fp16", "parallel.reduce_dtype=fp16"))
    ops = next(t for t in fp16 if t.name == "copy-in grads 0 mb0").ops
    assert [op.name for op in ops] == ["fsdp2_reduce_scatter_copy_in", "fsdp_grad_divide"]
    assert ops[1].bytes == 2 * 2 * ctx.work.layer_params * (1 + 1 / 8)


def test_fsdp2_copies_out_every_gather_and_copies_in_every_reduction():
    ctx, tasks = _copies(_sc("parallel.fsdp_version=2", "parallel.reduce_dtype=fp32"))
    outs = [t for t in tasks if t.name.startswith("copy-out")]
    ins = [t for t in tasks if t.name.startswith("copy-in")]
    # FULL_SHARD: per micro-batch the root once, each block before forward and again before backward
    assert len(outs) == 2 * (1 + 2 * 2)
    assert len(ins) == 2 * 3
    (out,) = next(t for t in outs if t.name == "copy-out 1 mb1").ops
    assert out.bytes == 2 * ctx.work.layer_params * 2  # read the gathered bf16 unit, write the params
    cast, cat = next(t for t in ins if t.name == "copy-in grads 1 mb0").ops
    assert cast.bytes == ctx.work.layer_params * 6
    assert cat.bytes == 2 * ctx.work.layer_params * 4  # chunk-cat of the fp32 gradients


def test_fsdp2_step_is_longer_than_fsdp1_by_at_most_its_copies(monkeypatch):
    # with the two versions' per-unit hooks equal (FSDP2's lighter hooks: tests/workload/test_host.py),
    # what is left between them is FSDP2's copies
    monkeypatch.setitem(host.FSDP_UNIT_HOST, 2, host.FSDP_UNIT_HOST[1])
    one = simulate(_sc("parallel.reduce_dtype=bf16"))
    two = simulate(_sc("parallel.reduce_dtype=bf16", "parallel.fsdp_version=2"))
    assert two.step_time_s > one.step_time_s
    # upper bound: every copy serialised at the H100's achievable HBM rate (3.35 TB/s x 0.84) plus a
    # launch each (10 us eager dispatch)
    ctx, tasks = _copies(_sc("parallel.reduce_dtype=bf16", "parallel.fsdp_version=2"))
    bound = sum(op.bytes for t in tasks for op in t.ops) / (3.35e12 * 0.84) + len(tasks) * 10e-6
    assert two.step_time_s - one.step_time_s <= bound * 1.01


def test_megatron_fsdp_fuses_the_division_into_the_reduction():
    # Megatron-FSDP (gradient_reduce_div_fusion) averages inside its reduce-scatter: only the cast stays
    ctx, tasks = _copies(_sc("parallel.reduce_dtype=fp32", "parallel.gradient_reduce_div_fusion=true"))
    (cast,) = next(t for t in tasks if t.name == "copy-in grads 0 mb0").ops
    assert cast.name == "fsdp_grad_cast_reduce_dtype"
    _, none = _copies(_sc("parallel.reduce_dtype=bf16", "parallel.gradient_reduce_div_fusion=true"))
    assert none == []
