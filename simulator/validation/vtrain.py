"""vTrain's measured Megatron-DeepSpeed iteration times (A100), as dtsim scenarios.

Source: Bang, Choi, Kim, Kim, Rhu, "vTrain: A Simulation Framework for Evaluating Cost-effective and
Compute-optimal Large Language Model Training", MICRO-57 (2024), arXiv:2312.12391; its repository
VIA-Research/vTrain at commit f8dda8473a48b373b1d25f51f52d685bff5150c5, ``data/ground_truth_single.csv``
(1,440 runs on 2, 4 or 8 GPUs of one node: hidden 1,024 or 2,048, 16 heads, 12-24 layers, sequence
1,024, micro-batch 1-8, TP 1-8, PP 1-4; sha256 2efec017...10f6c0 as published, CRLF line ends) and
``data/ground_truth_multi.csv`` (109 runs of 3.6B-175B GPT models on 64-512 GPUs, sequence 2,048),
copied verbatim into ``vtrain_single_node.csv`` and ``vtrain_multi_node.csv`` (LF line ends).
"All data points here are collected using Megatron-DeepSpeed codebase" (its ``data/README.md``).

What the source states, and what dtsim assumes (``scenario``):

* GPU "A100", 8 per node, activation checkpointing on (``use_checkpoint: true`` in every validation
  config), 1F1B pipeline schedule, gradients reduced once after the backward (``use_gradient_bucket:
  false``), inter-node bandwidth 800 Gb/s per node (``inter_node_bandwidth: 800``). fp16 (the profiling
  model runs ``.half()``, apex FusedAdam and FusedLayerNorm; PyTorch 2.0.1, CUDA 11.8 in its Dockerfile).
* Assumed: a DGX A100 node (NVSwitch; the A100 memory size is not stated, 80 GB taken), GPT-2 shape
  (learned positions, LayerNorm, GELU, biases, dropout 0.1, tied embeddings, vocabulary 50,257), no
  FlashAttention (Megatron-DeepSpeed's GPT of 2023 runs the fused scale-mask-softmax core), full
  recomputation per layer, Megatron-LM's loop and DDP (``framework: ddp``, no overlapped reduction),
  and for the multi-node runs 8 NICs of 100 Gb/s per node (the config's 800 Gb/s).

Which runs serve what (``SPLITS``): the host layer (``simulator.validation.host_calibration``) is fitted on
the 2- and 4-GPU single-node runs; ``dtsim validate`` shows the 8-GPU, 24-layer runs of global batch 16
(``corpus_runs``: every micro-batch, TP and PP combination once per hidden size, held out from that fit)
and one run per multi-node layout (its smallest micro-batch); ``benchmarks/vtrain.py`` prints all 1,549.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from importlib import resources
from typing import Any

from simulator.validation.suite import Run

SOURCE = ("Bang et al., \"vTrain: A Simulation Framework for Evaluating Cost-effective and Compute-optimal "
          "Large Language Model Training\", MICRO-57 2024 (arXiv:2312.12391)")
SOURCE_KEY = "arXiv:2312.12391"
FILES = {"single": "vtrain_single_node.csv", "multi": "vtrain_multi_node.csv"}
#: GPUs per node of the measured cluster (``node_size: 8``).
GPUS_PER_NODE = 8
#: NIC line rate giving the configs' 800 Gb/s per node over 8 NICs.
NIC_GBPS = 100
ASSUMED = ("DGX A100 node (80 GB assumed); GPT-2 shape (vocabulary 50,257, learned positions, dropout 0.1, tied "
           "embeddings); fp16; full recomputation (use_checkpoint: true); no FlashAttention; Megatron-LM loop and "
           "DDP with the gradients reduced after the backward; multi-node: 8 x 100 Gb/s NICs (800 Gb/s per node)")
EXCLUDED = ("host-bound small-model grid: it identifies the host layer (fitted on its 2- and 4-GPU runs), "
            "not the compute efficiencies")


@dataclass(frozen=True)
class Row:
    """One measured iteration: the layout, the model shape and the time (seconds)."""

    kind: str
    gpus: int
    global_batch: int
    micro_batch: int
    hidden: int
    heads: int
    layers: int
    seq_len: int
    tp: int
    dp: int
    pp: int
    iteration_time_s: float

    @property
    def id(self) -> str:
        return (f"vtrain-{self.kind}-h{self.hidden}-l{self.layers}-{self.gpus}gpu-tp{self.tp}-pp{self.pp}-dp{self.dp}"
                f"-mbs{self.micro_batch}-gbs{self.global_batch}")

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.global_batch * self.seq_len / (self.iteration_time_s * self.gpus)


def rows(kind: str) -> list[Row]:
    """Every row of one file (``single`` or ``multi``) in file order; the multi file's leading
    parameter-count column is dropped (the shape gives it)."""
    text = resources.files(__package__).joinpath(FILES[kind]).read_text()
    out = []
    reader = csv.reader(io.StringIO(text))
    next(reader)
    for rec in reader:
        if not rec:
            continue
        fields = rec[1:] if kind == "multi" else rec
        g, gbs, mbs, h, heads, layers, s, tp, dp, pp = (int(x) for x in fields[:10])
        out.append(Row(kind, g, gbs, mbs, h, heads, layers, s, tp, dp, pp, float(fields[10]) / 1e3))
    return out


def scenario(row: Row) -> dict[str, Any]:
    """The dtsim scenario of one measured run (module docstring: stated and assumed settings)."""
    model = {"name": f"vtrain-gpt-h{row.hidden}-l{row.layers}", "n_layers": row.layers, "hidden_size": row.hidden,
             "n_heads": row.heads, "ffn_hidden_size": 4 * row.hidden, "vocab_size": 50257, "mlp": "gelu",
             "norm": "layernorm", "linear_bias": True, "position_embedding": "learned",
             "max_position_embeddings": row.seq_len, "tied_embeddings": True, "dropout": 0.1}
    nodes = max(1, row.gpus // GPUS_PER_NODE)
    cluster: dict[str, Any] = {"topology": "dgx-a100", "nodes": nodes}
    if row.gpus < GPUS_PER_NODE:
        cluster["gpus"] = row.gpus
    return {"model": model, "cluster": cluster,
            "training": {"seq_len": row.seq_len, "micro_batch_size": row.micro_batch,
                         "global_batch_size": row.global_batch, "precision": "fp16",
                         "activation_checkpointing": "full",
                         "kernels": {"flash_attention": False, "linear": "megatron"}},
            "parallel": {"framework": "ddp", "tp": row.tp, "pp": row.pp, "overlap_grad_reduce": False}}


def overrides(row: Row) -> tuple[str, ...]:
    """``--set`` overrides of a run: the multi-node cluster's 100 Gb/s NICs."""
    return (f"cluster.topology.nics.bandwidth_Gbps={NIC_GBPS}",) if row.gpus > GPUS_PER_NODE else ()


