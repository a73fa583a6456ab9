"""PyTorch FSDP keyword block (the ``fsdp_kwargs = dict(...)`` that ``dtsim export --to fsdp``
writes, or a ``FullyShardedDataParallel(...)`` call) → scenario fragment, read with ``ast`` (the code
is never executed). Keywords: ``sharding_strategy=ShardingStrategy.X``,
``backward_prefetch=BackwardPrefetch.X | None``, ``forward_prefetch``, ``limit_all_gathers``,
``mixed_precision=MixedPrecision(param_dtype=torch.X, reduce_dtype=torch.Y)``,
``cpu_offload=CPUOffload(offload_params=...)`` (torch.distributed.fsdp API)."""

from __future__ import annotations

import ast

from simulator.errors import InputError
from simulator.interop.common import DTYPES, Imported

FIELD = "fsdp"
_IGNORED = {"auto_wrap_policy", "device_id", "sync_module_states", "use_orig_params", "param_init_fn",
            "device_mesh", "ignored_modules", "ignored_states", "process_group", "module"}


def _name(node: ast.AST) -> str:
    """``A.B`` or ``A`` of an attribute or name node."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant):
        return repr(node.value)
    raise InputError(f"cannot read {ast.unparse(node)!r}: write a literal, an enum member or a dtype", FIELD)


def _keywords(tree: ast.Module) -> list[ast.keyword]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in ("dict", "FullyShardedDataParallel", "FSDP") and \
                any(k.arg == "sharding_strategy" for k in node.keywords):
            return node.keywords
    raise InputError("no dict(...) or FullyShardedDataParallel(...) call with sharding_strategy= found", FIELD)


def _callee(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _dtype(node: ast.AST, key: str) -> str:
    name = _name(node)
    if name not in DTYPES:
        raise InputError(f"{name} is not bfloat16, float16 or float32", f"{FIELD} {key}")
    return DTYPES[name]


def _resolved(tree: ast.Module, node: ast.AST) -> ast.AST:
    """A keyword's value, or, when it names a variable (``mixed_precision=bf16_policy``), the call the
    file assigns to that variable last (``bf16_policy = MixedPrecision(...)``), the common pattern."""
    if not isinstance(node, ast.Name):
        return node
    calls = [a.value for a in ast.walk(tree) if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)
             and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
    return calls[-1] if calls else node


def import_block(text: str) -> Imported:
    """The FSDP keyword block's settings (framework fsdp)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise InputError(f"not valid Python (line {exc.lineno}: {exc.msg})", FIELD) from None
    out = Imported()
    out.set("parallel.framework", "fsdp")
    for kw in _keywords(tree):
        key, value = kw.arg, _resolved(tree, kw.value)
        if key in _IGNORED:
            out.ignore(key, "wrapping or initialisation: no effect on the simulated step")
        elif key == "sharding_strategy":
            name = _name(value).lower()
            if name not in ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard"):
                raise InputError(f"ShardingStrategy.{name.upper()} is not modelled", f"{FIELD} sharding_strategy")
            out.set("parallel.sharding_strategy", name)
        elif key == "backward_prefetch":
            name = _name(value)
            out.set("parallel.backward_prefetch", "none" if name == "None" else name.lower())
        elif key in ("forward_prefetch", "limit_all_gathers"):
            if not isinstance(value, ast.Constant) or not isinstance(value.value, bool):
                raise InputError("must be True or False", f"{FIELD} {key}")
            out.set(f"parallel.{key}", value.value)
        elif key == "mixed_precision":
            if not isinstance(value, ast.Call):
                raise InputError("must be MixedPrecision(param_dtype=..., reduce_dtype=...)", f"{FIELD} {key}")
            for inner in value.keywords:
                if inner.arg in ("param_dtype", "reduce_dtype"):
                    out.set(f"parallel.{inner.arg}", _dtype(inner.value, f"mixed_precision.{inner.arg}"))
                else:
                    out.ignore(f"mixed_precision.{inner.arg}", "buffer dtype and casting details")
        elif key == "cpu_offload":
            offload = isinstance(value, ast.Call) and any(
                k.arg == "offload_params" and isinstance(k.value, ast.Constant) and k.value.value
                for k in value.keywords)
            if offload:
                raise InputError("FSDP CPU offload is not modelled by dtsim; remove it or use DeepSpeed offload",
                                 f"{FIELD} cpu_offload")
        else:
            raise InputError(f"unknown FullyShardedDataParallel keyword {key!r}", FIELD)
    return out
