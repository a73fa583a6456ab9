"""Importers: real-looking configs written from each framework's documented flag/key names, with the
resulting scenario keys checked by hand; bad input is one error naming the flag, exit 2."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.loader import load_raw, load_scenario
from simulator.errors import InputError
from simulator.interop.megatron import import_args
from simulator.interop.pipeline import export_scenario, import_scenario

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]

# Megatron-LM flags as in examples/llama (pretrain_gpt.py), with the torchrun launcher line.
MEGATRON = textwrap.dedent("""\
    # Llama-3-8B-shaped pre-training
    torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py \\
      --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
      --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm \\
      --disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights \\
      --max-position-embeddings 8192 --vocab-size 128256 --attention-dropout 0.0 --hidden-dropout 0.0 \\
      --seq-length 8192 --micro-batch-size 1 --global-batch-size 128 --bf16 \\
      --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --sequence-parallel \\
      --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
      --recompute-activations --train-iters 1000 \\
      --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 \\
      --data-path /data/c4_text_document --tokenizer-type HuggingFaceTokenizer \\
      --save /ckpt --load /ckpt --save-interval 500 --log-interval 1 --eval-iters 10
""")


def test_megatron_import_hand_checked(tmp_path):
    f = tmp_path / "args.sh"
    f.write_text(MEGATRON)
    s, text, imported = import_scenario("megatron", f, topology="dgx-h100")
    m, tr, p = s.model, s.training, s.parallel
    assert (m.n_layers, m.hidden_size, m.n_heads, m.kv_heads, m.ffn_hidden_size, m.vocab_size) == \
        (32, 4096, 32, 8, 14336, 128256)
    assert (m.mlp, m.norm, m.linear_bias, m.position_embedding, m.tied_embeddings, m.dropout) == \
        ("swiglu", "rmsnorm", False, "rope", False, 0.0)
    assert (tr.seq_len, tr.micro_batch_size, tr.global_batch_size, tr.precision) == (8192, 1, 128, "bf16")
    assert (tr.activation_checkpointing, tr.steps) == ("selective", 1000)
    assert (p.framework, p.tp, p.pp, p.sequence_parallel, p.distributed_optimizer) == ("ddp", 2, 1, True, True)
    # torchrun --nnodes 2 on 8-GPU nodes: 16 GPUs, dp = 16 / 2 = 8, 128 / (1 x 8) = 16 micro-batches.
    assert (s.n_gpus, s.dp, s.grad_accum_steps) == (16, 8, 16)
    ignored = [k for k, _ in imported.ignored]
    assert {"--lr", "--data-path", "--save", "--eval-iters"} <= set(ignored)
    assert tr.grad_clipping  # --clip-grad 1.0
    assert "--lr" in text and text.startswith("# scenario imported")


def test_megatron_defaults_follow_arguments_py():
    imp = import_args("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu --seq-length 1024 "
                      "--vocab-size 50257 --tensor-model-parallel-size 2")
    # ffn default with --swiglu: int((4h * 2/3) / 64) * 64 = int(10922.67 / 64) * 64 = 170 * 64.
    assert imp.get("model.ffn_hidden_size") == 10880
    # vocab padded to a multiple of 128 x tp = 256: ceil(50257 / 256) = 197 -> 50432.
    assert imp.get("model.vocab_size") == 50432
    # Megatron defaults: LayerNorm, biases, learned positions (max = seq), tied, dropout 0.1, fp32.
    assert imp.get("model.norm") == "layernorm" and imp.get("model.linear_bias") is True
    assert imp.get("model.position_embedding") == "learned" and imp.get("model.max_position_embeddings") == 1024
    assert imp.get("model.tied_embeddings") is True and imp.get("model.dropout") == 0.1
    assert imp.get("training.precision") == "fp32"
    # --overlap-grad-reduce defaults to False in arguments.py: gradients reduced after the backward
    assert imp.get("parallel.overlap_grad_reduce") is False
    gelu = import_args("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512")
    assert gelu.get("model.ffn_hidden_size") == 4096 and gelu.get("model.mlp") == "gelu"
    # --no-position-embedding (Megatron-LM's Mixtral example passes it with rope) drops the learned table
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --no-position-embedding"
    assert import_args(base + " --position-embedding-type rope").get("model.position_embedding") == "rope"
    assert import_args(base).get("model.position_embedding") == "none"


def test_megatron_grad_reduce_in_bf16_round_trips():
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16"
    assert import_args(base).get("parallel.grad_reduce_in_fp32") is None  # Megatron's default: fp32
    imp = import_args(base + " --use-distributed-optimizer --grad-reduce-in-bf16")
    assert imp.get("parallel.grad_reduce_in_fp32") is False
    text = MEGATRON.replace("--overlap-param-gather", "--overlap-param-gather --grad-reduce-in-bf16")
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-h100")
    assert s.parallel.grad_reduce_in_fp32 is False
    assert "--grad-reduce-in-bf16" in export_scenario(s, "megatron").text


def test_megatron_fp8_attention_and_activation_store_round_trip():
    text = MEGATRON + " --fp8-format hybrid --fp8-dot-product-attention --activation-func-fp8-input-store"
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-h100")
    assert s.training.kernels.fp8_attention and s.training.kernels.activation_fp8_input_store
    out = export_scenario(s, "megatron").text
    assert "--fp8-dot-product-attention" in out and "--activation-func-fp8-input-store" in out
    # without FP8 training the scenario refuses them, naming the field
    with pytest.raises(InputError, match="fp8_attention"):
        import_scenario("megatron", text=MEGATRON + " --fp8-dot-product-attention", topology="dgx-h100")


def test_megatron_precision_aware_optimizer_round_trips():
    text = MEGATRON + " --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-h100")
    out = export_scenario(s, "megatron").text
    assert "--use-precision-aware-optimizer" in out and "--exp-avg-sq-dtype bf16" in out
    s2, _, _ = import_scenario("megatron", text=MEGATRON, topology="dgx-h100")
    assert "precision-aware" not in export_scenario(s2, "megatron").text


def test_megatron_ddp_bucket_size_round_trips():
    text = MEGATRON.replace("--overlap-param-gather", "--overlap-param-gather --ddp-bucket-size 80000000")
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-h100")
    assert s.parallel.ddp_bucket_size == 80_000_000
    assert "--ddp-bucket-size 80000000" in export_scenario(s, "megatron").text


def test_megatron_transformer_impl_names_the_linears():
    """--transformer-impl local runs Megatron-LM's own linears (the QKV bias added by a kernel of its own),
    transformer_engine Transformer Engine's; without the flag Megatron-LM's default (transformer_engine) is
    what kernels.linear auto gives framework ddp. The exporter writes local back."""
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16"
    assert import_args(base).get("training.kernels.linear") is None
    assert import_args(base + " --transformer-impl local").get("training.kernels.linear") == "megatron"
    assert import_args(base + " --transformer-impl transformer_engine").get("training.kernels.linear") == "te"
    with pytest.raises(InputError, match="--transformer-impl 'te' must be local or transformer_engine"):
        import_args(base + " --transformer-impl te")
    s, _, _ = import_scenario("megatron", text=MEGATRON.replace("--overlap-param-gather", "--overlap-param-gather --transformer-impl local"),
                              topology="dgx-h100")
    assert s.training.kernels.linear == "megatron"
    assert "--transformer-impl local" in export_scenario(s, "megatron").text
    s, _, _ = import_scenario("megatron", text=MEGATRON, topology="dgx-h100")
    assert "--transformer-impl" not in export_scenario(s, "megatron").text


def test_megatron_virtual_pipeline_from_layers_per_chunk():
    imp = import_args("--num-layers 32 --hidden-size 1024 --num-attention-heads 16 "
                      "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2")
    assert imp.get("parallel.virtual_stages") == 4  # 32 / (4 x 2)


def test_megatron_pipeline_slots_count_in_the_virtual_stages():
    """Megatron-LM's arguments.py adds one layer slot for each of --account-for-embedding/loss-in-pipeline-split
    before dividing by --num-layers-per-virtual-pipeline-stage: Qwen3-235B-A22B's recipe, (94 + 2) / (4 x 2) = 12."""
    base = ("--num-layers 94 --hidden-size 4096 --num-attention-heads 64 --pipeline-model-parallel-size 4 "
            "--num-layers-per-virtual-pipeline-stage 2 ")
    imp = import_args(base + "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    assert imp.get("parallel.virtual_stages") == 12
    assert imp.get("parallel.account_for_embedding_in_pipeline_split") is True
    assert imp.get("parallel.account_for_loss_in_pipeline_split") is True
    with pytest.raises(InputError, match=r"94 \+ 0|does not divide"):  # 94 / 4 is not whole without the slots
        import_args(base)


def test_megatron_pipeline_slots_round_trip():
    """Exported back, the slot flags come with the chunk size counted over the slots: (94 + 2) / (4 x 12) = 2."""
    from simulator.interop.megatron_export import export_args

    args = ("--num-layers 94 --hidden-size 4096 --num-attention-heads 64 --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 64 --bf16 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --vocab-size 151936")
    scenario, _, _ = import_scenario("megatron", text=args, topology="dgx-h100", nodes=2)
    text = export_args(scenario).text
    assert "--account-for-embedding-in-pipeline-split" in text and "--account-for-loss-in-pipeline-split" in text
    assert "--num-layers-per-virtual-pipeline-stage 2" in text


def test_megatron_add_qkv_bias_round_trip():
    """Megatron-LM's Qwen2 examples: --disable-bias-linear --add-qkv-bias biases q, k and v only (model.qkv_bias),
    and it exports back as the same two flags; without --disable-bias-linear every linear is biased anyway."""
    from simulator.interop.megatron_export import export_args

    args = ("--num-layers 28 --hidden-size 3584 --num-attention-heads 28 --group-query-attention --num-query-groups 4 "
            "--ffn-hidden-size 18944 --swiglu --normalization RMSNorm --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 64 --bf16 --vocab-size 152064 --disable-bias-linear --add-qkv-bias")
    scenario, _, _ = import_scenario("megatron", text=args, topology="dgx-h100")
    assert scenario.model.qkv_bias and not scenario.model.linear_bias
    text = export_args(scenario).text
    assert "--disable-bias-linear" in text and "--add-qkv-bias" in text
    both = import_args(args.replace(" --disable-bias-linear", ""))
    assert both.get("model.linear_bias") is True and both.get("model.qkv_bias") is None


def test_megatron_pipeline_slots_without_a_pipeline_are_ignored():
    """Megatron-LM's MoE recipes pass the slot flags at pipeline size 1, where there is no split to count in."""
    imp = import_args("--num-layers 48 --hidden-size 2048 --num-attention-heads 32 "
                      "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    ignored = dict(imp.ignored)
    assert "no pipeline" in ignored["--account-for-loss-in-pipeline-split"]
    assert imp.get("parallel.account_for_loss_in_pipeline_split") is None


def test_megatron_moe_recipe_flags_are_known():
    """The flags of Megatron-LM's examples/moe_recipes (2026) that change no simulated time are listed as ignored
    with their reason, not refused: paged stash, the fused grouped MLP, delayed weight gradients, p2p overlap,
    fine-grained offloading, checkpoint-format detection and graph warm-up."""
    flags = ("--moe-paged-stash --moe-expert-rank-capacity-factor 1.2 --moe-paged-stash-page-size 64 "
             "--moe-paged-stash-buffer-size-factor-cuda 1.0 --moe-pad-experts-for-cuda-graph-inference "
             "--use-transformer-engine-op-fuser --moe-mlp-glu-interleave-size 32 --delay-wgrad-compute "
             "--overlap-p2p-comm --fine-grained-activation-offloading --offload-modules core_attn expert_fc1 "
             "--offload-optimizer-states --delay-offload-until-cuda-graph --auto-detect-ckpt-format "
             "--cuda-graph-warmup-steps 2")
    _, _, imported = import_scenario("megatron", text=MEGATRON + " " + flags, topology="dgx-h100")
    ignored = dict(imported.ignored)
    assert "paged stash" in ignored["--moe-paged-stash-page-size"]
    assert "fused" in ignored["--use-transformer-engine-op-fuser"]
    assert "weight-gradient" in ignored["--delay-wgrad-compute"]
    assert "interleaved" in ignored["--overlap-p2p-comm"]
    assert "not modelled" in ignored["--offload-modules"]
    assert "before the CUDA graphs are captured" in ignored["--cuda-graph-warmup-steps"]
    assert "expert_fc1" not in {k.lstrip("-") for k in ignored}  # a list value, not a flag


def test_megatron_sliding_window_flags():
    # GPT-OSS in Megatron-Bridge: window_size (127, 0) = the token and 127 before it, 128 keys;
    # window_attn_skip_freq 2: layers 2, 4, ... (1-based, is_layer_window_attention) attend fully.
    base = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 "
    imp = import_args(base + "--window-size 127,0 --window-attn-skip-freq 2")
    assert (imp.get("model.sliding_window"), imp.get("model.full_attention_interval")) == (128, 2)
    assert import_args(base + "--window-size '(4095, 0)'").get("model.sliding_window") == 4096
    from simulator.config.loader import scenario_from_dict
    from simulator.interop.megatron_export import export_args

    sc = scenario_from_dict({"name": "w", "model": "gpt-oss-120b", "cluster": {"topology": "dgx-h100", "nodes": 8},
                             "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64},
                             "parallel": {"framework": "ddp", "ep": 8}})
    text = export_args(sc).text
    assert "--window-size 127,0" in text and "--window-attn-skip-freq 2" in text


def test_megatron_recompute_modules_list():
    base = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --recompute-granularity selective "
    imp = import_args(base + "--recompute-modules layernorm moe_act --bf16")
    assert imp.get("training.recompute_modules") == ["layernorm", "moe_act"]
    assert imp.get("training.precision") == "bf16"  # the list stops at the next flag
    # the MoE layer and the shared experts (Megatron-Core's moe and shared_experts modules)
    imp = import_args(base + "--recompute-modules moe shared_experts layernorm")
    assert imp.get("training.recompute_modules") == ["moe", "shared_experts", "layernorm"]
    # Megatron-Core's deprecated --moe-layer-recompute: selective, moe added to the modules (the default
    # core_attn when none are given), refused with full granularity
    plain = "--num-layers 4 --hidden-size 64 --num-attention-heads 4 "
    imp = import_args(plain + "--moe-layer-recompute")
    assert imp.get("training.activation_checkpointing") == "selective"
    assert imp.get("training.recompute_modules") == ["core_attn", "moe"]
    imp = import_args(base + "--recompute-modules layernorm --moe-layer-recompute")
    assert imp.get("training.recompute_modules") == ["layernorm", "moe"]
    with pytest.raises(InputError, match="Megatron-Core refuses it"):
        import_args(plain + "--recompute-granularity full --moe-layer-recompute")


@pytest.mark.parametrize("args, needle", [
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --bf16 --fp16", "--bf16 contradicts --fp16"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --tensor-model-parallel-sise 2",
     "unknown Megatron-LM flag --tensor-model-parallel-sise (did you mean --tensor-model-parallel-size?)"),
    ("--num-layers 2 --num-layers 4 --hidden-size 64 --num-attention-heads 4", "--num-layers is given twice"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2", "--group-query-attention"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --recompute-activations "
     "--recompute-granularity full", "contradicts --recompute-granularity full"),
    ("--num-layers x --hidden-size 64 --num-attention-heads 4", "--num-layers: expected an integer"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --window-size 127,16", "causal sliding windows"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --recompute-granularity selective "
     "--recompute-modules a2a_overlap_attn", "--recompute-modules a2a_overlap_attn: dtsim models core_attn, layernorm, "
     "moe_act, mla_up_proj, mlp, moe, shared_experts"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --recompute-modules moe_act",
     "add --recompute-granularity selective"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --window-attn-skip-freq 2", "needs --window-size"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --window-size 127,0 --window-attn-skip-freq "
     "'([0]*3+[1])'", "per-layer list"),
])
def test_megatron_bad_flags(args, needle):
    with pytest.raises(InputError) as exc:
        import_args(args)
    assert needle in str(exc.value)


def test_import_cli_errors_exit_2_and_write_nothing(tmp_path):
    out = tmp_path / "s.yaml"
    r = runner.invoke(app, ["import", "megatron", "--args", "--num-layers 2 --hidden-size 64 "
                            "--num-attention-heads 4 --bogus-flag 1", "--topology", "dgx-h100", "--out", str(out)])
    assert r.exit_code == 2 and "error:" in r.output and "--bogus-flag" in r.output
    assert "Traceback" not in r.output and not out.exists()
    # The cluster is not in Megatron's flags: the error names the option to give.
    r = runner.invoke(app, ["import", "megatron", "--args", "--num-layers 2 --hidden-size 64 "
                            "--num-attention-heads 4 --vocab-size 128 --seq-length 64 --micro-batch-size 1 "
                            "--global-batch-size 8"])
    assert r.exit_code == 2 and "cluster.topology" in r.output and "--topology" in r.output


def test_import_cli_writes_a_scenario_dtsim_runs(tmp_path):
    args = tmp_path / "args.txt"
    args.write_text(MEGATRON)
    out = tmp_path / "s.yaml"
    r = runner.invoke(app, ["import", "megatron", str(args), "--topology", "dgx-h100", "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", str(out), "--json", "--set", "training.global_batch_size=16"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["n_gpus"] == 16


# torchtitan: the layout of torchtitan/models/llama3/train_configs/llama3_70b.toml (64 A100 preset).
TORCHTITAN = textwrap.dedent("""\
    # torchtitan Config.toml
    [job]
    dump_folder = "./outputs"
    description = "Llama 3 70B training"

    [metrics]
    log_freq = 10
    enable_tensorboard = true

    [model]
    name = "llama3"
    flavor = "70B"
    hf_assets_path = "./assets/hf/Llama-3.1-70B"

    [optimizer]
    name = "AdamW"
    lr = 1.5e-4

    [training]
    local_batch_size = 8
    seq_len = 8192
    max_norm = 1.0
    steps = 1000
    dataset = "c4"

    [parallelism]
    data_parallel_replicate_degree = 1
    data_parallel_shard_degree = -1
    tensor_parallel_degree = 8
    pipeline_parallel_degree = 1
    context_parallel_degree = 1

    [checkpoint]
    enable_checkpoint = false

    [activation_checkpoint]
    mode = "full"

    [compile]
    enable = false
""")


def test_torchtitan_import_hand_checked(tmp_path):
    f = tmp_path / "llama3_70b.toml"
    f.write_text(TORCHTITAN)
    s, _, imported = import_scenario("torchtitan", f, topology="dgx-a100", nodes=8)
    assert s.model.n_layers == 80 and s.model.hidden_size == 8192 and s.model.kv_heads == 8  # llama3 70B
    assert (s.parallel.framework, s.parallel.sharding_strategy, s.parallel.tp) == ("fsdp", "full_shard", 8)
    # torchtitan's TP plan always shards norms and the residual stream over the sequence (SequenceParallel)
    assert s.parallel.sequence_parallel
    # 64 GPUs / tp 8 = dp 8; no global_batch_size: local 8 x dp 8 = 64 sequences.
    assert (s.dp, s.training.micro_batch_size, s.training.global_batch_size) == (8, 8, 64)
    assert (s.training.seq_len, s.training.steps, s.training.activation_checkpointing) == (8192, 1000, "full")
    assert s.training.precision == "bf16" and s.parallel.reduce_dtype == "fp32"  # torchtitan defaults
    assert s.parallel.fsdp_version == 2  # torchtitan wraps with FSDP2's fully_shard
    assert {"[optimizer]", "[checkpoint]", "training.max_norm"} <= {k for k, _ in imported.ignored}


def test_torchtitan_hsdp_ddp_and_errors(tmp_path):
    hsdp = "[model]\nname='llama3'\nflavor='8B'\n[training]\nlocal_batch_size=2\nseq_len=4096\n" \
           "[parallelism]\ndata_parallel_replicate_degree=2\ndata_parallel_shard_degree=8\n"
    s, _, _ = import_scenario("torchtitan", text=hsdp, topology="dgx-h100")
    # replicate 2 x shard 8 = 16 GPUs -> 2 nodes (given by the degrees); global 2 x 16.
    assert (s.parallel.sharding_strategy, s.n_gpus, s.training.global_batch_size) == ("hybrid_shard", 16, 32)
    assert not s.parallel.sequence_parallel  # no tensor parallelism, nothing to shard
    ddp = hsdp.replace("data_parallel_shard_degree=8", "data_parallel_shard_degree=1")
    s, _, _ = import_scenario("torchtitan", text=ddp, topology="dgx-h100")
    assert (s.parallel.framework, s.n_gpus) == ("ddp", 2)
    with pytest.raises(InputError, match="runs on 16 GPUs, but the cluster has 8"):
        import_scenario("torchtitan", text=hsdp, topology="dgx-h100", nodes=1)
    with pytest.raises(InputError, match="unknown key local_batch in \\[training\\]"):
        import_scenario("torchtitan", text=hsdp.replace("local_batch_size", "local_batch"), topology="dgx-h100")
    with pytest.raises(InputError, match="--model"):
        import_scenario("torchtitan", text=hsdp.replace("'8B'", "'debugmodel'"), topology="dgx-h100")


def test_fp8_param_gather_imports_and_exports():
    toml = "[model]\nname='llama3'\nflavor='8B'\nconverters=['float8']\n[training]\nlocal_batch_size=1\n" \
           "seq_len=8192\n[float8]\nenable_fsdp_float8_all_gather=true\n"
    s, _, _ = import_scenario("torchtitan", text=toml, topology="dgx-h100")
    assert (s.training.precision, s.parallel.fp8_param_gather) == ("fp8", True)
    assert "enable_fsdp_float8_all_gather = true" in export_scenario(s, "torchtitan").text
    off, _, _ = import_scenario("torchtitan", text=toml.replace("=true", "=false"), topology="dgx-h100")
    assert off.parallel.fp8_param_gather is False
    args = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --bf16 --fp8-format hybrid " \
           "--use-distributed-optimizer --fp8-param-gather"
    assert import_args(args).get("parallel.fp8_param_gather") is True
    with pytest.raises(InputError, match="--fp8-param-gather needs --fp8-format"):
        import_args(args.replace("--fp8-format hybrid ", ""))


# NeMo 1.x megatron_gpt_config.yaml layout (trainer / exp_manager / model sections).
NEMO = textwrap.dedent("""\
    name: megatron_gpt
    trainer:
      devices: 8
      num_nodes: 2
      accelerator: gpu
      precision: bf16
      logger: false
      enable_checkpointing: false
      max_steps: 300000
      log_every_n_steps: 10
      val_check_interval: 2000
      gradient_clip_val: 1.0
    exp_manager:
      explicit_log_dir: null
      create_checkpoint_callback: true
    model:
      micro_batch_size: 2
      global_batch_size: 256
      tensor_model_parallel_size: 2
      pipeline_model_parallel_size: 2
      virtual_pipeline_model_parallel_size: null
      encoder_seq_length: 2048
      max_position_embeddings: 2048
      num_layers: 24
      hidden_size: 4096
      ffn_hidden_size: 16384
      num_attention_heads: 32
      init_method_std: 0.01
      hidden_dropout: 0.0
      attention_dropout: 0.0
      kv_channels: null
      normalization: layernorm1p
      bias: false
      activation: gelu
      position_embedding_type: rope
      share_embeddings_and_output_weights: false
      make_vocab_size_divisible_by: 128
      tokenizer:
        library: megatron
        type: GPT2BPETokenizer
      sequence_parallel: true
      activations_checkpoint_granularity: selective
      use_flash_attention: true
      optim:
        name: distributed_fused_adam
        lr: 1.6e-4
        weight_decay: 0.1
      data:
        data_prefix: [1.0, /data/my_text_document]
""")


def test_nemo_import_hand_checked(tmp_path):
    f = tmp_path / "gpt3_5b.yaml"
    f.write_text(NEMO)
    with pytest.raises(InputError, match="model.vocab_size"):
        import_scenario("nemo", f, topology="dgx-a100")
    s, _, imported = import_scenario("nemo", f, topology="dgx-a100", overrides=["model.vocab_size=50304"])
    m = s.model
    assert (m.n_layers, m.hidden_size, m.ffn_hidden_size, m.n_heads, m.mlp, m.norm) == \
        (24, 4096, 16384, 32, "gelu", "layernorm")
    assert (m.linear_bias, m.position_embedding, m.tied_embeddings, m.dropout) == (False, "rope", False, 0.0)
    # devices 8 x num_nodes 2 = 16 GPUs; dp = 16 / (2 x 2) = 4; 256 / (2 x 4) = 32 micro-batches.
    assert (s.n_gpus, s.dp, s.grad_accum_steps, s.training.steps) == (16, 4, 32, 300000)
    assert (s.parallel.tp, s.parallel.pp, s.parallel.sequence_parallel, s.parallel.distributed_optimizer) == \
        (2, 2, True, True)
    assert s.training.activation_checkpointing == "selective" and s.training.precision == "bf16"
    assert {"model.init_method_std", "model.tokenizer", "exp_manager"} <= {k for k, _ in imported.ignored}
    with pytest.raises(InputError, match="unknown key model.num_layer"):
        import_scenario("nemo", text=NEMO.replace("num_layers:", "num_layer:"), topology="dgx-a100")
    # trainer.gradient_clip_val: MegatronGPTModel clips by global norm when > 0 (1.0 here), not at 0
    assert s.training.grad_clipping
    off, _, _ = import_scenario("nemo", text=NEMO.replace("gradient_clip_val: 1.0", "gradient_clip_val: 0.0"),
                                topology="dgx-a100", overrides=["model.vocab_size=50304"])
    assert not off.training.grad_clipping
    # model.transformer_engine: false builds Megatron-LM's own linears (kernels.linear megatron), true TE's
    te_off, _, _ = import_scenario("nemo", text=NEMO.replace("  num_layers:", "  transformer_engine: false\n  num_layers:"),
                                   topology="dgx-a100", overrides=["model.vocab_size=50304"])
    assert te_off.training.kernels.linear == "megatron" and s.training.kernels.linear == "auto"
    te_on, _, _ = import_scenario("nemo", text=NEMO.replace("  num_layers:", "  transformer_engine: true\n  num_layers:"),
                                  topology="dgx-a100", overrides=["model.vocab_size=50304"])
    assert te_on.training.kernels.linear == "te"


def test_deepspeed_import_on_model_and_topology(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({
        "train_batch_size": 512, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 16,
        "bf16": {"enabled": True}, "gradient_clipping": 1.0, "steps_per_print": 10,
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "overlap_comm": True,
                              "offload_optimizer": {"device": "cpu"}},
    }))
    s, text, imported = import_scenario("deepspeed", ds, model="olmo-2-7b", topology="dgx-a100",
                                        overrides=["training.seq_len=4096"])
    p = s.parallel
    assert (p.framework, p.zero_stage, p.reduce_bucket_size, p.overlap_comm, p.offload_optimizer) == \
        ("deepspeed", 2, 2e8, True, "cpu")
    assert (s.training.global_batch_size, s.training.micro_batch_size, s.grad_accum_steps) == (512, 4, 16)
    assert s.training.grad_clipping  # gradient_clipping 1.0 is read
    assert "steps_per_print" in text and "deepspeed_config" not in text  # an unmodelled key is listed


# Accelerate config as `accelerate config` writes it for FSDP (integer strategy 1 = FULL_SHARD and the
# older fsdp_backward_prefetch_policy key both appear in published configs).
ACCELERATE = textwrap.dedent("""\
    compute_environment: LOCAL_MACHINE
    debug: false
    distributed_type: FSDP
    downcast_bf16: 'no'
    fsdp_config:
      fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
      fsdp_backward_prefetch_policy: BACKWARD_PRE
      fsdp_cpu_ram_efficient_loading: true
      fsdp_forward_prefetch: false
      fsdp_offload_params: false
      fsdp_sharding_strategy: 1
      fsdp_state_dict_type: SHARDED_STATE_DICT
      fsdp_sync_module_states: true
      fsdp_use_orig_params: true
    machine_rank: 0
    main_training_function: main
    mixed_precision: bf16
    num_machines: 2
    num_processes: 16
    rdzv_backend: static
    same_network: true
    use_cpu: false
""")


def test_accelerate_import_hand_checked():
    s, _, imported = import_scenario("accelerate", text=ACCELERATE, model="llama-3-8b", topology="dgx-h100",
                                     overrides=["training.seq_len=4096", "training.micro_batch_size=2",
                                                "training.global_batch_size=64"])
    p = s.parallel
    assert (p.framework, p.sharding_strategy, p.backward_prefetch, p.forward_prefetch) == \
        ("fsdp", "full_shard", "backward_pre", False)
    assert (s.n_gpus, s.cluster.nodes, s.training.precision) == (16, 2, "bf16")
    assert {"fsdp_config.fsdp_auto_wrap_policy", "rdzv_backend"} <= {k for k, _ in imported.ignored}
    assert p.fsdp_version == 1
    two, _, _ = import_scenario("accelerate", text=ACCELERATE.replace("fsdp_use_orig_params: true",
                                                                       "fsdp_use_orig_params: true\n  fsdp_version: 2"),
                                model="llama-3-8b", topology="dgx-h100",
                                overrides=["training.seq_len=4096", "training.micro_batch_size=2",
                                           "training.global_batch_size=64"])
    assert two.parallel.fsdp_version == 2
    with pytest.raises(InputError, match="fsdp_version"):
        import_scenario("accelerate", text=ACCELERATE.replace("fsdp_use_orig_params: true",
                                                              "fsdp_use_orig_params: true\n  fsdp_version: 3"),
                        model="llama-3-8b", topology="dgx-h100")
    with pytest.raises(InputError, match="CPU offload"):
        import_scenario("accelerate", text=ACCELERATE.replace("fsdp_offload_params: false",
                                                              "fsdp_offload_params: true"),
                        model="llama-3-8b", topology="dgx-h100")


def test_deepspeed_auto_precision_keeps_the_scenarios(tmp_path):
    """Hugging Face's ZeRO-3 template sets fp16 and bf16 "enabled": "auto" (the Trainer fills them): that is
    neither on, so the base scenario's precision stays and both are listed as 'auto' (a bug bash found
    "both bf16 and fp16 are enabled" and, with fp16 auto alone, a bf16 scenario turned fp16)."""
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
                              "train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}))
    base = ROOT / "scenarios" / "olmo-2-7b-8xh100.yaml"
    s, _, imported = import_scenario("deepspeed", ds, base_raw=load_raw(base), base_dir=base.parent)
    assert s.training.precision == "bf16" and s.parallel.zero_stage == 3
    assert {"bf16.enabled", "fp16.enabled"} <= {key for key, _ in imported.ignored}


def test_deepspeed_import_names_ignored_keys_and_refuses_typos(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto",
                              "steps_per_print": 10, "zero_optimization": {"stage": 1}}))
    _, text, imported = import_scenario("deepspeed", ds, model="olmo-2-7b", topology="dgx-a100",
                                        overrides=["training.seq_len=4096", "training.global_batch_size=64"])
    assert ("steps_per_print", "not modelled by dtsim (no effect on the simulated step)") in imported.ignored
    assert ("gradient_accumulation_steps", "'auto': the scenario's value is kept") in imported.ignored
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_sise": 2e8}}))
    with pytest.raises(InputError, match="did you mean 'zero_optimization.reduce_bucket_size'"):
        import_scenario("deepspeed", ds, model="olmo-2-7b", topology="dgx-a100",
                        overrides=["training.seq_len=4096", "training.global_batch_size=64",
                                   "training.micro_batch_size=1"])


