"""Micro-batches copied from the previous one (``simulator.parallel.replicate``) equal micro-batches
issued through the framework hooks, task for task: same ids, names, deps, sizes, part labels."""

from __future__ import annotations

import glob

import pytest

from simulator.config.loader import load_scenario, scenario_from_dict
from simulator.parallel import deepspeed, fsdp, replicate
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.ir import GraphBuilder
from simulator.parallel.replicate import Template


def _both(sc, monkeypatch, copies: int | None = None):
    """The step built with copies (``copies``: how many micro-batches must have been copied) and
    with every micro-batch issued through the hooks."""
    ctx = context_for(sc)
    done, original = [], replicate.Template.append

    def counted(self, b, g):
        done.append(g)
        return original(self, b, g)

    with monkeypatch.context() as m:
        m.setattr(replicate.Template, "append", counted)
        copied = build_step_graph(ctx)
    if copies is not None:
        assert len(done) == copies
    with monkeypatch.context() as m:
        m.setattr(deepspeed.Zero3Hooks, "repeats", lambda self, g: False)
        m.setattr(deepspeed.Zero012Hooks, "repeats", lambda self, g: False)
        m.setattr(fsdp.FSDPHooks, "repeats", lambda self, g: False)
        issued = build_step_graph(ctx)
    return copied, issued


def _zero3(*sets, model="llama-2-7b", topology="dgx-a100", nodes=1, ckpt="full", parallel=None):
    raw = {"name": "t", "model": model, "cluster": {"topology": topology, "nodes": nodes},
           "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 6 * 8 * nodes,
                        "activation_checkpointing": ckpt},
           "parallel": parallel or {"framework": "deepspeed", "zero_stage": 3}}
    return scenario_from_dict(raw, overrides=["model.n_layers=3", *sets])


VARIANTS = [
    (),
    ("parallel.offload_optimizer=cpu",),
    ("parallel.offload_optimizer=cpu", "parallel.offload_param=cpu"),
    ("parallel.zero_hpz_partition_size=8", "parallel.zero_quantized_weights=true",
     "parallel.zero_quantized_gradients=true"),
    ("parallel.overlap_comm=false",),
    ("parallel.stage3_prefetch_bucket_size=0",),
    ("parallel.stage3_max_reuse_distance=0",),
]


@pytest.mark.parametrize("sets", VARIANTS)
def test_copied_micro_batches_equal_issued_ones(sets, monkeypatch):
    copied, issued = _both(_zero3(*sets, nodes=2), monkeypatch, copies=5)  # 6 micro-batches
    assert len(copied.tasks) == len(issued.tasks) > 6 * 10
    assert copied.tasks == issued.tasks
    assert copied.meta == issued.meta


FSDP = [
    {"framework": "fsdp"},
    {"framework": "fsdp", "fsdp_version": 2},
    {"framework": "fsdp", "sharding_strategy": "shard_grad_op"},
    {"framework": "fsdp", "sharding_strategy": "hybrid_shard"},
    {"framework": "fsdp", "sharding_strategy": "no_shard"},
    {"framework": "fsdp", "limit_all_gathers": False, "backward_prefetch": "backward_post"},
    {"framework": "fsdp", "offload_optimizer": "cpu"},
]


@pytest.mark.parametrize("parallel", FSDP)
def test_fsdp_copied_micro_batches_equal_issued_ones(parallel, monkeypatch):
    copied, issued = _both(_zero3(nodes=2, parallel=parallel), monkeypatch, copies=5)
    assert copied.tasks == issued.tasks
    assert copied.meta == issued.meta


# (parallel, micro-batches copied out of n): stages 0-1 issue the first and the boundary (last) one,
# stage 2 only the first; TP overlap names its pieces after the micro-batch, so nothing is copied.
ZERO012 = [
    ({"framework": "deepspeed", "zero_stage": 0}, lambda n: n - 2),
    ({"framework": "deepspeed", "zero_stage": 1}, lambda n: n - 2),
    ({"framework": "deepspeed", "zero_stage": 2}, lambda n: n - 1),
    ({"framework": "deepspeed", "zero_stage": 1, "use_multi_rank_bucket_allreduce": False}, lambda n: n - 2),
    ({"framework": "deepspeed", "zero_stage": 2, "overlap_comm": False, "offload_optimizer": "cpu"}, lambda n: n - 1),
    ({"framework": "deepspeed", "zero_stage": 1, "tp": 2, "sequence_parallel": True}, lambda n: n - 2),
    ({"framework": "deepspeed", "zero_stage": 1, "tp": 2, "sequence_parallel": True, "tp_comm_overlap": True},
     lambda n: 0),
]


