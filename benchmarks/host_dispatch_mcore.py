"""Host (CPU) time of Megatron-Core's own transformer layer against the plain-PyTorch rebuilds.

``benchmarks/host_dispatch.py`` and ``host_dispatch_moe.py`` rebuild Megatron's layers in plain PyTorch
and time them on tiny CPU tensors; ``simulator.workload.host`` and ``moe_host`` take their host times from
those rebuilds. This script runs the real code, Megatron-Core 0.16.1's ``TransformerLayer`` (``pip install
torch megatron-core==0.16.1`` in a separate virtualenv; no GPU, no Transformer Engine), in the same process
and on the same tensors (hidden 64, 16 tokens, a 24-layer stack, min over 15 repeats and three rounds), and
prints the real layer's host time over the rebuild's, forward and backward:

* dense: the local-spec layer (``get_gpt_layer_local_spec``: Megatron-Core's own ``ColumnParallelLinear``
  / ``RowParallelLinear`` and norms) with biases and GeLU, as the ``megatron-flash`` rebuild, its core
  attention replaced by one SDPA call (Transformer Engine's fused attention is one call too, and the
  rebuild uses SDPA);
* MoE: the same layer with an ``MoELayer`` (``TopKRouter`` with fp32 gating and the auxiliary loss,
  ``MoEAlltoAllTokenDispatcher`` dropless, top-2 of ``E`` experts, EP = 1), its Transformer Engine fused
  ops (``moe_router_fusion``'s top-k and auxiliary-loss kernels, ``moe_permute_fusion``'s permute,
  chunk sort and unpermute) stood in for by one call each way, as the rebuild counts them, and its
  experts replaced by the rebuild's ``TEGroupedMLP`` stand-in (Transformer Engine's ``GroupedLinear``
  does not run without CUDA), so that the two sides differ only in the router, dispatcher and layer code.
  The experts' own time (stamped at their input and output, both ways) is subtracted on both sides;
* MLA: a DeepSeek-style dense layer (RMSNorm, SwiGLU) with ``MLASelfAttention`` (low-rank q and kv with their
  norms, ``apply_rope_fusion``'s MLA RoPE kernels one call each way) against the same layer with standard
  self-attention, both with the one-call core attention: what MLA's code adds, as fractions of the rebuild's
  reference block.

The CUDA stream and event calls of the dispatcher's device-to-host copy run as no-ops on the CPU
(``_Stream``); on a GPU host they are a few host calls more, so the MoE figure is a lower bound as the
rebuild's is. ATen calls are counted too: the real layer makes no more of them than the rebuild
(``TorchDispatchMode``), so what it adds is Megatron-Core's Python per call (module dispatch, config
branches, ``make_viewless_tensor``, the submodule indirections).

Three runs (torch 2.13.0+cpu, Megatron-Core 0.16.1, the 2-core development machine, 6 December 2026):
dense forward 1.68 / 1.62 / 1.69x, backward 1.12 / 1.00 / 1.08x; MoE outside the experts, median over the
expert counts, forward 1.76x in all three, backward 2.01 / 1.98 / 1.99x. Their medians are
``simulator.workload.host.MCORE_HOST``; three later runs gave 1.64-1.69 / 1.03-1.12 and 1.69-1.71 / 1.90-1.99,
and MLA 1.02 / 0.95 / 0.97 forward and 0.82 / 0.48 / 0.61 backward, whose medians are ``MLA_HOST_EXTRA``.
``python benchmarks/host_dispatch_mcore.py`` (about 45 s).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from host_dispatch import TOKENS, MegatronLayer, _Count, host_time
from host_dispatch_moe import (
    FFN,
    HIDDEN,
    AttentionHalf,
    _FusedTopK,
    _GroupedLinear,
    _min_rounds,
    _WeightedSwiGLU,
    measure,
)

warnings.filterwarnings("ignore")
HEADS, LAYERS, REPEATS, ROUNDS = 4, 24, 15, 3
EXPERT_COUNTS = (2, 4, 8, 16)


class _Event:
    def synchronize(self) -> None:
        pass


class _Stream:
    """``torch.cuda.Stream`` on a CPU-only build: the dispatcher's device-to-host stream."""

    def wait_stream(self, other) -> None:
        pass

    def record_event(self, event=None) -> _Event:
        return _Event()