# A Qwen3-30B-A3B launch as in THUDM/slime scripts/models/qwen3-30B-A3B.sh (MODEL_ARGS), with its
# doubly quoted --moe-layer-freq, on two DGX H100.
QWEN3_MOE = """torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --disable-bias-linear --qk-layernorm
  --group-query-attention --num-attention-heads 32 --num-query-groups 4 --kv-channels 128 --num-layers 48
  --hidden-size 2048 --ffn-hidden-size 6144 --normalization RMSNorm --position-embedding-type rope --swiglu
  --untie-embeddings-and-output-weights --vocab-size 151936 --seq-length 4096 --micro-batch-size 1
  --global-batch-size 512 --bf16 --moe-ffn-hidden-size 768 --moe-router-score-function softmax
  --moe-token-dispatcher-type alltoall --moe-router-topk 8 --moe-layer-freq "'([1]*48)'" --num-experts 128
  --moe-grouped-gemm --moe-permute-fusion --moe-aux-loss-coeff 0 --expert-model-parallel-size 8
  --mtp-num-layers 1 --overlap-moe-expert-parallel-comm"""


def test_megatron_moe_flags_import():
    s, _, imported = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " "), topology="dgx-h100")
    moe = s.model.moe
    assert (moe.n_experts, moe.top_k, moe.expert_ffn_hidden_size) == (128, 8, 768)
    assert (moe.first_dense_layers, moe.layer_interval, s.model.mtp_layers) == (0, 1, 1)
    assert (s.parallel.ep, s.parallel.moe_dispatcher, s.parallel.moe_a2a_overlap) == (8, "alltoall", True)
    assert {"--moe-grouped-gemm", "--moe-aux-loss-coeff"} <= {k for k, _ in imported.ignored}


