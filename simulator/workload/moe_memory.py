"""Per-GPU memory of MoE models: expert states sharded over EP × ETP and expert-DP, and the
activations of routed tokens.

* Model states: the non-expert part of the most-loaded stage is sharded like a dense model (over
  the DP group per the ZeRO stage); each GPU holds ``E/ep`` experts of every MoE block of its
  stage, each split over ``etp``, and ZeRO / the distributed optimizer shards those over the
  expert-data-parallel group ``edp = tp·cp·dp/(ep·etp)`` (Megatron-Core keeps expert parameters in
  their own buffers sharded over the expert-DP group; DeepSpeed-MoE shards expert states over the
  expert-DP group the same way: Rajbhandari et al. 2022 "DeepSpeed-MoE" §5). ZeRO-3 / FSDP
  shard the expert weights too and hold two MoE blocks' gathered experts at a time (the one in use
  and the one prefetched, ``simulator.parallel.expert``), counted with the parameters.
* Activations: in an MoE block the dense MLP's stored tensors past its input (for SwiGLU gate/up
  ``2·2·b·s·f/t`` and the product ``2·b·s·f/t`` bytes in 16-bit, Korthikanti et al. 2022 Table 2
  generalised to width ``f``, as ``memory.layer_activation_bytes`` counts them) are replaced by the
  routed tokens' tensors: the permuted copies ``T·k·h`` (the experts' input, also the all-to-all
  receive buffer), the ``k_mlp−1`` expert up projections of width ``f_e/etp`` and the activation
  output (``× MoEConfig.rank_imbalance`` on the most-loaded rank), plus the shared experts' like a dense MLP of
  width ``n_s·f_s``; ``T = etp·b·s/(tp·cp)``: with expert tensor parallelism a rank holds its ETP
  group's all-gathered tokens. The MLP input stays (it is the router's input), unless
  selective recomputation re-runs the pre-MLP norm (``training.recompute_modules: layernorm``); with
  ``moe_act`` the activation output goes too, with ``shared_experts`` the shared experts' tensors, with
  ``moe`` all the layer's (rebuilt for one block at a time during the backward).
* MLA blocks store, instead of Q, K, V and the out-projection input of width ``a·d_h``: the
  compressed query ``d_c'`` before and after its norm, the compressed KV ``d_c + d_r`` and its
  normalised ``d_c``, and Q, K (``a·d_qk`` each, ÷t), V and the out-projection input (``a·d_v``
  each, ÷t). Selective recomputation of ``mla_up_proj`` drops Q, K and V (rebuilt from the
  normalised latents before the backward: Megatron-Core ``MLASelfAttention`` ``recompute_up_proj``).
"""

from __future__ import annotations

from typing import Any

from simulator.workload import moe as wmoe
from simulator.workload import recompute
from simulator.workload.activations import linear_input_bytes, out_proj_input_bytes


def _mlp_stored(tokens: float, h: int, width: float, k_mlp: int, pb: int, lin: int | None = None) -> float:
    """Bytes an MLP keeps for its backward: input, the (k_mlp − 1) up projections, the activation
    output; the input and the activation output are linear inputs, ``lin`` bytes each (1 under a
    Transformer Engine FP8 recipe: ``activations.linear_input_bytes``), default ``pb``."""
    lin = pb if lin is None else lin
    return tokens * (lin * h + pb * (k_mlp - 1) * width + lin * width)


def activation_delta_per_layer(scenario: Any, pb: int) -> float:
    """Average extra bytes per block (MoE block minus the dense block it replaces) per micro-batch;
    0 under full recomputation (only block inputs are stored)."""
    if scenario.training.activation_checkpointing == "full":
        return 0.0
    moe_part = moe_block_extra(scenario, pb) * scenario.model.n_moe_blocks / scenario.model.n_layers
    return moe_part + mla_block_extra(scenario, pb)


def mla_block_extra(scenario: Any, pb: int) -> float:
    """Extra activation bytes of one MLA attention over the dense estimate's Q, K, V and out-projection
    input; the normalised latents (the up projections' inputs) and the out-projection input are linear
    inputs (``activations.linear_input_bytes``)."""
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    if not m.is_mla:
        return 0.0
    sb, tp = tr.micro_batch_size * tr.seq_len // par.cp, par.tp
    a, qr, kvr = m.n_heads, m.q_lora_rank or 0, m.kv_lora_rank
    dqk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    lin = linear_input_bytes(scenario, pb)
    core_kept = recompute.attention_mode(tr, par.framework) != "selective"  # a checkpointed core keeps no copy
    out = out_proj_input_bytes(pb, lin, tr.kernels.flash_attention and core_kept)  # the attention output as stored
    qkv = 0 if "mla_up_proj" in recompute.modules(tr) else 2 * a * dqk + a * dv
    mla = pb * (qr + kvr + m.qk_rope_head_dim) + lin * (qr + kvr) + (pb * qkv + out * a * dv) / tp
    return sb * (mla - (pb * (m.q_dim + 2 * m.kv_dim) + out * m.q_dim) / tp)


