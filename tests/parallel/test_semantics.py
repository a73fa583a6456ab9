"""Framework semantics on the task graph: bucket order, streams, prefetch, offload, compression."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.parallel.build import build_step_graph
from simulator.parallel.ir import COMM, COMPUTE, D2H, H2D, CollectiveTask, CopyTask, HostTask
from simulator.parallel.schedule import Bucket, plan_buckets
from simulator.units import MiB
from tests.parallel.fakes import AlphaBeta, SumCompute, work
from tests.parallel.helpers import ctx, run, volume

PSI_LAYER, L = 1.0e6, 4


def _w(**kw):
    return work(n_layers=L, layer_params=PSI_LAYER, **kw)


def test_plan_buckets_first_bucket_then_cap_and_merging():
    ready = [("H", 0.0), (1, 10.0), (0, 10.0), ("E", 5.0)]
    assert plan_buckets(ready, cap=4.0, first_cap=1.0) == [
        Bucket(1, 1.0), Bucket(1, 4.0, 2), Bucket(0, 4.0, 2), Bucket("E", 4.0, 2)
    ]
    # A partial last bucket is ready with the last unit that has gradients.
    assert plan_buckets([(1, 3.0), ("E", 0.0)], cap=4.0)[-1] == Bucket(1, 3.0)
    with pytest.raises(ValueError):
        plan_buckets(ready, cap=0.0)


def test_ddp_buckets_launch_in_ready_order_on_one_stream():
    graph = build_step_graph(ctx(4, 1, w=_w(), framework="ddp"))
    comm = [t for t in graph.tasks if isinstance(t, CollectiveTask)]
    assert {t.stream for t in comm} == {COMM}
    layers = [int(t.name.split("@")[1].split(".")[0]) for t in comm]
    assert layers == sorted(layers, reverse=True)  # gradient-ready order: last block first
    first = comm[0]
    assert first.nbytes == pytest.approx(1 * MiB) and first.count == 1


@pytest.mark.parametrize(("dp", "bucket"), [(8, 40e6), (64, 64e6), (256, 256e6)])
def test_megatron_ddp_buckets_are_max_40m_or_1m_per_rank(dp, bucket):
    """Megatron-Core's DDP default bucket (distributed_data_parallel.py): max(4e7, 1e6 x dp) elements,
    no small first bucket. 10 blocks of 50M parameters = 500M elements: at dp 8 that is 12 buckets of
    40M and a last one of 20M; at dp 256, one of 256M and a last one of 244M."""
    w = work(n_layers=10, layer_params=50e6)
    graph = build_step_graph(ctx(dp, 1, w=w, framework="ddp", distributed_optimizer=True))
    sizes = [s for t in graph.collectives() if t.kind == "grad_reduce" for s in [t.nbytes / 4] * t.count]
    assert sizes[0] == pytest.approx(bucket)
    assert sum(sizes) == pytest.approx(500e6)
    assert len(sizes) == -(-500e6 // bucket)  # ceil: every bucket full but the last


def test_megatron_ddp_bucket_size_set_and_pytorch_ddp_unchanged():
    w = work(n_layers=10, layer_params=50e6)
    graph = build_step_graph(ctx(8, 1, w=w, framework="ddp", distributed_optimizer=True, ddp_bucket_size=100_000_000))
    assert max(t.nbytes for t in graph.collectives() if t.kind == "grad_reduce") == pytest.approx(100e6 * 4)
    # PyTorch DDP (no distributed optimizer): a first bucket of 1 MiB, then 25 MiB buckets
    torch_ddp = [t for t in build_step_graph(ctx(8, 1, w=w, framework="ddp")).collectives()]
    assert torch_ddp[0].nbytes == pytest.approx(1 * MiB) and torch_ddp[1].nbytes == pytest.approx(25 * MiB)


def test_megatron_ddp_buckets_only_the_first_model_chunk():
    """Megatron-LM get_model: disable_bucketing=(model_chunk_idx > 0): a later chunk of an interleaved
    stage reduces its gradients in one bucket, whatever its size."""
    w = work(n_layers=10, layer_params=50e6)
    first = ctx(8, 1, w=w, framework="ddp", distributed_optimizer=True)
    later = dataclasses.replace(first, model_chunk=1)
    assert len([t for t in build_step_graph(first).collectives() if t.kind == "grad_reduce"]) > 1
    (one,) = [t for t in build_step_graph(later).collectives() if t.kind == "grad_reduce"]
    assert one.nbytes == pytest.approx(500e6 * 4) and one.count == 1


def test_ddp_no_sync_reduces_only_in_the_last_micro_batch():
    graph = build_step_graph(ctx(4, 3, w=_w(), framework="ddp"))
    assert {t.micro_batch for t in graph.collectives()} == {2}


def test_deepspeed_stage1_reduces_at_boundary_stage2_every_micro_batch():
    g1 = build_step_graph(ctx(4, 3, w=_w(), framework="deepspeed", zero_stage=1))
    g2 = build_step_graph(ctx(4, 3, w=_w(), framework="deepspeed", zero_stage=2))
    red = lambda g: {t.micro_batch for t in g.collectives() if t.kind == "grad_reduce"}  # noqa: E731
    assert red(g1) == {2}
    assert red(g2) == {0, 1, 2}
    assert [t.kind for t in g2.collectives()][-1] == "post_step_gather"


@pytest.mark.parametrize(("overlap", "stream"), [(None, COMPUTE), (False, COMPUTE), (True, COMM)])
def test_deepspeed_stage2_overlap_comm_chooses_the_stream(overlap, stream):
    par = {"framework": "deepspeed", "zero_stage": 2, "reduce_bucket_size": 5e5}
    if overlap is not None:
        par["overlap_comm"] = overlap
    graph = build_step_graph(ctx(4, 1, w=_w(), **par))
    assert {t.stream for t in graph.collectives() if t.kind == "grad_reduce"} == {stream}


def test_overlap_comm_hides_reductions_behind_backward():
    par = {"framework": "deepspeed", "zero_stage": 2, "reduce_bucket_size": 5e5}
    _, serial = run(ctx(4, 1, w=_w(), overlap_comm=False, **par))
    _, overlapped = run(ctx(4, 1, w=_w(), overlap_comm=True, **par))
    assert overlapped.end_s < serial.end_s


def test_zero3_prefetch_hides_gathers_and_no_prefetch_exposes_them():
    slow = AlphaBeta(bw_Bps=5e9)  # gathers comparable to compute
    _, prefetch = run(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3), net=slow)
    # max_live_parameters below two blocks leaves no room to gather ahead (prefetch depth 0).
    _, none = run(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3, stage3_max_live_parameters=1.5e6), net=slow)
    assert prefetch.end_s < none.end_s


def _comm_order(graph):
    return [t.name.split(" mb")[0] for t in graph.tasks if isinstance(t, CollectiveTask) and t.stream == COMM]


def test_fsdp_no_sync_reduces_each_unit_once_in_the_last_micro_batch():
    """FSDP reduce-scatters every unit in every micro-batch; with ``fsdp_no_sync`` (FSDP1 ``no_sync()``,
    FSDP2 ``set_requires_gradient_sync(False)``) only the last micro-batch reduces: 4 reduce-scatters (the
    fake model's 4 blocks; its root has no parameters) instead of 3 x 4 = 12, while the parameter gathers
    stay per micro-batch."""
    def reductions(**kw):
        graph = build_step_graph(ctx(4, 3, w=_w(), framework="fsdp", **kw))
        return [t for t in graph.collectives() if t.kind == "grad_reduce"], \
            [t for t in graph.collectives() if t.kind == "param_allgather"]

    (every, gathers), (last, gathers_no_sync) = reductions(), reductions(fsdp_no_sync=True)
    assert len(every) == 12 and {t.micro_batch for t in every} == {0, 1, 2}
    assert len(last) == 4 and {t.micro_batch for t in last} == {2}
    assert len(gathers_no_sync) == len(gathers)


def test_fsdp_backward_prefetch_issue_order():
    pre = _comm_order(build_step_graph(ctx(4, 1, w=_w(), framework="fsdp", backward_prefetch="backward_pre")))
    post = _comm_order(build_step_graph(ctx(4, 1, w=_w(), framework="fsdp", backward_prefetch="backward_post")))
    none = _comm_order(build_step_graph(ctx(4, 1, w=_w(), framework="fsdp", backward_prefetch="none")))
    # BACKWARD_PRE: the gather of block 2 is issued before block 3's reduce-scatter.
    assert pre.index("allgather bwd 2") < pre.index("reducescatter grads 3")
    # BACKWARD_POST: also before it (issued in the post-backward hook ahead of the reduction) ...
    assert post.index("allgather bwd 2") < post.index("reducescatter grads 3")
    # ... and None: only when block 2's backward begins, behind block 3's reduce-scatter.
    assert none.index("allgather bwd 2") > none.index("reducescatter grads 3")


def test_fsdp_prefetch_policies_order_step_times():
    slow = AlphaBeta(bw_Bps=4e9)
    times = {p: run(ctx(4, 1, w=_w(), framework="fsdp", backward_prefetch=p), net=slow)[1].end_s
             for p in ("backward_pre", "backward_post", "none")}
    assert times["backward_pre"] <= times["backward_post"] <= times["none"]
    assert times["backward_pre"] < times["none"]


def test_fsdp_rate_limiter_waits_for_the_unit_two_back():
    graph = build_step_graph(ctx(4, 1, w=_w(), framework="fsdp"))
    names = {t.id: t.name for t in graph.tasks}
    ag3 = next(t for t in graph.tasks if t.name == "allgather fwd 3 mb0")
    assert [names[d] for d in ag3.deps] == ["fwd 1 mb0"]
    unlimited = build_step_graph(ctx(4, 1, w=_w(), framework="fsdp", limit_all_gathers=False))
    assert next(t for t in unlimited.tasks if t.name == "allgather fwd 3 mb0").deps == ()


def test_offload_moves_4_psi_over_n_bytes_over_pcie_and_runs_cpu_adam():
    n = 4
    graph = build_step_graph(ctx(n, 1, w=_w(), framework="deepspeed", zero_stage=2, offload_optimizer="cpu"))
    copies = [t for t in graph.tasks if isinstance(t, CopyTask)]
    down = sum(t.nbytes for t in copies if t.stream == D2H)
    up = sum(t.nbytes for t in copies if t.stream == H2D)
    psi = PSI_LAYER * L
    assert down == pytest.approx(2 * psi / n)  # 16-bit gradient partitions
    assert up == pytest.approx(2 * psi / n)  # updated 16-bit parameters
    host = [t for t in graph.tasks if isinstance(t, HostTask)]
    assert len(host) == 1 and host[0].n_params == pytest.approx(psi / n)
    assert not any(t.kind == "optimizer" and t.stream == COMPUTE for t in graph.tasks)


def test_offload_param_uploads_each_shard_before_its_gather():
    graph = build_step_graph(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3, offload_optimizer="cpu",
                                 offload_param="cpu"))
    by_id = {t.id: t for t in graph.tasks}
    gathers = [t for t in graph.collectives() if t.kind == "param_allgather"]
    assert gathers and all(isinstance(by_id[t.deps[0]], CopyTask) for t in gathers)


def test_zero_plus_plus_and_onebit_volumes():
    psi, phi = PSI_LAYER * L, 3 / 4
    qwz = volume(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3, zero_quantized_weights=True))
    assert qwz["param_allgather"] == pytest.approx(2 * phi * psi * 1)  # INT8 weights
    qgz = volume(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3, zero_quantized_gradients=True))
    assert qgz["grad_reduce"] == pytest.approx(phi * psi * 0.5)  # INT4 gradients
    onebit = volume(ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=0, onebit_adam=True))
    assert onebit["grad_reduce"] == pytest.approx(2 * phi * psi * 2 / 16)
    hpz = build_step_graph(ctx(16, 1, w=_w(), framework="deepspeed", zero_stage=3, zero_hpz_partition_size=8))
    assert {t.group for t in hpz.collectives() if t.name.startswith("allgather bwd")} == {"dp_shard"}


FRAMEWORKS = [
    {"framework": "ddp"},
    {"framework": "deepspeed", "zero_stage": 0},
    {"framework": "deepspeed", "zero_stage": 1},
    {"framework": "deepspeed", "zero_stage": 2, "overlap_comm": True},
    {"framework": "deepspeed", "zero_stage": 3},
    {"framework": "deepspeed", "zero_stage": 3, "offload_optimizer": "cpu"},
    {"framework": "fsdp"},
    {"framework": "fsdp", "sharding_strategy": "hybrid_shard"},
    {"framework": "fsdp", "backward_prefetch": "none", "limit_all_gathers": False},
]


@pytest.mark.parametrize("par", FRAMEWORKS)
@pytest.mark.parametrize("factor", [1.3, 2.0, 8.0])
def test_more_bandwidth_or_flops_never_slows_a_step(par, factor):
    c = ctx(16, 2, w=_w(recompute=True), **par)
    base = run(c, net=AlphaBeta(bw_Bps=5e9), slowdown=0.3)[1].end_s
    assert run(c, net=AlphaBeta(bw_Bps=5e9 * factor), slowdown=0.3)[1].end_s <= base * (1 + 1e-12)
    assert run(c, net=AlphaBeta(bw_Bps=5e9), compute=SumCompute(factor), slowdown=0.3)[1].end_s <= base * (1 + 1e-12)


@pytest.mark.parametrize("par", FRAMEWORKS)
def test_same_input_same_output(par):
    c = ctx(16, 2, w=_w(recompute=True), **par)
    a, b = run(c, slowdown=0.3)[1], run(c, slowdown=0.3)[1]
    assert a == b


def test_nvme_offload_streams_optimizer_states():
    from simulator.engine.costing import Costing
    from simulator.engine.executor import TaskCost

    n = 4
    c = ctx(n, 1, w=_w(), framework="deepspeed", zero_stage=3, offload_optimizer="nvme")
    graph = build_step_graph(c)
    host = next(t for t in graph.tasks if isinstance(t, HostTask))
    assert host.nvme_bytes == pytest.approx(24 * PSI_LAYER * L / n)
    costing = Costing(SumCompute(), AlphaBeta(), c.mesh, pcie_Bps=10e9, cpu_adam_params_per_s=1e12, nvme_Bps=1e9)
    assert costing.cost(host) == TaskCost(host.nvme_bytes / 1e9, {"params": host.n_params, "nvme_bytes": host.nvme_bytes})


def test_nvme_parameter_offload_reads_at_the_nvme_share():
    """offload_param nvme: each parameter upload is read from NVMe through the host, so it moves at the
    smaller of PCIe (10 GB/s here) and the GPU's NVMe share (1 GB/s here); cpu at PCIe. (A bug bash found
    nvme priced exactly as cpu.)"""
    from simulator.engine.costing import Costing
    from simulator.parallel.ir import CopyTask

    for where, bw in (("nvme", 1e9), ("cpu", 10e9)):
        c = ctx(4, 1, w=_w(), framework="deepspeed", zero_stage=3, offload_param=where)
        ups = [t for t in build_step_graph(c).tasks if isinstance(t, CopyTask) and t.name.startswith("param h2d")]
        assert ups and {t.source for t in ups} == {"nvme" if where == "nvme" else "host"}
        costing = Costing(SumCompute(), AlphaBeta(), c.mesh, pcie_Bps=10e9, cpu_adam_params_per_s=1e12, nvme_Bps=1e9)
        assert costing.cost(ups[0]).duration_s == pytest.approx(ups[0].nbytes / bw)


def test_deepspeed_bf16_at_stage0_runs_the_bf16_optimizer():
    """bf16 at ZeRO stage 0 is DeepSpeed's BF16_Optimizer: every micro-batch's backward adds the bf16
    gradients into fp32 (``update_hp_grads``: cast 2 + 4 B, add 4 + 4 + 4 B = 18 B per parameter), the
    boundary all-reduces the fp32 buffer (4 B per parameter), the Adam step covers 1/n of the parameters,
    then the bf16 weights are all-gathered. fp16 at stage 0 keeps the plain all-reduce of 2 B and no gather."""
    n, g = 4, 3
    c = ctx(n, g, w=_w(), framework="deepspeed", zero_stage=0)
    graph = build_step_graph(c)
    acc = [t for t in graph.tasks if t.name.startswith("bf16 grad accumulate")]
    assert len(acc) == g * L
    assert {t.ops[0].bytes for t in acc} == {18 * PSI_LAYER}
    reduce = [t for t in graph.collectives() if t.kind == "grad_reduce"]
    assert sum(t.nbytes for t in reduce) == pytest.approx(4 * L * PSI_LAYER)
    assert [t.kind for t in graph.collectives()][-1] == "post_step_gather"
    fp16 = build_step_graph(ctx(n, g, precision="fp16", w=_w(), framework="deepspeed", zero_stage=0))
    assert not [t for t in fp16.tasks if t.name.startswith("bf16 grad accumulate")]
    assert sum(t.nbytes for t in fp16.collectives() if t.kind == "grad_reduce") == pytest.approx(2 * L * PSI_LAYER)
    assert "post_step_gather" not in {t.kind for t in fp16.collectives()}
