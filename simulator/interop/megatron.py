"""Megatron-LM command-line arguments ⇄ scenario.

Flag names and defaults are Megatron-LM's (``megatron/training/arguments.py``, core_r0.9+):
``--num-layers``, ``--hidden-size``, ``--ffn-hidden-size`` (default ``4h``, or
``int(4h·2/3 / 64)·64`` with ``--swiglu``), ``--num-attention-heads``, ``--group-query-attention`` +
``--num-query-groups``, ``--kv-channels`` (default ``h / heads``), ``--normalization``
(``LayerNorm`` default, ``RMSNorm``), ``--disable-bias-linear``, ``--qk-layernorm``,
``--position-embedding-type`` (``learned_absolute`` default, ``rope``, ``none``; ``--no-position-embedding``
drops the learned table), ``--window-size L,0``
(sliding window of ``L + 1`` keys: ``model.sliding_window``) with ``--window-attn-skip-freq N`` (every
N-th layer full attention, ``is_layer_window_attention``: ``model.full_attention_interval``),
``--untie-embeddings-and-output-weights`` (tied by default), ``--attention-dropout`` /
``--hidden-dropout`` (0.1 default), ``--vocab-size`` padded to a multiple of
``--make-vocab-size-divisible-by`` (128) × tp (``_vocab_size_with_padding``), ``--seq-length``,
``--micro-batch-size``, ``--global-batch-size``, ``--bf16`` / ``--fp16``, ``--recompute-granularity``
(``full`` / ``selective``; ``--recompute-activations`` = selective), ``--recompute-modules`` (a list:
``core_attn``, ``layernorm``, ``moe_act``, ``mla_up_proj``; ``training.recompute_modules``), ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``, ``--sequence-parallel``,
``--num-layers-per-virtual-pipeline-stage``, ``--pipeline-model-parallel-layout`` (Megatron-Core's
per-virtual-stage layout, ``parallel.pipeline_layout``), ``--use-distributed-optimizer``, ``--tp-comm-overlap``,
``--train-iters`` / ``--train-samples``. Megatron-LM runs as dtsim framework ``ddp`` (its DDP with
optional distributed optimizer). Launcher flags ``--nnodes`` / ``--nproc-per-node`` of torchrun are
read when the command line includes them.
"""

from __future__ import annotations

import difflib
import shlex

from simulator.errors import InputError
from simulator.interop import megatron_graphs, megatron_moe
from simulator.interop.common import Imported, as_float, as_int, set_recompute_layers

FIELD = "megatron"