def test_megatron_moe_launch_with_tp_comm_overlap_imports_and_runs():
    """NVIDIA's MoE recipes run TP 2 with --tp-comm-overlap (Megatron-Bridge's Qwen3-235B presets): the
    launch imports with the overlap on and simulates (it was refused for an MoE model before), the
    attention's TP collectives hidden behind their GEMMs rather than on the compute stream."""
    from simulator.api import simulate

    text = QWEN3_MOE.replace("\n", " ").replace("--mtp-num-layers 1 --overlap-moe-expert-parallel-comm", "")
    tp2 = text + " --tensor-model-parallel-size 2 --sequence-parallel"
    plain, _, _ = import_scenario("megatron", text=tp2, topology="dgx-h100")
    over, _, _ = import_scenario("megatron", text=tp2 + " --tp-comm-overlap", topology="dgx-h100")
    assert (plain.parallel.tp_comm_overlap, over.parallel.tp_comm_overlap) == (False, True)
    exposed = [simulate(s).breakdown["communication"]["tp"]["exposed_s"] for s in (plain, over)]
    assert exposed[1] < exposed[0]


def test_megatron_router_padding_for_fp8_round_trips():
    """--moe-router-padding-for-fp8 (Megatron-Core's router pads the routing map for FP8) imports as
    model.moe.router_padding_for_fp8 and is written back by the exporter; absent, it stays False."""
    from simulator.interop.megatron_moe import export_moe

    plain, _, _ = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " "), topology="dgx-h100")
    padded, _, _ = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " ") + " --moe-router-padding-for-fp8",
                                   topology="dgx-h100")
    assert (plain.model.moe.router_padding_for_fp8, padded.model.moe.router_padding_for_fp8) == (False, True)
    assert "--moe-router-padding-for-fp8" in export_moe(padded)
    assert "--moe-router-padding-for-fp8" not in export_moe(plain)