def _cpu_shims() -> None:
    """The CUDA calls Megatron-Core makes outside the kernels, as no-ops, and a one-rank process group."""
    current = _Stream()
    torch.cuda.Stream = lambda *a, **k: _Stream()
    torch.cuda.current_stream = lambda *a, **k: current
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)


_cpu_shims()
from megatron.core import parallel_state  # noqa: E402  (after the process group)
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer import multi_latent_attention  # noqa: E402
from megatron.core.transformer.moe import moe_utils  # noqa: E402
from megatron.core.transformer.spec_utils import build_module  # noqa: E402
from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig  # noqa: E402

parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)


def _sdpa(self, query, key, value, attention_mask=None, attn_mask_type=None, attention_bias=None,
          packed_seq_params=None, **kwargs):
    """The core attention as one call (``[s, b, heads, d]`` in, ``[s, b, h]`` out)."""
    s, b = query.shape[0], query.shape[1]
    ctx = F.scaled_dot_product_attention(query.permute(1, 2, 0, 3), key.permute(1, 2, 0, 3),
                                         value.permute(1, 2, 0, 3), is_causal=True)
    return ctx.permute(2, 0, 1, 3).reshape(s, b, -1)


class _OneCall(torch.autograd.Function):
    """A Transformer Engine fused extension op: one ATen call forward and one backward."""

    @staticmethod
    def forward(ctx, x, rows):
        ctx.shape = x.shape
        return x.new_zeros((rows,) + tuple(x.shape[1:]))

    @staticmethod
    def backward(ctx, grad):
        return grad.new_zeros(ctx.shape), None


class _AuxLoss(torch.autograd.Function):
    """``fused_moe_aux_loss``: one call each way."""

    @staticmethod
    def forward(ctx, probs):
        ctx.shape = probs.shape
        return probs.sum().detach()

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.shape).clone()


def _fused_stand_ins() -> None:
    """Transformer Engine's MoE kernels (Megatron-Core calls them with ``moe_router_fusion`` and
    ``moe_permute_fusion``) as one call each way."""
    stand_ins = {
        "fused_permute_with_probs": lambda tokens, probs, routing_map, num_out_tokens: (
            _OneCall.apply(tokens, int(num_out_tokens)), _OneCall.apply(probs.reshape(-1), int(num_out_tokens)),
            routing_map),
        "fused_unpermute": lambda tokens, row_id_map, merging_probs=None, restore_shape=None: _OneCall.apply(
            tokens, restore_shape[0]),
        "fused_sort_chunks_by_index": lambda x, split_sizes, idxs: _OneCall.apply(x, x.shape[0]),
        "fused_sort_chunks_by_index_with_probs": lambda x, probs, split_sizes, idxs: (
            _OneCall.apply(x, x.shape[0]), _OneCall.apply(probs, probs.shape[0])),
        "fused_topk_with_score_function": lambda logits, topk, *a, **k: _FusedTopK.apply(logits, topk),
        "fused_compute_score_for_moe_aux_loss": lambda logits, topk, score_function: (
            lambda s: (s > 0.3, s))(_OneCall.apply(logits, logits.shape[0])),
        "fused_moe_aux_loss": lambda probs, *a, **k: _AuxLoss.apply(probs),
    }
    moe_utils.HAVE_TE = True
    moe_utils.te_general_gemm = None  # the router's gating GEMM through torch.mm (no Transformer Engine)
    for name, fn in stand_ins.items():
        setattr(moe_utils, name, fn)


_fused_stand_ins()


