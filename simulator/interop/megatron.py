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
``--micro-batch-size``, ``--global-batch-size``, ``--bf16`` / ``--fp16``, ``--fp8-format`` with ``--fp8-recipe``
(``delayed`` default, ``tensorwise`` = current scaling, ``mxfp8``; ``training.kernels.fp8_recipe``),
``--fp4-format e2m1`` with ``--fp4-recipe nvfp4`` (``fp8_recipe: nvfp4``),
``--recompute-granularity``
(``full`` / ``selective``; ``--recompute-activations`` = selective), ``--recompute-modules`` (a list:
``core_attn``, ``layernorm``, ``moe_act``, ``mla_up_proj``, ``mlp``, ``moe``, ``shared_experts``;
``training.recompute_modules``; the deprecated ``--moe-layer-recompute`` adds ``moe``),
``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``, ``--sequence-parallel``,
``--num-layers-per-virtual-pipeline-stage``, ``--pipeline-model-parallel-layout`` (Megatron-Core's
per-virtual-stage layout, ``parallel.pipeline_layout``), ``--use-distributed-optimizer``, ``--tp-comm-overlap``,
``--train-iters`` / ``--train-samples``, ``--cross-entropy-loss-fusion`` with ``--cross-entropy-fusion-impl``
(``native`` default, ``te``: ``training.kernels.cross_entropy`` ``fused`` / ``te``). Megatron-LM runs as dtsim
framework ``ddp`` (its DDP with optional distributed optimizer). Launcher flags ``--nnodes`` /
``--nproc-per-node`` of torchrun are read when the command line includes them.
"""

from __future__ import annotations

from typing import get_args

from simulator.config.scenario import RecomputeModule
from simulator.errors import InputError
from simulator.interop import megatron_graphs, megatron_mla, megatron_moe
from simulator.interop.common import Imported, as_float, as_int, set_recompute_layers, set_wgrad_deferral
from simulator.interop.megatron_flags import read_flags, value_of
from simulator.workload import recompute

FIELD = "megatron"

#: Megatron-LM ``--transformer-impl`` → ``training.kernels.linear``: Megatron-LM's own linears or
#: Transformer Engine's (the QKV bias add a kernel of its own, or in the GEMM's epilogue: ``workload.bias``).
LINEARS = {"local": "megatron", "transformer_engine": "te"}
#: Megatron-LM ``--fp8-recipe`` (default ``delayed``) → ``training.kernels.fp8_recipe``: ``tensorwise`` is
#: Transformer Engine's per-tensor current scaling. ``blockwise`` (DeepSeek-style 128×128 blocks) is not
#: simulated.
FP8_RECIPES = {"delayed": "delayed", "tensorwise": "current", "mxfp8": "mxfp8"}
#: Megatron-Core recompute modules dtsim models (``training.recompute_modules``).
RECOMPUTE_MODULES = get_args(RecomputeModule)


def import_args(text: str) -> Imported:
    """Megatron-LM arguments (a file's text or a command line) → scenario fragment + ignored flags."""
    out = Imported()
    flags = read_flags(text, out)

    def integer(name: str) -> int | None:
        value = value_of(flags, name)
        return None if value is None else as_int(value, f"--{name}")

    _model(flags, integer, out)
    megatron_mla.import_mla(flags, integer, out)
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
    norm = value_of(flags, "normalization") or "LayerNorm"
    if norm not in ("LayerNorm", "RMSNorm"):
        raise InputError(f"--normalization {norm!r}: dtsim models LayerNorm and RMSNorm", FIELD)
    out.set("model.norm", "rmsnorm" if norm == "RMSNorm" else "layernorm")
    if flags.get("disable-bias-linear") and flags.get("add-bias-linear"):
        raise InputError("--disable-bias-linear contradicts --add-bias-linear; keep one", FIELD)
    out.set("model.linear_bias", not flags.get("disable-bias-linear"))
    if flags.get("add-qkv-bias") and flags.get("disable-bias-linear"):
        out.set("model.qkv_bias", True)
    out.set("model.qk_norm", bool(flags.get("qk-layernorm")))
    if flags.get("qk-layernorm"):  # Megatron-Core norms each head: q_layernorm over hidden_size_per_attention_head
        out.set("model.qk_norm_per_head", True)
    pos = value_of(flags, "position-embedding-type")
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
    drops = {as_float(value_of(flags, n) or 0.1, f"--{n}") for n in ("attention-dropout", "hidden-dropout")}
    if len(drops) > 1:
        out.ignore("--attention-dropout", "dtsim has one dropout rate for the model; --hidden-dropout is used")
    out.set("model.dropout", as_float(value_of(flags, "hidden-dropout") or 0.1, "--hidden-dropout"))
    vocab = integer("vocab-size")
    if vocab is not None:
        tp = integer("tensor-model-parallel-size") or 1
        divisible = integer("make-vocab-size-divisible-by") or 128
        multiple = divisible * tp  # arguments.py _vocab_size_with_padding
        out.set("model.vocab_size", -(-vocab // multiple) * multiple)


def _window(flags: dict, integer, out: Imported) -> None:
    """``--window-size L,R`` (``tuple_type``: ``128,0`` or ``(128, 0)``) and ``--window-attn-skip-freq N``."""
    text = value_of(flags, "window-size")
    if text is None:
        if value_of(flags, "window-attn-skip-freq") is not None:
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
    freq = value_of(flags, "window-attn-skip-freq")
    if freq is not None:
        if not freq.strip().isdigit():
            raise InputError(f"--window-attn-skip-freq {freq!r}: dtsim models every N-th layer full attention (an "
                             "integer N); a per-layer list cannot be expressed", FIELD)
        out.set("model.full_attention_interval", integer("window-attn-skip-freq"))


def _training(flags: dict, integer, out: Imported) -> None:
    clip = value_of(flags, "clip-grad")  # Megatron clips when clip_grad > 0 (default 1.0)
    if clip is not None:
        out.set("training.grad_clipping", as_float(clip, "--clip-grad") > 0)
    optimizer = value_of(flags, "optimizer")  # adam (default), sgd, muon, dist_muon (Muon, layer-wise distributed)
    if optimizer in ("muon", "dist_muon"):
        out.set("training.optimizer", "muon")
        if integer("muon-num-ns-steps") is not None:
            out.set("training.muon_ns_steps", integer("muon-num-ns-steps"))
    elif optimizer not in (None, "adam"):
        raise InputError(f"--optimizer {optimizer}: dtsim models adam, muon and dist_muon", FIELD)
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
    if value_of(flags, "fp8-format"):
        precision = "fp8"
    fp4 = value_of(flags, "fp4-format")
    if fp4 is not None:
        if precision == "fp8":
            raise InputError("--fp4-format contradicts --fp8-format (Megatron runs one of them); keep one", FIELD)
        fp4_recipe = value_of(flags, "fp4-recipe") or "nvfp4"
        if fp4_recipe != "nvfp4":
            raise InputError(f"--fp4-recipe {fp4_recipe!r}: dtsim simulates nvfp4; give --fp4-recipe nvfp4", FIELD)
        precision = "fp8"  # dtsim's low-precision path, with the NVFP4 GEMM recipe (training.kernels.fp8_recipe)
        out.set("training.kernels.fp8_recipe", "nvfp4")
    out.set("training.precision", precision)
    for flag, field in (("fp8-dot-product-attention", "fp8_attention"),
                        ("activation-func-fp8-input-store", "activation_fp8_input_store")):
        if flags.get(flag):  # Transformer Engine FP8 options (the scenario checks what they need)
            out.set(f"training.kernels.{field}", True)
    recipe = value_of(flags, "fp8-recipe")
    if recipe is not None:
        if not value_of(flags, "fp8-format"):
            raise InputError(f"--fp8-recipe {recipe} needs --fp8-format (FP8 training)", FIELD)
        if recipe not in FP8_RECIPES:
            raise InputError(f"--fp8-recipe {recipe!r}: dtsim simulates {', '.join(FP8_RECIPES)}; give one of them",
                             FIELD)
        out.set("training.kernels.fp8_recipe", FP8_RECIPES[recipe])
    granularity = value_of(flags, "recompute-granularity")
    if flags.get("recompute-activations"):
        if granularity not in (None, "selective"):
            raise InputError(f"--recompute-activations (selective) contradicts --recompute-granularity {granularity}",
                             FIELD)
        granularity = "selective"
    if granularity not in (None, "full", "selective"):
        raise InputError(f"--recompute-granularity {granularity!r} must be full or selective", FIELD)
    # Megatron-Core's deprecated --moe-layer-recompute: selective granularity, with moe among the modules
    # (TransformerConfig.__post_init__, which refuses it with full granularity)
    moe_layer = bool(flags.get("moe-layer-recompute"))
    if moe_layer and granularity == "full":
        raise InputError("--moe-layer-recompute with --recompute-granularity full: Megatron-Core refuses it; "
                         "remove one", FIELD)
    granularity = "selective" if moe_layer else granularity
    out.set("training.activation_checkpointing", granularity or "none")
    modules = value_of(flags, "recompute-modules")
    names = modules.replace(",", " ").split() if modules is not None else None
    if moe_layer:  # added to the list given, or to Megatron-Core's default one
        names = list(names if names is not None else recompute.DEFAULT_MODULES)
        names += ["moe"] * ("moe" not in names)
    if names is not None:
        other = [n for n in names if n not in RECOMPUTE_MODULES]
        if other:
            raise InputError(f"--recompute-modules {other[0]}: dtsim models {', '.join(RECOMPUTE_MODULES)}; remove "
                             "the others or recompute more with --recompute-granularity full", FIELD)
        if granularity != "selective":
            raise InputError("--recompute-modules lists what selective recomputation re-runs: add "
                             "--recompute-granularity selective or remove it", FIELD)
        out.set("training.recompute_modules", list(names))
    set_recompute_layers(out, granularity, value_of(flags, "recompute-method"), integer("recompute-num-layers"),
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
    backend = value_of(flags, "attention-backend") or "auto"
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
    # --transformer-impl (default transformer_engine): whose linears run, for their bias kernels
    linear = value_of(flags, "transformer-impl")
    if linear is not None:
        if linear not in LINEARS:
            raise InputError(f"--transformer-impl {linear!r} must be local or transformer_engine", FIELD)
        out.set("training.kernels.linear", LINEARS[linear])
    _loss(flags, out)


def _loss(flags: dict, out: Imported) -> None:
    """``training.kernels.cross_entropy`` from ``--cross-entropy-loss-fusion`` (default off) and
    ``--cross-entropy-fusion-impl native|te`` (default native), which Megatron-Core's
    ``compute_language_model_loss`` reads: with the fusion, Transformer Engine's Triton loss (``te``) or its own
    fused vocab-parallel loss (``fused``); without it the unfused ``vocab_parallel_cross_entropy``, which dtsim
    prices as ``fused`` (``auto``), 12 bytes per logit below its traffic: its max and its subtraction of the max
    are passes of their own over the fp32 logits (read 4; read and write 4), which the fused loss folds into the
    upcast and the exponential."""
    impl = value_of(flags, "cross-entropy-fusion-impl")
    if impl not in (None, "native", "te"):
        raise InputError(f"--cross-entropy-fusion-impl {impl!r} must be native or te", FIELD)
    if flags.get("cross-entropy-loss-fusion"):
        out.set("training.kernels.cross_entropy", "te" if impl == "te" else "fused")
    elif impl is not None:
        out.ignore("--cross-entropy-fusion-impl", "read only with --cross-entropy-loss-fusion; without it "
                   "Megatron-Core runs its unfused vocab-parallel loss, priced as training.kernels.cross_entropy fused")


def _parallel(flags: dict, integer, out: Imported) -> None:
    out.set("parallel.framework", "ddp")
    for flag, key in (("tensor-model-parallel-size", "tp"), ("pipeline-model-parallel-size", "pp"),
                      ("context-parallel-size", "cp")):
        value = integer(flag)
        if value is not None:
            out.set(f"parallel.{key}", value)
    out.set("parallel.sequence_parallel", bool(flags.get("sequence-parallel")))
    # dist_muon: Muon under Megatron-Core's layer-wise distributed optimizer (workload.muon)
    distributed = bool(flags.get("use-distributed-optimizer")) or value_of(flags, "optimizer") == "dist_muon"
    out.set("parallel.distributed_optimizer", distributed)
    out.set("parallel.tp_comm_overlap", bool(flags.get("tp-comm-overlap")))
    if flags.get("use-tp-pp-dp-mapping"):  # rank order tp-cp-pp-dp (simulator.parallel.mesh)
        if integer("num-experts"):
            out.ignore("--use-tp-pp-dp-mapping", "not modelled for MoE models: ranks placed tp-cp-ep-dp-pp")
        else:
            out.set("parallel.use_tp_pp_dp_mapping", True)
    per_chunk, chunks = integer("num-layers-per-virtual-pipeline-stage"), integer("virtual-pipeline-model-parallel-size")
    if per_chunk is not None and chunks is not None:
        raise InputError("--num-layers-per-virtual-pipeline-stage contradicts --virtual-pipeline-model-parallel-size; "
                         "keep one", FIELD)
    pp, slots = integer("pipeline-model-parallel-size") or 1, 0
    for flag in ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split"):
        if not flags.get(flag):
            continue
        if pp == 1:
            out.ignore(f"--{flag}", "no pipeline (pipeline-model-parallel-size 1): no split to count it in")
            continue
        out.set(f"parallel.{flag.replace('-', '_')}", True)  # one more layer slot (pipeline_split)
        slots += 1
    set_wgrad_deferral(out, bool(flags.get("defer-embedding-wgrad-compute")), integer("wgrad-deferral-limit"), pp,
                       ("--defer-embedding-wgrad-compute", "--wgrad-deferral-limit"))
    if per_chunk is not None:
        # arguments.py validate_args: the layer slots (layers + embedding / loss slots) per stage, per chunk
        layers = out.get("model.n_layers") + slots
        if layers % (pp * per_chunk):
            extra = f" + {slots} embedding/loss slots" if slots else ""
            raise InputError(f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide "
                             f"(num-layers{extra}) / pp = {layers} / {pp}", FIELD)
        chunks = layers // (pp * per_chunk)
    layout = flags.get("pipeline-model-parallel-layout")
    if isinstance(layout, str):  # Megatron-Core's per-virtual-stage layout: it fixes the virtual stages too
        from simulator.parallel.pipeline_split import layout_stages

        try:
            n_stages = len(layout_stages(layout))
        except ValueError as exc:
            raise InputError(f"--pipeline-model-parallel-layout: {exc}", FIELD) from None
        if n_stages % pp:
            raise InputError(f"--pipeline-model-parallel-layout has {n_stages} stages, not a multiple of "
                             f"--pipeline-model-parallel-size {pp}", FIELD)
        out.set("parallel.pipeline_layout", layout)
        chunks = n_stages // pp
    if chunks is not None and chunks > 1:
        out.set("parallel.virtual_stages", chunks)
    out.set("parallel.overlap_grad_reduce", bool(flags.get("overlap-grad-reduce")))
    if integer("ddp-bucket-size") is not None:
        out.set("parallel.ddp_bucket_size", integer("ddp-bucket-size"))
    if flags.get("overlap-param-gather") and not distributed:
        raise InputError("--overlap-param-gather needs --use-distributed-optimizer (or --optimizer dist_muon)", FIELD)
    if flags.get("overlap-param-gather"):
        out.set("parallel.overlap_param_gather", True)
    if flags.get("grad-reduce-in-bf16"):
        out.set("parallel.grad_reduce_in_fp32", False)
    if flags.get("fp8-param-gather"):
        if not value_of(flags, "fp8-format"):
            raise InputError("--fp8-param-gather needs --fp8-format (FP8 training)", FIELD)
        out.set("parallel.fp8_param_gather", True)
    _precision_aware_optimizer(flags, out, distributed)
    nodes, per_node = integer("nnodes"), integer("nproc-per-node")
    if nodes is not None:
        out.set("cluster.nodes", nodes)
    if nodes is not None and per_node is not None:
        out.world_size = nodes * per_node


def _precision_aware_optimizer(flags: dict, out: Imported, distributed: bool) -> None:
    """``--use-precision-aware-optimizer`` and its moments' dtype (``--exp-avg-dtype`` / ``--exp-avg-sq-dtype``,
    both fp32 or both bf16) as ``parallel.precision_aware_optimizer`` and ``parallel.optimizer_moments_dtype``."""
    moments = {value_of(flags, name) or "fp32" for name in ("exp-avg-dtype", "exp-avg-sq-dtype")}
    if not flags.get("use-precision-aware-optimizer"):
        if moments != {"fp32"}:
            raise InputError("--exp-avg-dtype / --exp-avg-sq-dtype act only with --use-precision-aware-optimizer; "
                             "add it or drop them", FIELD)
        return
    if not distributed:
        raise InputError("--use-precision-aware-optimizer needs --use-distributed-optimizer", FIELD)
    if moments - {"fp32", "bf16"} or len(moments) > 1:
        raise InputError(f"--exp-avg-dtype / --exp-avg-sq-dtype {sorted(moments)}: dtsim models both moments in fp32 "
                         "or both in bf16; give the same one of those two", FIELD)
    out.set("parallel.precision_aware_optimizer", True)
    if moments == {"bf16"}:
        out.set("parallel.optimizer_moments_dtype", "bf16")
