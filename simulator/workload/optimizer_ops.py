"""Ops of the optimizer step on one GPU: Adam (fused or PyTorch's unfused passes) or Muon
(``simulator.workload.muon``), gradient clipping by global norm and the once-per-step FP8 weight cast, the
multi-tensor passes as ``multi_tensor_apply`` launches.
Memory-bound; FLOPs per formulas.md §1.2.
"""

from __future__ import annotations

import math

from simulator.workload import muon as wmuon
from simulator.workload.fp8_casts import FP8_WEIGHT_CAST_BYTES, TRANSPOSED_COPY_BYTES, TRANSPOSED_RECIPES
from simulator.workload.ops import Op

#: Adam bytes per parameter. Fused (DeepSpeed FusedAdam / torch ``fused=True``, one multi-tensor pass):
#: read fp32 master, m, v, grad (16 B), write master, m, v (12 B) and the 16-bit copy (2 B) = 30 B.
#: Unfused (torch ``optim/adam.py::_single_tensor_adam``): one kernel per line of the update, below.
_ADAM_FUSED_BYTES = 4 * 4 + 3 * 4 + 2
_ADAM_UNFUSED_PASSES: tuple[tuple[str, int, int], ...] = (
    # (kernel, bytes read, bytes written) per parameter; fp32 state and gradient.
    ("adam_exp_avg_lerp", 8, 4),  # m.lerp_(g, 1-β1)
    ("adam_exp_avg_sq_mul", 4, 4),  # v.mul_(β2)
    ("adam_exp_avg_sq_addcmul", 8, 4),  # v.addcmul_(g, g, 1-β2)
    ("adam_sqrt", 4, 4),  # v.sqrt()
    ("adam_div", 4, 4),  # / sqrt(bias_correction2)
    ("adam_add_eps", 4, 4),  # .add_(eps)
    ("adam_addcdiv", 12, 4),  # p.addcdiv_(m, denom, -lr/bc1)
    ("adam_cast_params", 4, 2),  # fp32 master -> 16-bit working copy
)
#: Adam arithmetic per parameter (moments, bias correction, sqrt, divide, update): O(10) (formulas.md §1.2).
ADAM_FLOPS_PER_PARAM = 12.0


#: ``multi_tensor_apply`` (PyTorch ``aten/src/ATen/native/cuda/MultiTensorApply.cuh``, Apex
#: ``csrc/multi_tensor_apply.cuh``): a launch covers at most 320 blocks of ``kChunkSize = 65536``
#: elements, so a pass over ``n`` parameters launches ``ceil(n / (65536·320))`` kernels (the tensor-count
#: limit per launch, 36–110, only matters for many tiny tensors and is not modelled).
MTA_ELEMENTS_PER_LAUNCH = 65536 * 320
#: Gradient clipping by global norm (``torch.nn.utils.clip_grad_norm_``, foreach; Megatron
#: ``clip_grad_norm_fp32``): ``_foreach_norm`` reads the fp32 gradients (4 B/param), then stack,
#: norm and the clip coefficient (3 small kernels), then ``_foreach_mul_`` reads and writes them (8 B).
GRAD_CLIP_NORM_BYTES, GRAD_CLIP_SCALE_BYTES, GRAD_CLIP_SMALL_KERNELS = 4, 8, 3


def _mta_launches(n: float) -> int:
    return max(1, math.ceil(n / MTA_ELEMENTS_PER_LAUNCH))


def optimizer_ops(n_params_local: float, fused_adam: bool, grad_clipping: bool = False,
                  fp8_weight_cast: bool = False, fp8_recipe: str = "", muon: tuple | None = None,
                  adam_params: float = 0.0, expert_params: float = 0.0, cast_params: float | None = None) -> list[Op]:
    """The optimizer step over the ``n_params_local`` parameters this GPU updates.

    Adam, fused: one op of ``30`` B/param. Unfused (torch ``foreach``): 8 elementwise passes, ``78`` B/param
    in total (table ``_ADAM_UNFUSED_PASSES``). FLOPs ``≈ 12`` per parameter either way. Each pass is
    ``multi_tensor_apply`` launches (``MTA_ELEMENTS_PER_LAUNCH``). ``grad_clipping`` adds the global-norm
    clipping before the step (``GRAD_CLIP_*``); ``fp8_weight_cast`` the once-per-step FP8 cast of
    the updated weights (``FP8_WEIGHT_CAST_BYTES``), whose transposed copy (a per-tensor ``fp8_recipe``)
    GPUs with any-layout FP8 GEMMs do not write (``fp8_casts.TRANSPOSED_RECIPES``), over ``cast_params`` weights
    (default ``n_params_local``; more under ``training.lora``, whose frozen weights are cast too; none, no op).

    ``muon = (dense NSCost, expert NSCost, Newton-Schulz steps)`` (``simulator.workload.muon``): Adam steps
    only ``adam_params`` of them (embedding, output layer), Muon the ``expert_params`` routed-expert weights
    and the rest of the blocks' weights.
    """
    n = float(n_params_local)
    mta = _mta_launches(n)
    out: list[Op] = []
    if grad_clipping:
        out += [Op("grad_norm", "memory", n, GRAD_CLIP_NORM_BYTES * n, launches=mta + GRAD_CLIP_SMALL_KERNELS),
                Op("grad_clip_scale", "memory", n, GRAD_CLIP_SCALE_BYTES * n, launches=mta)]
    nc = n if cast_params is None else float(cast_params)
    transposed = TRANSPOSED_COPY_BYTES * nc if fp8_recipe in TRANSPOSED_RECIPES else 0.0
    cast = [Op("fp8_weight_cast", "memory", 0.0, FP8_WEIGHT_CAST_BYTES * nc, launches=_mta_launches(nc),
               transpose_bytes=transposed)] if fp8_weight_cast and nc > 0 else []
    if muon is None:
        return out + _adam_ops(n, fused_adam) + cast
    dense, experts, steps = muon
    return (out + wmuon.step_ops(n - adam_params - expert_params, dense, steps, "")
            + wmuon.step_ops(expert_params, experts, steps, "_experts")
            + (_adam_ops(adam_params, fused_adam) if adam_params > 0 else []) + cast)


def _adam_ops(n: float, fused: bool) -> list[Op]:
    """Adam's step over ``n`` parameters: one fused pass, or PyTorch's unfused passes."""
    mta = _mta_launches(n)
    if fused:
        return [Op("adam", "memory", ADAM_FLOPS_PER_PARAM * n, _ADAM_FUSED_BYTES * n, launches=mta)]
    per_kernel = ADAM_FLOPS_PER_PARAM / len(_ADAM_UNFUSED_PASSES)
    return [Op(name, "memory", per_kernel * n, (rd + wr) * n, launches=mta) for name, rd, wr in _ADAM_UNFUSED_PASSES]