class _CoreAttention(torch.nn.Module):
    """The core attention as one SDPA call, for standard and MLA attention alike (MLA passes ``k_channels`` /
    ``v_channels``, which the local ``DotProductAttention`` does not take)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    forward = _sdpa


def _spec(**kwargs):
    """``get_gpt_layer_local_spec(**kwargs)`` with the one-call core attention."""
    spec = get_gpt_layer_local_spec(**kwargs)
    spec.submodules.self_attention.submodules.core_attention = _CoreAttention
    return spec


class _RopeQ(torch.autograd.Function):
    """``fused_apply_mla_rope_for_q`` (a Triton kernel under ``apply_rope_fusion``): one call each way."""

    @staticmethod
    def forward(ctx, q, width):
        ctx.shape = q.shape
        return q.new_zeros(q.shape[:-1] + (width,))

    @staticmethod
    def backward(ctx, grad):
        return grad.new_zeros(ctx.shape), None


class _RopeKV(torch.autograd.Function):
    """``fused_apply_mla_rope_for_kv``: one kernel, the key and value out (one allocation each)."""

    @staticmethod
    def forward(ctx, kv, k_pos, k_width, v_width):
        ctx.shapes = kv.shape, k_pos.shape
        return kv.new_zeros(kv.shape[:-1] + (k_width,)), kv.new_zeros(kv.shape[:-1] + (v_width,))

    @staticmethod
    def backward(ctx, grad_k, grad_v):
        return grad_k.new_zeros(ctx.shapes[0]), grad_k.new_zeros(ctx.shapes[1]), None, None


def _mla_stand_ins() -> None:
    """MLA's fused RoPE kernels as one call each, and Transformer Engine's classes (absent here, mocks)
    as a class no module is, for ``MLASelfAttention``'s ``isinstance`` checks."""
    multi_latent_attention.fused_apply_mla_rope_for_q = (
        lambda q, cos, sin, qk, pe, *a: _RopeQ.apply(q, qk + pe))
    multi_latent_attention.fused_apply_mla_rope_for_kv = (
        lambda kv, k_pos, cos, sin, pe, qk, v, *a: _RopeKV.apply(kv, k_pos, qk + pe, v))
    absent = type("NoTransformerEngine", (), {})
    for name in ("TELinear", "TEColumnParallelLinear"):
        if not isinstance(getattr(multi_latent_attention, name, None), type):
            setattr(multi_latent_attention, name, absent)


_mla_stand_ins()


class _Experts(torch.nn.Module):
    """``TEGroupedMLP.forward`` as ``host_dispatch_moe.MoELayer`` prices it (the tokens-per-expert list,
    the probabilities unsqueezed, fc1 and fc2 as one ``GroupedLinear`` node each, the weighted SwiGLU
    between), with its input and output stamped forward and backward."""

    def __init__(self, experts: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(2 * FFN, HIDDEN) * 0.02)
                                          for _ in range(experts))
        self.fc2 = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(HIDDEN, FFN) * 0.02)
                                          for _ in range(experts))
        self.fwd_s = self.bwd_s = 0.0
        self._grad_out = 0.0

    def _out_hook(self, grad):
        self._grad_out = time.perf_counter()

    def _in_hook(self, grad):
        self.bwd_s += time.perf_counter() - self._grad_out

    def forward(self, x, tokens_per_expert, probs):
        t0 = time.perf_counter()
        if x.requires_grad:
            x.register_hook(self._in_hook)
        splits = [int(v) for v in tokens_per_expert.tolist()]
        p = probs.unsqueeze(-1)
        inter = _GroupedLinear.apply(x, splits, False, *self.fc1)
        out = _GroupedLinear.apply(_WeightedSwiGLU.apply(inter, p), splits, False, *self.fc2)
        out.register_hook(self._out_hook)
        self.fwd_s += time.perf_counter() - t0
        return out, None


