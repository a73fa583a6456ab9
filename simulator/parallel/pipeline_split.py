"""Transformer blocks per (virtual) pipeline stage, as Megatron-Core places them.

Virtual stage ``j = chunk·p + s`` runs on GPU stage ``s`` (Megatron's chunk placement). Three
placements (Megatron-Core ``get_num_layers_to_build`` / ``get_transformer_layer_offset``,
``megatron/core/transformer/transformer_block.py`` and ``transformer_layer.py``):

* default: blocks as evenly as possible over the ``p·v`` virtual stages, the first ``L mod (p·v)``
  taking one more (Megatron itself needs ``L`` divisible by ``p·v``; torchtitan splits unevenly);
* ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the
  embedding and the loss each count as one more layer slot; ``L + e + l`` slots split evenly over
  the ``p·v`` virtual stages (must divide), the first virtual stage builds one block fewer for the
  embedding, the last one fewer for the loss (Llama 3.1 405B: 126 + 2 = 128 slots on p=8 × v=8).
  With one slot per virtual stage the first holds only the embedding and the last only the loss:
  Megatron-Bridge runs Llama 3.1 405B so on p=16 × v=8 (``docs/performance-summary.md``, 26.02.01
  DGX-GB200 MXFP8 row: 128 virtual stages for 126 blocks);
* ``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``: the first (last)
  GPU stage holds that many blocks, the other stages split the rest evenly (must divide); with
  ``v > 1`` each GPU stage's blocks split evenly over its ``v`` chunks (must divide).

* ``pipeline_layout`` (Megatron-Core ``pipeline_model_parallel_layout``,
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``): the blocks of every virtual
  stage written out, so virtual stages need not be equal and no divisibility applies. A string of
  ``p·v`` stages separated by ``|`` in virtual-stage order ``j = chunk·p + s`` (Megatron's
  ``layout[vpp_rank·pp + pp_rank]``); in a stage ``E`` = embedding, ``t`` = transformer block,
  ``m`` = multi-token-prediction block, ``L`` = loss; ``(..)*n`` and ``x*n`` repeat, commas are
  cosmetic (``parse_str_to_list``). As in Megatron-Core ``validate_layer_layout``: exactly one
  ``E``, in the first stage, before its blocks; exactly one ``L``, at the end of the last stage;
  the ``t`` count equals the model's layers; ``m`` only after every ``t``. With ``model.mtp_layers``
  the ``m`` count must equal it and each ``m`` is one more block on its stage (``simulator.workload.mtp``;
  without a layout the MTP blocks go to the last stage, Megatron-Core's placement); with
  ``model.mtp_layers: 0`` an ``m`` holds no work. Megatron-Bridge runs DeepSeek-V3 (61 blocks) on pp=8 × v=2 as
  ``Etttt|(tttt|)*14tmL`` (``recipes/deepseek/deepseek_v3.py``, ``layout_map[(8, 2)]``): four
  blocks per virtual stage, the embedding with the first four, the last stage one block, MTP and
  the loss; 61 blocks cannot be split over 16 chunks by ``decoder_first/last_pipeline_num_layers``
  (each GPU stage's count must divide by v, and 61 is odd).

Pure arithmetic; ``split_error`` says why a placement is impossible (``None`` if it is possible).
"""

from __future__ import annotations

import re
from typing import Any

#: Layer characters of a Megatron-Core layout string.
_LAYOUT_CHARS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}


def layout_stages(text: str) -> list[str]:
    """The stages of a layout string, each a string of layer characters (Megatron-Core
    ``PipelineParallelLayerLayout.parse_str_to_list``: drop commas, unroll ``(..)*n`` then ``x*n``,
    split at ``|``). Raises ``ValueError`` naming a bad character."""
    s = text.replace(",", "").replace(" ", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), s)
    stages = s.split("|")
    for stage in stages:
        for ch in stage:
            if ch not in _LAYOUT_CHARS:
                raise ValueError(f"invalid layer character {ch!r} in stage {stage!r}; use E (embedding), "
                                 "t (transformer block), m (MTP block), L (loss), | between stages, (..)*n to repeat")
    return stages