def test_megatron_moe_latent_size_round_trips():
    """--moe-latent-size (Megatron-Core's LatentMoE, Nemotron 3 Super: 1,024) imports as model.moe.latent_size
    and is written back; absent, the experts take the hidden width (None)."""
    from simulator.interop.megatron_moe import export_moe

    plain, _, _ = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " "), topology="dgx-h100")
    latent, _, _ = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " ") + " --moe-latent-size 512",
                                   topology="dgx-h100")
    assert (plain.model.moe.latent_size, latent.model.moe.latent_size) == (None, 512)
    assert "--moe-latent-size 512" in export_moe(latent)
    assert not any("latent" in line for line in export_moe(plain))
    with pytest.raises(InputError, match="model.moe.latent_size"):  # 0 is refused by name, not dropped
        import_scenario("megatron", text=QWEN3_MOE.replace("\n", " ") + " --moe-latent-size 0", topology="dgx-h100")

@pytest.mark.parametrize(("text", "layers", "want"), [
    ("2", 8, (0, 2)),  # Megatron: an integer N puts experts in blocks 0, N, 2N, ...
    ("([0]*3+[1]*58)", 61, (3, 1)),  # DeepSeek-V3: three dense blocks first
    ("([0]*1+[1,0]*3+[1])", 8, (1, 2)),
])
def test_moe_layer_freq_patterns(text, layers, want):
    from simulator.interop.megatron_moe import layer_pattern

    assert layer_pattern(text, layers) == want


