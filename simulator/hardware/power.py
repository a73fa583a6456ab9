"""A GPU run below its board power: the tensor-core peak the datasheets give for the same silicon at
lower power (``cluster.gpu_power_limit_W``).

Under a power cap the GPU lowers its clock until the board stays under the cap, and every tensor-core
rate falls with the clock. The vendor publishes that relation where it sells one die at several board
powers: NVIDIA's B100 (700 W), HGX B200 (1,000 W) and GB200 (1,200 W) are the same Blackwell silicon,
with dense BF16 peaks of 1,750, 2,250 and 2,500 TFLOP/s (catalog ``power_points_bf16_tflops``, sources
in ``docs/hardware.md``). Between two catalogued points the peak is interpolated linearly:

    peak(P) = p_i + (p_{i+1} − p_i) · (P − P_i) / (P_{i+1} − P_i),   P_i ≤ P ≤ P_{i+1}

and the compute model runs at ``power_limited_peak_fraction = peak(P) / peak_tflops.bf16`` of every
datasheet tensor rate (one clock drives them all: B100's FP8 and FP4 peaks are 0.778 of B200's, as its
BF16 one is). The measured points are concave (1.67 TFLOP/s per W from 700 to 1,000 W, 1.25 from 1,000
to 1,200 W: voltage rises with the clock), so the chord slightly understates the peak between them.
HBM, NVLink and PCIe bandwidths do not change (B100 and B200 both have 8 TB/s of HBM3e).

The cap is also the board's power for the run's energy cost (``tdp_W`` becomes the cap). A cap above
the GPU's TDP, below its lowest catalogued point, or on a GPU with no catalogued points is an
``InputError`` naming the field: no datasheet gives the clock there.
"""

from __future__ import annotations

import numpy as np

from simulator.config.hardware import GPUSpec
from simulator.errors import InputError

FIELD = "cluster.gpu_power_limit_W"


def peak_fraction(spec: GPUSpec, limit_W: float) -> float:
    """Fraction of the datasheet tensor peaks ``spec`` sustains under a ``limit_W`` board-power cap
    (module docstring's interpolation over ``spec.power_points_bf16_tflops``)."""
    points = sorted(spec.power_points_bf16_tflops or ())
    if not points:
        raise InputError(f"GPU {spec.name} has no catalogued peaks at lower board power, so a power limit "
                         "cannot be priced; remove the field or choose a GPU whose catalog entry has "
                         "power_points_bf16_tflops (b200, gb200)", FIELD)
    if limit_W > spec.tdp_W:
        raise InputError(f"{limit_W:g} W is above the {spec.name}'s {spec.tdp_W:g} W board power (a limit "
                         f"caps it); give at most {spec.tdp_W:g}", FIELD)
    low_W = points[0][0]
    if limit_W < low_W:
        raise InputError(f"{limit_W:g} W is below {low_W:g} W, the lowest board power with a datasheet peak "
                         f"for the {spec.name}; give {low_W:g}-{spec.tdp_W:g}", FIELD)
    watts, peaks = zip(*points, strict=True)
    return float(np.interp(limit_W, watts, peaks)) / spec.peak_tflops.bf16


def capped(spec: GPUSpec, limit_W: float) -> GPUSpec:
    """``spec`` under a ``limit_W`` power cap: its compute at ``peak_fraction`` of the datasheet peaks and
    its board power (``tdp_W``, used for energy cost) the cap. Idempotent: capping a capped spec at the
    same limit gives the same spec."""
    return spec.model_copy(update={"power_limited_peak_fraction": peak_fraction(spec, limit_W), "tdp_W": limit_W})
