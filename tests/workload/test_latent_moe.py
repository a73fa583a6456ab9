"""LatentMoE (Nemotron 3 Super, ``model.moe.latent_size``): the routed experts work in a latent width behind a
down projection before the dispatch and an up projection after the combine. Parameters, FLOPs, kernels and the
all-to-all bytes are checked against Megatron-Core's module shapes (``MoELayer``'s ``fc1_latent_proj`` /
``fc2_latent_proj``, ``TEGroupedMLP``'s fc1 ``latent -> f``, fc2 ``f -> latent``) counted by hand, and the whole
model against its name (120B total, 12B active) and Megatron-Bridge's model-FLOP count of the published rows."""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.config.kernels import KernelConfig
from simulator.config.model import ModelConfig
from simulator.workload import moe, moe_ops, params

H, L, F, FS, E, K = 4096, 1024, 2688, 5376, 512, 22


@pytest.fixture(scope="module")
def sup() -> ModelConfig:
    return catalog.get_model("nemotron-3-super-120b-a12b")


def test_pattern_and_parameters(sup):
    # 88 layers: 40 Mamba, 8 attention, 40 MoE (counted from the provider's pattern), in 44 blocks of two
    assert len(sup.hybrid_pattern) == 88 and sup.n_layers == 44 and sup.n_moe_blocks == 40
    counts = params.count(sup)
    # the Nemotron 3 Super report (arXiv:2604.12374): 120.6B total, 12.7B active
    assert counts.total == pytest.approx(120.6e9, rel=2e-3)
    assert counts.active == pytest.approx(12.7e9, rel=1e-2)
    # one MoE layer by hand: router E·h, the two latent projections 2·h·l, E squared-ReLU experts of
    # 2·l·f, the shared expert 2·h·f_s; the experts alone are E·2·l·f
    blk = moe.block(sup, True)
    assert blk.experts == E * 2 * L * F
    assert blk.mlp == E * H + 2 * H * L + 2 * H * FS


def test_moe_layer_flops_by_hand(sup):
    t = 8192
    fwd = moe.layer_forward(sup, 1, t, True, True)
    # router 2·T·h·E + routed 2·2·T·l·f·k + latent projections 2·T·2·h·l + shared 2·2·T·h·f_s
    assert fwd.mlp == pytest.approx(2 * t * H * E + 4 * t * L * F * K + 4 * t * H * L + 4 * t * H * FS)


def test_model_flops_per_token_match_the_published_convention(sup):
    """Megatron-Bridge's flop_utils (hybrid path) for the 26.04.01 rows, 3 x forward per token, by hand:
    Mamba in_proj 2h(2·d_in + 2GN + H_m) + out_proj 2·d_in·h (d_in 8,192; the scan's 7·d_in·N too), attention
    4h(h + h·g/a + s/2), MoE 4·l·f·k + 4·h·l + 4·h·f_s (no router), logits 2·h·V per depth, with the two MTP
    depths' *E layers: 84.69 G per token, the value the rows' TFLOP/s over tokens/s imply (84.3-84.7 G)."""
    s = 8192
    mamba = 2 * H * (2 * 8192 + 2 * 8 * 128 + 128) + 7 * 8192 * 128 + 2 * 8192 * H
    attn = 4 * H * (H + H * 2 / 32 + s / 2)
    moe_layer = 4 * L * F * K + 4 * H * L + 4 * H * FS
    logits = 2 * H * 131072
    published = 3 * (40 * mamba + (8 + 2) * attn + (40 + 2) * moe_layer + 3 * logits)
    assert published == pytest.approx(84.69e9, rel=2e-3)
    # dtsim's own MoE-layer count adds only the router's 2·h·E per token to the same terms
    assert moe.layer_forward(sup, 1, s, True, True).mlp / s == pytest.approx(moe_layer + 2 * H * E)


def test_kernels_carry_latent_tokens(sup):
    ops = moe_ops.moe_block_ops(sup, 1, 8192, 1, 2, KernelConfig(), "none", ep=64)
    pre = {op.name: op for op in ops.pre}
    post = {op.name: op for op in ops.post}
    ex = {op.name: op for op in ops.experts}
    t = 8192
    assert (pre["latent_down"].m, pre["latent_down"].n, pre["latent_down"].k) == (t, L, H)
    assert (post["latent_up"].m, post["latent_up"].n, post["latent_up"].k) == (t, H, L)
    # the permutes carry l-wide copies: T·k copies, read and written, 2 bytes each
    assert pre["permute"].bytes == pytest.approx(2 * 2 * t * K * L)
    assert ex["experts_up"].k == L and ex["experts_down"].n == L
    assert ops.local_experts == E // 64


def test_without_latent_size_nothing_changes(sup):
    plain = sup.model_copy(update={"moe": sup.moe.model_copy(update={"latent_size": None})})
    assert moe.block(plain, True).experts == E * 2 * H * F
    names = {op.name for op in moe_ops.moe_block_ops(plain, 1, 4096, 1, 2, KernelConfig(), "none", ep=8).pre}
    assert "latent_down" not in names


def test_alltoall_bytes_shrink_to_the_latent_width(sup):
    """The dispatch carries l-wide tokens (Megatron-Core's dispatcher sizes its buffers to moe_latent_size):
    the same run with and without the latent width differs in its EP bytes by l/h = 1/4."""
    from simulator.config.loader import scenario_from_dict
    from simulator.parallel.build import context_for

    def ep_bytes(latent):
        model = sup.model_dump(exclude_unset=True)
        model["moe"] = {**model["moe"], "latent_size": latent}
        sc = scenario_from_dict({"model": model, "cluster": {"topology": "dgx-b200", "nodes": 1},
                                 "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8},
                                 "parallel": {"ep": 8}})
        return context_for(sc).work.moe.dispatch_bytes

    assert ep_bytes(L) / ep_bytes(None) == pytest.approx(L / H)


def test_hybrid_mtp_depths_add_an_moe_block_and_the_head_each(sup):
    """Nemotron 3 Super trains two MTP depths (mtp_num_layers 2, pattern *E): each adds to the hardware FLOPs
    three times (forward, backward) an MoE block, the 2h -> h eh_proj and the logits (module docstring of
    simulator.workload.mtp); the model FLOPs stay the main model's."""
    from simulator.workload import flops

    b, s = 1, 8192
    base = flops.step(sup, b, s, 1, causal=True)
    two = flops.step(sup.model_copy(update={"mtp_layers": 2}), b, s, 1, causal=True)
    blk = moe.layer_forward(sup, b, s, True, True)
    one_depth = blk.unwindowed + blk.attention_core + 2 * b * s * H * 131072 + 2 * b * s * 2 * H * H
    assert two.hardware_flops - base.hardware_flops == pytest.approx(3 * 2 * one_depth)
    assert two.model_flops == base.model_flops
