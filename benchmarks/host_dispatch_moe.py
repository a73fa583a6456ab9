"""Host (CPU) work of a Megatron-Core MoE layer: where its ATen calls go, and how they grow with the experts.

The source of ``simulator.workload.moe_host``. The method is ``benchmarks/host_dispatch.py``'s: the
layer is rebuilt in plain PyTorch after Megatron-Core's code and run forward and backward on tiny CPU
tensors (hidden 64, 16 tokens), where the kernels cost next to nothing, so the time is the host's.
The layer (megatron/core/transformer/moe, 0.13-0.15, TP = EP = 1, one rank's view):

* ``TopKRouter`` (router.py): the gating GEMM in fp32 (``router_gating_linear``, a custom autograd
  function, ``moe_router_dtype fp32`` as NVIDIA's MoE recipes set), forced load balancing's random
  logits (``apply_random_logits``, the benchmark recipes' ``moe_router_force_load_balancing``), the
  fused top-k with its score function (``fused_topk_with_score_function``, ``moe_router_fusion``: one
  extension call each way) and the auxiliary load-balancing loss (``switch_load_balancing_loss_func``,
  ``MoEAuxLossAutoScaler``, the loss tracker's in-place add);
* ``MoEAlltoAllTokenDispatcher`` (token_dispatcher.py), dropless: ``preprocess`` (tokens per expert,
  the split sizes reshaped, summed and copied to the host with ``.to("cpu")``, the counts'
  all-gather), the fused permute (``moe_permute_with_probs``, ``moe_permute_fusion``), the token and
  probability all-to-alls (``_AllToAll``), the fused sort of the received chunks by local expert
  (``sort_chunks_by_idxs``), and the same in reverse for the combine with the fused unpermute;
* ``TEGroupedMLP`` (experts.py): ``tokens_per_expert.tolist()``, the probabilities unsqueezed, fc1
  and fc2 as Transformer Engine ``GroupedLinear`` (one autograd node; its forward splits the input
  and issues one GEMM per local expert from its C++ loop, ``general_grouped_gemm``; its backward one
  data-gradient and one weight-gradient GEMM per expert), the weighted SwiGLU between them (a custom
  autograd function, ``weighted_bias_swiglu_impl``).

A collective (the all-to-alls, the counts' all-gather) and a fused extension op are counted as one
call each: on a GPU host they pass through the same dispatcher and a launch, and NCCL's own host
work is not in this figure (a lower bound). An FP8 ``GroupedLinear`` also quantizes each expert's
input (``split_quantize``, one kernel per expert); ``fp8=True`` adds that call per expert each way.

Printed per number of local experts: the layer's host seconds forward and backward, split into the
three pieces dtsim's step graph prices separately (router + dispatch preprocessing + permute; the
experts; unpermute), timed at the pieces' boundaries (forward: wall clock; backward: tensor hooks on
the boundary tensors), min over repeats of a 24-layer stack and over three rounds; then the per-expert slope and the
intercept of a robust (Theil-Sen) line, as fractions of the ``megatron-flash`` reference block's host time
timed in the same run (so the figures carry over to ``simulator.workload.host.BLOCK_HOST_S`` whatever
the machine's speed), and the attention half of that block alone. Needs PyTorch (``pip install torch`` in a separate virtualenv),
then ``python benchmarks/host_dispatch_moe.py`` (about four minutes).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from host_dispatch import TOKENS as DENSE_TOKENS
from host_dispatch import MegatronLayer, _bias_dropout_add, host_time  # the dense reference, same method
from torch import nn

HIDDEN, TOKENS, TOP_K, FFN, LAYERS, REPEATS, ROUNDS = 64, 16, 2, 32, 24, 15, 3
EXPERT_COUNTS = (1, 2, 4, 8, 16, 32)


class _RouterGating(torch.autograd.Function):
    """``router_gating_linear``: the gating GEMM in the router dtype (fp32)."""

    @staticmethod
    def forward(ctx, inp, weight):
        ctx.save_for_backward(inp, weight)
        return torch.mm(inp.float(), weight.float().t())

    @staticmethod
    def backward(ctx, grad):
        inp, weight = ctx.saved_tensors
        return torch.mm(grad, weight.float()).to(inp.dtype), torch.mm(grad.t(), inp.float()).to(weight.dtype)


class _FusedTopK(torch.autograd.Function):
    """``fused_topk_with_score_function`` (Transformer Engine, softmax after top-k): one extension call
    forward (probabilities and routing map) and one backward."""

    @staticmethod
    def forward(ctx, logits, k):
        probs = torch.zeros_like(logits)
        top, idx = torch.topk(logits, k)
        probs.scatter_(1, idx, torch.softmax(top, -1))
        ctx.save_for_backward(probs)
        return probs, probs > 0

    @staticmethod
    def backward(ctx, grad, _unused):
        (probs,) = ctx.saved_tensors
        return grad * probs, None


class _AuxLossScaler(torch.autograd.Function):
    """``MoEAuxLossAutoScaler``: passes the activations through, feeds the aux loss's gradient."""

    @staticmethod
    def forward(ctx, out, aux):
        ctx.save_for_backward(aux)
        return out

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.ones_like(aux) * 1e-3


