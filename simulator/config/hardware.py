"""GPU specification as stored in the catalog (``simulator/catalog/gpus.yaml``).

Every number is a datasheet value (dense tensor-core peaks, decimal GB/s) with its source tag from
``shared/reference/hardware.md``. External names carry units; the properties below give SI values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

from simulator.config.base import Frozen
from simulator.units import GB, TFLOPS

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]


class PeakTflops(Frozen):
    """Dense peak throughput per math mode, TFLOP/s (1e12 FLOP/s). ``None`` = not supported.

    For GeForce cards fp16/bf16/fp8 are the FP32-accumulate tensor rates, which is what mixed-precision
    training uses (Ada/GA102 whitepapers; hardware.md §0).
    """

    fp32: PositiveFloat
    tf32: PositiveFloat | None = None
    fp16: PositiveFloat | None = None
    bf16: PositiveFloat | None = None
    fp8: PositiveFloat | None = None
    #: Dense FP4 tensor rate (NVFP4 on Blackwell, MXFP4 on CDNA4): catalogued for comparison, not a
    #: training precision here. MXFP8 runs at the ``fp8`` rate on both.
    fp4: PositiveFloat | None = None


class GPUSpec(Frozen):
    """One GPU model. Units are in the field names; ``sources`` lists hardware.md source tags."""

    name: str
    vendor: Literal["nvidia", "amd", "intel"]
    arch: str
    form_factor: str
    #: CUDA compute capability ×10 (80 = Ampere GA100, 90 = Hopper) or None for non-NVIDIA parts;
    #: NCCL's tuning tables are indexed by it.
    sm: int | None = None
    peak_tflops: PeakTflops
    hbm_GB: PositiveFloat = Field(description="vendor label (decimal GB)")
    hbm_usable_bytes: PositiveInt = Field(description="memory the driver reports as total global memory")
    hbm_bandwidth_GBps: PositiveFloat
    nvlink_GBps_per_direction: float = Field(0.0, ge=0, description="scale-up bandwidth per GPU per direction; 0 = none")
    pcie_gen: Literal[3, 4, 5, 6]
    pcie_GBps_per_direction: PositiveFloat
    p2p: bool = Field(True, description="GPU peer-to-peer DMA over PCIe/NVLink supported")
    tdp_W: PositiveFloat
    release_year: int
    #: Max achievable matmul fraction of dense peak (MAMF, hardware.md §4), None where unmeasured.
    mamf_fraction: float | None = Field(None, gt=0, le=1)
    #: Fraction of the datasheet tensor-core peaks the part sustains at its power limit (a lower
    #: clock under a cap below the datasheet part's TDP), None = the datasheet peaks. Applies to every
    #: tensor rate alike: one clock drives them all.
    power_limited_peak_fraction: float | None = Field(None, gt=0, le=1)
    #: Datasheet dense BF16 peaks of the same silicon at other board powers, ``[[W, TFLOP/s], ...]``
    #: (B100 / B200 / GB200): what ``cluster.gpu_power_limit_W`` interpolates (simulator.hardware.power).
    power_points_bf16_tflops: list[tuple[PositiveFloat, PositiveFloat]] | None = None
    #: The same for FP8 (E4M3) matmuls, None where unmeasured (then FP8 GEMMs reach the 16-bit fraction).
    mamf_fraction_fp8: float | None = Field(None, gt=0, le=1)
    price_usd_per_gpu_hour: float | None = Field(None, ge=0)
    price_source: str = ""
    confidence: Literal["V", "S", "D", "U"]
    sources: list[str]
    notes: str = ""

    def peak_flops(self, dtype: Dtype) -> float:
        """Dense peak in FLOP/s for the math mode a training dtype uses.

        fp32 training without TF32 uses the non-tensor FP32 rate; a dtype the GPU lacks raises
        ``ValueError`` (e.g. fp8 on A100).
        """
        value = getattr(self.peak_tflops, dtype)
        if value is None:
            raise ValueError(f"GPU {self.name} has no {dtype} tensor-core rate; choose another precision")
        return value * TFLOPS

    def sustained_peak_flops(self, dtype: Dtype) -> float:
        """Dense peak in FLOP/s the compute model runs at: the datasheet peak (``peak_flops``) times
        ``power_limited_peak_fraction`` for a power-capped part (MFU stays quoted against the
        datasheet peak, as the frameworks quote it)."""
        return self.peak_flops(dtype) * (self.power_limited_peak_fraction or 1.0)

    @property
    def hbm_bandwidth_Bps(self) -> float:
        return self.hbm_bandwidth_GBps * GB

    @property
    def nvlink_Bps(self) -> float:
        return self.nvlink_GBps_per_direction * GB

    @property
    def pcie_Bps(self) -> float:
        return self.pcie_GBps_per_direction * GB
