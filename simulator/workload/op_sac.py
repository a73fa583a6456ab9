"""torchtitan's op-level selective activation checkpointing (``activation_checkpointing: selective_op``).

torchtitan ``activation_checkpoint.mode = "selective"`` with ``selective_ac_option = "op"`` (its
Llama 3 default; ``torchtitan/models/llama3/parallelize_llama.py`` ``_apply_ac_to_transformer_block``)
wraps each block in ``checkpoint(..., context_fn=create_selective_checkpoint_contexts(policy))`` with a
policy that saves the output of ``aten.mm`` — *except every second one* — and of the SDPA kernel
(``_scaled_dot_product_flash_attention`` / ``_efficient_attention``), and recomputes everything else
(norms, rotary, activation, residual adds, the skipped GEMMs)::

    to_save = func in _save_list and not (func == aten.mm and meta[mm_count] % 2 == 0)

So with the block's linears in forward order (``ModelConfig.linear_modules``: Llama's q, k, v, o,
gate, up, down) the odd-numbered ones (q, v, gate, down) keep their outputs and the even-numbered
ones (k, o, up) are re-run before the backward, with every elementwise op. The block input is the
checkpoint's input and stays too. This module is the one place that says which tensors that is:
memory (``activations``), recompute FLOPs (``flops``) and the recompute kernels (``ops``) read it.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.model import ModelConfig
from simulator.workload.op import Op, gemm


def out_width(model: ModelConfig, linear: str) -> int:
    """Output features of one block linear (before tensor parallelism)."""
    h, f, q, kv = model.hidden_size, model.ffn_hidden_size, model.q_dim, model.kv_dim
    return {"qkv": q + 2 * kv, "q": q, "k": kv, "v": kv, "o": h, "gate": f, "up": f, "fc1": f,
            "down": h, "fc2": h}[linear]


def in_width(model: ModelConfig, linear: str) -> int:
    """Input features of one block linear (before tensor parallelism)."""
    return {"o": model.q_dim, "down": model.ffn_hidden_size, "fc2": model.ffn_hidden_size}.get(
        linear, model.hidden_size)


def saved_linears(model: ModelConfig) -> tuple[str, ...]:
    """The linears whose outputs the policy keeps: the 1st, 3rd, 5th, ... ``aten.mm`` of the block."""
    return model.linear_modules[0::2]


def recomputed_linears(model: ModelConfig) -> tuple[str, ...]:
    """The linears re-run before the backward: the 2nd, 4th, ... ``aten.mm`` of the block."""
    return model.linear_modules[1::2]


def saved_width(model: ModelConfig) -> int:
    """Features per token one block keeps under the policy, before tensor parallelism: the saved mm
    outputs plus the attention output (SDPA is in the save list); the block input is counted apart."""
    return sum(out_width(model, name) for name in saved_linears(model)) + model.q_dim


def recomputed_gemm_flops(model: ModelConfig, tokens: float) -> float:
    """Forward FLOPs of the re-run linears for ``tokens`` tokens: ``2·tokens·in·out`` each."""
    return sum(2.0 * tokens * in_width(model, n) * out_width(model, n) for n in recomputed_linears(model))


#: The block linears each linear GEMM op of ``layer_ops`` computes (``ModelConfig.linear_modules``).
_GEMM_LINEARS = {"qkv": ("qkv", "q", "k", "v"), "out_proj": ("o",), "mlp_up": ("gate", "up", "fc1"),
                 "mlp_down": ("down", "fc2")}


def mark(model: ModelConfig, ops: list[Op], pb: int) -> list[Op]:
    """Mark what torchtitan's op-level policy re-runs (``op_sac``): every memory-bound op (norms,
    rotary, activation, residual adds, FP8 casts) and the even-numbered linears; a GEMM op that
    computes saved and re-run linears together (q, k, v; gate, up) is split by output width."""
    rerun = set(recomputed_linears(model))
    out: list[Op] = []
    for op in ops:
        if op.kind == "memory":
            out.append(replace(op, recompute=True))
            continue
        linears = [x for x in _GEMM_LINEARS.get(op.name, ()) if x in model.linear_modules]
        redo = [x for x in linears if x in rerun]
        if not redo:
            out.append(op)
        elif len(redo) == len(linears):
            out.append(replace(op, recompute=True))
        else:  # e.g. q, k, v as one op: k is re-run, q and v kept
            n_redo = op.n * sum(out_width(model, x) for x in redo) // sum(
                out_width(model, x) for x in linears)
            n_keep = op.n - n_redo
            keep_launches = max(1, op.launches * (len(linears) - len(redo)) // len(linears))
            redo_launches = max(1, op.launches - keep_launches)
            out.append(replace(gemm(op.name, op.m, n_keep, op.k, pb), launches=keep_launches, linear=True))
            out.append(replace(gemm(f"{op.name}.rerun", op.m, n_redo, op.k, pb), launches=redo_launches,
                               linear=True, recompute=True))
    return out
