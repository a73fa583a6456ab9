"""Scenario → Megatron-LM command-line arguments (the arguments file ``megatron.import_args`` reads back;
flag names and defaults as documented in ``simulator.interop.megatron``)."""

from __future__ import annotations

from simulator.config.scenario import UNFUSED_ATTENTION, Scenario
from simulator.hardware import attention
from simulator.interop.common import Exported
from simulator.interop.megatron_graphs import export_graphs
from simulator.interop.megatron_mla import export_mla
from simulator.interop.megatron_moe import export_moe
from simulator.workload import loss
from simulator.workload.bias import linear_impl


def export_args(s: Scenario) -> Exported:
    """The Megatron-LM arguments for ``s``, one flag per line (an arguments file ``import_args`` reads)."""
    m, tr, par = s.model, s.training, s.parallel
    notes: list[str] = []
    lines: list[str] = [
        f"--num-layers {m.n_layers}", f"--hidden-size {m.hidden_size}", f"--ffn-hidden-size {m.ffn_hidden_size}",
        f"--num-attention-heads {m.n_heads}",
    ]
    if m.kv_heads != m.n_heads:
        lines += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    lines += export_mla(m)
    if m.head_dim is not None and m.head_dim * m.n_heads != m.hidden_size:
        lines.append(f"--kv-channels {m.head_dim}")
    if m.gated_mlp:
        lines.append("--swiglu")
        if m.mlp == "geglu":
            notes.append("model.mlp geglu: Megatron-LM's arguments gate with SiLU only; exported as --swiglu (same "
                         "shapes and cost)")
    elif m.mlp == "relu":
        notes.append("model.mlp relu: Megatron-LM has no plain ReLU MLP; exported as GELU (same parameter count)")
    lines.append(f"--normalization {'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'}")
    if not m.linear_bias:
        lines.append("--disable-bias-linear")
        if m.qkv_bias:
            lines.append("--add-qkv-bias")
    if m.qk_norm:
        lines.append("--qk-layernorm")
        if not m.qk_norm_per_head:
            notes.append("model.qk_norm over the full query / key width (OLMo 2): Megatron-Core's --qk-layernorm norms "
                         "each head; exported as --qk-layernorm")
    if m.sandwich_norm:
        notes.append("model.sandwich_norm: Megatron-LM has no argument for Gemma's norms on the attention and MLP "
                     "outputs (Megatron-Bridge's Gemma layer specs add them); not exported")
    pos = {"learned": "learned_absolute", "rope": "rope", "none": "none"}.get(m.position_embedding)
    if pos is None:
        notes.append(f"model.position_embedding {m.position_embedding}: not a Megatron-LM option; exported as none")
        pos = "none"
    lines.append(f"--position-embedding-type {pos}")
    lines.append(f"--max-position-embeddings {m.max_position_embeddings or tr.seq_len}")
    if not m.tied_embeddings:
        lines.append("--untie-embeddings-and-output-weights")
    if m.sliding_window is not None:
        lines.append(f"--window-size {m.sliding_window - 1},0")
        if m.full_attention_interval is not None:
            lines.append(f"--window-attn-skip-freq {m.full_attention_interval}")
    lines += [f"--attention-dropout {m.dropout:g}", f"--hidden-dropout {m.dropout:g}"]
    divisible = 128 if m.vocab_size % (128 * par.tp) == 0 else 1
    if m.vocab_size % (divisible * par.tp):
        notes.append(f"model.vocab_size {m.vocab_size}: Megatron-LM pads it to a multiple of tp ({par.tp})")
    lines += [f"--vocab-size {m.vocab_size}", f"--make-vocab-size-divisible-by {divisible}"]
    lines += export_moe(s)
    lines += [f"--seq-length {tr.seq_len}", f"--micro-batch-size {tr.micro_batch_size}",
              f"--global-batch-size {tr.global_batch_size}"]
    if tr.active_fp8_recipe == "nvfp4":
        lines += ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"]
    elif tr.precision == "fp8":
        lines += ["--bf16", "--fp8-format hybrid"]
        recipe = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8"}.get(tr.kernels.fp8_recipe)
        if recipe is None:
            notes.append(f"training.kernels.fp8_recipe {tr.kernels.fp8_recipe} is torchao float8: Megatron-LM "
                         "has no such recipe (exported as delayed scaling)")
        elif recipe != "delayed":
            lines.append(f"--fp8-recipe {recipe}")
    elif tr.precision in ("bf16", "fp16"):
        lines.append(f"--{tr.precision}")
    lines += export_graphs(tr.kernels)
    if not tr.grad_clipping:  # Megatron's default --clip-grad 1.0 clips
        lines.append("--clip-grad 0")
    if tr.activation_checkpointing == "full" and tr.recompute_layers is not None:
        lines += ["--recompute-granularity full", "--recompute-method block",
                  f"--recompute-num-layers {tr.recompute_layers}"]
    elif tr.activation_checkpointing == "full":
        lines += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif tr.activation_checkpointing in ("selective", "selective_op"):  # Megatron has no op-level policy
        lines.append("--recompute-granularity selective")
        if tr.recompute_modules is not None:
            lines.append("--recompute-modules " + " ".join(tr.recompute_modules))
    if tr.steps is not None:
        lines.append(f"--train-iters {tr.steps}")
    elif tr.total_tokens is not None:
        lines.append(f"--train-samples {int(tr.total_tokens // tr.seq_len)}")
    # The kernel dtsim prices (``attention.for_scenario``: auto resolves to cuDNN for Megatron on
    # Hopper/Blackwell), so the job launched runs what was predicted: cuDNN is Transformer Engine's fused
    # backend, flash-attn's kernels its flash backend, unfused attention its unfused one.
    kernel = attention.for_scenario(s)
    backend = "fused" if kernel == "cudnn" else "unfused" if kernel in UNFUSED_ATTENTION else "flash"
    lines.append(f"--attention-backend {backend}")
    # and the linears it priced (``workload.bias.linear_impl``): Megatron-LM's own with local, which runs no
    # FP8 (Megatron-LM's FP8 is Transformer Engine's); nn.Linear has no Megatron-LM counterpart
    priced = linear_impl(tr.kernels, par.framework)
    if priced == "megatron" and tr.precision != "fp8":
        lines.append("--transformer-impl local")
    elif priced != "te":
        why = "runs FP8 only through" if priced == "megatron" else "has no nn.Linear blocks; it runs"
        biases = " (exported with them: the biases in their GEMMs' epilogues)" if m.has_qkv_bias else ""
        notes.append(f"training.kernels.linear {priced}: Megatron-LM {why} Transformer Engine's linears{biases}")
    # and the loss it priced (``workload.loss.kind``): Megatron-Core's fused loss or Transformer Engine's
    ce = loss.kind(s)
    if ce not in ("fused", "te"):
        notes.append(f"training.kernels.cross_entropy {ce}: Megatron-LM runs its own vocab-parallel loss or "
                     "Transformer Engine's; exported as its fused loss (--cross-entropy-loss-fusion)")
    lines.append("--cross-entropy-loss-fusion")
    if ce == "te":
        lines.append("--cross-entropy-fusion-impl te")
    lines += [f"--tensor-model-parallel-size {par.tp}", f"--pipeline-model-parallel-size {par.pp}"]
    if par.cp > 1:
        lines.append(f"--context-parallel-size {par.cp}")
    if par.sequence_parallel:
        lines.append("--sequence-parallel")
    if par.use_tp_pp_dp_mapping:
        lines.append("--use-tp-pp-dp-mapping")
    slots = [f for f in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
             if getattr(par, f)]
    lines += [f"--{f.replace('_', '-')}" for f in slots]
    if par.pipeline_layout is not None:
        lines.append(f"--pipeline-model-parallel-layout '{par.pipeline_layout}'")
    elif par.virtual_stages > 1:  # layer slots per chunk: the layers and the embedding / loss slots
        lines.append(f"--num-layers-per-virtual-pipeline-stage {(m.n_layers + len(slots)) // (par.pp * par.virtual_stages)}")
    elif par.pipeline_schedule == "gpipe":
        notes.append("parallel.pipeline_schedule gpipe: Megatron-LM runs 1F1B")
    if par.defer_embedding_wgrad_compute:
        lines.append("--defer-embedding-wgrad-compute")
        if par.wgrad_deferral_limit:
            lines.append(f"--wgrad-deferral-limit {par.wgrad_deferral_limit}")
    if par.tp_comm_overlap:
        lines.append("--tp-comm-overlap")
    if par.overlap_grad_reduce:
        lines.append("--overlap-grad-reduce")
    if par.ddp_bucket_size is not None:
        lines.append(f"--ddp-bucket-size {par.ddp_bucket_size}")
    stage = par.effective_zero_stage
    distributed = par.framework == "ddp" and par.distributed_optimizer or par.framework != "ddp" and stage >= 1
    if tr.optimizer == "muon":  # Muon's distributed form is its layer-wise optimizer (workload.muon)
        lines.append(f"--optimizer {'dist_muon' if distributed else 'muon'}")
        if tr.muon_ns_steps != 5:
            lines.append(f"--muon-num-ns-steps {tr.muon_ns_steps}")
    elif distributed:
        lines.append("--use-distributed-optimizer")
    if distributed and par.overlap_param_gather:
        lines.append("--overlap-param-gather")
    if distributed and stage >= 2 and par.framework != "ddp":
        notes.append(f"{par.framework} ZeRO-{stage} sharding: Megatron-LM's distributed optimizer shards "
                     "optimizer states only (ZeRO-1); parameters and gradients stay replicated")
    if par.fp8_param_gather:
        lines.append("--fp8-param-gather")
    if tr.kernels.fp8_attention:
        lines.append("--fp8-dot-product-attention")
    if tr.kernels.activation_fp8_input_store:
        lines.append("--activation-func-fp8-input-store")
    if par.framework == "ddp" and not par.grad_reduce_in_fp32:
        lines.append("--grad-reduce-in-bf16")
    if par.framework == "ddp" and par.precision_aware_optimizer:
        lines.append("--use-precision-aware-optimizer")
        if par.optimizer_moments_dtype == "bf16":
            lines += ["--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    if par.offload_optimizer != "none" or par.offload_param != "none":
        notes.append("optimizer/parameter offload: not a Megatron-LM option")
    if tr.lora is not None:
        notes.append(f"training.lora (rank {tr.lora.rank} on {', '.join(tr.lora.modules)}): Megatron-LM has no LoRA "
                     "flag; NeMo / Megatron-Bridge PEFT (LoRA dim and target_modules linear_qkv, linear_proj, "
                     "linear_fc1, linear_fc2) sets it in the recipe")
    if tr.activation_offload_layers:
        notes.append(f"training.activation_offload_layers {tr.activation_offload_layers}: Megatron-Core's "
                     "TransformerConfig cpu_offloading / cpu_offloading_num_layers, set in the model config")
    per_node = s.cluster.topology.gpus_per_node
    head = [f"# Megatron-LM arguments for {s.name} (written by dtsim export)",
            f"# launch: torchrun --nnodes {-(-s.n_gpus // per_node)} --nproc-per-node {min(per_node, s.n_gpus)} "
            f"pretrain_gpt.py $(grep -v '^#' THIS_FILE) + data, tokenizer, optimizer and checkpoint flags"]
    head += [f"# not expressed: {n}" for n in notes]
    # One flag per line without continuations, so $(grep -v '^#' FILE) splits into the arguments.
    return Exported("\n".join(head) + "\n" + "\n".join(lines) + "\n", tuple(notes))