def _layout_error(text: str, n_layers: int, n_stages: int, mtp: int = 0) -> str | None:
    stages = layout_stages(text)
    flat = "".join(stages)
    if len(stages) != n_stages:
        return f"pipeline_layout has {len(stages)} stages, pp x virtual_stages = {n_stages}"
    if flat.count("E") != 1 or not stages[0].startswith("E"):
        return "pipeline_layout needs exactly one E (embedding), at the start of the first stage"
    if flat.count("L") != 1 or not stages[-1].endswith("L"):
        return "pipeline_layout needs exactly one L (loss), at the end of the last stage"
    if flat.count("t") != n_layers:
        return f"pipeline_layout places {flat.count('t')} transformer blocks (t), the model has {n_layers}"
    if "m" in flat and "t" in flat[flat.index("m"):]:
        return "pipeline_layout: MTP blocks (m) must come after every transformer block (t)"
    if mtp and flat.count("m") != mtp:
        return f"pipeline_layout places {flat.count('m')} MTP blocks (m), model.mtp_layers is {mtp}"
    return None


def _even(n_layers: int, n: int) -> list[int]:
    base, extra = divmod(n_layers, n)
    return [base + (1 if j < extra else 0) for j in range(n)]


def _layout(parallel: Any) -> str | None:
    return getattr(parallel, "pipeline_layout", None)


def _options(parallel: Any) -> tuple[int | None, int | None, bool, bool]:
    return (getattr(parallel, "decoder_first_pipeline_num_layers", None),
            getattr(parallel, "decoder_last_pipeline_num_layers", None),
            bool(getattr(parallel, "account_for_embedding_in_pipeline_split", False)),
            bool(getattr(parallel, "account_for_loss_in_pipeline_split", False)))


def is_custom(parallel: Any) -> bool:
    """Whether ``parallel`` asks for a Megatron uneven placement (any of the four options)."""
    first, last, emb, loss = _options(parallel)
    return first is not None or last is not None or emb or loss or _layout(parallel) is not None


def split_error(n_layers: int, pp: int, v: int, parallel: Any, mtp: int = 0) -> str | None:
    """Why the blocks cannot be placed (a message naming the key), or ``None``. ``n_layers``: the
    model's blocks; ``mtp``: its multi-token-prediction blocks (``model.mtp_layers``)."""
    first, last, emb, loss = _options(parallel)
    if _layout(parallel) is not None:
        if first is not None or last is not None or emb or loss:
            return ("pipeline_layout replaces decoder_first/last_pipeline_num_layers and "
                    "account_for_embedding/loss_in_pipeline_split (Megatron-Core refuses both); use one")
        return _layout_error(_layout(parallel), n_layers, pp * v, mtp)
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
    return None


def virtual_stage_layers(n_layers: int, pp: int, v: int = 1, parallel: Any = None, mtp: int = 0) -> list[int]:
    """Blocks on each of the ``p·v`` virtual stages (index ``j = chunk·p + s``): the model's
    ``n_layers`` placed as configured, and its ``mtp`` MTP blocks where the layout puts them or on the
    last virtual stage."""
    text = _layout(parallel)
    if text is not None:
        return [stage.count("t") + (stage.count("m") if mtp else 0) for stage in layout_stages(text)]
    layers = _decoder_layers(n_layers, pp, v, parallel)
    layers[-1] += mtp
    return layers


def _decoder_layers(n_layers: int, pp: int, v: int, parallel: Any) -> list[int]:
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


def gpu_stage_chunks(n_layers: int, pp: int, v: int = 1, parallel: Any = None, mtp: int = 0) -> list[list[int]]:
    """Blocks of each of the ``v`` model chunks on each GPU stage, MTP blocks included."""
    layers = virtual_stage_layers(n_layers, pp, v, parallel, mtp)
    return [[layers[c * pp + s] for c in range(v)] for s in range(pp)]