def _config(experts: int) -> TransformerConfig:
    kw = dict(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=4 * HIDDEN,
              use_cpu_initialization=True, params_dtype=torch.float32, add_bias_linear=True,
              gated_linear_unit=False, activation_func=F.gelu, bias_activation_fusion=False,
              bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False,
              persist_layer_norm=False, gradient_accumulation_fusion=False, hidden_dropout=0.0,
              attention_dropout=0.0)
    if experts:
        kw.update(num_moe_experts=experts, moe_router_topk=2, moe_token_dispatcher_type="alltoall",
                  moe_grouped_gemm=False, moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-3,
                  moe_router_dtype="fp32", moe_ffn_hidden_size=FFN)
    return TransformerConfig(**kw)


def _layers(experts: int, spec_fn=None) -> list:
    """A ``LAYERS`` stack built from ``spec_fn`` (default ``_spec``, the local spec), the experts stood in."""
    config = _config(experts)
    spec = (spec_fn or _spec)(num_experts=experts or None, moe_grouped_gemm=False)
    layers = [build_module(spec, config=config, layer_number=i + 1) for i in range(LAYERS)]
    if experts:
        for layer in layers:
            layer.mlp.experts = _Experts(experts)
        # read at run time: set after the dispatcher's constructor, which would put index tensors on CUDA
        config.moe_permute_fusion = config.moe_router_fusion = True
    return layers


def _pass(layers: list, x: torch.Tensor) -> tuple[float, float]:
    """One forward and backward of the stack: (forward, backward) host seconds per layer."""
    t0 = time.perf_counter()
    y = x
    for layer in layers:
        y, _ = layer(y, attention_mask=None)
    t1 = time.perf_counter()
    y.sum().backward()
    t2 = time.perf_counter()
    return (t1 - t0) / LAYERS, (t2 - t1) / LAYERS


def real_layer(experts: int, spec_fn=None) -> tuple[tuple[float, float], tuple[float, float]]:
    """Min over ``REPEATS`` of a ``LAYERS`` stack: per-layer (forward, backward) host seconds of the real
    layer (``spec_fn``, as ``_layers``), and of its experts (zero for a dense layer)."""
    layers = _layers(experts, spec_fn)
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    best = None
    for i in range(REPEATS + 3):
        for layer in layers:
            if experts:
                layer.mlp.experts.fwd_s = layer.mlp.experts.bwd_s = 0.0
        times = _pass(layers, x)
        ex = ((sum(layer.mlp.experts.fwd_s for layer in layers), sum(layer.mlp.experts.bwd_s for layer in layers))
              if experts else (0.0, 0.0))
        row = times, (ex[0] / LAYERS, ex[1] / LAYERS)
        if i >= 3 and (best is None or sum(row[0]) < sum(best[0])):
            best = row
    return best


def mla_layer(mla: bool) -> tuple[float, float]:
    """Min over ``REPEATS`` of a ``LAYERS`` stack: per-layer (forward, backward) host seconds of a dense
    DeepSeek-style layer (RMSNorm, SwiGLU, no biases) with ``MLASelfAttention`` (low-rank q and kv, the
    fused RoPE, ``apply_rope_fusion``) or standard self-attention, both with the one-call core attention."""
    kw = dict(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=4 * HIDDEN,
              use_cpu_initialization=True, params_dtype=torch.float32, add_bias_linear=False, gated_linear_unit=True,
              activation_func=F.silu, bias_activation_fusion=False, bias_dropout_fusion=False,
              masked_softmax_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
              hidden_dropout=0.0, attention_dropout=0.0, normalization="RMSNorm")
    if mla:
        config = MLATransformerConfig(**kw, q_lora_rank=32, kv_lora_rank=32, qk_head_dim=16, qk_pos_emb_head_dim=8,
                                      v_head_dim=16, apply_rope_fusion=False)
        config.apply_rope_fusion = True  # after __post_init__'s check for the fused kernels' import
    else:
        config = TransformerConfig(**kw, apply_rope_fusion=False)
    spec = _spec(multi_latent_attention=mla, normalization="RMSNorm")
    layers = [build_module(spec, config=config, layer_number=i + 1) for i in range(LAYERS)]
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    best = None
    for i in range(REPEATS + 3):
        row = _pass(layers, x)
        if i >= 3 and (best is None or sum(row) < sum(best)):
            best = row
    return best


