"""Units: constants, parsing of human-readable quantities, and formatting.

Inside dtsim every quantity is SI: seconds, bytes, FLOP, bytes/s, FLOP/s. External names carry the
unit (``latency_s``, ``bandwidth_GBps``). Decimal prefixes (GB = 1e9 B) are used for bandwidths and
FLOP rates, as vendors and nccl-tests do; binary prefixes (GiB = 2**30 B) only where a source counts
that way (nccl-tests buffer sizes, PyTorch ``bucket_cap_mb`` which is really MiB).
"""

from __future__ import annotations

import re

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

TFLOPS = 1e12
US = 1e-6
HOUR_S = 3600.0
DAY_S = 86400.0
YEAR_S = 365.25 * DAY_S

#: Bytes per element of each training dtype.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0}

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kb": KB,
    "kib": KiB,
    "m": MiB,
    "mb": MB,
    "mib": MiB,
    "g": GiB,
    "gb": GB,
    "gib": GiB,
    "t": TiB,
    "tb": TB,
    "tib": TiB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int | float) -> int:
    """Parse a byte count such as ``"8G"`` (nccl-tests style, binary), ``"1GB"``, ``"25MiB"``.

    Single-letter suffixes K/M/G/T are binary, as in nccl-tests' ``-b``/``-e`` flags; ``KB``/``MB``/
    ``GB`` are decimal and ``KiB``/``MiB``/``GiB`` binary.
    """
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _SIZE_RE.match(text)
        if not match or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"cannot read {text!r} as a byte count (examples: 1048576, 8G, 25MiB, 1GB)")
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value < 0:
        raise ValueError(f"byte count must not be negative, got {text!r}")
    return int(round(value))


def fmt_bytes(n: float) -> str:
    """Format a byte count with binary prefixes (memory is sold and reported in GiB by tools)."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(t: float) -> str:
    """Format a duration from microseconds up to years."""
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    if t < 120:
        return f"{t:.3f} s"
    if t < 2 * HOUR_S:
        return f"{t / 60:.1f} min"
    if t < 2 * DAY_S:
        return f"{t / HOUR_S:.1f} h"
    if t < YEAR_S:
        return f"{t / DAY_S:.1f} days"
    return f"{t / YEAR_S:.2f} years"


def fmt_seconds_range(low: float, high: float) -> str:
    """Format an interval with both ends in the unit :func:`fmt_seconds` picks for the upper end
    ("54.4–62.1 min", never "65.253 s–2.1 min")."""
    unit = fmt_seconds(high).split(" ", 1)[1]
    scale = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": HOUR_S, "days": DAY_S, "years": YEAR_S}[unit]
    digits = {"µs": 1, "ms": 2, "s": 3, "min": 1, "h": 1, "days": 1, "years": 2}[unit]
    return f"{low / scale:.{digits}f}–{high / scale:.{digits}f} {unit}"


def fmt_count(x: float) -> str:
    """Format a large count (parameters, FLOPs) with an SI suffix: 8.03B, 1.17e23."""
    if abs(x) >= 1e15:
        return f"{x:.3e}"
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2f}{suffix}"
    return f"{x:.0f}"
