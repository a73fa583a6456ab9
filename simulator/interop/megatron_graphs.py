"""Megatron-LM's CUDA-graph arguments ↔ ``training.kernels.cuda_graphs`` (read by ``megatron.import_args``,
written by ``megatron_export.export_args``). Flag names: Megatron-LM ``megatron/training/arguments.py``:

* ``--cuda-graph-impl`` ``none`` | ``local`` (Megatron-Core's own capture) | ``transformer_engine``
  (TE ``make_graphed_callables``); the older switches ``--enable-cuda-graph`` (local) and
  ``--external-cuda-graph`` (Transformer Engine) mean the same;
* ``--cuda-graph-scope``, a list: ``attn``, ``mlp``, ``moe_router``, ``moe_preprocess``, ``moe`` (parts of
  every block; ``moe`` the whole MoE layer, which Megatron-Core captures only with static shapes, a
  capacity factor with padding: the scenario refuses it for a dropless model), ``full_iteration`` (the
  whole forward and backward, with ``local``), or ``full`` (every part of the block: what an
  implementation without a scope captures).

``mamba`` is refused: a Mamba hybrid is not read from Megatron-LM's arguments (``--hybrid-override-pattern``);
a scenario writes ``model.hybrid_pattern`` and the ``mamba`` scope itself.
"""

from __future__ import annotations

from simulator.errors import InputError

FIELD = "megatron"
VALUE_FLAGS = ("cuda-graph-impl", "cuda-graph-scope")
BOOL_FLAGS = ("enable-cuda-graph", "external-cuda-graph")
LIST_FLAGS = ("cuda-graph-scope",)
#: Every block scope: ``full`` (or an implementation without ``--cuda-graph-scope``).
BLOCK_SCOPES = ("attn", "mlp", "moe_router", "moe_preprocess")
#: Scopes read one by one besides the block scopes.
OTHER_SCOPES = ("moe", "full_iteration")
IMPLS = ("none", "local", "transformer_engine")


def import_graphs(flags: dict, out) -> None:
    """``training.kernels.cuda_graphs`` from the CUDA-graph flags (module docstring); nothing when eager."""
    impl = flags.get("cuda-graph-impl")
    if impl is True or (impl is not None and impl not in IMPLS):
        raise InputError(f"--cuda-graph-impl {impl!r}: give one of {', '.join(IMPLS)}", FIELD)
    if impl is None and (flags.get("enable-cuda-graph") or flags.get("external-cuda-graph")):
        impl = "local" if flags.get("enable-cuda-graph") else "transformer_engine"
    scope = flags.get("cuda-graph-scope")
    if impl in (None, "none"):
        if scope is not None:
            raise InputError("--cuda-graph-scope needs --cuda-graph-impl local or transformer_engine", FIELD)
        return
    words = ["full"] if scope in (None, True) else str(scope).split()
    scopes: list[str] = []
    for word in words:
        if word == "full":
            scopes += [s for s in BLOCK_SCOPES if s not in scopes]
        elif word in BLOCK_SCOPES or word in OTHER_SCOPES:
            scopes += [word] if word not in scopes else []
        else:
            raise InputError(f"--cuda-graph-scope {word}: dtsim simulates the scopes "
                             f"{', '.join(BLOCK_SCOPES + OTHER_SCOPES)} and full (a Mamba hybrid is not read from Megatron arguments; write model.hybrid_pattern and the mamba scope in the scenario): "
                             "remove it", FIELD)
    if "full_iteration" in scopes and impl != "local":
        raise InputError("--cuda-graph-scope full_iteration needs --cuda-graph-impl local", FIELD)
    out.set("training.kernels.cuda_graphs", scopes)


def export_graphs(kernels) -> list[str]:
    """The Megatron-LM flags of ``kernels.cuda_graphs`` (none when eager)."""
    scopes = tuple(kernels.cuda_graphs)
    if not scopes:
        return []
    if "full_iteration" in scopes:
        return ["--cuda-graph-impl local", "--cuda-graph-scope full_iteration"]
    return ["--cuda-graph-impl transformer_engine", "--cuda-graph-scope " + " ".join(scopes)]
