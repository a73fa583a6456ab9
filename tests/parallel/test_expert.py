"""Expert parallelism: the expert mesh, the dispatch / combine all-to-alls and their direction of
effect on the step (property tests)."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.kernels import KernelConfig
from simulator.config.loader import scenario_from_dict
from simulator.parallel.build import context_for
from simulator.parallel.expert_mesh import expert_groups
from simulator.parallel.ir import CollectiveTask
from simulator.parallel.mesh import RankMesh
from simulator.parallel.placement import placement_lines
from simulator.workload import moe_ops

# A small MoE model (4 blocks, 16 experts of width 512, top-2) so each simulation takes < 1 s.
TINY = {"name": "tiny-moe", "n_layers": 4, "hidden_size": 1024, "n_heads": 8, "n_kv_heads": 8,
        "ffn_hidden_size": 2816, "vocab_size": 32000,
        "moe": {"n_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 512}}


def _scenario(nodes=2, ep=16, sets=(), **moe):
    raw = {
        "name": "t", "model": {**TINY, "moe": {**TINY["moe"], **moe}},
        "cluster": {"topology": "dgx-h100", "nodes": nodes},
        "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 8 * nodes * 2},
        "parallel": {"framework": "ddp", "ep": ep},
    }
    return scenario_from_dict(raw, overrides=list(sets))


def test_expert_mesh_is_etp_then_ep_then_edp():
    # 16 GPUs in one stage, etp 2, ep 4 -> edp 2: stage rank = etp + 2·(ep + 4·edp)
    assert expert_groups(2, 1, 8, 1, 4, 2, "etp")[:2] == [[0, 1], [2, 3]]
    assert expert_groups(2, 1, 8, 1, 4, 2, "ep")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert expert_groups(2, 1, 8, 1, 4, 2, "edp")[0] == [0, 8]
    # Pipeline stage 1 starts at GPU 16.
    assert expert_groups(2, 1, 8, 2, 4, 2, "ep")[4] == [16, 18, 20, 22]


def test_ep_groups_inside_the_node_first():
    mesh = RankMesh(tp=1, dp=16, pp=1, gpus_per_node=8, ep=8)
    assert mesh.groups("ep") == [list(range(8)), list(range(8, 16))]
    assert mesh.size("edp") == 2 and mesh.groups("edp")[0] == [0, 8]
    text = "\n".join(placement_lines(mesh))
    assert "EP groups (2 of 8)" in text and "[0, 1, 2, 3, 4, 5, 6, 7] (node 0)" in text


def test_dispatch_and_combine_bytes_by_hand():
    sc = _scenario(nodes=1, ep=8, imbalance=1.5)
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(context_for(sc))
    a2a = [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.op == "all_to_all"]
    # T = b·s = 1024 tokens, top-2 copies of h = 1024 bf16 elements, x imbalance 1.5
    assert {t.nbytes for t in a2a} == {1024 * 2 * 1024 * 2 * 1.5}
    assert {t.group for t in a2a} == {"ep"}
    n_micro = 16 // 8  # global batch 16 over dp 8
    # dispatch + combine in forward, their two mirrors in backward, per block and micro-batch
    assert len(a2a) == 4 * 4 * n_micro


def test_fp8_dispatch_is_one_byte_combine_two_with_deepep_only():
    # T = 1024 tokens x top-2 x h = 1024, x imbalance 1.25: DeepEP dispatches FP8 (1 B), combines BF16
    sc = _scenario(nodes=1, ep=8, sets=["training.precision=fp8", "parallel.moe_dispatcher=deepep"])
    mw = context_for(sc).work.moe
    assert mw.dispatch_bytes * 2 == mw.combine_bytes == 1024 * 2 * 1024 * 2 * 1.25
    # Megatron-Core's alltoall dispatcher sends the 16-bit hidden states both ways
    mw = context_for(_scenario(nodes=1, ep=8, sets=["training.precision=fp8"])).work.moe
    assert mw.dispatch_bytes == mw.combine_bytes == 1024 * 2 * 1024 * 2 * 1.25


def test_breakdown_and_trace_show_the_all_to_all():
    r = simulate(_scenario())
    ep = r.breakdown["communication"]["ep"]
    assert ep["on_link_s"] > 0 and 0 < ep["exposed_s"] <= ep["on_link_s"]
    names = [s.name for s in r.trace if s.kind == "ep"]
    assert any("dispatch fwd 0 mb0" in n for n in names) and any("combine fwd 0 mb0" in n for n in names)


def test_doubling_imbalance_slows_the_step():
    base = simulate(_scenario(imbalance=1.25)).step_time_s
    worse = simulate(_scenario(imbalance=2.5)).step_time_s
    assert worse > base


def test_imbalance_is_per_expert_parallel_rank():
    """A rank receives the sum of its E/ep experts' copies: at most ep times the mean rank's (every copy)
    and at most the busiest expert's multiple of the mean. Without expert parallelism the one rank holds
    all 16 experts and computes all 1,024 x 2 copies however the router spreads them."""
    one = [_scenario(nodes=1, ep=1, imbalance=i) for i in (1.0, 2.0)]
    ops = moe_ops.moe_block_ops(one[1].model, 1, 1024, 1, 2, KernelConfig(), "none", ep=1)
    up = next(op for op in ops.experts if op.name == "experts_up")
    assert (up.m, up.batch) == (1024 * 2 / 16, 16)  # every copy once, over the 16 local experts
    assert simulate(one[0]).memory == simulate(one[1]).memory
    ep2 = context_for(_scenario(nodes=1, ep=2, imbalance=3.0)).work.moe
    assert ep2.dispatch_bytes == 1024 * 2 * 1024 * 2 * 2.0  # T·top_k·h·bytes, x min(3, ep 2)
    ep8 = context_for(_scenario(nodes=1, ep=8, imbalance=3.0)).work.moe
    assert ep8.dispatch_bytes == 1024 * 2 * 1024 * 2 * 3.0


def test_halving_inter_node_bandwidth_slows_a_cross_node_ep_step():
    base = simulate(_scenario()).step_time_s  # ep 16 over 2 nodes: the all-to-all crosses IB
    slow = simulate(_scenario(sets=["cluster.topology.nics.bandwidth_Gbps=200"])).step_time_s
    assert slow > base


@pytest.mark.parametrize(("key", "value", "match"), [
    ("parallel.ep", 3, "must divide model.moe.n_experts"),
    ("parallel.etp", 3, "expert_ffn_hidden_size"),
    ("parallel.tp", 2, "sequence_parallel"),
])
def test_bad_expert_layouts_are_refused(key, value, match):
    with pytest.raises(Exception, match=match):
        _scenario(nodes=1, ep=1, sets=[f"{key}={value}"])


def test_ep_needs_an_moe_model():
    raw = {"name": "t", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100"},
           "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 8},
           "parallel": {"framework": "ddp", "ep": 8}}
    with pytest.raises(Exception, match="need an MoE model"):
        scenario_from_dict(raw)


def test_layouts_auto_enumerates_valid_ep_and_etp():
    from simulator.parallel.layouts import enumerate_layouts

    sc = _scenario(nodes=2, ep=1)
    layouts = enumerate_layouts(sc, micro_batch_sizes=(1,))
    eps = {(lay["parallel.ep"], lay["parallel.etp"]) for lay in layouts}
    assert (16, 1) in eps and (8, 2) in eps and (1, 1) in eps
    for lay in layouts:  # every enumerated layout passes validation
        stage = 16 // lay["parallel.pp"]
        assert 16 % lay["parallel.ep"] == 0 and stage % (lay["parallel.ep"] * lay["parallel.etp"]) == 0
        _scenario(nodes=2, ep=1, sets=[f"{k}={v}" for k, v in lay.items()])


def test_ep_is_a_sweep_axis(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from simulator.cli import app

    raw = {"name": "t", "model": TINY, "cluster": {"topology": "dgx-h100", "nodes": 2},
           "training": {"seq_len": 1024, "micro_batch_size": 1, "global_batch_size": 32},
           "parallel": {"framework": "ddp", "ep": 8}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(app, ["sweep", str(path), "--grid", "parallel.ep=8,16", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    rows = [__import__("json").loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["parallel.ep"] for r in rows) == [8, 16]


def test_deepep_two_hop_groups_and_bytes():
    mesh = RankMesh(tp=1, dp=16, pp=1, gpus_per_node=8, ep=16)
    assert mesh.groups("ep_intra") == [list(range(8)), list(range(8, 16))]
    assert mesh.groups("ep_inter")[:2] == [[0, 8], [1, 9]]  # same rail on each node
    sc = _scenario(nodes=2, ep=16, sets=["parallel.moe_dispatcher=deepep"])
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(context_for(sc))
    a2a = [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.op == "all_to_all"]
    full = 1024 * 2 * 1024 * 2 * 1.25  # T·top_k·h·bytes·imbalance: one copy per expert
    p_hit = 1 - (8 * 7) / (16 * 15)  # a node (8 of the 16 experts) gets one of a token's 2 distinct experts
    q_hit = 2 / 16  # a GPU of the 16 (one expert each) does: the token goes to exactly 2 GPUs
    assert {t.group: t.nbytes for t in a2a} == {"ep_intra": pytest.approx(16 * q_hit * full / 2),
                                                "ep_inter": pytest.approx(2 * p_hit * full / 2)}
    # a dispatch's two hops run side by side (DeepEP pipelines them in chunks): same predecessor,
    # one stream each, and the experts wait for both
    hops = [t for t in a2a if "dispatch fwd 0 mb0" in t.name]
    assert {t.group for t in hops} == {"ep_inter", "ep_intra"}
    assert hops[0].deps == hops[1].deps and hops[0].stream != hops[1].stream
    experts = next(t for t in graph.tasks if t.name.endswith("fwd 0 mb0 experts"))
    assert set(experts.deps) == {t.id for t in hops}


def test_deepep_inside_a_node_sends_one_copy_per_gpu():
    """DeepEP inside one node: a token goes once to each GPU holding any of its experts. Top-8 over
    EP 8 of 16 experts (2 per GPU): a GPU is missed with probability C(14, 8) / C(16, 8) = 3003 / 12870, so
    8·(1 − 3003/12870) = 6.13 copies where the alltoall dispatcher sends 8."""
    def nbytes(sets):
        graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(
            context_for(_scenario(ep=8, top_k=8, sets=sets)))
        return {t.nbytes for t in graph.tasks if isinstance(t, CollectiveTask) and t.op == "all_to_all"
                and t.name.startswith("ep all_to_all dispatch fwd")}
    (alltoall,), (deepep,) = nbytes([]), nbytes(["parallel.moe_dispatcher=deepep"])
    assert deepep / alltoall == pytest.approx(8 * (1 - 3003 / 12870) / 8)


def test_deepep_hops_take_the_slower_hops_time():
    """Side by side, a dispatch costs the slower hop, not the sum: in the timeline both hops start
    when the router ends, and the experts start when the later of them ends."""
    rep = simulate(_scenario(nodes=2, ep=16, top_k=8, sets=["parallel.moe_dispatcher=deepep"]))
    spans = {sp.name: sp for sp in rep.trace}
    router = spans["fwd 0 mb0 attn+router"]
    inter = spans["ep all_to_all dispatch fwd 0 mb0 (ep_inter)"]
    intra = spans["ep all_to_all dispatch fwd 0 mb0 (ep_intra)"]
    experts = spans["fwd 0 mb0 experts"]
    assert (inter.stream, intra.stream) == ("comm_ep", "comm_ep_nvl")
    assert inter.start_s == intra.start_s == router.end_s
    assert experts.start_s == pytest.approx(max(inter.end_s, intra.end_s))
    sequential = (inter.end_s - inter.start_s) + (intra.end_s - intra.start_s)
    assert experts.start_s - router.end_s < sequential


def test_deepep_pays_off_with_many_experts_per_token():
    """Top-8 over 2 nodes: one all-to-all sends 8 x 1/2 = 4 copies of a token over the network,
    two hops send it 1 − 2⁻⁸ ≈ 1 time, so the expert communication shrinks despite the extra hop."""
    plain = simulate(_scenario(top_k=8)).breakdown["communication"]["ep"]["on_link_s"]
    two_hop = simulate(_scenario(top_k=8, sets=["parallel.moe_dispatcher=deepep"]))
    assert two_hop.breakdown["communication"]["ep"]["on_link_s"] < plain


def test_context_parallel_composes_with_experts():
    """cp 2 x ep 8 on 16 GPUs: the K/V ring runs beside the attention of MoE blocks, and the
    tokens a rank routes halve with its sequence chunk."""
    sc = _scenario(nodes=2, ep=8, sets=["parallel.cp=2"])
    ctx = context_for(sc)
    assert ctx.mesh.size("edp") == 2  # 16 / 8
    assert ctx.work.moe.dispatch_bytes == 512 * 2 * 1024 * 2 * 1.25  # b·s/cp tokens, top-2, h, bf16
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(ctx)
    rings = [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "cp"]
    assert any("attn+router" in t.name for t in rings)
    assert simulate(sc).step_time_s > 0


def test_zero3_gathers_expert_shards_over_expert_dp():
    sc = _scenario(nodes=2, ep=8, sets=["parallel.framework=deepspeed", "parallel.zero_stage=3"])
    ctx = context_for(sc)
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(ctx)
    gathers = [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "edp" and t.op == "all_gather"]
    reduces = [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "edp" and t.op == "reduce_scatter"]
    n_micro = ctx.n_micro
    # 16 experts / ep 8 = 2 per GPU, 3 matrices of 1024 x 512, bf16
    assert {t.nbytes for t in gathers} == {2 * 3 * 1024 * 512 * 2}
    assert len(gathers) == 4 * 2 * n_micro  # 4 MoE blocks, forward and backward, every micro-batch
    assert len(reduces) == 4 * n_micro
    assert simulate(sc).step_time_s > 0


def _edp_gathers(sc):
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(context_for(sc))
    return [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "edp" and t.op == "all_gather"]


def test_distributed_optimizer_gathers_updated_experts_over_expert_dp():
    # Megatron's distributed optimizer steps 1/edp of each GPU's experts, then all-gathers them back:
    # 4 MoE blocks x 2 local experts (16 / ep 8) x 3 matrices of 1024 x 512, bf16, after the optimizer
    sc = _scenario(nodes=2, ep=8, sets=["parallel.distributed_optimizer=true"])
    (gather,) = _edp_gathers(sc)
    assert gather.nbytes == 4 * 2 * 3 * 1024 * 512 * 2
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(context_for(sc))
    (opt,) = [t for t in graph.tasks if getattr(t, "kind", "") == "optimizer"]
    assert gather.deps == (opt.id,)
    # FP8 weights gather in one byte
    fp8 = _scenario(nodes=2, ep=8, sets=["parallel.distributed_optimizer=true", "parallel.fp8_param_gather=true",
                                         "training.precision=fp8"])
    assert [t.nbytes for t in _edp_gathers(fp8)] == [4 * 2 * 3 * 1024 * 512]
    # without a sharded optimizer every GPU steps all its experts: nothing to gather
    assert _edp_gathers(_scenario(nodes=2, ep=8)) == []
    assert simulate(sc).collective_calls["post_step_gather"] == 2  # the dense parameters' over DP, the experts'
    # one node, ep 8: edp = 1, nothing to gather
    assert _edp_gathers(_scenario(nodes=1, ep=8, sets=["parallel.distributed_optimizer=true"])) == []


def test_expert_gradients_reduce_in_the_buffer_dtype():
    # 4 MoE blocks x 2 local experts (16 / ep 8) x 3 matrices of 1024 x 512 per block reduce over
    # expert-DP: fp32 by default (4 B), bf16 with grad_reduce_in_fp32 false (2 B)
    def rs(sets):
        graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(
            context_for(_scenario(nodes=2, ep=8, sets=["parallel.distributed_optimizer=true", *sets])))
        return {t.nbytes for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "edp"
                and t.op == "reduce_scatter"}
    assert rs([]) == {2 * 3 * 1024 * 512 * 4}
    assert rs(["parallel.grad_reduce_in_fp32=false"]) == {2 * 3 * 1024 * 512 * 2}


def test_overlapped_param_gather_fetches_each_moe_block_before_its_forward():
    sc = _scenario(nodes=2, ep=8, sets=["parallel.distributed_optimizer=true", "parallel.overlap_param_gather=true"])
    gathers = _edp_gathers(sc)
    assert len(gathers) == 4 and {t.nbytes for t in gathers} == {2 * 3 * 1024 * 512 * 2}
    assert {t.layer for t in gathers} == {0, 1, 2, 3}


def test_cross_node_ep_is_warned():
    assert any("all-to-alls cross the inter-node network" in w for w in simulate(_scenario()).warnings)
    assert not any("all-to-all" in w for w in simulate(_scenario(nodes=1, ep=8)).warnings)


def test_moe_block_tp_collectives_are_the_attention_ones():
    # Megatron-Core's alltoall dispatcher takes the sequence-parallel tokens as they are and talks over
    # the expert-TP group (etp = 1 here: none), so an MoE block has only its attention's TP collectives:
    # forward one reduce-scatter and one all-gather of b·s·h (a dense block has two of each); backward,
    # under Megatron's default asynchronous TP backward (as for a dense block), out_proj's output-gradient
    # all-gather, qkv's input all-gathered again for its weight gradient (sequence parallelism keeps only
    # the local shard) and qkv's data-gradient reduce-scatter. 4 MoE blocks x (2 + 3) = 20 TP collective
    # calls per micro-batch, plus the embedding's reduce-scatter (its backward all-gather) and the output
    # layer's all-gather (its backward reduce-scatter): 24.
    sc = _scenario(nodes=2, ep=8, sets=["parallel.tp=2", "parallel.sequence_parallel=true"])
    from simulator.parallel.build import build_step_graph

    ctx = context_for(sc)
    tasks = build_step_graph(ctx).tasks
    calls = sum(t.count for t in tasks if isinstance(t, CollectiveTask) and t.kind == "tp")
    assert calls == 24 * ctx.n_micro


def test_shared_experts_add_their_tp_collectives():
    """A shared expert is a tensor-parallel MLP on the gathered tokens (Megatron-Core SharedExpertMLP:
    column-parallel fc1, row-parallel fc2), so under sequence parallelism it adds a dense MLP's
    reduce-scatter and all-gather of b·s·h per pass: 4 MoE blocks x (forward 2 + 2, backward 3 + 2)
    = 36 TP calls per micro-batch, plus the embedding's and output layer's 4: 40 (24 without, above)."""
    from simulator.parallel.build import build_step_graph

    sc = _scenario(nodes=2, ep=8, sets=["parallel.tp=2", "parallel.sequence_parallel=true"], n_shared_experts=1)
    ctx = context_for(sc)
    tasks = build_step_graph(ctx).tasks
    calls = sum(t.count for t in tasks if isinstance(t, CollectiveTask) and t.kind == "tp")
    assert calls == 40 * ctx.n_micro


def test_fsdp_no_sync_reduces_expert_gradients_once_too():
    """Under FSDP every micro-batch reduces the experts' gradients over expert-DP, as the dense units'; with
    fsdp_no_sync only the last micro-batch does, for both (a review found the experts still reduced per
    micro-batch). 2 nodes, ep 8: edp 2; 2 micro-batches per step."""
    from simulator.parallel.build import build_step_graph

    def expert_reductions(no_sync: bool) -> set:
        sc = _scenario(ep=8, sets=["parallel.framework=fsdp", f"parallel.fsdp_no_sync={str(no_sync).lower()}"])
        graph = build_step_graph(context_for(sc))
        return {t.micro_batch for t in graph.collectives() if t.name.startswith("expert grad")}

    assert expert_reductions(False) == {0, 1}
    assert expert_reductions(True) == {1}


def _tp_tasks(sc):
    ctx = context_for(sc)
    graph = __import__("simulator.parallel.build", fromlist=["x"]).build_step_graph(ctx)
    return ctx, [t for t in graph.tasks if isinstance(t, CollectiveTask) and t.group == "tp"]


def test_moe_attention_tp_collectives_overlap_with_tp_comm_overlap():
    """Under tp_comm_overlap an MoE block's attention is a dense block's (Transformer Engine userbuffers):
    per micro-batch and block the all-gather beside qkv and the reduce-scatter pipelined with out_proj
    forward, and the backward's three (output-gradient gather, input re-gather, data-gradient scatter),
    all on the TP stream; none left on the compute stream. Same bytes as the plain plan: b·s·h·2 bytes
    (bf16) per collective, h = 1024, 1 x 1024 tokens."""
    sets = ["parallel.tp=2", "parallel.sequence_parallel=true"]
    plain_ctx, plain = _tp_tasks(_scenario(nodes=1, ep=4, sets=sets))
    ctx, over = _tp_tasks(_scenario(nodes=1, ep=4, sets=[*sets, "parallel.tp_comm_overlap=true"]))
    full = 1024 * 1024 * 2
    block0 = [t for t in over if " 0 mb0" in t.name]
    assert block0 and all(t.stream == "comm_tp" for t in block0)
    fwd = [t for t in block0 if t.name.startswith("tp ") and "fwd 0 mb0" in t.name]
    # ring all-gather beside qkv (whole buffer), reduce-scatter in 4 splits beside out_proj (3/4 + 1/4)
    assert sorted(t.op for t in fwd) == ["all_gather", "reduce_scatter", "reduce_scatter"]
    assert sum(t.nbytes for t in fwd if t.op == "reduce_scatter") == pytest.approx(full)
    assert [t.nbytes for t in fwd if t.op == "all_gather"] == [full]
    # the plain plan: one reduce-scatter and one all-gather per pass, on the compute stream
    plain0 = [t for t in plain if "fwd 0 mb0" in t.name]
    assert {t.op: t.nbytes for t in plain0} == {"reduce_scatter": full, "all_gather": full}
    assert all(t.stream == "compute" for t in plain0)


def test_moe_attention_backward_tp_is_asynchronous_by_default():
    """Megatron's default asynchronous TP backward applies to an MoE block's attention as to a dense
    block's: the qkv input re-gather and data-gradient reduce-scatter run on the TP stream beside its
    GEMMs; only the out_proj output-gradient gather stays on the compute stream."""
    _, tasks = _tp_tasks(_scenario(nodes=1, ep=4, sets=["parallel.tp=2", "parallel.sequence_parallel=true"]))
    bwd = [t for t in tasks if "bwd 0 mb0" in t.name]
    assert sorted((t.op, t.stream) for t in bwd) == [("all_gather", "comm_tp"), ("all_gather", "compute"),
                                                     ("reduce_scatter", "comm_tp")]


def test_tp_comm_overlap_speeds_up_an_moe_step():
    """Qwen3-30B-A3B at TP 2 on one DGX H100: the overlap hides the attention's collectives and the step
    gets shorter (on the tiny test model above each chunk's GEMM launch outweighs what it hides)."""
    raw = {"name": "q", "model": "qwen3-30b-a3b", "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 16},
           "parallel": {"framework": "ddp", "tp": 2, "sequence_parallel": True, "ep": 4}}
    plain = simulate(scenario_from_dict(raw))
    over = simulate(scenario_from_dict({**raw, "parallel": {**raw["parallel"], "tp_comm_overlap": True}}))
    assert over.breakdown["communication"]["tp"]["exposed_s"] < plain.breakdown["communication"]["tp"]["exposed_s"]
    assert over.step_time_s < plain.step_time_s


def test_tp_overlap_warns_where_moe_blocks_keep_plain_collectives():
    """The combined blocks of moe_a2a_overlap keep their TP collectives on the compute stream: the
    report says so instead of silently ignoring tp_comm_overlap there; a standard MoE block does not warn."""
    sets = ["parallel.tp=2", "parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"]
    plain = simulate(_scenario(nodes=1, ep=4, sets=sets))
    paired = simulate(_scenario(nodes=1, ep=4, sets=[*sets, "parallel.moe_a2a_overlap=true"]))
    assert not any("tp_comm_overlap" in w for w in plain.warnings)
    assert any("parallel.tp_comm_overlap" in w and "moe_a2a_overlap" in w for w in paired.warnings)
