"""Every published throughput run is also a memory measurement: it ran, so its peak memory fit the GPU.

``dtsim validate`` lists the runs whose simulated peak (``memory.breakdown``'s ``total``, with the
allocator's fragmentation allowance) exceeds the GPU's usable HBM: each is an overestimate of the memory
model (a lower bound on its error), reported with its cause where one is known (``CAUSES``, by run-id
glob, first match wins), never silenced, and with dtsim's verdict: ``fits tightly`` when the allocated
peak (``total − fragmentation``) still fits, which is what ``memory.breakdown`` calls fitting, else
``does not fit``, a verdict the measurement contradicts. The measured peak-memory runs (``dtsim validate
--memory``) give the model's error; this check covers the configurations those runs do not.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

_OFFLOAD = ("the Megatron-FSDP preset offloads the activations of 40 (GB200) / 20 (GB300) of the 80 blocks to the "
            "Grace CPU (cpu_offloading_num_layers, llama3_workload_base_configs.py); the row runs without "
            "training.activation_offload_layers, whose copies of dtsim's per-block estimate outlast the forward on "
            "the NVLink-C2C share and push the Blackwell GEMM share to its bound: which tensors Transformer Engine "
            "offloads, and so the bytes, is not identified")
#: Known reasons the memory model overestimates a run that ran (by run-id glob).
CAUSES: tuple[tuple[str, str], ...] = (
    ("mbridge2511-gb*-llama3-70b-64gpu-fp8cs", _OFFLOAD),
    ("mbridge260201-gb*-llama3-70b-64gpu-fp8", _OFFLOAD),
    ("mbridge2509-gb200-llama3-70b-64gpu-fp8cs", _OFFLOAD),
    ("together-b200-llama3-70b-*", "Megatron-FSDP Llama 3 70B at 8,192 tokens with the preset's 5 blocks' activations "
     "offloaded to host memory (the scaling report: CPU Offloading Layers 5), which these rows run without "
     "(training.activation_offload_layers, as NVIDIA's GB200 rows of the preset); the report's measured peak: 157.6-164.4 GB "
     "allocated, 162.6-171.9 GB reserved of the 178 GB, and micro-batch 2 ran out of memory (171 GB allocated)"),
    ("mbridge*-llama3*", "Megatron-Bridge Llama 3 presets at micro-batch 1-2 and 8,192 tokens: the table prints "
     "no recomputation or activation-offloading setting, so none is simulated"),
    ("dgxc2409-h100-nemotron4-340b-*", "NVIDIA's DGX Cloud NeMo 24.09 Nemotron-4 340B recipe: its distributed_fused_adam "
     "runs with optim.dtype bf16 (Apex DistributedFusedAdam's optimizer-state dtype; nemotron4-340b-synth.yaml), which "
     "the memory model holds in fp32 (12 bytes per parameter over the data-parallel ranks): at 128 GPUs (DP 2) 340B / 64 "
     "model-parallel ranks / 2 is 32 GB of fp32 states against about 16 GB in bf16, about 16 of the row's 24 GB "
     "excess; the rest is not identified"),
    ("dgxc2409-*", "NVIDIA's DGX Cloud NeMo 24.09 Llama 3.1 recipes at micro-batch 1 and 8,192 tokens: the recipe sets "
     "no recomputation (its configure.sh overrides none and the README states none), so none is simulated"),
    ("mlperf*-*-lora-*nvfp4*", "MLPerf v5.1 and v6.0 Llama 2 70B LoRA in NVFP4: the FP4 configs load a pre-quantized "
     "model (config_common_fp4.sh PRE_QUANTIZED_MODEL=True, FP8=False, so no te.fp8_model_init), held here in BF16 (129 "
     "GiB per GPU at TP 1); how the frozen weights are stored is not read, and the FP4 configs' activation settings "
     "(FP8_ACT) are not stored"),
    ("llmfoundry-mpt30b-*-8gpu-*", "30B on 8 GPUs under FSDP: model states alone are 56 GiB; the 5% excess is within "
     "the allocator's fragmentation term (10% of the allocated bytes, formulas.md §2.6)"),
)


def cause_of(run_id: str) -> str:
    """The known cause of an overestimate, else ``"no named cause"``."""
    return next((c for pattern, c in CAUSES if fnmatch.fnmatchcase(run_id, pattern)), "no named cause")


def overestimates(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Simulated rows whose memory exceeds the usable HBM (``memory_of_usable`` > 1), largest first:
    ``id``, ``memory_of_usable``, ``verdict`` (``fits tightly`` while ``allocated_of_usable`` ≤ 1, else
    ``does not fit``), ``cause``."""
    out = [{"id": r["id"], "memory_of_usable": r["memory_of_usable"],
            "verdict": "does not fit" if r.get("allocated_of_usable", r["memory_of_usable"]) > 1.0 else "fits tightly",
            "cause": cause_of(r["id"])}
           for r in rows if r.get("memory_of_usable", 0.0) > 1.0]
    return sorted(out, key=lambda o: (-o["memory_of_usable"], o["id"]))
