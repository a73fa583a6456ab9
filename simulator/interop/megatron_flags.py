"""The Megatron-LM flag lexicon: which flags dtsim reads (with a value, as a switch or as a list), which
known flags it ignores and why, and the parser from shell words to flag values that
``simulator.interop.megatron.import_args`` reads."""

from __future__ import annotations

import difflib
import shlex

from simulator.errors import InputError
from simulator.interop import megatron_graphs, megatron_mla, megatron_moe
from simulator.interop.common import Imported

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
    "attention-backend", "nnodes", "nproc-per-node", "clip-grad", "fp8-recipe", "ddp-bucket-size",
    "transformer-impl", "wgrad-deferral-limit", "optimizer", "muon-num-ns-steps", "fp4-format", "fp4-recipe",
    "cross-entropy-fusion-impl", "exp-avg-dtype", "exp-avg-sq-dtype",
) + megatron_moe.VALUE_FLAGS + megatron_graphs.VALUE_FLAGS + megatron_mla.VALUE_FLAGS
#: Switches dtsim reads.
BOOL_FLAGS = (
    "group-query-attention", "swiglu", "disable-bias-linear", "add-bias-linear", "add-qkv-bias", "qk-layernorm",
    "untie-embeddings-and-output-weights", "use-rotary-position-embeddings", "bf16", "fp16",
    "recompute-activations", "sequence-parallel", "use-distributed-optimizer", "tp-comm-overlap",
    "use-flash-attn", "overlap-grad-reduce", "overlap-param-gather", "fp8-param-gather", "grad-reduce-in-bf16",
    "no-position-embedding", "account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split",
    "defer-embedding-wgrad-compute", "moe-layer-recompute", "cross-entropy-loss-fusion", "use-precision-aware-optimizer",
    "fp8-dot-product-attention", "activation-func-fp8-input-store", "use-tp-pp-dp-mapping",
) + megatron_moe.BOOL_FLAGS + megatron_graphs.BOOL_FLAGS + megatron_mla.BOOL_FLAGS
#: Flags taking a list of values (argparse ``nargs="*"``): every word up to the next flag.
LIST_FLAGS = ("recompute-modules", "offload-modules") + megatron_graphs.LIST_FLAGS
_NO_STEP_EFFECT = "optimizer, learning-rate or initialisation hyper-parameter: no effect on step time"
_DATA = "data pipeline or tokenizer: dtsim assumes the input pipeline never stalls the step"
_OUTSIDE = "logging, checkpointing or evaluation: outside the simulated step (checkpoints: reliability.checkpoint)"
_NUMERICS = "numerics or kernel choice dtsim does not distinguish (same FLOPs and bytes)"
_PROCESS = "process setup: no effect on the simulated step"
#: Known flags dtsim does not use, by prefix or exact name, with the reason.
IGNORED = (
    *megatron_moe.IGNORED,
    (("lr", "min-lr", "lr-", "weight-decay", "start-weight-decay", "end-weight-decay", "adam-", "sgd-",
      "init-method-", "seed", "loss-scale", "initial-loss-scale", "min-loss-scale",
      "loss-scale-window", "hysteresis", "muon-momentum", "muon-use-nesterov", "muon-nesterov", "muon-scale-mode",
      "muon-extra-scale-factor", "muon-coefficient-type", "muon-fp32-matmul-prec", "muon-tp-mode",
      "muon-scalar-optimizer", "override-opt-param-scheduler",
      "use-checkpoint-opt-param-scheduler", "rampup-batch-size", "decoupled-lr", "decoupled-min-lr"),
     _NO_STEP_EFFECT),
    (("data-path", "train-data-path", "valid-data-path", "test-data-path", "split", "tokenizer-", "vocab-file",
      "merge-file", "data-cache-path", "num-workers", "mock-data", "dataloader-type", "reset-position-ids",
      "reset-attention-mask", "eod-mask-loss", "no-create-attention-mask-in-dataloader", "dataset"),
     _DATA),
    (("log-", "save", "load", "save-interval", "eval-", "tensorboard-", "wandb-", "timing-log-", "exit-",
      "no-load-", "ckpt-", "async-save", "finetune", "no-save-", "use-dist-ckpt", "dist-ckpt-", "profile",
      "use-pytorch-profiler", "record-memory-history", "memory-snapshot-path", "logging-level",
      "auto-detect-ckpt-format"),
     _OUTSIDE),
    (("cuda-graph-warmup-steps",), "eager iterations before the CUDA graphs are captured: before the steady-state "
     "step dtsim simulates"),
    (("overlap-p2p-comm",),
     "pipeline sends overlapped with compute: dtsim overlaps them under the interleaved schedule (virtual "
     "stages), as Megatron-LM does, and cannot without it (Megatron-LM forces the flag off there)"),
    (("fine-grained-activation-offloading", "offload-modules", "offload-optimizer-states",
      "delay-offload-until-cuda-graph", "fine-grained-offloading-"),
     "offloading of listed modules' activations or of the optimizer states to host memory: copies on a side "
     "stream, taken as hidden behind compute, and the device memory they free is not modelled (the fit check "
     "is then pessimistic); whole-block activation offloading is training.activation_offload_layers"),
    (("norm-epsilon", "rotary-", "use-rope-scaling", "rope-scaling-factor", "no-rope-fusion",
      "no-masked-softmax-fusion", "no-bias-gelu-fusion", "no-bias-swiglu-fusion", "no-bias-dropout-fusion",
      "no-gradient-accumulation-fusion", "apply-query-key-layer-scaling", "attention-softmax-in-fp32",
      "accumulate-allreduce-grads-in-fp32", "use-mcore-models",
      "use-legacy-models", "apply-layernorm-1p", "no-persist-layer-norm",
      "fp8-amax-", "fp8-margin", "fp8-interval", "fp8-wgrad", "bias-dropout-fusion", "squared-relu-fusion",
      "manual-gc", "manual-gc-", "no-async-tensor-model-parallel-allreduce", "calculate-per-token-loss", "init-model-with-meta-device",
      "deterministic-mode", "check-for-nan-in-loss-and-grad", "no-check-for-nan-in-loss-and-grad", "bf16-",
      "align-grad-reduce", "align-param-gather",
      "ddp-average-in-collective", "tp-comm-",
      "enable-experimental", "te-rng-tracker", "mscale", "mscale-all-dim"),
     _NUMERICS),
    (("main-grads-dtype", "main-params-dtype", "reuse-grad-buf-for-mxfp8-param-ag"),
     "optimizer buffer dtypes: same step time; memory is modelled with an FP32 master copy (its 16-bit remainder "
     "under --use-precision-aware-optimizer) and separate gradient and parameter-gather buffers"),
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


def value_of(flags: dict, name: str) -> str | None:
    value = flags.get(name)
    if value is True:
        raise InputError(f"--{name} needs a value", FIELD)
    return value


def read_flags(text: str, out: Imported) -> dict[str, str | bool]:
    """The flags of a Megatron-LM arguments file or command line; every known flag dtsim does not use is
    recorded on ``out`` with its reason, and an unknown one is refused with the closest known name."""
    flags, order = parse(tokenize(text))
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
    return flags