class _Fused(torch.autograd.Function):
    """A fused extension op (permute, chunk sort, unpermute): one call each way."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.clone()


class _AllToAll(torch.autograd.Function):
    """``_AllToAll``: the output allocated, one collective (stood in for by a copy) each way."""

    @staticmethod
    def forward(ctx, x):
        return torch.empty_like(x).copy_(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.empty_like(grad).copy_(grad)


class _GroupedLinear(torch.autograd.Function):
    """Transformer Engine ``_GroupedLinear``: one node; per expert one GEMM forward (after its input's
    quantize under FP8), a data- and a weight-gradient GEMM backward (after the gradient's quantize)."""

    @staticmethod
    def forward(ctx, inp, splits, fp8, *weights):
        out = torch.empty(inp.shape[0], weights[0].shape[0])
        xs, outs = inp.split(splits), out.split(splits)
        for x, w, o in zip(xs, weights, outs, strict=True):
            torch.mm(x.clone() if fp8 else x, w.t(), out=o)  # clone: the quantize kernel's stand-in
        ctx.save_for_backward(inp, *weights)
        ctx.splits, ctx.fp8 = splits, fp8
        return out

    @staticmethod
    def backward(ctx, grad):
        inp, *weights = ctx.saved_tensors
        dx = torch.empty_like(inp)
        dws = []
        for x, g, w, d in zip(inp.split(ctx.splits), grad.split(ctx.splits), weights, dx.split(ctx.splits),
                                 strict=True):
            g = g.clone() if ctx.fp8 else g
            torch.mm(g, w, out=d)
            dws.append(torch.mm(g.t(), x))
        return (dx, None, None, *dws)


class _WeightedSwiGLU(torch.autograd.Function):
    """``weighted_bias_swiglu_impl``: SwiGLU times the routing probability, hand-written backward."""

    @staticmethod
    def forward(ctx, x, probs):
        ctx.save_for_backward(x, probs)
        a, b = x.chunk(2, -1)
        return F.silu(a) * b * probs

    @staticmethod
    def backward(ctx, grad):
        x, probs = ctx.saved_tensors
        a, b = x.chunk(2, -1)
        s = torch.sigmoid(a)
        ga = grad * probs * b * s * (1 + a * (1 - s))
        return torch.cat([ga, grad * probs * a * s], -1), (grad * F.silu(a) * b).sum(-1, keepdim=True)


class MoELayer(nn.Module):
    """Megatron-Core ``MoELayer`` with its pre-MLP norm (module docstring), ``local`` experts, EP = 1."""

    def __init__(self, local: int, fp8: bool) -> None:
        super().__init__()
        self.local, self.fp8 = local, fp8
        self.norm = nn.LayerNorm(HIDDEN)
        self.router = nn.Parameter(torch.randn(local, HIDDEN) * 0.02)
        self.fc1 = nn.ParameterList(nn.Parameter(torch.randn(2 * FFN, HIDDEN) * 0.02) for _ in range(local))
        self.fc2 = nn.ParameterList(nn.Parameter(torch.randn(HIDDEN, FFN) * 0.02) for _ in range(local))
        self.aux_tracker = torch.zeros(LAYERS)
        self.marks: list[float] = []

    def _stamp(self, t: torch.Tensor) -> torch.Tensor:
        """Records the wall clock now (forward) and when ``t``'s gradient arrives (backward)."""
        self.marks.append(time.perf_counter())
        if t.requires_grad:
            t.register_hook(lambda g: self.marks.append(time.perf_counter()))
        return t

    def forward(self, x):
        k = min(TOP_K, self.local)
        h = self.norm(x).view(-1, HIDDEN)
        # TopKRouter
        logits = _RouterGating.apply(h, self.router)
        logits = torch.randn_like(logits)  # apply_random_logits (forced balancing)
        probs, routing_map = _FusedTopK.apply(logits, k)
        scores = torch.softmax(logits, -1, dtype=torch.float32)  # aux loss scores
        tokens_per_expert = routing_map.sum(0)
        aux = torch.sum(scores.sum(0) * tokens_per_expert) * (self.local * 1e-3 / (k * TOKENS))
        probs = _AuxLossScaler.apply(probs, aux)
        self.aux_tracker[0] += aux.detach()
        self.marks.append(time.perf_counter())  # the router ends (cuda_graph_scope moe_router)
        # MoEAlltoAllTokenDispatcher.preprocess (dropless)
        counts = routing_map.sum(0).long()
        input_splits = counts.reshape(1, self.local).sum(1).to("cpu")
        gathered = counts.clone().reshape(1, 1, self.local).transpose(0, 1)  # the counts' all-gather
        per_local = gathered[:, :, 0:self.local].contiguous()
        output_splits = per_local.sum(2)[0].to("cpu")
        per_local.sum(1).to("cpu")
        tokens_local = per_local.sum((0, 1)).to("cpu")
        per_local.view(-1, self.local).to("cpu")
        del input_splits, output_splits
        self.marks.append(time.perf_counter())  # the preprocessing ends (cuda_graph_scope moe_preprocess)
        # permute (fused), token and probability all-to-alls, sort by local expert (fused)
        rows = h.repeat(k, 1)
        permuted = _Fused.apply(rows)
        permuted_probs = _Fused.apply(probs.sum(-1).repeat(k))
        received = _AllToAll.apply(permuted)
        received_probs = _AllToAll.apply(permuted_probs)
        if self.local > 1:
            received = _Fused.apply(received)
            received_probs = _Fused.apply(received_probs)
        received = self._stamp(received)
        # TEGroupedMLP
        splits = tokens_local.tolist()
        splits = [int(v) for v in splits]
        splits[-1] += received.shape[0] - sum(splits)
        p = received_probs.unsqueeze(-1)
        inter = _GroupedLinear.apply(received, splits, self.fp8, *self.fc1)
        out = _GroupedLinear.apply(_WeightedSwiGLU.apply(inter, p), splits, self.fp8, *self.fc2)
        out = self._stamp(out)
        # combine: sort back (fused), all-to-all, unpermute (fused), the token copies summed
        if self.local > 1:
            out = _Fused.apply(out)
        out = _AllToAll.apply(out)
        out = _Fused.apply(out).view(k, -1, HIDDEN).sum(0)
        return x + out.view_as(x)


class AttentionHalf(MegatronLayer):
    """The ``megatron-flash`` reference block (``host_dispatch.py``) up to its first bias-dropout-add: the
    attention half that an MoE block keeps in front of its MoE layer."""

    def __init__(self) -> None:
        super().__init__(flash=True)

    def forward(self, x):
        mixed, _ = self.qkv(self.ln1(x))
        mixed = mixed.view(*(mixed.size()[:-1] + (4, 3 * self.hn)))
        q, k, v = torch.split(mixed, self.hn, dim=-1)
        ctx = F.scaled_dot_product_attention(q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3),
                                             v.permute(1, 2, 0, 3), is_causal=True)
        out, bias = self.dense(ctx.permute(2, 0, 1, 3).reshape(x.shape[0], x.shape[1], HIDDEN))
        return _bias_dropout_add(out, bias, x)