#: Flags taking a value that dtsim reads.
VALUE_FLAGS = (
    "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups", "kv-channels",
    "normalization", "position-embedding-type", "max-position-embeddings", "vocab-size",
    "make-vocab-size-divisible-by", "attention-dropout", "hidden-dropout", "seq-length", "micro-batch-size",
    "global-batch-size", "recompute-granularity", "recompute-method", "recompute-num-layers", "train-iters",
    "train-samples", "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "num-layers-per-virtual-pipeline-stage", "virtual-pipeline-model-parallel-size", "pipeline-model-parallel-layout",
    "fp8-format", "window-size", "window-attn-skip-freq", "recompute-modules",
    "attention-backend", "nnodes", "nproc-per-node",
) + megatron_moe.VALUE_FLAGS + megatron_graphs.VALUE_FLAGS
#: Switches dtsim reads.
BOOL_FLAGS = (
    "group-query-attention", "swiglu", "disable-bias-linear", "add-bias-linear", "qk-layernorm",
    "untie-embeddings-and-output-weights", "use-rotary-position-embeddings", "bf16", "fp16",
    "recompute-activations", "sequence-parallel", "use-distributed-optimizer", "tp-comm-overlap",
    "use-flash-attn", "overlap-grad-reduce", "overlap-param-gather", "fp8-param-gather", "grad-reduce-in-bf16",
    "no-position-embedding",
) + megatron_moe.BOOL_FLAGS + megatron_graphs.BOOL_FLAGS
#: Flags taking a list of values (argparse ``nargs="*"``): every word up to the next flag.
LIST_FLAGS = ("recompute-modules",) + megatron_graphs.LIST_FLAGS
#: Megatron-Core recompute modules dtsim models (``training.recompute_modules``).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj")
_NO_STEP_EFFECT = "optimizer, learning-rate or initialisation hyper-parameter: no effect on step time"
_DATA = "data pipeline or tokenizer: dtsim assumes the input pipeline never stalls the step"
_OUTSIDE = "logging, checkpointing or evaluation: outside the simulated step (checkpoints: reliability.checkpoint)"
_NUMERICS = "numerics or kernel choice dtsim does not distinguish (same FLOPs and bytes)"
_PROCESS = "process setup: no effect on the simulated step"
#: Known flags dtsim does not use, by prefix or exact name, with the reason.
IGNORED = (
    megatron_moe.IGNORED,
    (("lr", "min-lr", "lr-", "weight-decay", "start-weight-decay", "end-weight-decay", "adam-", "sgd-",
      "clip-grad", "init-method-", "seed", "loss-scale", "initial-loss-scale", "min-loss-scale",
      "loss-scale-window", "hysteresis", "optimizer", "override-opt-param-scheduler",
      "use-checkpoint-opt-param-scheduler", "rampup-batch-size", "decoupled-lr", "decoupled-min-lr"),
     _NO_STEP_EFFECT),
    (("data-path", "train-data-path", "valid-data-path", "test-data-path", "split", "tokenizer-", "vocab-file",
      "merge-file", "data-cache-path", "num-workers", "mock-data", "dataloader-type", "reset-position-ids",
      "reset-attention-mask", "eod-mask-loss", "no-create-attention-mask-in-dataloader", "dataset"),
     _DATA),
    (("log-", "save", "load", "save-interval", "eval-", "tensorboard-", "wandb-", "timing-log-", "exit-",
      "no-load-", "ckpt-", "async-save", "finetune", "no-save-", "use-dist-ckpt", "dist-ckpt-", "profile",
      "use-pytorch-profiler", "record-memory-history", "memory-snapshot-path", "logging-level"),
     _OUTSIDE),
    (("norm-epsilon", "rotary-", "use-rope-scaling", "rope-scaling-factor", "no-rope-fusion",
      "no-masked-softmax-fusion", "no-bias-gelu-fusion", "no-bias-swiglu-fusion", "no-bias-dropout-fusion",
      "no-gradient-accumulation-fusion", "apply-query-key-layer-scaling", "attention-softmax-in-fp32",
      "accumulate-allreduce-grads-in-fp32", "transformer-impl", "use-mcore-models",
      "use-legacy-models", "cross-entropy-loss-fusion", "apply-layernorm-1p", "no-persist-layer-norm",
      "fp8-amax-", "fp8-margin", "fp8-interval", "fp8-wgrad", "bias-dropout-fusion", "squared-relu-fusion",
      "manual-gc", "no-async-tensor-model-parallel-allreduce", "calculate-per-token-loss", "init-model-with-meta-device",
      "deterministic-mode", "check-for-nan-in-loss-and-grad", "no-check-for-nan-in-loss-and-grad", "bf16-",
      "align-grad-reduce", "align-param-gather", "ddp-bucket-size",
      "ddp-average-in-collective", "tp-comm-", "defer-embedding-wgrad-compute"),
     _NUMERICS),
    (("distributed-backend", "distributed-timeout-minutes", "local-rank", "local_rank", "use-cpu-initialization",
      "empty-unused-memory-level", "node_rank", "node-rank", "master_addr", "master-addr", "master_port",
      "master-port", "rdzv-", "rdzv_"),
     _PROCESS),
)


def _canonical(flag: str) -> str:
    """``--nproc_per_node`` and ``--nproc-per-node`` are the same torchrun flag; Megatron uses dashes."""
    return flag.replace("_", "-") if flag.replace("_", "-") in ("nproc-per-node", "nnodes") else flag


def _reason(flag: str) -> str | None:
    for names, reason in IGNORED:
        for name in names:
            if flag == name or (name.endswith("-") and flag.startswith(name)):
                return reason
    return None


