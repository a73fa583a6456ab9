"""The two files of ``dtsim calibrate``, checked key by key: a measurements file's rows
(``--measured``) and an efficiency profile (``--efficiency``, written by ``--out``).

Both are plain YAML a user edits by hand, so every key is validated with its type and physical range
before anything is simulated: a misspelt row key (``splt: test``) would put the row in the wrong fold,
a ``set:`` string would be read letter by letter, a profile's ``gemm_sustained_of_mamf: 7.1`` would
give an MFU of 180 %, ``0`` a division by zero, ``sigma: -1`` an inverted interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.config.base import Frozen
from simulator.config.loader import format_validation_error
from simulator.errors import InputError


class MeasuredRow(Frozen):
    """One row of a user's measurements file, as the module docstring shows it: every key checked, a
    misspelt one refused (``splt: test`` would otherwise leave the row in the default fold)."""

    #: A scenario path (relative to the measurements file) or a scenario mapping.
    scenario: Any
    #: ``--set`` overrides of the row's scenario: a list (a bare string would be read letter by letter).
    set: list[str] = []
    measured: dict[str, Any] | None = None
    log: str | None = None
    log_format: str | None = None
    #: Warm-up lines of the log to drop (default: a tenth of them).
    skip: NonNegativeInt | None = None
    split: Literal["train", "test"] | None = None
    id: str | None = None
    source_key: str | None = None

    @field_validator("scenario", mode="before")
    @classmethod
    def _path_or_mapping(cls, value: Any) -> Any:
        if not isinstance(value, str | dict):
            raise ValueError(f"must be a scenario path or mapping, got {value!r}")
        return value

    @field_validator("set", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(f"give a list of overrides, set: [{value}]")
        return value


def check_row(row: dict, where: str, path: Path) -> None:
    """Validate a user row against ``MeasuredRow``; one error per problem, named ``runs[i].key``."""
    try:
        MeasuredRow.model_validate(row)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, MeasuredRow, f"{where}."), f"--measured {path}") from None


class IntervalGroup(Frozen):
    """One residual group of a profile (``group_stats`` plus the residuals): ln(predicted / measured)."""

    n: PositiveInt
    mu: float
    #: A standard deviation: a negative one would turn the prediction interval inside out.
    sigma: NonNegativeFloat
    residuals: list[float] = []

    @model_validator(mode="after")
    def _n_counts_the_residuals(self) -> IntervalGroup:
        if self.residuals and len(self.residuals) != self.n:
            raise ValueError(f"n is {self.n} but {len(self.residuals)} residuals are listed")
        return self


class ProfileIntervals(Frozen):
    """A profile's ``intervals`` section; ``all`` is the group every run falls back to."""

    source: str = ""
    groups: dict[str, IntervalGroup]

    @model_validator(mode="after")
    def _has_all(self) -> ProfileIntervals:
        if self.groups and "all" not in self.groups:
            raise ValueError("groups needs an 'all' group (the fallback of every GPU and framework)")
        return self


def check_params(arch: str, values: Any, path: str | Path) -> dict[str, float]:
    """An architecture's fitted values, each a number inside the calibration's own plausible range
    (``calibration.BOUNDS``): a profile outside it was not written by ``dtsim calibrate`` and would
    give an MFU above 100 % (7.1) or a division by zero (0)."""
    from simulator.validation.calibration import ARCH_BOUNDS, BOUNDS, PARAMS, STEP

    if not isinstance(values, dict) or set(values) != set(PARAMS):
        raise InputError(f"{path}: {arch} must map exactly {', '.join(PARAMS)} to numbers", "--efficiency")
    box = {**BOUNDS, **ARCH_BOUNDS.get(arch, {})}
    for name in PARAMS:
        value = values[name]
        low, high = (round(k * STEP, 4) for k in box[name])
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise InputError(f"{path}: {arch}.{name} must be a number from {low:g} to {high:g} (the range "
                             f"dtsim calibrate fits in), got {value!r}", "--efficiency")
    return {k: float(v) for k, v in values.items()}
