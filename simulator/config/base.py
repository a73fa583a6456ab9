"""Base class for all configuration models: strict keys, frozen values."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A frozen pydantic model whose unknown keys are errors (a misspelt key never passes silently).

    Infinite and NaN numbers are refused: no price, rate, size or budget is meaningfully infinite.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