def tokenize(text: str) -> list[str]:
    """Shell words of an arguments file or command line (comments, line continuations, quotes)."""
    lexer = shlex.shlex(text.replace("\\\n", " "), posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as exc:
        raise InputError(f"cannot split the arguments: {exc}", FIELD) from None


def parse(words: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Flags → values (``True`` for switches), and the order flags appeared in. Words before the first
    flag (``torchrun``, ``pretrain_gpt.py``) and launcher words are skipped. A flag given twice with
    different values is a contradiction."""
    flags: dict[str, str | bool] = {}
    order: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, inline = word[2:].partition("=")
        name = _canonical(name)
        if eq:
            value: str | bool = inline
        elif name in LIST_FLAGS:
            items = []
            while i < len(words) and not words[i].startswith("--"):
                items.append(words[i])
                i += 1
            value = " ".join(items) if items else True
        elif name in BOOL_FLAGS:
            value = True
        elif i < len(words) and not words[i].startswith("--"):
            value = words[i]
            i += 1
        else:
            value = True
        if name in flags and flags[name] != value:
            raise InputError(f"--{name} is given twice with different values ({flags[name]!r}, {value!r})", FIELD)
        if name not in flags:
            order.append(name)
        flags[name] = value
    return flags, order


def _value(flags: dict, name: str) -> str | None:
    value = flags.get(name)
    if value is True:
        raise InputError(f"--{name} needs a value", FIELD)
    return value


def import_args(text: str) -> Imported:
    """Megatron-LM arguments (a file's text or a command line) → scenario fragment + ignored flags."""
    flags, order = parse(tokenize(text))
    out = Imported()
    known = set(VALUE_FLAGS) | set(BOOL_FLAGS)
    for name in order:
        if name in known:
            continue
        reason = _reason(name)
        if reason is None:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            hint = f" (did you mean --{close[0]}?)" if close else ""
            raise InputError(f"unknown Megatron-LM flag --{name}{hint}; docs/interop.md lists the flags dtsim "
                             "reads and ignores: fix or remove it", FIELD)
        out.ignore(f"--{name}", reason)

    def integer(name: str) -> int | None:
        value = _value(flags, name)
        return None if value is None else as_int(value, f"--{name}")

    _model(flags, integer, out)
    megatron_moe.import_moe(flags, integer, out)
    megatron_graphs.import_graphs(flags, out)
    _training(flags, integer, out)
    _parallel(flags, integer, out)
    return out


def _model(flags: dict, integer, out: Imported) -> None:
    layers, hidden, heads = integer("num-layers"), integer("hidden-size"), integer("num-attention-heads")
    for name, value in (("num-layers", layers), ("hidden-size", hidden), ("num-attention-heads", heads)):
        if value is None:
            raise InputError(f"--{name} is required (the model shape)", FIELD)
    swiglu = bool(flags.get("swiglu"))
    ffn = integer("ffn-hidden-size")
    if ffn is None:  # arguments.py validate_args
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
    out.set("model.name", "megatron-import")
    out.set("model.n_layers", layers)
    out.set("model.hidden_size", hidden)
    out.set("model.n_heads", heads)
    out.set("model.ffn_hidden_size", ffn)
    out.set("model.mlp", "swiglu" if swiglu else "gelu")
    groups = integer("num-query-groups")
    if groups is not None and not flags.get("group-query-attention"):
        raise InputError("--num-query-groups has no effect without --group-query-attention; add it or remove "
                         "--num-query-groups", FIELD)
    if flags.get("group-query-attention"):
        if groups is None:
            raise InputError("--group-query-attention needs --num-query-groups", FIELD)
        out.set("model.n_kv_heads", groups)
    kv_channels = integer("kv-channels")
    if kv_channels is not None and kv_channels * heads != hidden:
        out.set("model.head_dim", kv_channels)
    norm = _value(flags, "normalization") or "LayerNorm"
    if norm not in ("LayerNorm", "RMSNorm"):
        raise InputError(f"--normalization {norm!r}: dtsim models LayerNorm and RMSNorm", FIELD)
    out.set("model.norm", "rmsnorm" if norm == "RMSNorm" else "layernorm")
    if flags.get("disable-bias-linear") and flags.get("add-bias-linear"):
        raise InputError("--disable-bias-linear contradicts --add-bias-linear; keep one", FIELD)
    out.set("model.linear_bias", not flags.get("disable-bias-linear"))
    out.set("model.qk_norm", bool(flags.get("qk-layernorm")))
    pos = _value(flags, "position-embedding-type")
    if flags.get("use-rotary-position-embeddings"):
        if pos not in (None, "rope"):
            raise InputError(f"--use-rotary-position-embeddings contradicts --position-embedding-type {pos}", FIELD)
        pos = "rope"
    if flags.get("no-position-embedding"):
        # Megatron-LM's legacy switch (add_position_embedding False): no learned position table, so rope
        # when given (its Mixtral example passes both), else none
        if pos == "learned_absolute":
            raise InputError("--no-position-embedding contradicts --position-embedding-type learned_absolute", FIELD)
        pos = pos or "none"
    pos = pos or "learned_absolute"
    mapping = {"learned_absolute": "learned", "rope": "rope", "none": "none"}
    if pos not in mapping:
        raise InputError(f"--position-embedding-type {pos!r}: dtsim models learned_absolute, rope and none", FIELD)
    out.set("model.position_embedding", mapping[pos])
    max_pos = integer("max-position-embeddings")
    if max_pos is not None:
        out.set("model.max_position_embeddings", max_pos)
    elif pos == "learned_absolute" and integer("seq-length") is not None:
        out.set("model.max_position_embeddings", integer("seq-length"))  # validate_args' default
    out.set("model.tied_embeddings", not flags.get("untie-embeddings-and-output-weights"))
    _window(flags, integer, out)
    drops = {as_float(_value(flags, n) or 0.1, f"--{n}") for n in ("attention-dropout", "hidden-dropout")}
    if len(drops) > 1:
        out.ignore("--attention-dropout", "dtsim has one dropout rate for the model; --hidden-dropout is used")
    out.set("model.dropout", as_float(_value(flags, "hidden-dropout") or 0.1, "--hidden-dropout"))
    vocab = integer("vocab-size")
    if vocab is not None:
        tp = integer("tensor-model-parallel-size") or 1
        divisible = integer("make-vocab-size-divisible-by") or 128
        multiple = divisible * tp  # arguments.py _vocab_size_with_padding
        out.set("model.vocab_size", -(-vocab // multiple) * multiple)


def _window(flags: dict, integer, out: Imported) -> None:
    """``--window-size L,R`` (``tuple_type``: ``128,0`` or ``(128, 0)``) and ``--window-attn-skip-freq N``."""
    text = _value(flags, "window-size")
    if text is None:
        if _value(flags, "window-attn-skip-freq") is not None:
            raise InputError("--window-attn-skip-freq needs --window-size (the sliding window); add it or remove "
                             "--window-attn-skip-freq", FIELD)
        return
    parts = [p.strip() for p in text.strip("()[] ").split(",")]
    if len(parts) != 2:
        raise InputError(f"--window-size {text!r}: give left,right tokens, e.g. 127,0", FIELD)
    left, right = (as_int(p, "--window-size") for p in parts)
    if right != 0 or left < 0:
        raise InputError(f"--window-size {text!r}: dtsim models causal sliding windows (right 0, left >= 0)", FIELD)
    out.set("model.sliding_window", left + 1)
    freq = _value(flags, "window-attn-skip-freq")
    if freq is not None:
        if not freq.strip().isdigit():
            raise InputError(f"--window-attn-skip-freq {freq!r}: dtsim models every N-th layer full attention (an "
                             "integer N); a per-layer list cannot be expressed", FIELD)
        out.set("model.full_attention_interval", integer("window-attn-skip-freq"))


def _training(flags: dict, integer, out: Imported) -> None:
    seq = integer("seq-length")
    if seq is not None:
        out.set("training.seq_len", seq)
    micro = integer("micro-batch-size")
    if micro is not None:
        out.set("training.micro_batch_size", micro)
    glob = integer("global-batch-size")
    if glob is not None:
        out.set("training.global_batch_size", glob)
    elif micro is not None:
        out.ignore("(absent) --global-batch-size", "Megatron then uses micro-batch-size x dp; dtsim sets "
                   "training.global_batch_size only when the GPU count is known: give --set")
    if flags.get("bf16") and flags.get("fp16"):
        raise InputError("--bf16 contradicts --fp16; keep one", FIELD)
    precision = "bf16" if flags.get("bf16") else "fp16" if flags.get("fp16") else "fp32"
    if _value(flags, "fp8-format"):
        precision = "fp8"
    out.set("training.precision", precision)
    granularity = _value(flags, "recompute-granularity")
    if flags.get("recompute-activations"):
        if granularity not in (None, "selective"):
            raise InputError(f"--recompute-activations (selective) contradicts --recompute-granularity {granularity}",
                             FIELD)
        granularity = "selective"
    if granularity not in (None, "full", "selective"):
        raise InputError(f"--recompute-granularity {granularity!r} must be full or selective", FIELD)
    out.set("training.activation_checkpointing", granularity or "none")
    modules = _value(flags, "recompute-modules")
    if modules is not None:
        names = tuple(modules.replace(",", " ").split())
        other = [n for n in names if n not in RECOMPUTE_MODULES]
        if other:
            raise InputError(f"--recompute-modules {other[0]}: dtsim models {', '.join(RECOMPUTE_MODULES)}; remove "
                             "the others or recompute more with --recompute-granularity full", FIELD)
        if granularity != "selective":
            raise InputError("--recompute-modules lists what selective recomputation re-runs: add "
                             "--recompute-granularity selective or remove it", FIELD)
        out.set("training.recompute_modules", list(names))
    set_recompute_layers(out, granularity, _value(flags, "recompute-method"), integer("recompute-num-layers"),
                         "--recompute-method/--recompute-num-layers")
    iters, samples = integer("train-iters"), integer("train-samples")
    if iters is not None and samples is not None:
        raise InputError("--train-iters contradicts --train-samples; keep one", FIELD)
    if iters is not None:
        out.set("training.steps", iters)
    if samples is not None and seq is not None:
        out.set("training.total_tokens", float(samples * seq))
    # Megatron-Core's --attention-backend defaults to auto (flash or cuDNN fused attention); unfused and
    # local materialise the score matrix. The legacy --use-flash-attn switch is read as flash.
    backend = _value(flags, "attention-backend") or "auto"
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise InputError(f"--attention-backend {backend!r} must be auto, flash, fused, unfused or local", FIELD)
    if flags.get("use-flash-attn") and backend in ("unfused", "local"):
        raise InputError(f"--use-flash-attn contradicts --attention-backend {backend}", FIELD)
    out.set("training.kernels.flash_attention", backend not in ("unfused", "local"))
    # fused = Transformer Engine's cuDNN FusedAttention; flash = flash-attn; auto leaves dtsim's rule
    # (simulator.hardware.attention: cuDNN on Hopper/Blackwell for Megatron)
    impl = {"fused": "cudnn", "flash": "fa2", "unfused": "eager", "local": "eager"}.get(backend)
    if impl is not None:
        out.set("training.kernels.attention", impl)


def _parallel(flags: dict, integer, out: Imported) -> None:
    out.set("parallel.framework", "ddp")
    for flag, key in (("tensor-model-parallel-size", "tp"), ("pipeline-model-parallel-size", "pp"),
                      ("context-parallel-size", "cp")):
        value = integer(flag)
        if value is not None:
            out.set(f"parallel.{key}", value)
    out.set("parallel.sequence_parallel", bool(flags.get("sequence-parallel")))
    out.set("parallel.distributed_optimizer", bool(flags.get("use-distributed-optimizer")))
    out.set("parallel.tp_comm_overlap", bool(flags.get("tp-comm-overlap")))
    per_chunk, chunks = integer("num-layers-per-virtual-pipeline-stage"), integer("virtual-pipeline-model-parallel-size")
    if per_chunk is not None and chunks is not None:
        raise InputError("--num-layers-per-virtual-pipeline-stage contradicts --virtual-pipeline-model-parallel-size; "
                         "keep one", FIELD)
    if per_chunk is not None:
        pp, layers = integer("pipeline-model-parallel-size") or 1, out.get("model.n_layers")
        if layers % (pp * per_chunk):
            raise InputError(f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide "
                             f"num-layers / pp = {layers} / {pp}", FIELD)
        chunks = layers // (pp * per_chunk)
    layout = flags.get("pipeline-model-parallel-layout")
    if isinstance(layout, str):  # Megatron-Core's per-virtual-stage layout: it fixes the virtual stages too
        from simulator.parallel.pipeline_split import layout_stages

        try:
            n_stages = len(layout_stages(layout))
        except ValueError as exc:
            raise InputError(f"--pipeline-model-parallel-layout: {exc}", FIELD) from None
        pp = integer("pipeline-model-parallel-size") or 1
        if n_stages % pp:
            raise InputError(f"--pipeline-model-parallel-layout has {n_stages} stages, not a multiple of "
                             f"--pipeline-model-parallel-size {pp}", FIELD)
        out.set("parallel.pipeline_layout", layout)
        chunks = n_stages // pp
    if chunks is not None and chunks > 1:
        out.set("parallel.virtual_stages", chunks)
    out.set("parallel.overlap_grad_reduce", bool(flags.get("overlap-grad-reduce")))
    if flags.get("overlap-param-gather") and not flags.get("use-distributed-optimizer"):
        raise InputError("--overlap-param-gather needs --use-distributed-optimizer", FIELD)
    if flags.get("overlap-param-gather"):
        out.set("parallel.overlap_param_gather", True)
    if flags.get("grad-reduce-in-bf16"):
        out.set("parallel.grad_reduce_in_fp32", False)
    if flags.get("fp8-param-gather"):
        if not _value(flags, "fp8-format"):
            raise InputError("--fp8-param-gather needs --fp8-format (FP8 training)", FIELD)
        out.set("parallel.fp8_param_gather", True)
    nodes, per_node = integer("nnodes"), integer("nproc-per-node")
    if nodes is not None:
        out.set("cluster.nodes", nodes)
    if nodes is not None and per_node is not None:
        out.world_size = nodes * per_node