@pytest.mark.parametrize(("text", "match"), [
    ("([1]*3+[0]*1)*3", "every k-th block"),  # Megatron's docstring example: not a dense-then-every-k layout
    ("__import__('os')", "list expression"),
    ("[1]*7", "entries"),
])
def test_moe_layer_freq_refusals(text, match):
    from simulator.interop.megatron_moe import layer_pattern

    with pytest.raises(InputError, match=match):
        layer_pattern(text, 12 if "*3" in text else 8)


def test_megatron_moe_dispatchers_and_round_trip(tmp_path):
    base = QWEN3_MOE.replace("\n", " ").replace("--moe-token-dispatcher-type alltoall", "{}")
    deepep = base.format("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")
    assert import_args(deepep).get("parallel.moe_dispatcher") == "deepep"
    with pytest.raises(InputError, match="allgather"):  # Megatron-LM's default dispatcher
        import_args(base.format(""))
    path = ROOT / "scenarios" / "mixtral-8x7b-ep8-16xh100.yaml"
    s = load_scenario(path)
    back, _, _ = import_scenario("megatron", text=export_scenario(s, "megatron").text,
                                 base_raw={"cluster": load_raw(path)["cluster"]}, base_dir=path.parent)
    assert back.model.moe == s.model.moe
    assert (back.parallel.ep, back.parallel.etp, back.parallel.moe_dispatcher) == (s.parallel.ep, s.parallel.etp,
                                                                                   s.parallel.moe_dispatcher)


def test_megatron_export_names_activation_offloading_it_cannot_write():
    s = load_scenario(ROOT / "scenarios" / "mixtral-8x7b-ep8-16xh100.yaml",
                      ["training.activation_checkpointing=none", "training.activation_offload_layers=8"])
    exported = export_scenario(s, "megatron")
    assert any("activation_offload_layers 8" in n for n in exported.notes)


def test_megatron_moe_bad_capacity_factor_names_the_flag():
    with pytest.raises(InputError, match="expected a number") as err:
        import_args(QWEN3_MOE.replace("\n", " ") + " --moe-expert-capacity-factor abc")
    assert err.value.field == "--moe-expert-capacity-factor"


@pytest.mark.parametrize(("flags", "want"), [
    # NVIDIA's MoE presets (Megatron-Bridge scripts/performance): TE graphs of the router and preprocessing
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope moe_router moe_preprocess", ["moe_router", "moe_preprocess"]),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", ["full_iteration"]),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe", ["attn", "moe"]),
    # an implementation without a scope captures the whole block (Megatron's default scope, "full")
    ("--cuda-graph-impl transformer_engine", ["attn", "mlp", "moe_router", "moe_preprocess"]),
    ("--external-cuda-graph --cuda-graph-scope attn", ["attn"]),
    ("--cuda-graph-impl none", None),
])
def test_megatron_cuda_graph_flags(flags, want):
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16 "
    assert import_args(base + flags).get("training.kernels.cuda_graphs") == want


