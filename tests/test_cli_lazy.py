"""Lazy command loading (``simulator.cli``): ``--help`` imports no command module and none of the
heavy libraries; every listed command still resolves to its real typer command."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from simulator.cli import COMMANDS, app, load_command


def test_every_listed_command_loads_with_its_options():
    for name in COMMANDS:
        command = load_command(name)
        assert command.name == name
        assert command.params or getattr(command, "commands", None), name


def test_help_lists_every_command():
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0
    for name in COMMANDS:
        assert f" {name} " in res.output


def test_help_imports_no_command_module_nor_heavy_library():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom simulator.cli import app\n"
            "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith(('simulator.cli_', 'networkx', 'numpy', "
            "'matplotlib', 'simpy', 'pyarrow', 'ray', 'pandas', 'pydantic'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_run_imports_neither_plotting_nor_distributed_backends():
    code = ("import sys\nfrom simulator.cli import load_command\nload_command('run')\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'ray', 'pyarrow', 'pandas'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
