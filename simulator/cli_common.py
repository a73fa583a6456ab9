"""Shared CLI plumbing: one error style (message, exit 2, no traceback), JSON and rich output."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from simulator.config.loader import format_validation_error
from simulator.errors import InputError

#: Exit code for bad input (unknown name, misspelt key, impossible layout, unreadable file).
EXIT_BAD_INPUT = 2

class _PipeConsole(Console):
    """A console that stops quietly with exit 0 when its reader closes the pipe (``dtsim ... | head``;
    rich's default exits 1). Output files are written before anything is printed."""

    def on_broken_pipe(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)


stdout = _PipeConsole()
stderr = Console(stderr=True)


def note_not_expressed(target: str, notes: Iterable[str]) -> None:
    """What an export to ``target`` cannot express, one ``note:`` line each on stderr (``dtsim export``,
    ``dtsim sweep --export-best``)."""
    for note in notes:
        stderr.print(f"[yellow]note:[/] not expressed in {target}: {escape(note)}", highlight=False, soft_wrap=True)


def finite(value: float | None) -> float | None:
    """A typer callback for float options: ``inf`` and ``nan`` parse as floats but are no budget,
    utilisation or threshold."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}")
    return value


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` to stderr and return the Exit to raise (code 2)."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    return typer.Exit(EXIT_BAD_INPUT)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ``InputError`` (and stray pydantic/OS errors from user input) into exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
            sys.stdout.flush()  # inside the handler: a closed pipe is met here, not at exit
            return result
        except InputError as exc:
            raise fail(str(exc)) from None
        except ValidationError as exc:
            raise fail(format_validation_error(exc)) from None
        except FileNotFoundError as exc:
            raise fail(f"file not found: {exc.filename or exc}") from None
        except BrokenPipeError:
            # The reader closed the pipe (``| head``): stop quietly, as Unix tools do; files are
            # written before anything is printed, so nothing is lost.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as exc:  # a file that became unwritable after the up-front checks
            raise fail(f"cannot access {exc.filename or 'a file'}: {exc.strerror or exc}") from None

    return wrapper


def json_safe(data: Any) -> Any:
    """Replace non-finite floats by None: JSON has no Infinity (a run that is not expected to finish
    reports ``wall_clock_s: null``)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def print_json(data: Any) -> None:
    """Machine-readable output on stdout: sorted keys so the same input gives the same bytes."""
    sys.stdout.write(json.dumps(json_safe(data), indent=2, sort_keys=True, default=float) + "\n")