@pytest.mark.parametrize(("flags", "match"), [
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope mamba", "remove it"),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope full_iteration", "needs --cuda-graph-impl local"),
    ("--cuda-graph-scope attn", "needs --cuda-graph-impl"),
    ("--cuda-graph-impl cudnn", "give one of"),
])
def test_megatron_cuda_graph_refusals(flags, match):
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16 "
    with pytest.raises(InputError, match=match):
        import_args(base + flags)


def test_megatron_cuda_graphs_round_trip():
    s = load_scenario(ROOT / "scenarios" / "mixtral-8x7b-ep8-16xh100.yaml",
                      ["training.kernels.cuda_graphs=[attn,moe_router,moe_preprocess]"])
    text = export_scenario(s, "megatron").text
    assert "--cuda-graph-impl transformer_engine" in text
    assert import_args(text).get("training.kernels.cuda_graphs") == ["attn", "moe_router", "moe_preprocess"]


def test_megatron_loss_flags_choose_the_loss_and_round_trip():
    """Megatron-Core's compute_language_model_loss: --cross-entropy-loss-fusion (default off) with
    --cross-entropy-fusion-impl te runs Transformer Engine's loss, with native (the default) its own fused
    loss; the impl alone changes nothing (Megatron-LM arguments.py: choices native, te)."""
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16"
    assert import_args(base + " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te").get(
        "training.kernels.cross_entropy") == "te"
    for flags in (" --cross-entropy-loss-fusion", " --cross-entropy-loss-fusion --cross-entropy-fusion-impl native"):
        assert import_args(base + flags).get("training.kernels.cross_entropy") == "fused"
    alone = import_args(base + " --cross-entropy-fusion-impl te")
    assert alone.get("training.kernels.cross_entropy") is None
    assert "--cross-entropy-fusion-impl" in {k for k, _ in alone.ignored}
    with pytest.raises(InputError, match="--cross-entropy-fusion-impl 'triton' must be native or te"):
        import_args(base + " --cross-entropy-fusion-impl triton")
    s = load_scenario(ROOT / "scenarios" / "mixtral-8x7b-ep8-16xh100.yaml", ["training.kernels.cross_entropy=te"])
    text = export_scenario(s, "megatron").text
    assert "--cross-entropy-loss-fusion\n--cross-entropy-fusion-impl te\n" in text
    assert import_args(text).get("training.kernels.cross_entropy") == "te"
    fsdp = export_scenario(load_scenario(ROOT / "scenarios" / "llama-3-8b-fsdp-8xdgx-h100.yaml"), "megatron")
    assert any("cross_entropy eager" in n for n in fsdp.notes) and "--cross-entropy-fusion-impl" not in fsdp.text


@pytest.mark.parametrize("fmt", ["torchtitan", "megatron"])
def test_import_onto_a_bundled_base_scenario(fmt):
    """--base fills in what the config does not say: a bundled scenario of another framework (DeepSpeed)
    or with a token budget works as a base, the config's framework and run length replacing the base's
    (a bug bash found 'give total_tokens or steps, not both' and 'allgather_bucket_size is a deepspeed
    option')."""
    from simulator.interop.pipeline import export_scenario

    src = load_scenario(ROOT / "scenarios" / "llama-3-8b-fsdp-8xdgx-h100.yaml")
    text = export_scenario(src, fmt).text
    for base in ("llama-3-8b-fsdp-8xdgx-h100.yaml", "olmo-2-7b-8xh100.yaml"):
        path = ROOT / "scenarios" / base
        s, _, _ = import_scenario(fmt, text=text, base_raw=load_raw(path), base_dir=path.parent, nodes=8)
        assert s.parallel.framework == ("fsdp" if fmt == "torchtitan" else "ddp")
        assert s.model.hidden_size == 4096 and s.training.seq_len == src.training.seq_len


def test_deepspeed_import_onto_a_base_of_another_framework(tmp_path):
    """A DeepSpeed config on an FSDP or Megatron --base drops the base's framework keys but keeps its layout,
    which a ds_config.json does not give (a review found 'parallel.backward_prefetch is a fsdp option');
    the config's ZeRO stage and batch shape replace the base's: 8 nodes x 8 GPUs x micro-batch 2 x 4
    accumulation steps = 512 sequences."""
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                              "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    path = ROOT / "scenarios" / "llama-3-8b-fsdp-8xdgx-h100.yaml"
    s, _, _ = import_scenario("deepspeed", ds, base_raw=load_raw(path), base_dir=path.parent, nodes=8)
    assert (s.parallel.framework, s.parallel.zero_stage) == ("deepspeed", 2)
    assert (s.n_gpus, s.training.micro_batch_size, s.training.global_batch_size) == (64, 2, 512)
    assert s.model.hidden_size == 4096
    moe = ROOT / "scenarios" / "mixtral-8x7b-ep8-16xh100.yaml"  # ep: 8, pp: 2, Megatron's distributed optimizer
    s, _, _ = import_scenario("deepspeed", ds, base_raw=load_raw(moe), base_dir=moe.parent)
    assert (s.parallel.framework, s.parallel.ep, s.parallel.pp, s.parallel.distributed_optimizer) == \
        ("deepspeed", 8, 2, False)


def test_torchtitan_kernels_float8_and_mx_recipes():
    """torchtitan's converters in both spellings ([float8] / [quantize.linear.float8], "float8" /
    "quantize.linear.float8", "mx"), torchao's recipe names, torch.compile and the eager RMSNorm, as the
    validation corpus models torchtitan (eager: unfused norms; compiled: the loss compiled with the model;
    float8: torchao tensorwise unless rowwise). A bug bash found the new spelling imported as bf16 and
    float8 runs priced as Transformer Engine's delayed scaling."""
    head = "[model]\nname='llama3'\nflavor='8B'\n{conv}\n[training]\nlocal_batch_size=1\nseq_len=8192\n{extra}"

    def imp(conv="", extra=""):
        s, _, _ = import_scenario("torchtitan", text=head.format(conv=conv, extra=extra), topology="dgx-h100")
        return s.training

    eager = imp()
    assert (eager.precision, eager.kernels.compile, eager.kernels.fused_norm_residual) == ("bf16", False, False)
    compiled = imp(extra="[compile]\nenable=true\ncomponents=['model','loss']\n")
    assert compiled.kernels.compile and compiled.kernels.cross_entropy == "compiled"
    new = imp("converters=['quantize.linear.float8']", "[quantize.linear.float8]\nrecipe_name='rowwise'\n")
    assert (new.precision, new.kernels.fp8_recipe) == ("fp8", "rowwise")
    old = imp("converters=['float8']", "[float8]\nenable_fsdp_float8_all_gather=true\n")
    assert (old.precision, old.kernels.fp8_recipe) == ("fp8", "tensorwise")
    with pytest.raises(InputError, match="mxfp8"):  # MX linears need Blackwell: refused on the H100 node
        imp("converters=['quantize.linear.mx']")


def test_nemo_block_recompute_grad_overlap_and_tp_overlap_knobs():
    """NeMo's full granularity with method block and N layers recomputes N layers per pipeline chunk (the
    Megatron importer's reading of the same settings); optim.overlap_grad_sync is the overlapped gradient
    reduction; the launcher's tp_comm_atomic_* knobs are accepted (a bug bash found all layers
    recomputed, the overlap dropped and NeMo-Framework-Launcher's llama2_7b.yaml refused)."""
    text = NEMO.replace("activations_checkpoint_granularity: selective",
                        "activations_checkpoint_granularity: full\n  activations_checkpoint_method: block\n"
                        "  activations_checkpoint_num_layers: 4\n  tp_comm_atomic_ag: false\n  tp_comm_atomic_rs: false")
    text = text.replace("    weight_decay: 0.1", "    weight_decay: 0.1\n    overlap_grad_sync: false")
    s, _, _ = import_scenario("nemo", text=text, topology="dgx-a100", nodes=2, overrides=["model.vocab_size=50304"])
    assert (s.training.activation_checkpointing, s.training.recompute_layers) == ("full", 4)
    assert s.parallel.overlap_grad_reduce is False


