"""Output files are written whole or not at all.

Each writer fills a temporary file in the target's folder and renames it over the target
(``os.replace`` is atomic on POSIX), so a command interrupted or failing mid-write leaves the previous
file or none, never a torn one (a half-written trace, a README cut in the middle). The temporary name
keeps the target's suffix, so writers that infer the format from it (matplotlib's ``savefig``) work.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path to write instead of ``path``: it replaces ``path`` when the block ends, and
    is removed if the block raises."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _file_mode())  # mkstemp makes 0600; an output gets the user's umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, synced to disk before the rename."""
    with replacing(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode())
