"""Transformer blocks per (virtual) pipeline stage, as Megatron-Core places them.

Virtual stage ``j = chunk·p + s`` runs on GPU stage ``s`` (Megatron's chunk placement). Three
placements (Megatron-Core ``get_num_layers_to_build`` / ``get_transformer_layer_offset``,
``megatron/core/transformer/transformer_block.py`` and ``transformer_layer.py``):

* default: blocks as evenly as possible over the ``p·v`` virtual stages, the first ``L mod (p·v)``
  taking one more (Megatron itself needs ``L`` divisible by ``p·v``; torchtitan splits unevenly);
* ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the
  embedding and the loss each count as one more layer slot; ``L + e + l`` slots split evenly over
  the ``p·v`` virtual stages (must divide), the first virtual stage builds one block fewer for the
  embedding, the last one fewer for the loss (Llama 3.1 405B: 126 + 2 = 128 slots on p=8 × v=8);
* ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``: the first (last)
  GPU stage holds that many blocks, the other stages split the rest evenly (must divide); with
  ``v > 1`` each GPU stage's blocks split evenly over its ``v`` chunks (must divide).

Pure arithmetic; ``split_error`` says why a placement is impossible (``None`` if it is possible).
"""

from __future__ import annotations

from typing import Any


def _even(n_layers: int, n: int) -> list[int]:
    base, extra = divmod(n_layers, n)
    return [base + (1 if j < extra else 0) for j in range(n)]


def _options(parallel: Any) -> tuple[int | None, int | None, bool, bool]:
    return (getattr(parallel, "decoder_first_pipeline_num_layers", None),
            getattr(parallel, "decoder_last_pipeline_num_layers", None),
            bool(getattr(parallel, "account_for_embedding_in_pipeline_split", False)),
            bool(getattr(parallel, "account_for_loss_in_pipeline_split", False)))


def is_custom(parallel: Any) -> bool:
    """Whether ``parallel`` asks for a Megatron uneven placement (any of the four options)."""
    first, last, emb, loss = _options(parallel)
    return first is not None or last is not None or emb or loss


def split_error(n_layers: int, pp: int, v: int, parallel: Any) -> str | None:
    """Why the blocks cannot be placed (a message naming the key), or ``None``."""
    first, last, emb, loss = _options(parallel)
    if (first is not None or last is not None) and (emb or loss):
        return ("decoder_first/last_pipeline_num_layers and account_for_embedding/loss_in_pipeline_split "
                "cannot be combined (Megatron-Core refuses it); use one of the two")
    if first is not None or last is not None:
        if pp < 2:
            return "decoder_first/last_pipeline_num_layers need parallel.pp >= 2"
        rest = n_layers - (first or 0) - (last or 0)
        middle = pp - (first is not None) - (last is not None)
        if rest < 0 or (middle == 0 and rest) or (middle and (rest % middle or rest // middle < 1)):
            return (f"{n_layers} layers minus first={first} and last={last} leave {rest} for the other "
                    f"{middle} stages: it must split evenly, at least one each")
        for name, n in (("first", first), ("last", last), ("middle", rest // middle if middle else None)):
            if n is not None and n % v:
                return f"the {name} stage's {n} layers are not divisible by virtual_stages={v}"
        return None
    slots = n_layers + emb + loss
    if emb or loss:
        if slots % (pp * v):
            return (f"{n_layers} layers + {int(emb) + int(loss)} (embedding/loss slots) = {slots} must be divisible "
                    f"by pp x virtual_stages = {pp * v}")
        if min(virtual_stage_layers(n_layers, pp, v, parallel)) < 1:
            return (f"{slots} slots over {pp * v} virtual stages leave the first or last virtual stage without a "
                    "transformer block; use fewer stages")
    return None


def virtual_stage_layers(n_layers: int, pp: int, v: int = 1, parallel: Any = None) -> list[int]:
    """Blocks on each of the ``p·v`` virtual stages (index ``j = chunk·p + s``)."""
    n = pp * v
    first, last, emb, loss = _options(parallel)
    if first is not None or last is not None:
        middle = pp - (first is not None) - (last is not None)
        rest = n_layers - (first or 0) - (last or 0)
        per_stage = [rest // middle if middle else 0] * pp
        if first is not None:
            per_stage[0] = first
        if last is not None:
            per_stage[-1] = last
        return [per_stage[j % pp] // v for j in range(n)]
    if emb or loss:
        per = (n_layers + emb + loss) // n
        out = [per] * n
        out[0] -= int(emb)
        out[-1] -= int(loss)
        return out
    return _even(n_layers, n)


def gpu_stage_layers(n_layers: int, pp: int, v: int = 1, parallel: Any = None) -> list[int]:
    """Blocks on each GPU stage (its ``v`` chunks summed)."""
    layers = virtual_stage_layers(n_layers, pp, v, parallel)
    return [sum(layers[c * pp + s] for c in range(v)) for s in range(pp)]
