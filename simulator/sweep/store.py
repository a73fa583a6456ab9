"""Sweep results on disk: one row per point, always a valid file, resumable.

Every flush writes the whole table to a temporary file in the same folder and renames it over the
target (``os.replace`` is atomic on POSIX), so a sweep killed at any moment leaves either the
previous or the new complete file, never a torn one. Rows carry the sweep's fingerprint
(``sweep_id``); resuming into a file of another sweep is refused.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from simulator.atomic import write_bytes
from simulator.errors import InputError

FORMATS = (".csv", ".jsonl", ".parquet")


def _check_format(path: Path) -> str:
    if path.suffix not in FORMATS:
        raise InputError(f"output {path.name!r} must end in {', '.join(FORMATS)}", "--out")
    if path.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401  (optional extra: pip install 'dtsim[parquet]')
        except ImportError:
            raise InputError("writing .parquet needs pyarrow: pip install 'dtsim[parquet]'", "--out") from None
    return path.suffix


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Union of keys in first-seen order (every row has the same keys; failed points fill fewer)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def _encode(rows: list[dict[str, Any]], suffix: str) -> bytes:
    if suffix == ".jsonl":
        return "".join(json.dumps(row, sort_keys=False) + "\n" for row in rows).encode()
    if suffix == ".csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=_columns(rows), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = _columns(rows)
    table = pa.Table.from_pylist([{c: row.get(c) for c in cols} for row in rows])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


_INT = re.compile(r"^-?[0-9]+$")


def _coerce(text: str) -> Any:
    """A CSV cell back to the type it was written from: '' → None, True/False, int, float, else str.

    Writing the coerced value again gives the same text (Python's float repr round-trips), so a
    resumed CSV is byte-identical to an uninterrupted one.
    """
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _INT.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _decode(path: Path) -> list[dict[str, Any]]:
    """The complete rows of a results file. A row cut short (a file truncated outside dtsim: a full
    disk, a copy interrupted) is dropped, so resuming simulates that point again."""
    if path.suffix == ".jsonl":
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if i != len(lines) - 1:
                    raise
        return rows
    if path.suffix == ".csv":
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            return [{k: _coerce(v) for k, v in row.items()} for row in reader
                    if None not in row and None not in row.values()]
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


class ResultStore:
    """The rows of one sweep, flushed atomically to ``path`` (kept in memory only when it is None)."""

    def __init__(self, path: Path | None, sweep_id: str, resume: bool = False):
        self.path = Path(path) if path is not None else None
        self.sweep_id = sweep_id
        self.rows: dict[int, dict[str, Any]] = {}
        if self.path is None:
            return
        self.suffix = _check_format(self.path)
        if self.path.exists():
            if not resume:
                raise InputError(f"{self.path} exists; pass --resume to continue it or choose another --out", "--out")
            self._load()

    def _load(self) -> None:
        try:
            rows = _decode(self.path)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
            raise InputError(f"cannot read {self.path} to resume: {exc}", "--resume") from None
        if not rows or any("point" not in row or "sweep_id" not in row for row in rows):
            raise InputError(
                f"{self.path} is not a dtsim sweep result (no point / sweep_id columns); refusing to overwrite it",
                "--resume",
            )
        for row in rows:
            if str(row.get("sweep_id")) != self.sweep_id:
                raise InputError(
                    f"{self.path} holds results of another sweep (sweep_id {row.get('sweep_id')!r}, this sweep "
                    f"is {self.sweep_id!r}: the base scenario or the grid differ); refusing to mix them",
                    "--resume",
                )
            self.rows[int(row["point"])] = row

    def done(self) -> set[int]:
        return set(self.rows)

    def add(self, row: dict[str, Any]) -> None:
        self.rows[int(row["point"])] = row

    def flush(self) -> None:
        """Write all rows, sorted by point, atomically."""
        if self.path is None:
            return
        ordered = [self.rows[k] for k in sorted(self.rows)]
        write_bytes(self.path, _encode(ordered, self.suffix))
