"""The configurations of the speed table (issue 14), shared by the benchmarks.

Each function returns a validated ``Scenario``; the shapes are the catalogued models
(``simulator/catalog/models.yaml``).
"""

from __future__ import annotations

from simulator.config.loader import scenario_from_dict


def llama3_70b_zero3(n_gpus: int = 1024, micro_batches: int = 8):
    """Llama 3 70B, DeepSpeed ZeRO-3, full checkpointing, ``micro_batches`` of 1 × 8,192 tokens per GPU."""
    return scenario_from_dict({
        "name": f"llama-3-70b-zero3-{n_gpus}xh100",
        "model": "llama-3-70b",
        "cluster": {"topology": "dgx-h100", "nodes": max(1, n_gpus // 8)},
        "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": micro_batches * n_gpus,
                     "activation_checkpointing": "full"},
        "parallel": {"framework": "deepspeed", "zero_stage": 3},
    })


def llama2_70b_tp8_sp_zero1():
    """Llama 2 70B, TP = 8 with sequence parallelism, ZeRO-1, 64 H100 (dp = 8), 128 micro-batches of 1 × 4,096."""
    return scenario_from_dict({
        "name": "llama-2-70b-tp8-sp-zero1-64xh100",
        "model": "llama-2-70b",
        "cluster": {"topology": "dgx-h100", "nodes": 8},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 1024,
                     "activation_checkpointing": "selective"},
        "parallel": {"framework": "deepspeed", "zero_stage": 1, "tp": 8, "sequence_parallel": True},
    })


def llama2_7b_zero3_a100():
    """Llama 2 7B, DeepSpeed ZeRO-3, one DGX A100 (8 GPUs), global batch 1,024 × 4,096 (micro-batch 4: 32 per GPU)."""
    return scenario_from_dict({
        "name": "llama-2-7b-zero3-8xa100",
        "model": "llama-2-7b",
        "cluster": {"topology": "dgx-a100", "nodes": 1},
        "training": {"seq_len": 4096, "micro_batch_size": 4, "global_batch_size": 1024},
        "parallel": {"framework": "deepspeed", "zero_stage": 3},
    })
