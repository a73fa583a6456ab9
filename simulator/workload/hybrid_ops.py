"""Kernels of a hybrid Mamba-Transformer block (Nemotron-H, ``model.hybrid_pattern``) on one GPU.

A hybrid's ``2·n_layers`` layers are Mamba-2 (``M``), attention (``*``) and MLP (``-``) layers, each with its
own pre-norm and residual add (``simulator.workload.hybrid``). The step engine plays ``n_layers`` identical
blocks, so a hybrid block is the pattern's average: each layer kind's kernels with ``Op.weight`` = that
kind's layers per block (Nemotron-H 56B: 54/59 Mamba, 10/59 attention, 54/59 MLP layers), which the compute
model multiplies into their GPU and host time. Every stage that holds the whole pattern (``parallel.pp`` 1,
the only layout accepted for hybrids, ``hybrid.check_simulated``) runs exactly the pattern's kernels.

A hybrid with MoE layers (``E``) has two such averages, one over its MoE blocks (the mixer layer, then the MoE
layer's pre-norm, before the router and experts of ``workload.moe_ops``) and one over the rest (``block_ops``'s
``moe``).

The attention and MLP layers are the two halves of ``workload.ops.layer_ops``'s transformer block: split at
``post_attn_add_norm``, the residual add that ends the mixer layer fused with the MLP layer's pre-norm. The
mixer layers' (attention and Mamba) add + norm is the block's ``input_add_norm``.

One Mamba-2 layer as Megatron-Core trains it (``megatron/core/ssm/mamba_mixer.py``, ``use_mamba_mem_eff_path``;
``mamba_ssm.ops.triton.ssd_combined.mamba_split_conv1d_scan_combined``), per tensor-parallel rank, ``T`` tokens,
width ``h``, inner width ``d``, ``G`` groups of state width ``N``, ``H`` heads of width ``P``, chunks of ``Q``
tokens, all of ``d``, ``G``, ``H`` split over the ``t`` ranks:

* ``mamba_in_proj``: Transformer Engine's ``LayerNormColumnParallelLinear`` (the pre-norm fused into the GEMM's
  input, as the attention's QKV), ``T × (2d + 2GN + H)/t × h``;
* with more than one sequence per micro-batch, the ``l b d -> b l d`` rearrange copies the projection's output
  (``.contiguous()``; with one sequence the permuted tensor is already contiguous), and the output back;
* ``mamba_conv1d``: ``causal_conv1d_fwd`` over x, B and C with SiLU (read and write ``T·(d + 2GN)/t``); its
  backward re-runs it and runs ``causal_conv1d_bwd`` (read the input and the output gradient, write the input
  gradient): 5 passes, 2 kernels;
* ``mamba_ssd``: the SSD algorithm's five Triton kernels (``_chunk_cumsum_fwd``, ``_chunk_state_fwd`` writing the
  chunk states in fp32, ``_state_passing_fwd`` writing them back in 16 bits, ``_bmm_chunk_fwd`` writing ``C·Bᵀ`` in
  fp32, ``_chunk_scan_fwd`` reading x, z, C, ``C·Bᵀ`` and the states, writing the gated output and the pre-gate
  output that the function saves): HBM bytes ``5X + 6S + 4B + 2K`` with ``X = 2·T·d/t`` (one 16-bit
  ``T × d`` tensor), ``S = 2·(T/Q)·H·P·N/t`` (the chunk states in 16 bits), ``B = 2·T·G·N/t`` (B or C),
  ``K = 4·T·Q·G/t`` (``C·Bᵀ`` in fp32). Its backward (``_mamba_chunk_scan_combined_bwd``) re-runs four of them
  (cumsum, ``C·Bᵀ``, chunk states and their passing, in fp32) and runs eleven more (the gate's gradient, the
  states' gradient in fp32, its passing back to 16 bits, dx with ddt and dD, dB, dC, d(C·Bᵀ), the two ``C·Bᵀ``
  gradients, the ``dA`` cumulative sum's gradient, the cumsum's backward): ``16X + 17S + 11B + 6K``, each
  kernel reading and writing its tensors once. Its FLOPs are ``hybrid.mamba_forward``'s ``scan`` (backward:
  twice); at every catalogued width they sit far below the tensor cores' ridge (Nemotron-H 56B at t = 2: about
  52 FLOP per byte forward, against a ridge above 200) and below the HBM bandwidth too, and run at
  ``SSD_H100_CLASS_Bps`` scaled by the GPU's SMs x clock;
* ``mamba_norm``: the grouped RMSNorm of the gated output (``RMSNormGated`` without z, a Triton kernel; the gate
  is applied inside ``_chunk_scan_fwd``);
* ``mamba_out_proj``: ``RowParallelLinear``, ``T × h × d/t``, its FP8 input cast standalone.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.model import ModelConfig
from simulator.workload import ops as wops
from simulator.workload.hybrid import mamba_forward
from simulator.workload.op import Op, memory_op

#: HBM bytes per second the SSD kernels move on an H100-class GPU: tile-ai/tilelang ``benchmark/mamba2/README.md``
#: times the chunk-scan forward (the largest of them) on an H800 SXM at batch 8, 80 heads of 64, one group,
#: state 128, chunk 256, sequence 8,192: 1.278 ms for 1.72e11 FLOP (134 TFLOP/s, 14% of the dense BF16 peak).
#: It reads x, ``C·Bᵀ``, C, the 16-bit chunk states, dt and the ``dA`` cumulative sum and writes the output:
#: 26.7 kB a token, 1.75 GB in all, 1.37 TB/s (0.41 of the 3.35 TB/s datasheet bandwidth). One kernel on one
#: GPU (a TileLang kernel where Megatron-Core runs mamba_ssm's Triton ones), taken for every SSD kernel (U).
#: Neither the tensor cores nor the HBM bound them, so on another GPU they scale with its SMs x clock
#: (``Op.sm_bound_Bps``): a pure Mamba-2 model (d_model 2,048, 48 layers, 4 x 4,096 tokens, BF16) trains at
#: 102.5, 239.2 and 360.4 TFLOP/s on an A100, an H200 and a GB200 (state-spaces/mamba issue #904), GB200 / H200
#: 1.51 and A100 / H200 0.43, which dtsim gives as 1.67 and 0.46 this way and as 1.90 and 0.40 with the rate
#: a share of each GPU's HBM bandwidth (``tests/workload/test_hybrid_ops.py``).
SSD_H100_CLASS_Bps = 1.37e12
#: The SSD kernels' HBM traffic in units of ``(X, S, B, K)`` (module docstring), forward and backward.
SSD_FWD_UNITS, SSD_BWD_UNITS = (5, 6, 4, 2), (16, 17, 11, 6)
#: Triton kernels of the SSD forward, and of its backward (four re-run, eleven of its own, and the two small
#: torch ops around the ``dA`` cumulative sum's gradient, ``flip`` and ``cumsum``).
SSD_FWD_LAUNCHES, SSD_BWD_LAUNCHES = 5, 17
#: Bytes of the SSD traffic's tensors' elements: 16-bit activations, fp32 ``C·Bᵀ``.
_ACT_BYTES, _FP32 = 2, 4
#: Passes of the convolution's backward (module docstring) and its kernels.
CONV_BWD_PASSES, CONV_BWD_LAUNCHES = 5, 2
#: FLOPs per element of the convolution (``2k`` multiply-adds, ``k`` = 4 taps, and the SiLU): order of magnitude
#: only, as the norms' (bandwidth-bound).
_CONV_FLOPS = 10.0


def ssd_bytes(model: ModelConfig, b: int, s: int, tp: int, units: tuple[int, int, int, int]) -> float:
    """HBM bytes of the SSD kernels on one rank for ``b`` sequences of ``s`` tokens: ``units`` of the 16-bit
    ``T × d/t`` tensor, of the 16-bit chunk states, of B (or C) and of the fp32 ``C·Bᵀ`` (module docstring)."""
    m = model.mamba
    assert m is not None
    tokens, q = b * s, min(m.chunk_size, s)
    x = _ACT_BYTES * tokens * m.d_inner / tp
    states = _ACT_BYTES * b * -(-s // q) * m.n_heads * m.head_dim * m.state_size / tp
    bc = _ACT_BYTES * tokens * m.n_groups * m.state_size / tp
    cb = _FP32 * tokens * q * m.n_groups / tp
    ux, us, ub, uk = units
    return ux * x + us * states + ub * bc + uk * cb


def _copy(name: str, elements: float, pb: int) -> Op:
    """A ``.contiguous()`` copy (read and write once) whose backward is the same copy of the gradient."""
    return replace(memory_op(name, elements, 2, pb, 0.0), bwd_bytes=2.0 * elements * pb)


def mamba_layer_ops(model: ModelConfig, b: int, s: int, tp: int, pb: int, fp8: str | None, causal: bool,
                    sequence_parallel: bool) -> list[Op]:
    """Forward kernels of one Mamba-2 layer without its pre-norm's add + norm (module docstring)."""
    m, h, t = model.mamba, model.hidden_size, tp
    assert m is not None
    tokens = b * s
    gathered = wops.region_tokens(tokens, t, sequence_parallel) / tokens
    in_n, d = m.in_proj_dim // t, m.d_inner // t
    ops = wops._linear("mamba_in_proj", tokens, in_n, h, pb, 1, fp8, False, producer="norm", input_share=gathered)
    if b > 1:  # rearrange(..., "l b d -> b l d").contiguous(): a copy, and its gradient's
        ops.append(_copy("mamba_rearrange_in", tokens * in_n, pb))
    conv = tokens * m.conv_dim / t
    ops.append(replace(memory_op("mamba_conv1d", conv, 2, pb, _CONV_FLOPS), bwd_launches=CONV_BWD_LAUNCHES,
                       bwd_bytes=CONV_BWD_PASSES * conv * pb))
    scan = mamba_forward(model, b, s, causal).scan / t
    ops.append(Op("mamba_ssd", "memory", scan, ssd_bytes(model, b, s, t, SSD_FWD_UNITS), launches=SSD_FWD_LAUNCHES,
                  bwd_launches=SSD_BWD_LAUNCHES, bwd_bytes=ssd_bytes(model, b, s, t, SSD_BWD_UNITS),
                  sm_bound_Bps=SSD_H100_CLASS_Bps))
    if b > 1:
        ops.append(_copy("mamba_rearrange_out", tokens * d, pb))
    ops.append(wops._norm("mamba_norm", tokens * d, pb, False))
    ops += wops._linear("mamba_out_proj", tokens, h, d, pb, 1, fp8, False)
    return ops