def _layer_parts(scenario: Any, pb: int) -> tuple[float, float, float]:
    """Bytes one MoE block's MoE layer stores for its backward, one micro-batch: the routed experts'
    (``moe_act``'s activation output left out), the shared experts', and the dense MLP's stored tensors
    past its input that the layer replaces."""
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    b, s, tp = tr.micro_batch_size, tr.seq_len // par.cp, par.tp  # a CP rank holds s/cp tokens
    h, k_mlp, moe = m.hidden_size, m.mlp_matrices, m.moe
    lin = linear_input_bytes(scenario, pb)
    dense = _mlp_stored(b * s, 0, m.ffn_hidden_size / tp, k_mlp, pb, lin)
    # the routed copies an expert rank holds: its ETP group's, all-gathered (etp x), at 1/etp of the width
    t = b * s / tp * moe.top_k * moe.rank_imbalance(par.ep) * par.etp
    width = moe.expert_ffn_hidden_size / par.etp
    routed = _mlp_stored(t, moe.routed_width(h), width, k_mlp, pb, lin)
    if "moe_act" in recompute.modules(tr):  # the activation output, the experts' fc2 input (``lin`` bytes)
        routed -= lin * t * width
    if moe.latent_size:  # fc2_latent_proj's input, the combined latent tokens (fc1's is the stored norm output)
        routed += lin * b * s / tp * moe.latent_size
    shared = (_mlp_stored(b * s, 0, moe.n_shared_experts * moe.shared_width / tp, k_mlp, pb, lin)
              if moe.n_shared_experts else 0)
    return routed, shared, dense


def moe_block_extra(scenario: Any, pb: int) -> float:
    """Extra activation bytes of ONE MoE block over the dense block it replaces, one micro-batch
    (also what a block being recomputed holds on top of the dense estimate). Selective recomputation's
    modules (``training.recompute_modules``) leave out: ``layernorm`` the pre-MLP norm's output
    ``p·b·s·h`` (÷t with sequence parallelism, as the norm region is); ``moe_act`` the experts' activation
    output ``p·T·k·f_e/etp``; ``shared_experts`` the shared experts' tensors; ``moe`` everything the MoE
    layer stores past its input (Megatron-Core checkpoints the layer, keeping only its input, the norm
    output; :func:`recompute_transient` holds one block's again during its backward)."""
    if scenario.model.moe is None:
        return 0.0
    routed, shared, dense = _layer_parts(scenario, pb)
    mods, tr, par = recompute.modules(scenario.training), scenario.training, scenario.parallel
    if "moe" in mods:
        routed = shared = 0.0
    elif "shared_experts" in mods:
        shared = 0.0
    norm = 0.0
    if "layernorm" in mods:
        region = par.tp if par.sequence_parallel and par.tp > 1 else 1
        norm = pb * tr.micro_batch_size * (tr.seq_len // par.cp) * scenario.model.hidden_size / region
    return routed + shared - dense - norm


def recompute_transient(scenario: Any, pb: int) -> float:
    """Bytes a recompute module rebuilds for one MoE block while that block's backward runs: the MoE
    layer's stored tensors (``moe``) or the shared experts' (``shared_experts``), 0 otherwise."""
    if scenario.model.moe is None:
        return 0.0
    mods = recompute.modules(scenario.training)
    routed, shared, _ = _layer_parts(scenario, pb)
    return routed + shared if "moe" in mods else shared if "shared_experts" in mods else 0.0


def split(scenario: Any, pipeline_stage: int | None = None) -> Any:
    """``moe.LocalParams`` of one GPU of pipeline stage ``pipeline_stage`` (None: the most-loaded stage's), its
    blocks where the scenario's pipeline places them (virtual stages, uneven splits, layouts)."""
    m, par = scenario.model, scenario.parallel
    v = par.virtual_stages if par.pp > 1 and par.pipeline_schedule == "interleaved" else 1
    if pipeline_stage is None:
        return wmoe.local(m, par.tp, par.pp, par.ep, par.etp, v, par)
    return wmoe.stage_local(m, par.tp, par.pp, par.ep, par.etp, pipeline_stage, v, par)


def expert_dp(scenario: Any) -> int:
    """The expert-data-parallel degree, over which the experts' gradients and ZeRO states shard."""
    par = scenario.parallel
    return max(1, scenario.n_gpus // (par.pp * par.ep * par.etp))


def model_states(scenario: Any, zero_model_states, shard_degree: int, stage: int, sizes: tuple,
                 expert_sizes: tuple | None = None, pipeline_stage: int | None = None) -> Any:
    """Model-state bytes of an MoE model on a GPU of pipeline stage ``pipeline_stage`` (None: the most
    loaded): the dense part over ``shard_degree``, the experts over the expert-DP group (both with
    ``zero_model_states`` and the framework's bytes per parameter; the experts' ``expert_sizes`` where they
    differ: Muon)."""
    m, par = scenario.model, scenario.parallel
    held = split(scenario, pipeline_stage)
    dense = zero_model_states(held.dense, shard_degree, stage, *sizes)
    edp = expert_dp(scenario)
    exp = zero_model_states(held.experts, edp, stage, *(expert_sizes or sizes))
    gathered = 0.0
    if stage >= 3 and edp > 1:  # two blocks' experts unsharded at a time, in the 16-bit working dtype
        block = wmoe.block_local(m, True, par.tp, par.ep, par.etp).experts
        gathered = 2 * block * (2 if scenario.training.precision in ("bf16", "fp16", "fp8") else 4)
    return type(dense)(dense.params_bytes + exp.params_bytes + gathered, dense.grads_bytes + exp.grads_bytes,
                       dense.optimizer_bytes + exp.optimizer_bytes)

