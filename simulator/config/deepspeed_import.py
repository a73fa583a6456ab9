"""Import a DeepSpeed JSON config into a raw scenario dict (before validation).

Read keys (DeepSpeed 0.16.5 names; formulas.md §4.2): ``zero_optimization.*`` (stage, bucket sizes,
overlap_comm, contiguous_gradients, use_multi_rank_bucket_allreduce, stage3_* prefetch/live/
persistence, offload_optimizer/offload_param ``device``, ZeRO++ switches),
``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``train_batch_size``,
``bf16``/``fp16`` ``enabled``, ``communication_data_type``, ``gradient_clipping`` (0, the default, is off). Every other key is listed in one
warning, never silently ignored. DeepSpeed's ``train_batch_size = micro × accumulation × dp``.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.inputs import read_json

FIELD = "parallel.deepspeed_config"

_ZERO_KEYS = {
    "stage": "zero_stage",
    "reduce_bucket_size": "reduce_bucket_size",
    "allgather_bucket_size": "allgather_bucket_size",
    "overlap_comm": "overlap_comm",
    "contiguous_gradients": "contiguous_gradients",
    "use_multi_rank_bucket_allreduce": "use_multi_rank_bucket_allreduce",
    "stage3_prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters": "stage3_max_live_parameters",
    "stage3_max_reuse_distance": "stage3_max_reuse_distance",
    "stage3_param_persistence_threshold": "stage3_param_persistence_threshold",
    "zero_quantized_weights": "zero_quantized_weights",
    "zero_quantized_gradients": "zero_quantized_gradients",
    "zero_hpz_partition_size": "zero_hpz_partition_size",
}
#: Keys read but with no effect on a simulated step (documented, so not warned about).
_ZERO_NO_EFFECT = {"reduce_scatter", "allgather_partitions", "round_robin_gradients", "sub_group_size"}
_DTYPES = {"fp16": "fp16", "float16": "fp16", "half": "fp16", "bf16": "bf16", "bfloat16": "bf16",
           "fp32": "fp32", "float32": "fp32", "float": "fp32"}
_TOP_READ = {"zero_optimization", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
             "train_batch_size", "bf16", "fp16", "communication_data_type", "gradient_clipping"}


def _read(path: Path, field: str) -> dict:
    data = read_json(path, field, "DeepSpeed config")
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object", field)
    return data


def _gpus(raw: dict) -> int | None:
    cluster = raw.get("cluster", {})
    if cluster.get("gpus"):
        return int(cluster["gpus"])
    topo = cluster.get("topology")
    if isinstance(topo, dict) and "gpus_per_node" in topo:
        return int(cluster.get("nodes", 1)) * int(topo["gpus_per_node"])
    return None


def _offload_device(value: Any, key: str, field: str) -> str:
    device = value.get("device", "none") if isinstance(value, dict) else value
    device = "none" if device in (None, "none") else str(device)
    if device not in ("none", "cpu", "nvme"):
        raise InputError(f"zero_optimization.{key}.device must be none, cpu or nvme, got {device!r}", field)
    return device


def apply_deepspeed_config(raw_scenario: dict, ds_json_path: str | Path, field: str = FIELD) -> tuple[dict, list[str]]:
    """Return a copy of ``raw_scenario`` with the DeepSpeed config applied, and warnings.

    ``raw_scenario`` should have its references resolved (``loader.prepare_raw``) so the GPU count
    is known when ``gradient_accumulation_steps`` must become a global batch. ``field`` names where
    the file came from in messages (``--deepspeed`` on the command line, else the scenario's key).
    """
    ds = _read(Path(ds_json_path), field)
    raw = copy.deepcopy(raw_scenario)
    par = raw.setdefault("parallel", {})
    tr = raw.setdefault("training", {})
    par["framework"] = "deepspeed"
    par["deepspeed_config"] = str(ds_json_path)
    unmodelled: list[str] = []
    auto: list[str] = []

    zero = ds.get("zero_optimization", {}) or {}
    if not isinstance(zero, dict):
        raise InputError("zero_optimization must be a JSON object", field)
    for key, value in zero.items():
        if value == "auto":
            auto.append(f"zero_optimization.{key}")
        elif key in _ZERO_KEYS:
            par[_ZERO_KEYS[key]] = value
        elif key in ("offload_optimizer", "offload_param"):
            par[key] = _offload_device(value, key, field)
        elif key not in _ZERO_NO_EFFECT:
            unmodelled.append(f"zero_optimization.{key}")

    # "auto" (the Hugging Face Trainer / Accelerate templates fill it from their own arguments) is not
    # "on": it keeps the scenario's precision, listed with the other 'auto' values
    enabled = {}
    for dtype in ("bf16", "fp16"):
        flag = (ds.get(dtype) or {}).get("enabled")
        if flag == "auto":
            auto.append(f"{dtype}.enabled")
        enabled[dtype] = flag is True or (isinstance(flag, str) and flag.lower() == "true")
    if enabled["bf16"] and enabled["fp16"]:
        raise InputError("both bf16 and fp16 are enabled in the DeepSpeed config; enable one", field)
    if enabled["bf16"]:
        tr["precision"] = "bf16"
    elif enabled["fp16"]:
        tr["precision"] = "fp16"
    if "communication_data_type" in ds:
        value = str(ds["communication_data_type"]).lower()
        if value not in _DTYPES:
            raise InputError(f"communication_data_type {value!r} is not one of {sorted(set(_DTYPES))}", field)
        par["communication_data_type"] = _DTYPES[value]

    # DeepSpeed clips by global norm only when gradient_clipping > 0 (default 0.0: engine.py
    # ``if self.gradient_clipping() > 0.0``), so a config without it does not clip
    clip = ds.get("gradient_clipping", 0.0)
    if clip == "auto":
        auto.append("gradient_clipping")
    elif isinstance(clip, bool) or not isinstance(clip, int | float):
        raise InputError(f"gradient_clipping {clip!r} must be a number (0 turns clipping off)", field)
    else:
        tr["grad_clipping"] = clip > 0
    micro = ds.get("train_micro_batch_size_per_gpu")
    accum = ds.get("gradient_accumulation_steps")
    total = ds.get("train_batch_size")
    for name, value in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", accum),
                        ("train_batch_size", total)):
        if value == "auto":
            auto.append(name)
    micro, accum, total = (None if v == "auto" else v for v in (micro, accum, total))
    if micro is not None:
        tr["micro_batch_size"] = int(micro)
    gpus = _gpus(raw)
    dp = gpus // (int(par.get("tp", 1)) * int(par.get("pp", 1))) if gpus else None
    if total is not None:
        tr["global_batch_size"] = int(total)
        if micro is not None and accum is not None and dp and int(total) != int(micro) * int(accum) * dp:
            raise InputError(
                f"train_batch_size {total} != train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp "
                f"= {micro} x {accum} x {dp}", field)
    elif accum is not None:
        if not dp:
            raise InputError("gradient_accumulation_steps needs the GPU count; give train_batch_size instead", field)
        tr["global_batch_size"] = int(tr.get("micro_batch_size", 1)) * int(accum) * dp

    unmodelled += sorted(k for k in ds if k not in _TOP_READ)
    # A key one typo away from a key dtsim reads is most likely misspelt, and DeepSpeed would run with
    # the default in its place: refused, for ``dtsim run --deepspeed`` and ``dtsim import deepspeed``
    # alike. Compare within a section (zero_optimization.* with its own keys) so a shared prefix does
    # not count.
    zero_known = [*_ZERO_KEYS, *_ZERO_NO_EFFECT, "offload_optimizer", "offload_param"]
    misspelt = []
    for key in unmodelled:
        section, _, leaf = key.rpartition(".")
        close = difflib.get_close_matches(leaf, zero_known if section else sorted(_TOP_READ), n=1, cutoff=0.85)
        if close:
            suggestion = f"{section}.{close[0]}" if section else close[0]
            misspelt.append(f"unknown key {key!r} (did you mean {suggestion!r}?)")
    if misspelt:
        raise InputError(f"{ds_json_path}: {'; '.join(misspelt)}; fix the spelling (DeepSpeed would use its "
                         "default in its place)", field)
    warnings = []
    if unmodelled:
        warnings.append(f"DeepSpeed config {ds_json_path}: keys not modelled by dtsim (ignored): {', '.join(unmodelled)}")
    if auto:
        warnings.append(f"DeepSpeed config {ds_json_path}: 'auto' values kept at scenario values: {', '.join(auto)}")
    return raw, warnings
