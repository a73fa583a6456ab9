"""Pipeline schedules as per-stage orders of (phase, micro-batch, model chunk) items.

Pure functions, no graph: the builder (``simulator.parallel.pipeline``) turns an order into tasks,
and the bubble comes out of the simulated dependencies, never from these formulas. The in-flight
counts here feed per-stage activation memory.

* ``gpipe`` (Huang et al. 2019): all ``m`` forwards, then all ``m`` backwards; ``m`` micro-batches
  in flight on every stage; bubble ``(p−1)/m`` of the ideal time.
* ``1f1b`` (PipeDream-Flush; Narayanan et al. SC'21 §2.2): ``p−s−1`` warm-up forwards, then one
  forward and one backward alternately, then the remaining backwards; ``min(p−s, m)`` in flight on
  stage ``s``; bubble ``(p−1)/m``.
* ``interleaved`` (SC'21 §2.2.2; Megatron-LM ``forward_backward_pipelining_with_interleaving``):
  each stage holds ``v`` model chunks (virtual stage ``j = chunk·p + s``); forwards walk the chunks
  in groups of ``p`` micro-batches, backwards the chunks in reverse; warm-up
  ``(p−s−1)·2 + (v−1)·p`` chunk-forwards; bubble ``(p−1)/(m·v)``. Needs ``m`` divisible by ``p``.
"""

from __future__ import annotations

Item = tuple[str, int, int]  # ("F" | "B", micro-batch, model chunk)


def gpipe(stage: int, pp: int, n_micro: int) -> list[Item]:
    return [("F", g, 0) for g in range(n_micro)] + [("B", g, 0) for g in range(n_micro)]


def one_f_one_b(stage: int, pp: int, n_micro: int) -> list[Item]:
    warmup = min(pp - stage - 1, n_micro)
    order: list[Item] = [("F", g, 0) for g in range(warmup)]
    for i in range(n_micro - warmup):
        order += [("F", warmup + i, 0), ("B", i, 0)]
    order += [("B", g, 0) for g in range(n_micro - warmup, n_micro)]
    return order


def _interleaved_item(k: int, pp: int, v: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of the ``k``-th forward or backward of a stage (Megatron's
    ``get_model_chunk_id`` and ``get_microbatch_id_in_model_chunk``)."""
    in_group = k % (pp * v)
    chunk = in_group // pp
    if not forward:
        chunk = v - 1 - chunk
    return (k // (pp * v)) * pp + k % pp, chunk


def interleaved_warmup(stage: int, pp: int, n_micro: int, v: int) -> int:
    return min((pp - stage - 1) * 2 + (v - 1) * pp, n_micro * v)


def interleaved(stage: int, pp: int, n_micro: int, v: int) -> list[Item]:
    total = n_micro * v
    warmup = interleaved_warmup(stage, pp, n_micro, v)
    order: list[Item] = []
    for k in range(warmup):
        order.append(("F", *_interleaved_item(k, pp, v, True)))
    for i in range(total - warmup):
        order.append(("F", *_interleaved_item(warmup + i, pp, v, True)))
        order.append(("B", *_interleaved_item(i, pp, v, False)))
    for k in range(total - warmup, total):
        order.append(("B", *_interleaved_item(k, pp, v, False)))
    return order


def order(schedule: str, stage: int, pp: int, n_micro: int, v: int = 1) -> list[Item]:
    if schedule == "gpipe":
        return gpipe(stage, pp, n_micro)
    if schedule == "interleaved":
        return interleaved(stage, pp, n_micro, v)
    return one_f_one_b(stage, pp, n_micro)


def in_flight(schedule: str, stage: int, pp: int, n_micro: int, v: int = 1,
              chunk_blocks: list[int] | None = None) -> float:
    """Peak micro-batches whose activations stage ``stage`` holds, in units of the whole stage's
    layers, measured on the order itself. A chunk of an interleaved stage counts its share of the
    stage's blocks (``chunk_blocks``, one count per chunk; ``1/v`` each when they are equal or not
    given): unequal chunks (a last stage's MTP block, ``pipeline_layout``) hold unequal activations."""
    weights = chunk_blocks if chunk_blocks and sum(chunk_blocks) > 0 else [1] * v
    live = peak = 0
    for phase, _, chunk in order(schedule, stage, pp, n_micro, v):
        live += weights[chunk] if phase == "F" else -weights[chunk]
        peak = max(peak, live)
    return peak / sum(weights)
