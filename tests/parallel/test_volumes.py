"""Bytes per step per rank against the volume table of formulas.md §4.2.

φ = (n−1)/n, Ψ parameters, G micro-batches; values in bytes = elements × dtype width.
"""

from __future__ import annotations

import pytest

from tests.parallel.fakes import work
from tests.parallel.helpers import ctx, volume

N, G = 4, 3
PSI_LAYER, L = 1.0e6, 4
PSI = PSI_LAYER * L
PHI = (N - 1) / N


def _w():
    return work(n_layers=L, layer_params=PSI_LAYER)


def test_ddp_no_sync_moves_2phi_psi_fp32():
    v = volume(ctx(N, G, w=_w(), framework="ddp"))
    assert v == pytest.approx({"grad_reduce": 2 * PHI * PSI * 4})


def test_ddp_without_no_sync_moves_G_times():
    v = volume(ctx(N, G, w=_w(), framework="ddp", no_sync=False))
    assert v["grad_reduce"] == pytest.approx(G * 2 * PHI * PSI * 4)


def test_ddp_comm_hook_halves_bytes():
    v = volume(ctx(N, G, w=_w(), framework="ddp", comm_hook="bf16"))
    assert v["grad_reduce"] == pytest.approx(2 * PHI * PSI * 2)


def test_megatron_16bit_gradient_buffer_halves_the_reduce_scatter():
    # distributed optimizer: reduce-scatter φΨ of fp32 gradients (4 B), of bf16 ones (2 B) with
    # grad_reduce_in_fp32 false; the updated bf16 weights gather back either way (φΨ · 2 B)
    for fp32, grad_bytes in ((True, 4), (False, 2)):
        v = volume(ctx(N, G, w=_w(), framework="ddp", distributed_optimizer=True, grad_reduce_in_fp32=fp32))
        assert v["grad_reduce"] == pytest.approx(PHI * PSI * grad_bytes)
        assert v["post_step_gather"] == pytest.approx(PHI * PSI * 2)


@pytest.mark.parametrize(
    ("stage", "precision", "grad", "post"),
    [
        (0, "fp16", 2 * PHI * PSI * 2, 0.0),  # at the boundary, fp16
        # bf16 at stage 0 is the BF16_Optimizer: its fp32 buffer all-reduced, then its own ZeRO-1 gather
        (0, "bf16", 2 * PHI * PSI * 4, PHI * PSI * 2),
        (1, "bf16", 2 * PHI * PSI * 2, PHI * PSI * 2),  # boundary all-reduce buckets + post-step gather
        (2, "bf16", G * 2 * PHI * PSI * 2, PHI * PSI * 2),  # every micro-batch + post-step gather
    ],
)
def test_deepspeed_stages_0_to_2(stage, precision, grad, post):
    v = volume(ctx(N, G, precision=precision, w=_w(), framework="deepspeed", zero_stage=stage))
    assert v.get("grad_reduce", 0.0) == pytest.approx(grad)
    assert v.get("post_step_gather", 0.0) == pytest.approx(post)
    assert "param_allgather" not in v


def test_deepspeed_stage3_moves_G_times_3phi_psi():
    v = volume(ctx(N, G, w=_w(), framework="deepspeed", zero_stage=3))
    total = sum(v.values())
    assert total == pytest.approx(G * 3 * PHI * PSI * 2)
    assert v["param_allgather"] == pytest.approx(G * 2 * PHI * PSI * 2)


def test_deepspeed_stage3_persistent_params_are_not_gathered():
    w = work(n_layers=L, layer_params=PSI_LAYER, persistent=1000.0)
    v = volume(ctx(N, G, w=w, framework="deepspeed", zero_stage=3))
    assert v["param_allgather"] == pytest.approx(G * 2 * PHI * (PSI - 1000.0 * L) * 2)
    assert v["grad_reduce"] == pytest.approx(G * PHI * PSI * 2)


def test_fsdp_full_shard_G_times_3phi_psi():
    # Blocks: gather fwd + bwd, reduce-scatter: 3φ each. The root (embedding+head) stays gathered
    # from forward to backward (FSDP never reshards the root after forward): 2φ for its share.
    root = 5e5
    w = work(n_layers=L, layer_params=PSI_LAYER, embed_params=root / 2, head_params=root / 2)
    v = volume(ctx(N, G, w=w, framework="fsdp"))
    assert sum(v.values()) == pytest.approx(G * (3 * PHI * PSI + 2 * PHI * root) * 2)


def test_fsdp_shard_grad_op_G_times_2phi_psi():
    v = volume(ctx(N, G, w=_w(), framework="fsdp", sharding_strategy="shard_grad_op"))
    assert sum(v.values()) == pytest.approx(G * 2 * PHI * PSI * 2)


def test_fsdp_hybrid_adds_replica_all_reduce():
    # 16 GPUs, 8 per node: shard group g = 8, R = 2 replicas.
    n, g, r = 16, 8, 2
    v = volume(ctx(n, 1, w=_w(), framework="fsdp", sharding_strategy="hybrid_shard"))
    phi_g = (g - 1) / g
    expected = (3 * phi_g * PSI + 2 * ((r - 1) / r) * PSI / g) * 2
    assert sum(v.values()) == pytest.approx(expected)


def test_fsdp_reduce_dtype_fp32():
    v = volume(ctx(N, 1, w=_w(), framework="fsdp", reduce_dtype="fp32"))
    assert v["grad_reduce"] == pytest.approx(PHI * PSI * 4)
    assert v["param_allgather"] == pytest.approx(2 * PHI * PSI * 2)


