"""Base class for all configuration models: strict keys, frozen values."""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def _is_a(annotation: Any, kind: type) -> bool:
    """Whether a field annotation is ``kind`` (``int``: ``PositiveInt``, ``int | None``, ...)."""
    if annotation is kind:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_a(typing.get_args(annotation)[0], kind)
    args = typing.get_args(annotation)
    return bool(args) and typing.get_origin(annotation) in (typing.Union, __import__("types").UnionType) and any(
        _is_a(a, kind) for a in args)


@cache
def _int_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(name for name, f in model.model_fields.items() if _is_a(f.annotation, int))


@cache
def _number_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """Fields that take a number and not a flag (a ``bool | float`` field takes ``true``)."""
    return tuple(name for name, f in model.model_fields.items()
                 if (_is_a(f.annotation, int) or _is_a(f.annotation, float)) and not _is_a(f.annotation, bool))


class Frozen(BaseModel):
    """A frozen pydantic model whose unknown keys are errors (a misspelt key never passes silently).

    Infinite and NaN numbers are refused: no price, rate, size or budget is meaningfully infinite.
    Number keys refuse booleans (``nodes: true`` is not one node, ``reduce_bucket_size: true`` not a
    one-element bucket); integer keys refuse text that looks like a number (YAML reads ``1e30`` as
    text), with the reason.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _refuse_non_integers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name in _number_fields(cls):
            if isinstance(data.get(name), bool):
                whole = "a whole number" if name in _int_fields(cls) else "a number"
                raise ValueError(f"{name}: expected {whole}, got {str(data[name]).lower()}")
        for name in _int_fields(cls):
            value = data.get(name)
            if isinstance(value, float) and abs(value) >= 1e15:
                raise ValueError(f"{name}: {value:g} is far too large for a whole-number key")
            if isinstance(value, str):
                try:
                    number = float(value)
                except ValueError:
                    continue
                raise ValueError(f"{name}: expected a whole number, got the text {value!r}"
                                 + (f" (write {int(number)})" if number.is_integer() and abs(number) < 1e15 else
                                    " (far too large)" if abs(number) >= 1e15 else ""))
        return data
