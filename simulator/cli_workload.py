"""``dtsim flops``, ``dtsim memory`` and ``dtsim catalog``: the workload model on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simulator import catalog
from simulator.catalog.hf import model_dict_from_hf
from simulator.cli_common import finite, handle_errors, print_json, stdout
from simulator.config.loader import load_scenario
from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.report.tables import memory_verdict
from simulator.units import fmt_bytes, fmt_count
from simulator.workload import flops, memory, params

SetOption = Annotated[
    list[str] | None, typer.Option("--set", metavar="PATH=VALUE", help="override a scenario key: dotted.path=value (repeatable)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]


def resolve_model(ref: str) -> ModelConfig:
    """A catalog name, a path to a Hugging Face config.json, or a scenario YAML (its model)."""
    if ref.endswith((".yaml", ".yml")):
        return load_scenario(ref).model
    if ref.endswith(".json") or Path(ref).is_file():
        return ModelConfig.model_validate(model_dict_from_hf(Path(ref)))
    try:
        return catalog.get_model(ref)
    except KeyError as exc:
        raise InputError(exc.args[0], "MODEL") from None


def flops_summary(model: ModelConfig, seq_len: int, convention: Literal["full", "causal"]) -> dict:
    """Parameters and FLOPs per token / per sequence for one sequence of ``seq_len`` tokens.

    Training FLOPs = 3 × forward (backward ≈ 2× forward: dgrad + wgrad per GEMM; Kaplan et al. 2020,
    Chinchilla App. F). The optimizer adds O(10·N) FLOPs per *step*, negligible, and is not counted.
    Sliding-window blocks count the score pairs their window leaves (``flops.attention_span``, fused kernels).
    """
    counts = params.count(model)
    causal = convention == "causal"
    window = {"attention_fraction": flops.attention_span(model, seq_len).fraction}
    plain = flops.step(model, 1, seq_len, causal=causal, **window)
    full = flops.step(model, 1, seq_len, causal=causal, recompute="full", **window)
    moe = {}
    if model.moe is not None:  # active = what one token uses (simulator.workload.moe)
        moe = {"n_params_active": counts.active,
               "n_params_active_without_input_embedding": counts.active - counts.embedding}
    return {
        "model": model.name,
        "seq_len": seq_len,
        "attention_convention": convention,
        "n_params": counts.total,
        **moe,
        "n_params_non_embedding": counts.non_embedding,
        "n_params_embedding": counts.embedding + counts.lm_head,
        "forward_flops_per_token": plain.forward_flops_per_token,
        "train_flops_per_token": plain.train_flops_per_token,
        "train_flops_per_token_full_recompute": full.hardware_flops_per_token,
        "forward_flops_per_sequence": plain.forward_flops,
        "train_flops_per_sequence": plain.model_flops,
        "six_n_flops_per_token": 6 * counts.active,  # N = active parameters for an MoE model
    }


def budget_summary(train_flops_per_token: float, tokens: float, gpu_name: str, n_gpus: int, mfu: float,
                   precision: str = "bf16") -> dict:
    """Closed-form run length at an *assumed* utilisation: T = C / (N_gpu · peak · MFU).

    C = training FLOPs per token × tokens (formulas.md §9: 1.17e23 FLOP at 1 PFLOP/s is 1.17e8 s).
    ``dtsim run`` replaces the assumed MFU with a simulated one.
    """
    try:
        gpu = catalog.get_gpu(gpu_name)
    except KeyError as exc:
        raise InputError(exc.args[0], "--gpu") from None
    total = train_flops_per_token * tokens
    rate = n_gpus * gpu.peak_flops(precision) * mfu  # type: ignore[arg-type]
    seconds = total / rate
    return {
        "tokens": tokens,
        "train_flops_total": total,
        "gpu": gpu.name,
        "n_gpus": n_gpus,
        "assumed_mfu": mfu,
        "sustained_flops_per_s": rate,
        "duration_s": seconds,
        "duration_days": seconds / 86400.0,
    }


def flops_command(
    model: Annotated[str, typer.Argument(help="catalog name, a config.json, or a scenario YAML (uses its model)")],
    seq_len: Annotated[int | None, typer.Option("--seq-len", min=1, help="tokens per sequence [2048 or scenario's]")] = None,
    convention: Annotated[
        str, typer.Option("--convention", help="attention FLOPs: full (PaLM, Megatron Eq. 3) or causal (half)")
    ] = "full",
    tokens: Annotated[float | None, typer.Option("--tokens", min=1, callback=finite, help="token budget for a run-length estimate")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU for the estimate")] = None,
    n_gpus: Annotated[int | None, typer.Option("--n-gpus", min=1, help="GPUs for the estimate")] = None,
    mfu: Annotated[float | None, typer.Option("--mfu", min=1e-6, max=1.0, callback=finite, help="assumed utilisation (0-1)")] = None,
    json_out: JsonOption = False,
) -> None:
    """Parameters and forward / training FLOPs per token and per sequence; with --mfu, the run length
    at that assumed utilisation (a scenario supplies tokens, GPU and GPU count)."""
    _flops(model, seq_len, convention, tokens, gpu, n_gpus, mfu, json_out)


@handle_errors
def _flops(model_ref: str, seq_len: int | None, convention: str, tokens: float | None, gpu: str | None,
           n_gpus: int | None, mfu: float | None, json_out: bool) -> None:
    if convention not in ("full", "causal"):
        raise InputError(f"unknown convention {convention!r}; valid: full, causal", "--convention")
    if model_ref.endswith((".yaml", ".yml")):
        scenario = load_scenario(model_ref)
        model = scenario.model
        seq_len = seq_len or scenario.training.seq_len
        tokens = tokens or scenario.training.total_tokens
        gpu = gpu or scenario.cluster.gpu_spec.name
        n_gpus = n_gpus or scenario.n_gpus
    else:
        model = resolve_model(model_ref)
    summary = flops_summary(model, seq_len or 2048, convention)  # type: ignore[arg-type]
    if mfu is not None:
        missing = [flag for flag, value in (("--tokens", tokens), ("--gpu", gpu), ("--n-gpus", n_gpus)) if not value]
        if missing:
            raise InputError(f"a run-length estimate also needs {', '.join(missing)} (or a scenario)", "--mfu")
        summary["estimate"] = budget_summary(summary["train_flops_per_token"], tokens, gpu, n_gpus, mfu)
    if json_out:
        print_json(summary)
        return
    table = Table(title=f"{summary['model']} at seq_len {summary['seq_len']} (attention FLOPs: {convention})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if key in ("model", "seq_len", "attention_convention", "estimate"):
            continue
        table.add_row(key, f"{value:,}" if key.startswith("n_params") else f"{value:.4e}")
    if "estimate" in summary:
        est = summary["estimate"]
        table.add_row("tokens", f"{est['tokens']:.4e}")
        table.add_row("train_flops_total", f"{est['train_flops_total']:.4e}")
        table.add_row(
            f"duration on {est['n_gpus']} x {est['gpu']} at MFU {est['assumed_mfu']:.0%}",
            f"{est['duration_s']:.4e} s = {est['duration_days']:.1f} days",
        )
    stdout.print(table)
    stdout.print(
        "Training = 3 × forward (backward ≈ 2 × forward); the optimizer adds no meaningful FLOPs. "
        "6N is the Kaplan approximation without the attention term."
    )
    if model.windowed_layers:
        stdout.print(f"Sliding-window attention: {model.windowed_layers} of {model.n_layers} blocks attend "
                     f"{model.sliding_window} tokens, counted as the score pairs inside the window.")


def memory_command(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML")],
    overrides: SetOption = None,
    json_out: JsonOption = False,
) -> None:
    """Per-GPU memory breakdown and whether it fits in usable HBM."""
    _memory(scenario, overrides, json_out)


@handle_errors
def _memory(path: Path, overrides: list[str] | None, json_out: bool) -> None:
    scenario = load_scenario(path, overrides)
    result = memory.breakdown(scenario).as_dict()
    if json_out:
        print_json(result)
        return
    gpu = scenario.cluster.gpu_spec
    par = scenario.parallel
    layout = f"dp={scenario.dp}" + "".join(f", {k}={getattr(par, k)}" for k in ("tp", "cp", "pp") if getattr(par, k) > 1)
    table = Table(title=f"{escape(scenario.name)}: memory per GPU on {gpu.name} ({layout}, "
                  f"ZeRO {par.effective_zero_stage}, {par.framework})")
    table.add_column("component")
    table.add_column("bytes", justify="right")
    table.add_column("", justify="right")
    for key, value in result.items():
        if key.endswith("_bytes") and key not in ("total_bytes", "hbm_bytes", "headroom_bytes"):
            table.add_row(key.removesuffix("_bytes"), f"{value:,.0f}", fmt_bytes(value))
    table.add_row("[bold]total", f"{result['total_bytes']:,.0f}", fmt_bytes(result["total_bytes"]))
    table.add_row("usable HBM", f"{result['hbm_bytes']:,.0f}", fmt_bytes(result["hbm_bytes"]))
    stdout.print(table)
    if result.get("stages"):
        stages = Table(title="per pipeline stage (the most loaded is reported above)")
        for col in ("stage", "layers", "micro-batches in flight", "activations", "total"):
            stages.add_column(col, justify="right")
        for r in result["stages"]:
            stages.add_row(str(r["stage"]), str(r["layers"]), f"{r['in_flight']:g}",
                           fmt_bytes(r["activations_bytes"]), fmt_bytes(r["total_bytes"]))
        stdout.print(stages)
    stdout.print(memory_verdict(result))


catalog_app = typer.Typer(help="List the catalogued GPUs and models.", no_args_is_help=True)


def _catalog_table(title: str, columns: tuple[str, ...], rows: list[list[str]],
                   left: tuple[str, ...] = ("name",)) -> Table:
    """A catalog table whose cells never truncate or fold (names are what users type, numbers are
    read whole): every cell is no-wrap; :func:`_print_wide` gives it the width it needs."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    return table


