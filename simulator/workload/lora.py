"""LoRA fine-tuning (``training.lora``; Hu et al. 2021, arXiv:2106.09685): what freezing the base weights and
training low-rank adapters ``B·A`` of rank ``r`` beside the blocks' linear layers changes in a step.

* Every linear GEMM of the blocks and the output layer's keep their forward and their data-gradient GEMM but
  lose the weight-gradient GEMM (``Op.frozen``, ``workload.ops.backward_ops``), and the embedding gets no
  gradient (its backward scatter-add does not run). The weight GEMMs then cost 2 forwards per step instead of 3
  (the attention core's backward is unchanged): NeMo's LoRA FLOP convention is 2/3 of full training's, its
  24.07 table's Llama 2 7B LoRA and SFT rows implying 26.7 and 39.8 GFLOP per token (``step_flops_terms``).
* Beside each targeted linear (``LoraConfig.modules``) of ``m`` tokens, ``k`` inputs and ``n`` outputs on a
  rank, the adapter: the ``A`` (``m × r × k``) and ``B`` (``m × n × r``) GEMMs in 16-bit (NeMo's
  ``ParallelLinearAdapter`` is built of Megatron's ``ColumnParallelLinear`` / ``RowParallelLinear``, not of
  Transformer Engine's FP8 modules), trained (data and weight gradients), then its output scaled by
  ``alpha / r`` and added to the base layer's: ``ADAPTER_PASSES`` passes over the ``m × n`` output (the scaled
  copy written, 2; the add, 3) in 2 kernels; backward the scale's gradient, 2 passes in 1 kernel (the add's is
  the identity). Its Python (the two linears' forward functions, the scale, the add, the module call) adds
  ``ADAPTER_HOST_CALLS`` ATen calls to the block's host time each way (``simulator.workload.host``; U:
  counted from the module's structure, not measured). The adapters' own tensor-parallel collectives (an
  ``m × r`` all-gather or all-reduce per adapter) are not simulated (U: ``r / h`` of the block's TP bytes,
  latency-bound).
* Gradients, their data-parallel reduction, the optimizer step and its states cover the adapters only
  (``block_params``: ``r·(k + n)`` per adapter, split over the TP ranks); the base weights stay in the
  framework's parameter dtype without gradient, master copy or optimizer states (``model_states``). Transformer
  Engine re-casts the frozen weights to FP8 at each step's first micro-batch as it does trained ones
  (``is_first_microbatch``), so the once-per-step weight cast covers them (``cast_scale``), unless they are
  stored in FP8 (``parallel.fp8_param_gather``; NeMo's ``fp8_params``, Transformer Engine's ``fp8_model_init``):
  then the blocks' linear weights take 1 B each and are never cast. The adapters are 16-bit modules: no FP8 weight of their own.
* Saved activations: a frozen linear keeps no input, having no weight gradient to compute (Transformer
  Engine's ``BasicLinear`` and ``Linear``: the input is saved only when the weight requires a gradient); an
  adapter keeps its own 16-bit input (``workload.activations.layer_activation_bytes``, ``adapters``).
* Kept as in full training (U): the FP8 casts (Transformer Engine's ``Linear`` quantizes the output gradient
  row- and column-wise whether or not a weight gradient follows: ``module/linear.py``
  ``grad_output_quantizer.set_usage(rowwise=True, columnwise=True)``) and the host time of the base block's
  backward; an adapter's dropout (NeMo's ``dropout_position: pre``) is not modelled.

Modelled for Megatron-style data parallelism (``parallel.framework: ddp``) and dense blocks (``check``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simulator.units import DTYPE_BYTES
from simulator.workload.op import ADD_FLOPS, Op, gemm, memory_op

#: The forward GEMM op of each targetable module (``workload.ops.layer_ops`` names).
MODULE_OPS = {"qkv": "qkv", "proj": "out_proj", "fc1": "mlp_up", "fc2": "mlp_down"}
#: Passes over an adapter's ``m × n`` output: its ``alpha / r`` scaling (read, write) and the add to the base
#: output (two reads, a write); backward the scaling's gradient (read, write).
ADAPTER_PASSES, ADAPTER_BWD_PASSES = 5, 2
#: ATen calls of one adapter's forward beyond the reference block's: the ``A`` and ``B`` linears (a matmul and
#: the autograd function around each), the scaling, the add, and the adapter module's call (U).
ADAPTER_HOST_CALLS = 6


def check(scenario: Any) -> str | None:
    """What stops ``training.lora`` on this scenario, or None."""
    t, p, m = scenario.training, scenario.parallel, scenario.model
    if t.lora is None:
        return None
    if p.framework != "ddp":
        return (f"training.lora is modelled for parallel.framework ddp (Megatron-Core / NeMo, PyTorch DDP), not "
                f"{p.framework}: under FSDP or ZeRO the frozen weights are gathered but never reduced, which is not "
                "modelled; set parallel.framework: ddp or remove training.lora")
    if m.moe is not None or m.is_mla:
        return "training.lora is modelled for dense blocks; remove it for an MoE or MLA model"
    if t.optimizer != "adam":
        return "training.lora trains its adapters with Adam; set training.optimizer: adam"
    return None


def module_shapes(model: Any) -> dict[str, tuple[int, int]]:
    """``(inputs k, outputs n)`` of each targetable linear layer, whole (before tensor parallelism)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    return {"qkv": (h, model.q_dim + 2 * model.kv_dim), "proj": (model.q_dim, h),
            "fc1": (h, (model.mlp_matrices - 1) * f), "fc2": (f, h)}


