"""Reading the user's input files: every reader goes through ``read_text`` (and ``read_json``), so a
missing file, a folder, an unreadable file or one that is not UTF-8 text gives the same single
``InputError`` naming the file and the option or key that named it, whatever the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.errors import InputError


def read_text(path: str | Path, field: str | None = None, what: str = "file", errors: str = "strict") -> str:
    """The UTF-8 text of ``path`` (``what`` names the kind of file in messages: "DeepSpeed config").

    ``errors="replace"`` is for files read for a few lines among arbitrary bytes (training logs with
    progress bars); every config is strict, since a wrong byte there is a wrong file.
    """
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8", errors=errors)
    except FileNotFoundError:
        raise InputError(f"file not found: {path}", field) from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory; give the {what} itself", field) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); give the {what} as UTF-8 text",
                         field) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}", field) from None


def read_json(path: str | Path, field: str | None = None, what: str = "JSON file") -> Any:
    """``read_text`` parsed as JSON; malformed JSON names the line."""
    text = read_text(path, field, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                         field) from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to be a {what}", field) from None