def _min_of_rounds(run):
    rows = [run() for _ in range(ROUNDS)]
    return min(rows, key=lambda r: sum(r[0]))


def calls(experts: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """ATen calls of one real layer and of the rebuild (attention half and MoE layer for ``experts``),
    forward and backward."""
    def count(fn):
        forward, backward = _Count(), _Count()
        with forward:
            y = fn()
        with backward:
            y.sum().backward()
        return forward.calls, backward.calls

    from host_dispatch_moe import MoELayer
    x = torch.randn(TOKENS, 1, HIDDEN, requires_grad=True)
    real = _layers(experts)[0]
    if experts:
        moe, att = MoELayer(experts, False), AttentionHalf()
        return count(lambda: real(x, attention_mask=None)[0]), count(lambda: moe(att(x)))
    ref = MegatronLayer(flash=True)
    return count(lambda: real(x, attention_mask=None)[0]), count(lambda: ref(x))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    import megatron.core
    print(f"torch {torch.__version__}, Megatron-Core {megatron.core.__version__}; {LAYERS} layers, "
          f"min of {REPEATS} repeats and {ROUNDS} rounds; µs per layer")
    ref_f, ref_b = _min_rounds(lambda: host_time(lambda: MegatronLayer(flash=True), (TOKENS, 1, HIDDEN)))
    (real_f, real_b), _ = _min_of_rounds(lambda: real_layer(0))
    (cr, cb) = calls(0)
    print(f"dense: rebuild (megatron-flash) {ref_f * 1e6:.0f} / {ref_b * 1e6:.0f} ({cb[0]} / {cb[1]} calls), "
          f"Megatron-Core {real_f * 1e6:.0f} / {real_b * 1e6:.0f} ({cr[0]} / {cr[1]} calls): "
          f"forward {real_f / ref_f:.2f}x, backward {real_b / ref_b:.2f}x")
    att_f, att_b = _min_rounds(lambda: host_time(AttentionHalf, (TOKENS, 1, HIDDEN)))
    ratios = []
    print("\nMoE layer outside its experts (attention half, router, dispatcher, combine):")
    print("| experts | rebuild fwd | real fwd | ratio | rebuild bwd | real bwd | ratio | calls rebuild / real |")
    print("|---|---|---|---|---|---|---|---|")
    for e in EXPERT_COUNTS:
        f, b = _min_rounds(lambda e=e: measure(e, False))
        reb_f, reb_b = att_f + f[0] + f[2], att_b + b[0] + b[2]
        (lf, lb), (ef, eb) = _min_of_rounds(lambda e=e: real_layer(e))
        rf, rb = lf - ef, lb - eb
        ratios.append((rf / reb_f, rb / reb_b))
        cr, cb = calls(e)
        print(f"| {e} | {reb_f * 1e6:.0f} | {rf * 1e6:.0f} | {rf / reb_f:.2f} | {reb_b * 1e6:.0f} | {rb * 1e6:.0f} | "
              f"{rb / reb_b:.2f} | {cb[0]}+{cb[1]} / {cr[0]}+{cr[1]} |")
    print(f"median over the expert counts: forward {statistics.median(r[0] for r in ratios):.2f}x, "
          f"backward {statistics.median(r[1] for r in ratios):.2f}x")
    mha = min((mla_layer(False) for _ in range(ROUNDS)), key=sum)
    mla = min((mla_layer(True) for _ in range(ROUNDS)), key=sum)
    print(f"\nMLA over standard attention (Megatron-Core both): {mla[0] * 1e6:.0f} / {mla[1] * 1e6:.0f} against "
          f"{mha[0] * 1e6:.0f} / {mha[1] * 1e6:.0f} µs per layer; the difference as fractions of the rebuild's "
          f"reference block: forward {(mla[0] - mha[0]) / ref_f:.2f}, backward {(mla[1] - mha[1]) / ref_b:.2f}")


if __name__ == "__main__":
    main()