def block_ops(model: ModelConfig, dense: list[Op], b: int, s: int, tp: int, pb: int, fp8: str | None,
              recompute: str, sequence_parallel: bool, moe: bool = False) -> list[Op]:
    """The average hybrid block without (``moe`` False) or with an MoE layer (module docstring) from ``dense``,
    ``workload.ops.layer_ops``'s transformer block of the model's attention and MLP layers: its add + norm,
    attention and MLP ops, and the Mamba layer's, each weighted by its kind's layers per block of the class. An
    MoE block's ``E`` layer keeps only its pre-norm here (the add + norm that ends its mixer layer), its router
    and experts being ``workload.moe_ops``'s. Full recomputation re-runs the Mamba ops too."""
    n, c = model.hybrid_class_counts(moe)
    n = max(1, n)
    cut = next(i for i, op in enumerate(dense) if op.name.startswith("post_attn"))
    mixer_norm, attention, mlp = dense[:1], dense[1:cut], dense[cut:]
    pre_norm = [op for op in mlp if op.name.startswith("post_attn")]

    def weighted(ops: list[Op], layers: int) -> list[Op]:
        return [replace(op, weight=layers / n) for op in ops] if layers else []

    mamba = mamba_layer_ops(model, b, s, tp, pb, fp8, True, sequence_parallel) if c["M"] else []
    if recompute == "full":
        mamba = [replace(op, recompute=True) for op in mamba]
    return (weighted(mixer_norm, c["M"] + c["*"]) + weighted(attention, c["*"]) + weighted(mamba, c["M"])
            + weighted(mlp, c["-"]) + weighted(pre_norm, c["E"]))
