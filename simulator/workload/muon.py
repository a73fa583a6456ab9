"""Muon: the optimizer step of Megatron-Core's ``--optimizer muon`` / ``dist_muon`` (``training.optimizer: muon``).

Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv:2502.16982) keeps one
momentum buffer per weight matrix and replaces the update by the momentum's nearest semi-orthogonal matrix,
computed by ``k`` Newton-Schulz iterations (``training.muon_ns_steps``, Megatron-Core ``--muon-num-ns-steps``,
default 5). Megatron-Core (``megatron/core/optimizer/muon.py``) gives Muon every parameter with two dimensions
that is not the embedding or the output layer; those and the 1-D ones (norms, biases) stay on Adam.

**FLOPs.** NVIDIA Emerging-Optimizers ``muon_utils.newton_schulz`` transposes a ``rows × cols`` matrix so that
``X`` is ``m × n`` with ``m = min(rows, cols)``, ``n = max``, and runs per iteration
``A = X·Xᵀ`` (``2m²n``), ``B = b·A + c·A·A`` (``2m³``, one ``addmm``), ``X = a·X + B·X`` (``2m²n``, one ``addmm``):
``k·(4m²n + 2m³)`` FLOPs per matrix in three GEMMs per iteration. At the recipes' ``muon_fp32_matmul_prec:
medium`` it casts ``X`` to BF16 first ("PyTorch doesn't really have FP32 I/O BF16 compute kernels"), so the
GEMMs run at the 16-bit rate. Under tensor parallelism the Megatron-Bridge recipes' ``muon_tp_mode:
blockwise`` orthogonalises each rank's shard on its own (its local shape); Megatron-Core fuses QKV and the
gated MLP's gate and up projections into one weight each and orthogonalises the fused matrix
(``split_qkv=False``). Each routed expert's weights are separate matrices (``TEGroupedMLP``).

**Memory traffic.** ``OrthogonalizedOptimizer.step`` per matrix, fp32 master ``p``, gradient ``g`` and momentum
``m``: decoupled weight decay ``p += -λ·p`` (8 B/param), ``m.lerp_(g)`` (12), Nesterov ``g.lerp(m)`` (12),
``F.normalize`` (norm and divide: 12), the BF16 cast in and out (6 + 6), the spectral scale (8), ``p.add_`` (12),
and Megatron's ``Float16OptimizerWithFloat16Params`` copy of the master into the 16-bit weight (6): 82 B per
parameter, issued one matrix at a time from Python (``MUON_KERNELS_PER_MATRIX`` plus three GEMMs per
iteration).

**Distribution** (``simulator.parallel.ddp``): ``dist_muon`` (``parallel.distributed_optimizer`` with Muon) is
Megatron-Core's ``LayerWiseDistributedOptimizer``: gradients all-reduced as plain DDP does, each data-parallel
rank steps whole matrices (about ``1/dp`` of them), then the updated weights are all-gathered
(Emerging-Optimizers ``docs/primer/layerwise-distributed-optimizer.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.workload import params
from simulator.workload.op import Op

#: ``OrthogonalizedOptimizer.step`` memory traffic per Muon parameter (module docstring), bytes.
MUON_BYTES_PER_PARAM = 8 + 12 + 12 + 12 + 6 + 6 + 8 + 12 + 6
#: Kernels per matrix besides the Newton-Schulz GEMMs: weight decay, two lerps, norm, clamp and divide, the two
#: casts, the scale, the update and the copy into the 16-bit weight.
MUON_KERNELS_PER_MATRIX = 11
#: Newton-Schulz GEMMs per iteration (``newton_schulz_step``: ``X·Xᵀ`` and two ``addmm``).
NS_GEMMS_PER_STEP = 3
#: Muon's fp32 state per parameter besides the 16-bit weight and the gradient: master weight and momentum.
MUON_STATE_BYTES = 8


def ns_flops(rows: int, cols: int, steps: int) -> float:
    """Newton-Schulz FLOPs for one ``rows × cols`` matrix: ``k·(4m²n + 2m³)``, ``m`` the smaller side."""
    m, n = sorted((rows, cols))
    return float(steps * (4 * m * m * n + 2 * m ** 3))


def block_matrices(model: Any, moe_layer: bool, tp: int = 1, etp: int = 1) -> tuple[list, list]:
    """``([(rows, cols, count)] of the dense weights, [(rows, cols, count)] of ONE routed expert)`` of a block on
    one tensor-parallel rank (column-parallel weights split on their output side, row-parallel on their input
    side; ``etp`` for the experts' expert-tensor parallelism). Router and MLA down-projections are replicated."""
    h = model.hidden_size
    gated = model.mlp_matrices - 1  # 2 for a gated MLP (gate and up fused into fc1), else 1
    if model.is_mla:
        a, qr, kvr = model.n_heads, model.q_lora_rank, model.kv_lora_rank
        dn, dr, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        attn = [(qr, h, 1), (a * (dn + dr) // tp, qr, 1)] if qr else [(a * (dn + dr) // tp, h, 1)]
        attn += [(kvr + dr, h, 1), (a * (dn + dv) // tp, kvr, 1), (h, a * dv // tp, 1)]
    else:
        attn = [((model.q_dim + 2 * model.kv_dim) // tp, h, 1), (h, model.q_dim // tp, 1)]
    if not moe_layer or model.moe is None:
        f = model.ffn_hidden_size // tp
        return attn + [(gated * f, h, 1), (h, f, 1)], []
    m = model.moe
    dense = attn + [(m.n_experts, h, 1)]
    if m.n_shared_experts:
        fs = m.shared_width // tp
        dense += [(gated * fs, h, m.n_shared_experts), (h, fs, m.n_shared_experts)]
    fe = m.expert_ffn_hidden_size // etp
    return dense, [(gated * fe, h, 1), (h, fe, 1)]


@dataclass(frozen=True)
class NSCost:
    """Newton-Schulz cost of a group of matrices per parameter, and the shape of the one carrying most FLOPs
    (its GEMMs' tile and wave efficiency stands for the group's)."""

    flops_per_param: float
    matrices_per_param: float
    shape: tuple[int, int]


def _cost(mats: list, steps: int) -> NSCost | None:
    params = sum(r * c * n for r, c, n in mats)
    if not params:
        return None
    flops = sum(ns_flops(r, c, steps) * n for r, c, n in mats)
    r, c, _ = max(mats, key=lambda t: ns_flops(t[0], t[1], steps) * t[2])
    return NSCost(flops / params, sum(n for *_, n in mats) / params, tuple(sorted((r, c))))


def costs(model: Any, steps: int, tp: int = 1, etp: int = 1) -> tuple[NSCost | None, NSCost | None]:
    """(dense weights, routed experts) Newton-Schulz costs over the model's blocks."""
    dense: list = []
    experts: list = []
    for i in range(model.n_layers):
        moe_layer = model.is_moe_block(i)
        d, e = block_matrices(model, moe_layer, tp, etp)
        dense += d
        experts += [(r, c, n * model.moe.n_experts) for r, c, n in e]
    return _cost(dense, steps), _cost(experts, steps)


def step_ops(n: float, cost: NSCost | None, steps: int, name: str) -> list[Op]:
    """Muon's step over ``n`` parameters of one group: the elementwise passes (``MUON_BYTES_PER_PARAM``) and
    the Newton-Schulz GEMMs (``cost``), each launched per matrix."""
    if n <= 0 or cost is None:
        return []
    mats = max(1, round(n * cost.matrices_per_param))
    m, k = cost.shape  # X·Xᵀ: (m × m), depth n; the addmm's: (m × m) and (m × n), depth m
    return [Op(f"muon_update{name}", "memory", 0.0, MUON_BYTES_PER_PARAM * n, launches=mats * MUON_KERNELS_PER_MATRIX),
            Op(f"muon_newton_schulz{name}", "gemm", cost.flops_per_param * n, 0.0, m=m, n=m, k=k,
               launches=mats * NS_GEMMS_PER_STEP * steps)]


def check(scenario: Any) -> str | None:
    """What stops ``training.optimizer: muon`` on this scenario, or None."""
    t, p = scenario.training, scenario.parallel
    if t.optimizer != "muon":
        return None
    if p.framework != "ddp":
        return (f"training.optimizer muon is modelled as Megatron-Core's Muon (framework ddp), not {p.framework}; "
                "set parallel.framework: ddp or training.optimizer: adam")
    if t.precision not in ("bf16", "fp8"):
        return (f"training.optimizer muon needs bf16 or fp8 training (Megatron-Core's Muon has no fp16 or fp32 path "
                f"modelled), got training.precision {t.precision}")
    return None


def state_sizes(scenario: Any, dense_params: float, outside: float | None = None) -> tuple[tuple, tuple]:
    """Bytes per parameter ``(weight, gradient, optimizer)`` of the non-expert and of the routed-expert parameters
    of a GPU holding ``dense_params`` non-expert ones under Muon (``simulator.workload.memory``): the 16-bit
    weight, the gradient buffer (``grad_reduce_in_fp32``) and the fp32 master with Muon's one momentum buffer
    (``MUON_STATE_BYTES``), Adam's 12 B for the ``outside`` embedding and output-layer parameters (default the
    most-loaded GPU's, ``params.outside_local``; norm and bias vectors counted as Muon's: under 0.1% of a block); a 16-bit gradient
    buffer's fp32 copy for the step (``ParallelConfig.step_grad_copy_bytes``) is a transient of the step
    (``memory.buffers``), as under Megatron's distributed optimizer."""
    m, p = scenario.model, scenario.parallel
    grad = p.grad_buffer_bytes(scenario.training.precision)
    adam = min(float(params.outside_local(m, p.tp, p.pp) if outside is None else outside), dense_params)
    dense = (MUON_STATE_BYTES * (dense_params - adam) + 12 * adam) / dense_params if dense_params else MUON_STATE_BYTES
    return (2, grad, dense), (2, grad, MUON_STATE_BYTES)
