"""Build step: ship the top-level ``topologies/`` and ``scenarios/`` inside the package.

They stay at the repository's top level (where users read and copy them); ``build_py`` copies
their ``*.yaml`` files to ``simulator/_bundled/<name>/`` in the build, so a non-editable
``pip install .`` carries them (``simulator.bundled.bundled_dir`` finds either place). All other
metadata is in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("topologies", "scenarios")


class BuildWithBundledData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the source tree
        for name in BUNDLED:
            target = Path(self.build_lib) / "simulator" / "_bundled" / name
            target.mkdir(parents=True, exist_ok=True)
            for src in sorted((ROOT / name).glob("*.yaml")):
                shutil.copyfile(src, target / src.name)


setup(cmdclass={"build_py": BuildWithBundledData})
