"""``dtsim validate [--only GLOB] [--kind pure_dp|tp_pp] [--json] [--max-mape PCT] [--png F] [--markdown F]``.

Simulates every run of the bundled validation suite (``simulator/validation/runs.yaml`` and
``runs_corpus.yaml``), prints measured vs predicted in the source's own terms with the signed error,
and MAPE overall, for the pure data-parallel runs and their held-out part, by GPU, framework and
parallelism kind, plus the worst five. Runs without a scenario, or that dtsim refuses (``InputError``), are listed as skipped.

Exit codes: 0 ok; 1 MAPE of the simulated runs above ``--max-mape``; 2 bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from simulator.cli_common import handle_errors, print_json, stderr, stdout
from simulator.errors import InputError
from simulator.validation.render import README_END, README_START, markdown, print_table, scatter_png, splice
from simulator.validation.suite import load_runs, select, try_run
from simulator.validation.summary import row, summarize

#: Exit code when the MAPE exceeds ``--max-mape``.
EXIT_MAPE = 1

OnlyOption = Annotated[str | None, typer.Option("--only", help="run ids matching this glob (comma-separated globs)")]
KindOption = Annotated[str | None, typer.Option("--kind", help="only 'pure_dp' or 'tp_pp' runs")]
JsonOption = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]
MaxOption = Annotated[float | None, typer.Option("--max-mape", help="exit 1 when the MAPE (percent) exceeds this")]
PngOption = Annotated[Path | None, typer.Option("--png", help="write a predicted-vs-measured scatter plot (PNG)")]
MdOption = Annotated[Path | None, typer.Option("--markdown", help="write the markdown report (docs/validation.md)")]
ReadmeOption = Annotated[Path | None, typer.Option("--readme", help="replace the report between the "
                                                     "validation markers of this file (README.md)")]


def validate_command(only: OnlyOption = None, kind: KindOption = None, json_out: JsonOption = False,
                     max_mape: MaxOption = None, png: PngOption = None, markdown_out: MdOption = None,
                     readme: ReadmeOption = None) -> None:
    """Simulate the published runs of the validation suite; measured vs predicted, MAPE by group."""
    code = _validate(only, kind, json_out, max_mape, png, markdown_out, readme)
    if code:
        raise typer.Exit(code)


def _command_line(only: str | None, kind: str | None, png: Path | None, md: Path | None,
                  readme: Path | None = None) -> str:
    parts = ["dtsim validate"]
    parts += [f"--only '{only}'"] if only else []
    parts += [f"--kind {kind}"] if kind else []
    parts += [f"--png {png}"] if png else []
    parts += [f"--markdown {md}"] if md else []
    parts += [f"--readme {readme}"] if readme else []
    return " ".join(parts)


@handle_errors
def _validate(only: str | None, kind: str | None, json_out: bool, max_mape: float | None, png: Path | None,
              md: Path | None, readme: Path | None = None) -> int:
    if readme is not None:
        if not readme.is_file():
            raise InputError(f"file not found: {readme}", "--readme")
        if README_START not in readme.read_text():
            raise InputError(f"{readme} has no {README_START} ... {README_END} markers", "--readme")
    if kind not in (None, "pure_dp", "tp_pp"):
        raise InputError(f"--kind must be pure_dp or tp_pp, got {kind!r}")
    runs = [r for r in select(load_runs(), only) if kind is None or r.parallelism == kind]
    if not runs:
        raise InputError(f"no validation run matches --only {only!r}" + (f" and --kind {kind}" if kind else ""))
    rows = [row(try_run(r)) for r in runs]
    summary = summarize(rows)
    if json_out:
        print_json({"rows": rows, "summary": summary})
    else:
        # A pipe gets a wide table (run ids are long); a terminal keeps its own width.
        print_table(rows, summary, stdout if stdout.is_terminal else Console(width=170))
    if png is not None:
        scatter_png(rows, png)
    command = _command_line(only, kind, png, md, readme)
    if md is not None:
        md.write_text(markdown(rows, summary, command))
    if readme is not None:
        # The README sits at the root; the scatter plot is written beside the markdown report.
        image = (png.as_posix() if png else "docs/validation.png")
        readme.write_text(splice(readme.read_text(), markdown(rows, summary, command, image=image, level=2)))
    if max_mape is not None and summary["mape"] is not None and 100 * summary["mape"] > max_mape:
        stderr.print(f"[bold red]MAPE {100 * summary['mape']:.1f}% exceeds --max-mape {max_mape:g}%[/]",
                     highlight=False)
        return EXIT_MAPE
    return 0


if __name__ == "__main__":  # until the lead registers it: python -m simulator.cli_validate [options]
    typer.run(validate_command)