def as_run(row: Row) -> Run:
    """A validation-suite ``Run`` of one row (tokens/s per GPU = global batch × sequence / (time × GPUs))."""
    return Run(id=row.id, source=SOURCE, source_key=SOURCE_KEY, gpu="A100", framework="Megatron",
               parallelism="pure_dp" if row.tp == row.pp == 1 else "tp_pp",
               measured={"tokens_per_s_per_gpu": row.tokens_per_s_per_gpu, "iteration_time_s": row.iteration_time_s},
               scenario=scenario(row), overrides=overrides(row), assumed=ASSUMED,
               extra={"calibration_excluded": EXCLUDED})


def host_fit_rows() -> list[Row]:
    """The rows the host layer is fitted on: the single-node runs on 2 and 4 GPUs."""
    return [r for r in rows("single") if r.gpus < GPUS_PER_NODE]


def host_test_rows() -> list[Row]:
    """The single-node runs on 8 GPUs, held out from the host fit."""
    return [r for r in rows("single") if r.gpus == GPUS_PER_NODE]


def corpus_runs() -> list[Run]:
    """The runs ``dtsim validate`` shows: the 8-GPU, 24-layer single-node runs of global batch 16 (each
    hidden size × micro-batch × TP × PP combination measured at that batch once), and per multi-node
    layout (model, TP, DP, PP) its run of the smallest micro-batch (the first in file order on a tie)."""
    single = [r for r in host_test_rows() if r.layers == 24 and r.global_batch == 16]
    first: dict[tuple, Row] = {}
    for r in rows("multi"):
        key = (r.hidden, r.layers, r.tp, r.dp, r.pp)
        if key not in first or r.micro_batch < first[key].micro_batch:
            first[key] = r
    return [as_run(r) for r in single + list(first.values())]
