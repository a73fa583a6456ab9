"""Inputs every graph builder shares, and the byte widths of what each framework communicates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.parallel.mesh import RankMesh
from simulator.parallel.work import StepWork
from simulator.units import DTYPE_BYTES

#: 1-bit Adam compression stage: 1-bit momentum instead of 16-bit values, 16x less volume than fp16
#: (Tang et al. 2021; formulas.md §4.5). The warm-up stage (15-20 % of steps) is uncompressed; a
#: step simulated here is a steady-state compression-stage step.
ONEBIT_ADAM_BYTES = 2.0 / 16.0
#: ZeRO++ qwZ: block-quantised INT8 weights in the forward all-gather (0.5x of 16-bit; formulas.md §4.4).
QWZ_BYTES = 1.0
#: ZeRO++ qgZ: INT4 gradients (0.25x of 16-bit) in a hierarchical all-to-all (formulas.md §4.4).
QGZ_BYTES = 0.5


@dataclass(frozen=True)
class BuildContext:
    """``parallel`` is a ``ParallelConfig``; ``precision`` the training dtype; ``n_micro`` = G."""

    work: StepWork
    mesh: RankMesh
    parallel: Any
    n_micro: int
    precision: str
    #: The model chunk this context builds (interleaved pipeline: virtual stage ``j`` is chunk ``j // pp``
    #: of its GPU stage); Megatron-Core buckets only chunk 0's gradients (``ddp.DDPHooks``).
    model_chunk: int = 0

    @property
    def param_bytes(self) -> int:
        """Bytes per working (compute) parameter: 16-bit under mixed precision, 4 for fp32/tf32."""
        return 4 if self.precision in ("fp32", "tf32") else 2

    @property
    def ds_comm_bytes(self) -> float:
        """DeepSpeed communication dtype: ``communication_data_type``, else fp16 if fp16, bf16 if
        bf16 (fp8 trains with bf16 master copies) but fp32 through the ``BF16_Optimizer``, else fp32
        (DS engine.py; formulas.md §4.2)."""
        p = self.parallel
        if p.onebit_adam:
            return ONEBIT_ADAM_BYTES
        if p.communication_data_type is not None:
            return DTYPE_BYTES[p.communication_data_type]
        if p.bf16_optimizer(self.precision):
            return 4  # BF16_Optimizer all-reduces its fp32 gradient buffer (get_grads_for_reduction)
        return 2 if self.precision in ("fp16", "bf16", "fp8") else 4

    def fsdp_dtype_name(self, which: str) -> str:
        """FSDP MixedPrecision: ``param_dtype`` (gather) and ``reduce_dtype`` (defaults to param_dtype);
        unset, the working dtype (``param_bytes``: fp32 for fp32/tf32, else the 16-bit type, bf16 under fp8)."""
        p = self.parallel
        value = p.param_dtype if which == "param" else (p.reduce_dtype or p.param_dtype)
        if value is not None:
            return value
        if self.precision in ("fp32", "tf32"):
            return "fp32"
        return "fp16" if self.precision == "fp16" else "bf16"

    def fsdp_dtype_bytes(self, which: str) -> int:
        """Bytes of ``fsdp_dtype_name(which)``."""
        return DTYPE_BYTES[self.fsdp_dtype_name(which)]

    def size(self, group: str) -> int:
        return self.mesh.size(group)
