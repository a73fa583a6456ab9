"""One kernel of the workload (:class:`Op`) and its two basic shapes: a GEMM and a memory-bound pass.

``simulator.workload.ops`` builds a block's kernel lists from these; the compute model
(``simulator.hardware``) turns each into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OpKind = Literal["gemm", "attention", "memory"]


@dataclass(frozen=True)
class Op:
    """One kernel on one GPU. ``flops`` in FLOP, ``bytes`` in HBM bytes read + written.

    GEMMs carry their shape ``C (m × n) = A (m × k) · B (k × n)``, ``batch`` independent products
    (attention heads × sequences for the unfused attention core). ``recompute`` marks an op that
    activation checkpointing runs again before the backward pass.
    """

    name: str
    kind: OpKind
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    recompute: bool = False
    #: Kernels this op launches (eager PyTorch splits one op into several; the compute model charges
    #: each launch a host dispatch cost and a GPU floor, or for a GEMM a fixed GPU time on top of its
    #: work, ``simulator.hardware.kernels``).
    launches: int = 1
    #: A linear-layer GEMM (QKV, output projection, MLP): the GEMMs FP8 recipes run in FP8; attention
    #: and the logits GEMM stay 16-bit (``fp8_gemm`` in the compute model).
    linear: bool = False
    #: Kernels of this op's backward; 0 = the default rule of ``_backward``.
    bwd_launches: int = 0
    #: This memory op's backward runs inside a GEMM's epilogue (Transformer Engine's fused grouped MLP,
    #: ``simulator.workload.fused_grouped_mlp``): ``workload.ops.backward_ops`` gives it no kernel.
    fused_backward: bool = False
    #: The FP8 recipe of an FP8 cast op (``fp8_casts.FP8_RECIPES``), else empty.
    fp8_recipe: str = ""
    #: HBM bytes of this op's backward; 0 = the default rule of ``_backward``.
    bwd_bytes: float = 0.0
    #: A backward-pass kernel: the fused attention backward runs at its own rate
    #: (``simulator.hardware.attention``); GEMM dgrad/wgrad accumulate FP8 products precisely where the
    #: forward uses Hopper's fast accumulation (``simulator.hardware.compute``).
    backward: bool = False
    #: CPU seconds to issue this op's code (its ATen calls, views and autograd nodes included);
    #: ``None`` = ``launches`` × the launch model's per-kernel dispatch. Set on eager transformer blocks
    #: by ``simulator.workload.host``.
    host_s: float | None = None
    #: Kernels this op issues from compiled code on top of ``host_s`` (a chunk of a GEMM that Transformer
    #: Engine's userbuffers overlap splits: its C++ loop launches each chunk's GEMM), each at the launch
    #: model's per-kernel dispatch (``simulator.parallel.tp_overlap.fraction``).
    cpp_launches: int = 0
    #: ATen calls this op's code makes beyond what the measured reference block's code makes for it
    #: (``simulator.workload.host``: each costs the block's per-call host time, forward and, as
    #: autograd nodes, backward); e.g. Megatron's PyTorch softmax fallback.
    extra_host_calls: int = 0
    #: An attention core averaged over full and sliding-window blocks (``flops.attention_span``): the
    #: window ``w`` of its windowed blocks and their share of its FLOPs, which the compute model prices
    #: at the band rate (``simulator.hardware.attention.band_half``); ``k`` is the full blocks'.
    window: int = 0
    window_share: float = 0.0
    #: How the ``batch`` GEMMs of a grouped GEMM run: 0 = one grouped kernel, all their tiles in one
    #: pool of waves; ``c`` = one kernel per GEMM on ``c`` streams (Transformer Engine's
    #: ``GroupedLinear``: ``simulator.hardware.kernels.TE_GROUPED_STREAMS``), so at most ``c`` GEMMs are in
    #: flight (``simulator.hardware.kernels.wave_efficiency``), and each GEMM adds a measured
    #: fixed cost (``simulator.hardware.kernels.TE_GROUPED_GEMM_FIXED_S``).
    streams: int = 0
    #: Of ``bytes`` and ``launches``: what an FP8 cast spends on the transposed FP8 copy that per-tensor
    #: recipes keep for the backward GEMMs where FP8 GEMMs take only the TN layout (Hopper). The compute
    #: model drops them on GPUs whose FP8 GEMMs take any layout (``hardware.compute.NON_TN_FP8_ARCHS``).
    transpose_bytes: float = 0.0
    transpose_launches: int = 0
    #: A GEMM with a frozen weight (``training.lora``'s base layers): its backward computes the input
    #: gradient only, no weight gradient (``workload.ops.backward_ops``).
    frozen: bool = False
    #: Copies of this op per block: a hybrid model's average block (``workload.hybrid_ops``) runs each layer
    #: kind's ops times that kind's layers per block (Nemotron-H 56B: its 10 attention layers over 59 blocks
    #: give the attention ops 10/59). The compute model multiplies the op's GPU and host time by it.
    weight: float = 1.0
    #: HBM bytes per second a kernel is measured to move on an H100-class GPU (132 SMs at 1.83 GHz), for a
    #: kernel whose speed is set by its SMs' issue rate rather than by the HBM bandwidth (the Mamba-2 SSD
    #: kernels, ``workload.hybrid_ops``): on another GPU the rate scales with its SMs x clock
    #: (``hardware.kernels.sm_issue_Hz``); 0 = a streaming kernel at ``Efficiency.hbm_fraction``. Such a
    #: kernel computes matrix products too, so its FLOPs bound its time as well, at the 16-bit GEMM rate.
    sm_bound_Bps: float = 0.0

    @property
    def shape(self) -> tuple[int, int, int] | None:
        return (self.m, self.n, self.k) if self.kind == "gemm" else None


#: FLOPs per element of an elementwise add (residual or bias add: bandwidth-bound, so this never decides a
#: roofline time; order of magnitude only).
ADD_FLOPS = 1.0


def gemm(name: str, m: int, n: int, k: int, precision_bytes: int, batch: int = 1) -> Op:
    """A (batched) GEMM: ``2·m·n·k·batch`` FLOPs, ``(m·k + k·n + m·n)·batch·precision_bytes`` bytes."""
    return Op(
        name=name,
        kind="gemm",
        flops=2.0 * m * n * k * batch,
        bytes=float((m * k + k * n + m * n) * batch * precision_bytes),
        m=m,
        n=n,
        k=k,
        batch=batch,
    )


def memory_op(
    name: str, elements: float, passes: float, precision_bytes: int, flops_per_element: float
) -> Op:
    """A bandwidth-bound elementwise kernel: ``passes·elements·precision_bytes`` bytes."""
    return Op(
        name=name,
        kind="memory",
        flops=flops_per_element * elements,
        bytes=passes * elements * precision_bytes,
    )
