"""Megatron-LM's multi-head latent attention arguments ↔ ``model.attention: mla`` and its five shapes (read
by ``megatron.import_args``, written by ``megatron_export.export_args``). Flag names and defaults:
Megatron-LM ``megatron/training/arguments.py`` (``_add_mla_args``) and Megatron-Core ``MLATransformerConfig``:

* ``--multi-latent-attention`` turns MLA on;
* ``--q-lora-rank`` (default none: queries projected without compression, DeepSeek-V2-Lite), ``--kv-lora-rank``
  (32), ``--qk-head-dim`` (the no-position part of a query/key head, 128), ``--qk-pos-emb-head-dim`` (its
  rotary part, 64) and ``--v-head-dim`` (128): ``model.q_lora_rank``, ``kv_lora_rank``,
  ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``.

The shape flags without ``--multi-latent-attention`` are refused, as ``--num-query-groups`` without
``--group-query-attention`` is: Megatron would build a plain attention and ignore them.
"""

from __future__ import annotations

from simulator.errors import InputError

FIELD = "megatron"
#: Flag → (model key, Megatron's default).
SHAPES = {
    "q-lora-rank": ("q_lora_rank", None),
    "kv-lora-rank": ("kv_lora_rank", 32),
    "qk-head-dim": ("qk_nope_head_dim", 128),
    "qk-pos-emb-head-dim": ("qk_rope_head_dim", 64),
    "v-head-dim": ("v_head_dim", 128),
}
VALUE_FLAGS = tuple(SHAPES)
BOOL_FLAGS = ("multi-latent-attention",)


def import_mla(flags: dict, integer, out) -> None:
    """``model.attention: mla`` and its shapes from the MLA flags (module docstring); nothing without them."""
    given = [name for name in SHAPES if name in flags]
    if not flags.get("multi-latent-attention"):
        if given:
            raise InputError(f"--{given[0]} has no effect without --multi-latent-attention; add it or remove "
                             f"--{given[0]}", FIELD)
        return
    out.set("model.attention", "mla")
    for name, (key, default) in SHAPES.items():
        value = integer(name) if name in flags else default
        if value is not None:
            out.set(f"model.{key}", value)


def export_mla(model) -> list[str]:
    """The Megatron-LM flags of an MLA model (none for another attention)."""
    if not model.is_mla:
        return []
    lines = ["--multi-latent-attention"]
    for name, (key, _) in SHAPES.items():
        value = getattr(model, key)
        if value is not None:
            lines.append(f"--{name} {value}")
    return lines