@pytest.mark.parametrize(
    "par",
    [
        {"framework": "ddp"},
        {"framework": "deepspeed", "zero_stage": 1},
        {"framework": "deepspeed", "zero_stage": 3},
        {"framework": "fsdp"},
        {"framework": "fsdp", "sharding_strategy": "hybrid_shard"},
    ],
)
def test_degree_one_is_a_no_op(par):
    assert volume(ctx(1, G, w=_w(), **par)) == {}


def test_tensor_parallel_all_reduces_per_block():
    # Megatron TP (t = 2): 2 all-reduces of b·s·h in forward and 2 in backward per block and
    # micro-batch, plus 2 more for the recomputed forward; ring volume 2·(t−1)/t each.
    import dataclasses

    from simulator.parallel.context import BuildContext
    from simulator.parallel.mesh import RankMesh

    act = 8.0e6
    w = dataclasses.replace(work(n_layers=L, layer_params=PSI_LAYER, recompute=True), tp_allreduce_bytes=act)
    c = ctx(N, G, w=w, framework="ddp")
    c = BuildContext(w, RankMesh(tp=2, dp=N, pp=1, gpus_per_node=8), c.parallel, G, "bf16")
    v = volume(c)
    assert v["tp"] == pytest.approx(G * L * 6 * act * 2 * 0.5)


def test_sequence_parallel_keeps_tp_volume():
    import dataclasses

    from simulator.parallel.context import BuildContext
    from simulator.parallel.mesh import RankMesh

    w = dataclasses.replace(work(n_layers=L, layer_params=PSI_LAYER), tp_allreduce_bytes=8.0e6)
    mesh = RankMesh(tp=4, dp=N, pp=1, gpus_per_node=8)
    plain = volume(BuildContext(w, mesh, ctx(N, G, framework="ddp").parallel, G, "bf16"))
    sp = volume(BuildContext(dataclasses.replace(w, sequence_parallel=True), mesh, ctx(N, G, framework="ddp").parallel,
                             G, "bf16"))
    assert sp["tp"] == pytest.approx(plain["tp"])


def test_deepspeed_stage1_per_rank_reduce_moves_psi_plus_phi_psi():
    # use_multi_rank_bucket_allreduce=False: one reduce per rank slice ≈ φΨ (formulas.md §4.2:
    # "≈Ψ + φΨ with per-rank reduce"), plus the post-step gather φΨ.
    v = volume(ctx(N, G, w=_w(), framework="deepspeed", zero_stage=1, use_multi_rank_bucket_allreduce=False))
    assert v["grad_reduce"] == pytest.approx(PHI * PSI * 2)
    assert v["post_step_gather"] == pytest.approx(PHI * PSI * 2)


def test_per_rank_is_both_tallies_in_one_pass():
    from simulator.parallel.build import build_step_graph
    from simulator.parallel.volume import bytes_per_rank, calls_per_rank, per_rank

    c = ctx(N, G, w=_w(), framework="deepspeed", zero_stage=3)
    g = build_step_graph(c)
    nbytes, calls = per_rank(g, c.mesh, 0)
    assert list(nbytes.items()) == list(bytes_per_rank(g, c.mesh, 0).items())  # same sums, same key order
    assert list(calls.items()) == list(calls_per_rank(g, 0).items())
    # ZeRO-3: per micro-batch 2 gathers per block (forward and backward), N ranks: φ per element, 2 bytes
    assert nbytes["param_allgather"] == pytest.approx(G * 2 * PHI * PSI * 2)


# --- parallel.fp8_param_gather: a block's linear weights gathered in FP8 (1 byte), its vectors and
# the root (embedding, output layer) in the 2-byte parameter dtype.
VEC = 1.0e4  # a block's norm weights and biases


def _fp8_work():
    from dataclasses import replace

    root = 5e5
    w = work(n_layers=L, layer_params=PSI_LAYER, embed_params=root / 2, head_params=root / 2)
    return replace(w, layer_vector_params=VEC), root


def test_fsdp_fp8_param_gather_halves_the_linear_weights():
    w, root = _fp8_work()
    bf16 = volume(ctx(N, G, w=w, framework="fsdp"))
    fp8 = volume(ctx(N, G, precision="fp8", w=w, framework="fsdp", fp8_param_gather=True))
    # blocks gathered twice per micro-batch (forward, backward); the root once (it stays gathered)
    block_bytes = (PSI_LAYER - VEC) * 1 + VEC * 2
    assert fp8["param_allgather"] == pytest.approx(G * PHI * (2 * L * block_bytes + root * 2))
    assert bf16["param_allgather"] == pytest.approx(G * PHI * (2 * L * PSI_LAYER * 2 + root * 2))
    assert fp8["grad_reduce"] == pytest.approx(bf16["grad_reduce"])  # gradients unchanged


@pytest.mark.parametrize("overlap", [False, True])
def test_distributed_optimizer_fp8_param_gather(overlap):
    w, root = _fp8_work()
    v = volume(ctx(N, G, precision="fp8", w=w, framework="ddp", distributed_optimizer=True,
                   overlap_param_gather=overlap, fp8_param_gather=True))
    assert v["post_step_gather"] == pytest.approx(PHI * (L * ((PSI_LAYER - VEC) + VEC * 2) + root * 2))