def block_params(model: Any, lora: Any, tp: int) -> float:
    """Adapter parameters of one block on a rank: ``r·(k + n)`` per targeted layer, split over the ``tp`` ranks
    (one of ``A`` and ``B`` is split with its base layer, the other by rank; U: as one even split)."""
    shapes = module_shapes(model)
    return sum(lora.rank * sum(shapes[mod]) for mod in lora.modules) / tp


def block_forward_flops(model: Any, lora: Any, tokens: float) -> float:
    """Forward FLOPs of one block's adapters over ``tokens`` tokens: ``2·tokens·r·(k + n)`` per targeted layer."""
    return 2.0 * tokens * block_params(model, lora, 1)


def _adapter(op: Op, rank: int, pb: int) -> list[Op]:
    """The adapter beside the base GEMM ``op`` (``m × n × k`` on this rank): ``A``, ``B`` and the scaled add."""
    m, n, k, launches = op.m, op.n, op.k, op.launches
    a = replace(gemm(f"{op.name}.lora_a", m, rank, k, pb), launches=launches, extra_host_calls=ADAPTER_HOST_CALLS)
    b = replace(gemm(f"{op.name}.lora_b", m, n, rank, pb), launches=launches)
    add = replace(memory_op(f"{op.name}.lora_add", m * n, ADAPTER_PASSES, pb, 2 * ADD_FLOPS),
                  launches=2 * launches, bwd_launches=launches, bwd_bytes=float(ADAPTER_BWD_PASSES * pb * m * n))
    return [a, b, add]


def block_ops(fwd: list[Op], lora: Any, pb: int) -> list[Op]:
    """A block's forward ops under LoRA: every linear GEMM frozen, each targeted one followed by its adapter
    (recomputed when it is)."""
    targets = {MODULE_OPS[mod] for mod in lora.modules}
    out: list[Op] = []
    for op in fwd:
        if op.kind != "gemm" or not op.linear:
            out.append(op)
            continue
        out.append(replace(op, frozen=True))
        if op.name in targets:
            out += [replace(a, recompute=op.recompute) for a in _adapter(op, lora.rank, pb)]
    return out


def head_ops(head_fwd: tuple) -> tuple:
    """The output layer's ops with its logits GEMM frozen (the output layer is a base weight)."""
    return tuple(replace(op, frozen=True) if op.kind == "gemm" else op for op in head_fwd)


def model_states(scenario: Any, psi: float, outside: float, adapters: float, states: Callable[..., Any]) -> Any:
    """Model states of a GPU holding ``psi`` base parameters (``outside`` of them the embedding and output layer)
    and ``adapters`` adapter parameters (``adapters_local``): the adapters' weights, gradients and optimizer states as
    ``states`` (``workload.memory.model_states``) gives them, plus the base weights at the parameter bytes it
    gives the whole model (16-bit under Megatron's distributed optimizer, fp32 under AMP DDP; 1 B stored in FP8
    under ``parallel.fp8_param_gather``), with no gradient or optimizer state."""
    st = states(scenario, adapters, 0.0)
    if scenario.parallel.fp8_param_gather:  # FP8 primary weights in the blocks' linears; embedding, output 16-bit
        frozen = DTYPE_BYTES["fp8"] * (psi - outside) + DTYPE_BYTES["bf16"] * outside
    else:
        frozen = states(scenario, psi, outside).params_bytes
    return replace(st, params_bytes=st.params_bytes + frozen)


def cast_scale(parallel: Any, base: float, adapters: float) -> float:
    """What the once-per-step FP8 weight cast covers per trained (adapter) parameter: the ``base`` frozen weights
    over the ``adapters``, or nothing where the frozen weights are stored in FP8 (``parallel.fp8_param_gather``)."""
    return 0.0 if parallel.fp8_param_gather else base / adapters


def adapters_local(scenario: Any, blocks: int) -> float:
    """Adapter parameters of a GPU holding ``blocks`` blocks (what its gradient buckets hold)."""
    return blocks * block_params(scenario.model, scenario.training.lora, scenario.parallel.tp)
