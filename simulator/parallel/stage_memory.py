"""Activation memory per pipeline stage, from the schedule's in-flight micro-batches.

A stage holding ``n_s`` blocks with ``k_s`` micro-batches in flight stores
``per_layer · n_s · k_s`` bytes of block activations (``per_layer`` = Korthikanti et al. 2022
Table 2 via ``workload.memory.layer_activation_bytes``, with sequence parallelism dividing the
norm/dropout region by t). ``k_s`` is counted on the schedule's order
(``pipeline_order.in_flight``): GPipe ``m``; 1F1B ``min(p−s, m)``; interleaved
``(2(p−s−1) + (v−1)p + 1)/v`` stage-equivalents, i.e. ``L·(1 + (p−1)/(p·v))`` layers on stage 0
(Korthikanti §4.2.3; Narayanan et al. SC'21 §2.2.2). The first stage adds the embedding's dropout
mask per in-flight micro-batch, the last the logits buffers of one micro-batch; full recomputation
adds one block's full activations while it is rebuilt. With context parallelism every term is for
the rank's ``s/cp`` tokens (Korthikanti's formulas with ``s → s/cp``).
"""

from __future__ import annotations

import math
from typing import Any

from simulator.parallel import pipeline_order
from simulator.parallel.build import n_micro as micro_batches
from simulator.parallel.pipeline import stage_layers
from simulator.workload.memory import MASK_BYTES, layer_activation_bytes, logits_activation_bytes


def stage_activations(scenario: Any) -> list[dict[str, float]]:
    """One row per GPU stage: ``stage``, ``layers``, ``in_flight`` (micro-batches, in whole-stage
    units), ``activations_bytes``."""
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    # Context parallelism: each rank stores the activations of its s/cp tokens.
    b, s, t, pp = tr.micro_batch_size, tr.seq_len // par.cp, par.tp, par.pp
    pb = 2 if tr.precision in ("bf16", "fp16", "fp8") else 4
    dropout = m.dropout > 0
    common = dict(flash_attention=tr.kernels.flash_attention, precision_bytes=pb, dropout=dropout,
                  sequence_parallel=par.sequence_parallel and t > 1)
    per_layer = layer_activation_bytes(m, b, s, t, recompute=tr.activation_checkpointing, **common)
    transient = 0.0
    if tr.activation_checkpointing == "full":
        transient = layer_activation_bytes(m, b, s, t, recompute="none", **common)
    schedule = par.pipeline_schedule if pp > 1 else "1f1b"
    v = par.virtual_stages if schedule == "interleaved" else 1
    chunks = stage_layers(m.n_layers, pp * v)
    n_micro = micro_batches(scenario)
    rows = []
    for st in range(pp):
        layers = sum(chunks[c * pp + st] for c in range(v))
        k = pipeline_order.in_flight(schedule, st, pp, n_micro, v)
        act = per_layer * layers * k + transient
        if st == 0 and dropout:
            act += MASK_BYTES * s * b * m.hidden_size * math.ceil(k)
        if st == pp - 1:
            act += logits_activation_bytes(m, b, s, t, pb)
        rows.append({"stage": st, "layers": layers, "in_flight": k, "activations_bytes": act})
    return rows


def apply_to_breakdown(mem: dict[str, Any], rows: list[dict[str, float]], fragmentation: float) -> dict[str, Any]:
    """Replace the memory verdict's activations by the most-loaded stage's and recompute the total:
    ``total += (1 + fragmentation)·(max(act', step) − max(act, step))`` (the optimizer-step
    transient and the activations are never live together; workload.memory.breakdown)."""
    new_act = max(r["activations_bytes"] for r in rows)
    step = mem.get("optimizer_step_bytes", 0.0)
    delta = (max(new_act, step) - max(mem["activations_bytes"], step)) * (1 + fragmentation)
    out = dict(mem)
    out["activations_bytes"] = new_act
    out["fragmentation_bytes"] = mem["fragmentation_bytes"] + delta * fragmentation / (1 + fragmentation)
    out["total_bytes"] = mem["total_bytes"] + delta
    out["headroom_bytes"] = mem["hbm_bytes"] - out["total_bytes"]
    out["fits"] = out["total_bytes"] <= mem["hbm_bytes"]
    out["stages"] = rows
    return out