def test_fsdp_mixed_precision_given_as_a_variable():
    """The common pattern: the policy assigned to a variable, the variable passed to FSDP (a bug bash found
    it refused)."""
    text = ("import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision\n"
            "policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
            "model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, mixed_precision=policy)\n")
    s, _, _ = import_scenario("fsdp", text=text, model="llama-3-8b", topology="dgx-h100",
                              overrides=["training.seq_len=4096", "training.micro_batch_size=1",
                                         "training.global_batch_size=8"])
    assert (s.parallel.param_dtype, s.parallel.reduce_dtype) == ("bf16", "fp32")


def test_megatron_mla_flags_with_megatrons_defaults():
    """--multi-latent-attention with only --q-lora-rank and --kv-lora-rank given takes Megatron-LM's defaults
    for the head dims (qk 128, rotary 64, v 128); the shape flags without the switch are refused."""
    from simulator.interop import megatron

    base = "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 128 --micro-batch-size 1 "
    out = megatron.import_args(base + "--multi-latent-attention --q-lora-rank 256 --kv-lora-rank 128")
    assert [out.get(f"model.{k}") for k in ("attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                            "qk_rope_head_dim", "v_head_dim")] == ["mla", 256, 128, 128, 64, 128]
    lite = megatron.import_args(base + "--multi-latent-attention")
    assert lite.get("model.q_lora_rank") is None and lite.get("model.kv_lora_rank") == 32
    with pytest.raises(InputError, match="without --multi-latent-attention"):
        megatron.import_args(base + "--kv-lora-rank 128")


def test_gradient_clipping_read_and_written(tmp_path):
    """Megatron clips when --clip-grad > 0 (default 1.0), DeepSpeed when gradient_clipping > 0 (default 0:
    off); both directions (a bug bash found them ignored, though training.grad_clipping prices the norm)."""
    from simulator.config.deepspeed_import import apply_deepspeed_config
    from simulator.interop import megatron
    from simulator.interop.pipeline import export_scenario

    base = "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 128 --micro-batch-size 1 "
    assert megatron.import_args(base + "--clip-grad 0").get("training.grad_clipping") is False
    assert megatron.import_args(base + "--clip-grad 1.0").get("training.grad_clipping") is True
    s = load_scenario(ROOT / "scenarios" / "olmo-2-7b-dgx-h100-zero3.yaml", ["training.grad_clipping=false"])
    assert "--clip-grad 0" in export_scenario(s, "megatron").text.split("\n")
    assert "gradient_clipping" not in json.loads(export_scenario(s, "deepspeed").text)
    clipped = load_scenario(ROOT / "scenarios" / "olmo-2-7b-dgx-h100-zero3.yaml")
    assert json.loads(export_scenario(clipped, "deepspeed").text)["gradient_clipping"] == 1.0
    for ds, want in (({"gradient_clipping": 1.0}, True), ({}, False), ({"gradient_clipping": 0}, False)):
        path = tmp_path / "ds.json"
        path.write_text(json.dumps(ds))
        raw, _ = apply_deepspeed_config({"training": {}, "parallel": {}}, path)
        assert raw["training"]["grad_clipping"] is want
    from simulator.interop import accelerate

    for value, want in (("1.0", True), ("0.0", False)):
        doc = ("distributed_type: DEEPSPEED\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 2\n"
               f"  gradient_clipping: {value}\n")
        assert accelerate.import_yaml(doc).get("training.grad_clipping") is want


@pytest.mark.parametrize(("recipe", "want"), [("delayed", "delayed"), ("tensorwise", "current"), ("mxfp8", "mxfp8")])
def test_megatron_fp8_recipe_imports_and_round_trips(recipe, want):
    """Megatron-LM's --fp8-recipe (arguments.py choices; tensorwise is Transformer Engine's per-tensor current
    scaling) sets training.kernels.fp8_recipe, and the exporter writes it back (delayed is the default)."""
    text = MEGATRON.replace("--bf16", f"--bf16 --fp8-format hybrid --fp8-recipe {recipe}")
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-b200")
    assert (s.training.precision, s.training.kernels.fp8_recipe) == ("fp8", want)
    exported = export_scenario(s, "megatron").text
    assert (f"--fp8-recipe {recipe}" in exported) is (recipe != "delayed")
    back, _, _ = import_scenario("megatron", text=exported, topology="dgx-b200")
    assert back.training.kernels.fp8_recipe == want


@pytest.mark.parametrize(("extra", "needle"), [
    ("--fp8-format hybrid --fp8-recipe blockwise", "--fp8-recipe 'blockwise'"),  # not simulated
    ("--fp8-recipe mxfp8", "needs --fp8-format"),
])
def test_megatron_fp8_recipe_refusals(extra, needle):
    with pytest.raises(InputError, match=needle):
        import_scenario("megatron", text=MEGATRON.replace("--bf16", f"--bf16 {extra}"), topology="dgx-b200")


def test_megatron_router_padding_new_name_and_catalog_model_keeps_run_settings():
    """Megatron-Core 0.14 renamed --moe-router-padding-for-fp8 to --moe-router-padding-for-quantization.
    With --model naming a catalog entry, the architecture is the catalog's but what the flags set for the
    run (forced load balancing, router padding, MTP modules) stays, and --set can edit the catalog
    model's keys (the scenario then writes the model out)."""
    text = QWEN3_MOE.replace("\n", " ") + " --moe-router-padding-for-quantization --moe-router-force-load-balancing"
    s, written, _ = import_scenario("megatron", text=text, topology="dgx-h100", model="qwen3-30b-a3b")
    assert (s.model.moe.router_padding_for_fp8, s.model.moe.imbalance, s.model.mtp_layers) == (True, 1.0, 1)
    assert "router_padding_for_fp8: true" in written
    s2, _, _ = import_scenario("megatron", text=QWEN3_MOE.replace("\n", " "), topology="dgx-h100",
                               model="qwen3-30b-a3b", overrides=["model.moe.capacity_factor=1.0"])
    assert s2.model.moe.capacity_factor == 1.0
    plain, written_plain, _ = import_scenario("megatron", text=MEGATRON, topology="dgx-h100", model="llama-3-8b")
    assert "model: llama-3-8b" in written_plain  # nothing to keep: the name stays


def test_megatron_reproduce_guide_flags_are_known():
    """The flags of NVIDIA's DeepSeek-V3 GB200 reproduce guide (Megatron-LM docs/discussions/
    deepseek-v3-gb200-optimization) that change no simulated quantity are listed as ignored, not refused."""
    flags = ("--cross-entropy-fusion-impl te --manual-gc --manual-gc-interval 10 --enable-experimental "
             "--te-rng-tracker --mscale 1.0 --mscale-all-dim 1.0 --use-precision-aware-optimizer "
             "--main-grads-dtype fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
             "--reuse-grad-buf-for-mxfp8-param-ag")
    s, _, imported = import_scenario("megatron", text=MEGATRON + " " + flags, topology="dgx-h100")
    ignored = {k for k, _ in imported.ignored}
    assert {"--manual-gc-interval", "--main-params-dtype", "--te-rng-tracker", "--mscale-all-dim",
            "--cross-entropy-fusion-impl"} <= ignored
    # the precision-aware optimizer and its BF16 moments change the memory model, so they are read
    assert (s.parallel.precision_aware_optimizer, s.parallel.optimizer_moments_dtype) == (True, "bf16")


def test_megatron_precision_aware_optimizer_flags_are_checked():
    """Moments in a dtype dtsim does not model, moments without the precision-aware optimizer and the optimizer
    without the distributed one are refused, each with one message naming the flags."""
    for extra, match in [(" --use-precision-aware-optimizer --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8", "both moments"),
                         (" --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", "act only with --use-precision-aware"),
                         (" --use-precision-aware-optimizer", "needs --use-distributed-optimizer")]:
        text = (MEGATRON.replace("--use-distributed-optimizer", "").replace("--overlap-param-gather", "")
                if "needs" in match else MEGATRON)
        with pytest.raises(InputError, match=match):
            import_scenario("megatron", text=text + extra, topology="dgx-h100")


def test_import_set_edits_a_topology_file_and_keeps_other_names():
    """--set cluster.topology.<key> on an imported scenario writes that topology out as a mapping (as a
    nested edit of a catalog model writes the model out); the model stays a name."""
    s, written, _ = import_scenario("megatron", text=MEGATRON, topology="dgx-h100", model="llama-3-8b",
                                    overrides=["cluster.topology.nics.per_node=4"])
    assert s.cluster.topology.nics.per_node == 4  # DGX H100: 8 compute NICs
    assert "model: llama-3-8b" in written and "per_node: 4" in written and "topology: dgx-h100" not in written


def test_catalog_model_without_the_configs_experts_is_refused():
    """A config that force-balances its experts on --model naming a dense catalog model is not the model
    it trains: one message naming the field, no scenario."""
    text = MEGATRON + " --num-experts 4 --moe-token-dispatcher-type alltoall --moe-router-force-load-balancing"
    with pytest.raises(InputError, match="model.moe.imbalance but --model llama-3-8b has no moe section"):
        import_scenario("megatron", text=text, topology="dgx-h100", model="llama-3-8b")


def test_wgrad_deferral_flags_round_trip():
    """Megatron-LM's --defer-embedding-wgrad-compute and --wgrad-deferral-limit (NeMo's model.defer_embedding_wgrad_compute
    and model.wgrad_deferral_limit, as NeMo-Framework-Launcher's nemotron_340b.yaml sets them: true, 22) become
    parallel.defer_embedding_wgrad_compute / wgrad_deferral_limit under a pipeline and go back out as the same flags;
    without a pipeline, which Megatron-Core refuses for it, the switch is listed as ignored, and so is a limit alone."""
    from simulator.interop.megatron_export import export_args

    args = ("--num-layers 32 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 "
            "--global-batch-size 64 --bf16 --vocab-size 50304 --pipeline-model-parallel-size 4 "
            "--defer-embedding-wgrad-compute --wgrad-deferral-limit 22")
    scenario, _, _ = import_scenario("megatron", text=args, topology="dgx-h100", nodes=2)
    assert (scenario.parallel.defer_embedding_wgrad_compute, scenario.parallel.wgrad_deferral_limit) == (True, 22)
    text = export_args(scenario).text
    assert "--defer-embedding-wgrad-compute" in text and "--wgrad-deferral-limit 22" in text
    flat = import_args(args.replace("--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 1"))
    assert "no pipeline" in dict(flat.ignored)["--defer-embedding-wgrad-compute"]
    assert flat.get("parallel.defer_embedding_wgrad_compute") is None
    alone = import_args(args.replace("--defer-embedding-wgrad-compute ", ""))
    assert "--wgrad-deferral-limit" in dict(alone.ignored)
    nemo = NEMO.replace("  sequence_parallel: true",
                        "  sequence_parallel: true\n  defer_embedding_wgrad_compute: true\n  wgrad_deferral_limit: 22")
    s, _, _ = import_scenario("nemo", text=nemo, topology="dgx-a100", nodes=2, overrides=["model.vocab_size=50304"])
    assert (s.parallel.defer_embedding_wgrad_compute, s.parallel.wgrad_deferral_limit) == (True, 22)


def test_megatron_muon_round_trips():
    """``--optimizer dist_muon`` is Muon under Megatron-Core's layer-wise distributed optimizer (no
    ``--use-distributed-optimizer``: Megatron-Core refuses Muon with it); ``muon`` steps every matrix on every rank."""
    base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 32000 --bf16"
    imp = import_args(base + " --optimizer dist_muon --muon-num-ns-steps 6 --muon-momentum 0.95")
    assert (imp.get("training.optimizer"), imp.get("training.muon_ns_steps")) == ("muon", 6)
    assert imp.get("parallel.distributed_optimizer") is True
    assert import_args(base + " --optimizer muon").get("parallel.distributed_optimizer") is False
    assert import_args(base + " --optimizer adam").get("training.optimizer") is None
    with pytest.raises(InputError, match="--optimizer sgd"):
        import_args(base + " --optimizer sgd")
    text = MEGATRON.replace("--use-distributed-optimizer", "--optimizer dist_muon")
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-h100")
    assert s.training.optimizer == "muon" and s.parallel.distributed_optimizer
    out = export_scenario(s, "megatron").text
    assert "--optimizer dist_muon" in out and "--use-distributed-optimizer" not in out


def test_megatron_nvfp4_imports_and_round_trips():
    """Megatron-LM's --fp4-format e2m1 --fp4-recipe nvfp4 (arguments.py; Megatron-Bridge's bf16_with_nvfp4_mixed)
    is the NVFP4 recipe on dtsim's low-precision path; the exporter writes the same flags; FP4 with FP8 is refused."""
    text = MEGATRON.replace("--bf16", "--bf16 --fp4-format e2m1 --fp4-recipe nvfp4")
    s, _, _ = import_scenario("megatron", text=text, topology="dgx-b200")
    assert (s.training.precision, s.training.kernels.fp8_recipe) == ("fp8", "nvfp4")
    exported = export_scenario(s, "megatron").text
    assert "--fp4-format e2m1" in exported and "--fp4-recipe nvfp4" in exported and "--fp8-format" not in exported
    back, _, _ = import_scenario("megatron", text=exported, topology="dgx-b200")
    assert back.training.kernels.fp8_recipe == "nvfp4"
    with pytest.raises(InputError, match="contradicts --fp8-format"):
        import_scenario("megatron", text=text.replace("--bf16", "--bf16 --fp8-format hybrid"), topology="dgx-b200")


def test_megatron_export_of_gemma_says_what_it_leaves_out():
    """Megatron-LM's arguments have no GeGLU and no sandwich norms: Gemma 3 exports with --swiglu (the same shapes)
    and a note for each, and no bias note for a model without biases."""
    from simulator.interop.megatron_export import export_args
    from simulator.python_api import load

    scenario = load({"name": "g", "model": "gemma-3-1b", "cluster": {"topology": "dgx-h100"},
                              "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                                           "precision": "bf16"}, "parallel": {"framework": "fsdp"}})
    out = export_args(scenario)
    assert "--swiglu" in out.text and "--qk-layernorm" in out.text
    assert any("model.mlp geglu" in n for n in out.notes) and any("model.sandwich_norm" in n for n in out.notes)
    assert not any("bias" in n for n in out.notes)


def test_nemo_geglu_activations_import_as_geglu():
    """NeMo 1.0's megatron_gpt_config.yaml activation options: geglu and fast-geglu gate with GELU (model.mlp geglu,
    three matrices); an activation dtsim does not model is refused naming the key."""
    for name in ("geglu", "fast-geglu"):
        s, _, _ = import_scenario("nemo", text=NEMO.replace("activation: gelu", f"activation: {name}"),
                                  topology="dgx-a100", nodes=2, overrides=["model.vocab_size=50304"])
        assert s.model.mlp == "geglu" and s.model.mlp_matrices == 3
    with pytest.raises(InputError, match="model.activation"):
        import_scenario("nemo", text=NEMO.replace("activation: gelu", "activation: squared-relu"),
                        topology="dgx-a100", nodes=2, overrides=["model.vocab_size=50304"])


def test_megatron_qk_layernorm_is_per_head():
    """Megatron-Core's --qk-layernorm builds q_layernorm and k_layernorm over hidden_size_per_attention_head: one
    128-wide norm each for 32 heads of 128 (2 x 128 parameters a block), not 4,096 + 1,024."""
    args = ("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
            "--ffn-hidden-size 12288 --swiglu --normalization RMSNorm --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --vocab-size 151936 --disable-bias-linear --qk-layernorm")
    scenario, _, _ = import_scenario("megatron", text=args, topology="dgx-h100")
    assert scenario.model.qk_norm and scenario.model.qk_norm_per_head
    from simulator.workload import params

    plain = scenario.model.model_copy(update={"qk_norm": False, "qk_norm_per_head": False})
    assert params.count(scenario.model).per_layer - params.count(plain).per_layer == 2 * 128
