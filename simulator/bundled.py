"""Where the bundled topologies and scenarios are, in a source checkout and in an installed package.

The canonical files stay at the repository's top level (``topologies/``, ``scenarios/``), where a
user reads and copies them. A built wheel carries copies inside the package, under
``simulator/_bundled/<name>/`` (``setup.py``'s ``build_py`` step copies them at build time), so a
plain ``pip install .`` finds them too. The source tree wins when both exist (an editable install
sees edits at once).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
#: The folders shipped as package data.
BUNDLED = ("topologies", "scenarios")


def bundled_dir(name: str) -> Path:
    """The folder of bundled ``name`` files (``topologies`` or ``scenarios``); it may not exist."""
    source = _PACKAGE.parent / name
    if source.is_dir():
        return source
    return _PACKAGE / "_bundled" / name
