"""Round trip over every bundled scenario: import(export(s)) reproduces s on every key both sides
express; the exported ds_config uses only keys of DeepSpeed's documented configuration."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator.config.loader import load_raw, load_scenario
from simulator.interop.pipeline import export_scenario, import_scenario

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted((ROOT / "scenarios").glob("*.yaml"))
IDS = [p.stem for p in BUNDLED]

MODEL_KEYS = ("n_layers", "hidden_size", "n_heads", "kv_heads", "d_head", "ffn_hidden_size", "vocab_size",
              "tied_embeddings", "norm", "linear_bias", "qk_norm", "dropout", "sliding_window",
              "full_attention_interval")
BATCH_KEYS = ("seq_len", "micro_batch_size", "global_batch_size")


def _get(obj, dotted: str):
    for key in dotted.split("."):
        obj = getattr(obj, key)
    return obj


def _same(a, b, keys):
    diffs = {k: (_get(a, k), _get(b, k)) for k in keys if _get(a, k) != _get(b, k)}
    assert not diffs, diffs


def _cluster(path: Path) -> dict:
    raw = load_raw(path)
    return {"cluster": raw["cluster"]}


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_megatron_round_trip(path):
    s = load_scenario(path)
    text = export_scenario(s, "megatron").text
    back, _, _ = import_scenario("megatron", text=text, base_raw=_cluster(path), base_dir=path.parent)
    _same(s, back, [f"model.{k}" for k in MODEL_KEYS] + [f"training.{k}" for k in BATCH_KEYS])
    # MLA (DeepSeek-V3): --multi-latent-attention and its five shapes (a bug bash found them dropped)
    _same(s, back, [f"model.{k}" for k in ("attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                           "qk_rope_head_dim", "v_head_dim")])
    # Megatron has no op-level policy: torchtitan's selective_op leaves as its selective granularity
    ac = s.training.activation_checkpointing
    assert back.training.activation_checkpointing == ("selective" if ac == "selective_op" else ac)
    _same(s, back, ["training.kernels.flash_attention", "parallel.tp",
                    "parallel.pp", "parallel.cp", "parallel.sequence_parallel", "parallel.virtual_stages",
                    "parallel.tp_comm_overlap", "n_gpus"])
    # the job launched runs the attention kernel dtsim priced (auto is cuDNN for Megatron on Hopper and
    # Blackwell: --attention-backend fused, not flash)
    from simulator.hardware import attention
    from simulator.workload.bias import linear_impl

    assert attention.for_scenario(back) == attention.for_scenario(s)
    # and the linears it priced, where Megatron-LM has them (Megatron-Core's: Transformer Engine's)
    if s.parallel.framework == "ddp":
        assert linear_impl(back.training.kernels, "ddp") == linear_impl(s.training.kernels, "ddp")
    if s.model.mlp != "relu":  # Megatron-LM has no plain-ReLU MLP
        assert back.model.mlp == s.model.mlp
    if s.model.position_embedding != "alibi":
        assert back.model.position_embedding == s.model.position_embedding
    if s.training.precision != "tf32":
        assert back.training.precision == s.training.precision
    if s.training.total_tokens is not None:  # --train-samples = floor(tokens / seq_len)
        assert back.training.total_tokens == s.training.seq_len * (s.training.total_tokens // s.training.seq_len)
    assert back.training.steps == s.training.steps


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_deepspeed_round_trip(path, tmp_path):
    s = load_scenario(path)
    ds = tmp_path / "ds_config.json"
    ds.write_text(export_scenario(s, "deepspeed").text)
    raw = load_raw(path)
    # The base keeps what ds_config does not say (model, cluster, sequence, tp/pp); the rest comes back.
    base = {"model": raw["model"], "cluster": raw["cluster"], "training": {"seq_len": s.training.seq_len},
            "parallel": {"tp": s.parallel.tp, "pp": s.parallel.pp}}
    back, _, _ = import_scenario("deepspeed", ds, base_raw=base, base_dir=path.parent)
    _same(s, back, [f"training.{k}" for k in BATCH_KEYS] + ["parallel.effective_zero_stage",
                                                             "parallel.offload_optimizer", "parallel.offload_param"])
    if s.training.precision in ("bf16", "fp16"):
        assert back.training.precision == s.training.precision
    if s.parallel.framework == "deepspeed":
        _same(s, back, [f"parallel.{k}" for k in (
            "reduce_bucket_size", "allgather_bucket_size", "effective_overlap_comm", "contiguous_gradients",
            "communication_data_type", "zero_quantized_weights", "zero_quantized_gradients",
            "zero_hpz_partition_size")])
        if s.parallel.zero_stage == 3:
            _same(s, back, [f"parallel.stage3_{k}" for k in (
                "prefetch_bucket_size", "max_live_parameters", "param_persistence_threshold")])


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_torchtitan_round_trip(path):
    s = load_scenario(path)
    text = export_scenario(s, "torchtitan").text
    raw = load_raw(path)
    back, _, _ = import_scenario("torchtitan", text=text, base_raw={"model": raw["model"], **_cluster(path)},
                                 base_dir=path.parent)
    _same(s, back, [f"model.{k}" for k in MODEL_KEYS[:7]] + [f"training.{k}" for k in BATCH_KEYS])
    _same(s, back, ["training.activation_checkpointing", "parallel.tp", "parallel.pp", "parallel.cp",
                    "parallel.tp_comm_overlap", "n_gpus"])
    if s.training.precision in ("bf16", "fp32", "fp8"):
        assert back.training.precision == s.training.precision
    if s.parallel.framework == "fsdp" or s.parallel.effective_zero_stage in (2, 3):
        assert back.parallel.effective_zero_stage == s.parallel.effective_zero_stage
    if s.parallel.framework == "fsdp":
        _same(s, back, ["parallel.sharding_strategy"])
        assert (back.parallel.reduce_dtype or "fp32") == (s.parallel.reduce_dtype or "fp32")
    if s.training.total_tokens is not None:
        assert back.training.steps == math.ceil(s.training.total_tokens / s.tokens_per_step)


#: Top-level and zero_optimization keys of DeepSpeed's configuration reference
#: (https://www.deepspeed.ai/docs/config-json/: "Batch Size Related Parameters", "BFLOAT16 training
#: options", "FP16 training options", "Communication options", "ZeRO Optimizations for FP16 Training",
#: ZeRO++ in https://www.deepspeed.ai/tutorials/zeropp/).
DS_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
          "communication_data_type", "zero_optimization", "gradient_clipping"}  # + "Gradient Clipping"
DS_ZERO = {"stage", "allgather_partitions", "allgather_bucket_size", "overlap_comm", "reduce_scatter",
           "reduce_bucket_size", "contiguous_gradients", "offload_param", "offload_optimizer",
           "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_prefetch_bucket_size",
           "stage3_param_persistence_threshold", "sub_group_size", "zero_quantized_weights",
           "zero_quantized_gradients", "zero_hpz_partition_size"}


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_exported_ds_config_uses_documented_keys(path):
    s = load_scenario(path)
    config = json.loads(export_scenario(s, "deepspeed").text)
    assert set(config) <= DS_TOP
    assert set(config["zero_optimization"]) <= DS_ZERO
    # train_batch_size = micro x accumulation x dp (DeepSpeed's batch identity).
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * s.dp)
    for key in ("offload_param", "offload_optimizer"):
        if key in config["zero_optimization"]:
            assert config["zero_optimization"][key]["device"] in ("cpu", "nvme")
    try:
        from deepspeed.runtime.config import DeepSpeedConfig  # noqa: F401 - schema check where installed
    except ImportError:
        return
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    DeepSpeedZeroConfig(**config["zero_optimization"])


@pytest.mark.parametrize("fmt", ["fsdp", "accelerate"])
def test_fsdp_and_accelerate_exports_name_the_settings(fmt):
    s = load_scenario(ROOT / "scenarios" / "llama-2-70b-fsdp-full-recompute-16xdgx-a100.yaml")
    text = export_scenario(s, fmt).text
    if fmt == "fsdp":
        assert "ShardingStrategy.FULL_SHARD" in text and "BackwardPrefetch.BACKWARD_PRE" in text
        assert "param_dtype=torch.bfloat16" in text
        compile(text, "fsdp_kwargs.py", "exec")  # valid Python
    else:
        import yaml

        data = yaml.safe_load(text)
        assert data["distributed_type"] == "FSDP" and data["num_processes"] == 128 and data["num_machines"] == 16
        assert data["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
        assert data["fsdp_config"]["fsdp_activation_checkpointing"] is True


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_accelerate_round_trip(path, tmp_path):
    s = load_scenario(path)
    raw = load_raw(path)
    base = {"model": raw["model"], "cluster": raw["cluster"],
            "training": {"seq_len": s.training.seq_len, "micro_batch_size": s.training.micro_batch_size,
                         "global_batch_size": s.training.global_batch_size}}
    f = tmp_path / "accelerate.yaml"
    f.write_text(export_scenario(s, "accelerate").text)
    back, _, _ = import_scenario("accelerate", f, base_raw=base, base_dir=path.parent)
    _same(s, back, ["parallel.framework", "n_gpus", "training.global_batch_size"])
    if s.training.precision in ("bf16", "fp16", "fp8", "fp32"):
        assert back.training.precision == s.training.precision
    if s.parallel.framework == "fsdp":
        _same(s, back, ["parallel.sharding_strategy", "parallel.backward_prefetch", "parallel.forward_prefetch"])
        assert (back.training.activation_checkpointing == "none") == (s.training.activation_checkpointing == "none")
    if s.parallel.framework == "deepspeed":
        _same(s, back, ["parallel.zero_stage", "parallel.offload_optimizer", "parallel.offload_param",
                        "grad_accum_steps"])


@pytest.mark.parametrize("path", BUNDLED, ids=IDS)
def test_fsdp_block_round_trip(path):
    s = load_scenario(path)
    raw = load_raw(path)
    base = {"model": raw["model"], "cluster": raw["cluster"], "training": raw["training"]}
    back, _, _ = import_scenario("fsdp", text=export_scenario(s, "fsdp").text, base_raw=base, base_dir=path.parent)
    assert back.parallel.framework == "fsdp"
    if s.parallel.framework == "fsdp":
        _same(s, back, ["parallel.sharding_strategy", "parallel.backward_prefetch", "parallel.forward_prefetch",
                        "parallel.limit_all_gathers"])
        param = s.parallel.param_dtype or s.training.precision
        assert back.parallel.param_dtype == param
        assert back.parallel.reduce_dtype == (s.parallel.reduce_dtype or param)
    else:
        # ZeRO-3 -> FULL_SHARD, ZeRO-1/2 -> SHARD_GRAD_OP (FSDP has no optimizer-only sharding), 0 -> NO_SHARD
        assert back.parallel.effective_zero_stage == {3: 3, 2: 2, 1: 2, 0: 0}[s.parallel.effective_zero_stage]
