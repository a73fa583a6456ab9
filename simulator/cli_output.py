"""Output files are checked before any work: one ``error:`` line (exit 2) instead of a traceback
after the results were printed.

``check_output(path, option, suffixes, inputs)`` refuses a path that is a directory, whose folder
does not exist or cannot be written (permission, read-only file system, ``/proc``), an existing
file that cannot be written, a name without one of the expected suffixes (``--png adir`` would
otherwise become ``adir.png``), and an input file of the same command (``--trace base.yaml`` would
overwrite the scenario). The probe creates and removes a temporary file in the folder, or opens an
existing target for appending without changing it; nothing is left behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from simulator.errors import InputError


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: Path | None, option: str, suffixes: Iterable[str] = (),
                 inputs: Iterable[Path | None] = ()) -> None:
    """Raise ``InputError`` (naming ``option``) unless ``path`` can be written as a new or replaced file."""
    if path is None:
        return
    suffixes = tuple(suffixes)
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a file name" + (f" ending in {suffixes[0]}" if suffixes else ""),
                         option)
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(f"{path}: give a file name ending in {' or '.join(suffixes)}", option)
    for other in inputs:
        if other is not None and _same_file(path, Path(other)):
            raise InputError(f"{path} is an input of this command ({other}); writing it would overwrite it", option)
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"folder {folder} does not exist", option)
    try:
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            fd, probe = tempfile.mkstemp(prefix=".dtsim-probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"cannot write {path}: {reason}", option) from None