def _pieces(marks: list[float], t0: float, t1: float) -> tuple[float, ...]:
    """(pre, experts, post, router, preprocess) seconds of one layer from its four forward marks (the
    router's end, the preprocessing's end, the experts' start and end) between ``t0`` and ``t1``; the
    router (with the norm before it) and the preprocessing are parts of ``pre``."""
    r, p, a, b = marks
    return a - t0, b - a, t1 - b, r - t0, p - r


def measure(local: int, fp8: bool) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Min over ``REPEATS`` of a ``LAYERS`` stack: per-layer (pre, experts, post) host seconds forward
    and backward. Backward: the experts' piece between its two hooks; the rest of the layer's backward (the
    unpermute's before, the router's and dispatch's after, adjacent across layers) split between post and
    pre in the forward's proportion."""
    stack = [MoELayer(local, fp8) for _ in range(LAYERS)]
    x = torch.randn(1, TOKENS, HIDDEN, requires_grad=True)
    best_f = best_b = None
    for i in range(REPEATS + 3):
        for layer in stack:
            layer.marks = []
        y, starts, ends = x, [], []
        for layer in stack:
            starts.append(time.perf_counter())
            y = layer(y)
            ends.append(time.perf_counter())
        fwd = [_pieces(layer.marks[:4], s, e) for layer, s, e in zip(stack, starts, ends, strict=True)]
        t_b0 = time.perf_counter()
        y.sum().backward()
        t_b1 = time.perf_counter()
        # per layer, the hooks fire when the experts' output gradient arrives and when their input's is done
        exp_b = sum(layer.marks[5] - layer.marks[4] for layer in stack) / LAYERS
        total_b = t_b1 - t_b0
        if i < 3:
            continue
        f = tuple(sum(p[n] for p in fwd) / LAYERS for n in range(5))
        rest = total_b / LAYERS - exp_b
        # outside the experts, split the backward's rest between post (before) and pre (after) as forward
        share = f[2] / (f[0] + f[2])
        b = (rest * (1 - share), exp_b, rest * share)
        if best_f is None or sum(f) < sum(best_f):
            best_f = f
        if best_b is None or sum(b) < sum(best_b):
            best_b = b
    return best_f, best_b


def _line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Theil-Sen line (median of the pairwise slopes, then the median intercept): one row slowed by the
    shared machine does not tilt it."""
    pairs = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))]
    slope = statistics.median(pairs)
    return statistics.median(y - slope * x for x, y in zip(xs, ys, strict=True)), slope


def _min_rounds(run):
    """Element-wise min of ``ROUNDS`` calls of ``run`` (each returning a pair of floats or of tuples)."""
    results = [run() for _ in range(ROUNDS)]
    if isinstance(results[0][0], tuple):
        return tuple(tuple(min(r[i][j] for r in results) for j in range(len(results[0][i]))) for i in range(2))
    return tuple(min(r[i] for r in results) for i in range(2))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {LAYERS} layers, min of {REPEATS} repeats; µs per layer")
    # each figure the min over ROUNDS rounds as well: the development machine is shared and noisy
    ref_f, ref_b = _min_rounds(lambda: host_time(lambda: MegatronLayer(flash=True), (DENSE_TOKENS, 1, HIDDEN)))
    att_f, att_b = _min_rounds(lambda: host_time(AttentionHalf, (DENSE_TOKENS, 1, HIDDEN)))
    print(f"megatron-flash block (the reference): forward {ref_f * 1e6:.0f}, backward {ref_b * 1e6:.0f}")
    print(f"its attention half: forward {att_f * 1e6:.0f} ({att_f / ref_f:.3f} of the block's), "
          f"backward {att_b * 1e6:.0f} ({att_b / ref_b:.3f})")
    for fp8 in (False, True):
        print(f"\n{'FP8' if fp8 else '16-bit'} GroupedLinear")
        print("| local experts | fwd pre | fwd experts | fwd post | bwd pre | bwd experts | bwd post |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        rows = []
        for n in EXPERT_COUNTS:
            f, b = _min_rounds(lambda n=n, fp8=fp8: measure(n, fp8))
            rows.append((n, f, b))
            print(f"| {n} | " + " | ".join(f"{v * 1e6:.0f}" for v in (*f[:3], *b)) + " |")
        shares = [(r[1][3] / r[1][0], r[1][4] / r[1][0]) for r in rows]
        print("share of the forward pre in the router (with the norm) and in the preprocessing: "
              + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in shares))
        print("as fractions of the reference block's host time (forward of its forward, backward of its backward):")
        for label, idx, ref in (("fwd", 1, ref_f), ("bwd", 2, ref_b)):
            for piece, j in (("pre", 0), ("experts", 1), ("post", 2)):
                a, s = _line([r[0] for r in rows], [r[idx][j] / ref for r in rows])
                print(f"{label} {piece}: {a:.3f} + {s:.4f} per local expert")


if __name__ == "__main__":
    main()
