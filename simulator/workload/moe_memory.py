"""Per-GPU memory of MoE models: expert states sharded over EP × ETP and expert-DP, and the
activations of routed tokens.

* Model states: the non-expert part of the most-loaded stage is sharded like a dense model (over
  the DP group per the ZeRO stage); each GPU holds ``E/ep`` experts of every MoE block of its
  stage, each split over ``etp``, and ZeRO / the distributed optimizer shards those over the
  expert-data-parallel group ``edp = tp·cp·dp/(ep·etp)`` (Megatron-Core keeps expert parameters in
  their own buffers sharded over the expert-DP group; DeepSpeed-MoE shards expert states over the
  expert-DP group the same way: Rajbhandari et al. 2022 "DeepSpeed-MoE" §5). Expert weights are
  never gathered per use here, so ZeRO-3 / FULL_SHARD shard them like stage 2 (gradients and
  optimizer states over expert-DP, parameters whole).
* Activations: in an MoE block the dense MLP's stored tensors (input ``2·b·s·h`` and, for SwiGLU,
  gate/up ``2·2·b·s·f/t`` and the product ``2·b·s·f/t`` bytes in 16-bit, Korthikanti et al. 2022
  Table 2 generalised to width ``f``) are replaced by the routed tokens' tensors: the permuted
  copies ``T·k·h``, the expert inputs of width ``k_mlp−1`` times ``f_e/etp`` and the activation
  output (``× imbalance`` on the most-loaded rank), plus the shared experts' like a dense MLP of
  width ``n_s·f_s``; ``T = b·s/tp``. The all-to-all receive buffer is the permuted copies
  (counted once).
"""

from __future__ import annotations

import math
from typing import Any

from simulator.workload import moe as wmoe


def _mlp_stored(tokens: float, h: int, width: float, k_mlp: int, pb: int) -> float:
    """Bytes an MLP keeps for its backward: input, the (k_mlp − 1) up projections, the activation output."""
    return pb * tokens * (h + (k_mlp - 1) * width + width)


def activation_delta_per_layer(scenario: Any, pb: int) -> float:
    """Average extra bytes per block (MoE block minus the dense block it replaces) per micro-batch;
    0 under full recomputation (only block inputs are stored)."""
    if scenario.training.activation_checkpointing == "full":
        return 0.0
    return moe_block_extra(scenario, pb) * wmoe.n_moe_layers(scenario.model) / scenario.model.n_layers


def moe_block_extra(scenario: Any, pb: int) -> float:
    """Extra activation bytes of ONE MoE block over the dense block it replaces, one micro-batch
    (also what a block being recomputed holds on top of the dense estimate)."""
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    if m.moe is None:
        return 0.0
    b, s, tp = tr.micro_batch_size, tr.seq_len // par.cp, par.tp  # a CP rank holds s/cp tokens
    h, k_mlp, moe = m.hidden_size, m.mlp_matrices, m.moe
    dense = _mlp_stored(b * s, h, m.ffn_hidden_size / tp, k_mlp, pb)
    t = b * s / tp * moe.top_k * moe.effective_imbalance
    routed = pb * t * h + _mlp_stored(t, 0, moe.expert_ffn_hidden_size / par.etp, k_mlp, pb)
    shared = _mlp_stored(b * s, h, moe.n_shared_experts * moe.shared_width / tp, k_mlp, pb) if moe.n_shared_experts else 0
    return routed + shared - dense


def model_states(scenario: Any, zero_model_states, shard_degree: int, stage: int, sizes: tuple) -> Any:
    """Model-state bytes of an MoE model: the dense part over ``shard_degree``, the experts over
    the expert-DP group (both with ``zero_model_states`` and the framework's bytes per parameter)."""
    m, par = scenario.model, scenario.parallel
    split = wmoe.local(m, par.tp, par.pp, par.ep, par.etp)
    dense = zero_model_states(split.dense, shard_degree, stage, *sizes)
    edp = max(1, scenario.n_gpus // (par.pp * par.ep * par.etp))
    # Expert weights are not gathered per use (simulator.parallel.expert): at most stage-2 sharding.
    exp = zero_model_states(split.experts, edp, min(stage, 2), *sizes)
    return type(dense)(dense.params_bytes + exp.params_bytes, dense.grads_bytes + exp.grads_bytes,
                       dense.optimizer_bytes + exp.optimizer_bytes)


def stage_blocks(scenario: Any) -> int:
    return math.ceil(scenario.model.n_layers / scenario.parallel.pp)