@pytest.mark.parametrize(("parallel", "copies"), ZERO012)
def test_zero012_copied_micro_batches_equal_issued_ones(parallel, copies, monkeypatch):
    sc = _zero3(nodes=2, parallel=parallel)
    copied, issued = _both(sc, monkeypatch, copies=copies(context_for(sc).n_micro))
    assert copied.tasks == issued.tasks
    assert copied.meta == issued.meta


@pytest.mark.parametrize("parallel", [{"framework": "deepspeed", "zero_stage": 3, "ep": 8},
                                      {"framework": "fsdp", "ep": 8}])
def test_moe_is_not_copied(parallel, monkeypatch):
    # the expert-gradient reductions follow the last micro-batch only: every micro-batch is issued
    copied, issued = _both(_zero3("model.n_layers=2", model="mixtral-8x7b", nodes=2, parallel=parallel),
                           monkeypatch, copies=0)
    assert copied.tasks == issued.tasks


@pytest.mark.parametrize("ckpt", ["none", "selective"])
def test_equal_without_full_recomputation(ckpt, monkeypatch):
    copied, issued = _both(_zero3(ckpt=ckpt), monkeypatch)
    assert copied.tasks == issued.tasks


def test_equal_with_one_data_parallel_rank(monkeypatch):
    # dp = 1 (tp = 8 on one node): no gathers or reductions at all
    copied, issued = _both(_zero3("parallel.tp=8"), monkeypatch)
    assert copied.tasks == issued.tasks


@pytest.mark.parametrize("path", sorted(glob.glob("scenarios/*.yaml")))
def test_equal_on_bundled_scenarios(path, monkeypatch):
    try:
        sc = load_scenario(path)
    except Exception:  # sweeps and comparisons are not single scenarios
        pytest.skip("not a single scenario")
    copied, issued = _both(sc, monkeypatch)
    assert copied.tasks == issued.tasks


def test_template_refused_for_a_dependency_outside_the_micro_batch():
    b = GraphBuilder()
    first = b.compute("x mb0", "forward", (), micro_batch=0)
    b.compute("y mb1", "forward", (), deps=(first,), micro_batch=1)
    assert Template.of(b, 1, 2, 1) is None


def test_template_renames_and_shifts():
    b = GraphBuilder()
    b.compute("optimizer", "optimizer", ())
    a = b.compute("fwd 0 mb1", "forward", (), micro_batch=1)
    b.collective("allgather fwd 0 mb1", "param_allgather", "all_gather", "dp", 8.0, deps=(a,), micro_batch=1,
                 parts=(("allgather fwd 0.q mb1", 3.0), ("allgather fwd 0.k mb1", 5.0)))
    assert b.tasks[2].deps == (1,)
    template = Template.of(b, 1, 3, 1)
    assert template.append(b, 12) == 3
    c, g = b.tasks[3:]
    assert (c.id, c.name, c.micro_batch) == (3, "fwd 0 mb12", 12)
    assert (g.id, g.name, g.deps, g.micro_batch) == (4, "allgather fwd 0 mb12", (3,), 12)
    assert g.parts == (("allgather fwd 0.q mb12", 3.0), ("allgather fwd 0.k mb12", 5.0))
    assert Template.of(b, 1, 3, 0) is None  # names do not end with " mb0": refused


SAMPLED = [
    *[(sets, None) for sets in VARIANTS],
    *[((), parallel) for parallel in FSDP],
    ((), {"framework": "deepspeed", "zero_stage": 2}),
    ((), {"framework": "deepspeed", "zero_stage": 2, "overlap_comm": False, "offload_optimizer": "cpu"}),
]


@pytest.mark.parametrize(("sets", "parallel"), SAMPLED)
def test_copied_samples_equal_separately_built_steps(sets, parallel):
    # One first micro-batch through the hooks for the steady-state samples of 1, 2 and 5 micro-batches:
    # each graph equals the step built alone with that many.
    import dataclasses

    from simulator.parallel.build import build_copied_samples

    ctx = context_for(_zero3(*sets, nodes=2, parallel=parallel))
    graphs = build_copied_samples(ctx, (1, 2, 5))
    assert graphs is not None and len(graphs) == 3
    for n, graph in zip((1, 2, 5), graphs, strict=True):
        alone = build_step_graph(dataclasses.replace(ctx, n_micro=n))
        assert graph.tasks == alone.tasks
        assert graph.meta == alone.meta
        assert max(t.micro_batch for t in graph.tasks) == n - 1


def test_no_copied_samples_where_the_last_micro_batch_differs():
    from simulator.parallel.build import build_copied_samples

    for parallel in ({"framework": "deepspeed", "zero_stage": 1}, {"framework": "ddp"}):
        assert build_copied_samples(context_for(_zero3(nodes=2, parallel=parallel)), (1, 2)) is None