def _print_wide(table: Table) -> None:
    """Print at the table's natural width even when the terminal or pipe is narrower (the terminal
    wraps lines instead of rich cutting names to "a100-…")."""
    needed = Console(width=10_000).measure(table).maximum
    console = stdout if needed <= stdout.width else Console(width=needed)
    console.print(table)


@catalog_app.command("gpus")
def catalog_gpus(json_out: JsonOption = False) -> None:
    """GPUs with dense peaks, memory, bandwidths and power (datasheet values with sources)."""
    specs = catalog.gpus()
    if json_out:
        print_json({name: spec.model_dump() for name, spec in specs.items()})
        return
    rows = []
    for spec in specs.values():
        pk = spec.peak_tflops
        rows.append([
            spec.name,
            f"{pk.bf16 or pk.fp16 or 0:g}",
            f"{pk.fp8:g}" if pk.fp8 else "-",
            f"{pk.fp4:g}" if pk.fp4 else "-",
            fmt_bytes(spec.hbm_usable_bytes),
            f"{spec.hbm_bandwidth_GBps:g}",
            f"{spec.nvlink_GBps_per_direction:g}",
            f"Gen{spec.pcie_gen}",
            f"{spec.tdp_W:g}",
            spec.confidence,
            ",".join(spec.sources),
        ])
    table = _catalog_table("GPU catalog (dense peaks; GeForce: FP32-accumulate rates)",
                           ("name", "bf16/fp16 TFLOP/s", "fp8", "fp4", "HBM", "HBM GB/s", "NVLink GB/s/dir", "PCIe",
                            "TDP W", "conf.", "sources"), rows, left=("name", "sources"))
    _print_wide(table)


@catalog_app.command("models")
def catalog_models(json_out: JsonOption = False) -> None:
    """Models with their shapes and dtsim's exact parameter count."""
    table_data = {
        name: {**model.model_dump(exclude_defaults=True), "n_params": params.count(model).total,
               "n_params_active": params.count(model).active}
        for name, model in catalog.models().items()
    }
    if json_out:
        print_json(table_data)
        return
    rows = [[name, str(model.n_layers), str(model.hidden_size), str(model.n_heads), str(model.kv_heads),
             str(model.ffn_hidden_size),
             model.mlp + (f" MoE {model.moe.n_experts}e top-{model.moe.top_k}" if model.moe else ""),
             str(model.vocab_size), "yes" if model.tied_embeddings else "no",
             fmt_count(table_data[name]["n_params"])
             + (f" ({fmt_count(table_data[name]['n_params_active'])} active)" if model.moe else "")]
            for name, model in catalog.models().items()]
    table = _catalog_table("Model catalog", ("name", "layers", "hidden", "heads", "kv", "ffn", "mlp", "vocab", "tied",
                                             "params"), rows, left=("name", "mlp"))
    _print_wide(table)
