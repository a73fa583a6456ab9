"""Host (CPU) work of eager PyTorch transformer blocks: ATen calls per block and their CPU time.

The source of ``simulator.workload.host_calls``. Each reference block is rebuilt in plain PyTorch
after its framework's code, then run forward and backward on tiny CPU tensors (hidden 64, 16 tokens),
where the kernels cost next to nothing, so the time is the host's: Python, module calls, pybind11,
the autograd recorder, the ATen dispatcher and the backward engine. Blocks:

* ``megatron``: Megatron-LM ``ParallelTransformerLayer`` at TP = 1 (megatron/model/transformer.py,
  2023): LayerNorm, QKV ``ColumnParallelLinear`` (its matmul in the Python autograd function
  ``LinearWithGradAccumulationAndAsyncCommunication``, the bias added after), ``CoreAttention``
  (views, ``repeat``, ``baddbmm``, masked softmax, dropout, ``bmm``, ``permute().contiguous()``),
  the dense projection, bias-dropout-add, LayerNorm, bias-GeLU (a custom autograd function), fc2,
  bias-dropout-add; ``megatron-flash``: the same with PyTorch SDPA in place of the unfused core.
* ``llama``: torchtitan's Llama 3 ``TransformerBlock`` in eager mode (RMSNorm as torch code, wq/wk/wv,
  complex rotary, ``repeat_kv`` by expand/reshape, SDPA, wo, SwiGLU).

For each block it prints the ATen calls forward and backward (counted with ``TorchDispatchMode``,
views included) and the host time per block (min over repeats of a 24-block stack), and the host
time per call; then the backward host time per parameter that Megatron-LM DDP's gradient-accumulation
hook adds (``hook_time_per_param``). Needs PyTorch, which dtsim does not depend on: ``pip install torch`` in a separate
virtualenv, then ``python benchmarks/host_dispatch.py`` (about 20 s).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

HIDDEN, HEADS, KV_HEADS, TOKENS, LAYERS, REPEATS = 64, 4, 2, 16, 24, 20


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class _MegatronLinearFn(torch.autograd.Function):
    """``LinearWithGradAccumulationAndAsyncCommunication`` at TP = 1: matmul, Python backward."""

    @staticmethod
    def forward(ctx, inp, weight):
        ctx.save_for_backward(inp, weight)
        return torch.matmul(inp, weight.t())

    @staticmethod
    def backward(ctx, grad):
        inp, weight = ctx.saved_tensors
        grad_input = grad.matmul(weight)
        g2 = grad.view(grad.shape[0] * grad.shape[1], grad.shape[2])
        i2 = inp.view(inp.shape[0] * inp.shape[1], inp.shape[2])
        return grad_input, g2.t().matmul(i2)


class _BiasGeLUFn(torch.autograd.Function):
    """Megatron's ``bias_gelu_impl``: tanh-GeLU of ``x + bias`` with its hand-written backward."""

    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return F.gelu(x + bias, approximate="tanh")

    @staticmethod
    def backward(ctx, grad):
        x, bias = ctx.saved_tensors
        y = x + bias
        tanh_out = torch.tanh(0.79788456 * y * (1 + 0.044715 * y * y))
        ff = 0.5 * y * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * y * y)) + 0.5 * (1 + tanh_out)
        g = ff * grad
        return g, g


class _MegatronLinear(nn.Module):
    def __init__(self, n_in: int, n_out: int, skip_bias_add: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))
        self.skip_bias_add = skip_bias_add

    def forward(self, x):
        out = _MegatronLinearFn.apply(x, self.weight)
        return (out, self.bias) if self.skip_bias_add else (out + self.bias, None)


def _bias_dropout_add(x, bias, residual):
    return residual + F.dropout(x + bias, p=0.1, training=True)


class MegatronLayer(nn.Module):
    """Megatron-LM ``ParallelTransformerLayer``, TP = 1, ``[s, b, h]`` layout."""

    def __init__(self, flash: bool) -> None:
        super().__init__()
        h = HIDDEN
        self.hn = h // HEADS
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv = _MegatronLinear(h, 3 * h, skip_bias_add=False)
        self.dense = _MegatronLinear(h, h, skip_bias_add=True)
        self.fc1 = _MegatronLinear(h, 4 * h, skip_bias_add=True)
        self.fc2 = _MegatronLinear(4 * h, h, skip_bias_add=True)
        self.flash = flash
        self.register_buffer("mask", torch.ones(TOKENS, TOKENS, dtype=torch.bool).triu(1))

    def _core(self, q, k, v):
        b, sq = q.shape[1], q.shape[0]
        size = (b, HEADS, sq, k.shape[0])
        q = q.view(sq, b * HEADS, -1)
        k = k.repeat(1, 1, 1, 1).view(size[3], b * HEADS, -1)
        buf = torch.empty((b * HEADS, sq, size[3]), dtype=q.dtype)
        scores = torch.baddbmm(buf, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0,
                               alpha=1.0 / math.sqrt(self.hn)).view(*size)
        probs = F.dropout(torch.softmax(scores.masked_fill(self.mask, -10000.0), dim=-1), 0.1, training=True)
        v = v.repeat(1, 1, 1, 1).view(v.shape[0], b * HEADS, -1)
        ctx = torch.bmm(probs.view(b * HEADS, sq, -1), v.transpose(0, 1)).view(b, HEADS, sq, self.hn)
        ctx = ctx.permute(2, 0, 1, 3).contiguous()
        return ctx.view(*(ctx.size()[:-2] + (HIDDEN,)))

    def forward(self, x):
        mixed, _ = self.qkv(self.ln1(x))
        mixed = mixed.view(*(mixed.size()[:-1] + (HEADS, 3 * self.hn)))
        q, k, v = torch.split(mixed, self.hn, dim=-1)
        if self.flash:
            ctx = F.scaled_dot_product_attention(q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3),
                                                 v.permute(1, 2, 0, 3), is_causal=True)
            ctx = ctx.permute(2, 0, 1, 3).reshape(x.shape[0], x.shape[1], HIDDEN)
        else:
            ctx = self._core(q, k, v)
        out, bias = self.dense(ctx)
        x = _bias_dropout_add(out, bias, x)
        inter, ibias = self.fc1(self.ln2(x))
        out, bias = self.fc2(_BiasGeLUFn.apply(inter, ibias))
        return _bias_dropout_add(out, bias, x)


class _RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


class LlamaBlock(nn.Module):
    """torchtitan Llama 3 ``TransformerBlock``, eager, ``[b, s, h]`` layout."""

    def __init__(self) -> None:
        super().__init__()
        h, hd = HIDDEN, HIDDEN // HEADS
        self.hd = hd
        self.attention_norm, self.ffn_norm = _RMSNorm(h), _RMSNorm(h)
        self.wq = nn.Linear(h, h, bias=False)
        self.wk = nn.Linear(h, KV_HEADS * hd, bias=False)
        self.wv = nn.Linear(h, KV_HEADS * hd, bias=False)
        self.wo = nn.Linear(h, h, bias=False)
        self.w1, self.w3 = nn.Linear(h, 4 * h, bias=False), nn.Linear(h, 4 * h, bias=False)
        self.w2 = nn.Linear(4 * h, h, bias=False)
        self.freqs = torch.polar(torch.ones(TOKENS, hd // 2), torch.zeros(TOKENS, hd // 2))

    def _rope(self, xq, xk):
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        f = self.freqs.view(1, xq_.shape[1], 1, xq_.shape[-1])
        return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq),
                torch.view_as_real(xk_ * f).flatten(3).type_as(xk))

    def _attention(self, x):
        b, s, _ = x.shape
        xq = self.wq(x).view(b, s, -1, self.hd)
        xk = self.wk(x).view(b, s, -1, self.hd)
        xv = self.wv(x).view(b, s, -1, self.hd)
        xq, xk = self._rope(xq, xk)
        rep = HEADS // KV_HEADS
        keys = xk[:, :, :, None, :].expand(b, s, KV_HEADS, rep, self.hd).reshape(b, s, HEADS, self.hd)
        values = xv[:, :, :, None, :].expand(b, s, KV_HEADS, rep, self.hd).reshape(b, s, HEADS, self.hd)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))

    def forward(self, x):
        h = x + self._attention(self.attention_norm(x))
        n = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(n)) * self.w3(n))


BLOCKS = {
    "megatron": (lambda: MegatronLayer(flash=False), (TOKENS, 1, HIDDEN)),
    "megatron-flash": (lambda: MegatronLayer(flash=True), (TOKENS, 1, HIDDEN)),
    "llama": (LlamaBlock, (1, TOKENS, HIDDEN)),
}


def calls(make, shape) -> tuple[int, int]:
    """ATen calls of one block's forward and of its backward."""
    block, x = make(), torch.randn(*shape, requires_grad=True)
    with _Count() as fwd:
        y = block(x)
    with _Count() as bwd:
        y.sum().backward()
    return fwd.calls, bwd.calls - 2  # minus the loss's own sum and its ones_like seed


def host_time(make, shape, dtype=torch.float32) -> tuple[float, float]:
    """Min over ``REPEATS`` of the forward and backward host seconds per block of a ``LAYERS`` stack."""
    stack, x = [make() for _ in range(LAYERS)], torch.randn(*shape, requires_grad=True, dtype=dtype)
    fwd, total = [], []
    for i in range(REPEATS + 3):
        t0 = time.perf_counter()
        y = x
        for block in stack:
            y = block(y)
        t1 = time.perf_counter()
        y.sum().backward()
        t2 = time.perf_counter()
        if i >= 3:  # warm-up
            fwd.append((t1 - t0) / LAYERS)
            total.append((t2 - t0) / LAYERS)
    return min(fwd), min(total) - min(fwd)


def with_ddp_hooks(block: nn.Module) -> nn.Module:
    """``block`` with Megatron-LM DDP's per-parameter gradient-accumulation hooks
    (megatron/core/distributed/distributed_data_parallel.py: ``param.expand_as(param).grad_fn.next_functions[0][0]
    .register_hook(_make_param_hook(param))``; the hook adds ``param.grad`` into ``param.main_grad`` and sets
    ``param.grad = None``)."""
    block._grad_accs = []
    for param in block.parameters():
        param.main_grad = torch.zeros_like(param)
        acc = param.expand_as(param).grad_fn.next_functions[0][0]

        def hook(*_unused, param=param):
            if param.grad is not None and not getattr(param, "grad_added_to_main_grad", False):
                param.main_grad.add_(param.grad.data)
            param.grad = None

        acc.register_hook(hook)
        block._grad_accs.append(acc)
    return block


def hook_time_per_param(n: int = 2000) -> float:
    """Backward host seconds per parameter that Megatron DDP's hook adds: ``n`` small parameters summed
    into a loss, backward with and without the hooks (min of ``REPEATS`` each), over ``n``. The same
    AccumulateGrad nodes run either way; the difference is the hook's call and its ``add_``."""

    def backward_s(hooked: bool) -> float:
        params = nn.ParameterList(nn.Parameter(torch.randn(HIDDEN)) for _ in range(n))
        if hooked:
            with_ddp_hooks(params)
        best = math.inf
        for i in range(REPEATS + 3):
            loss = sum(q.sum() for q in params)
            t0 = time.perf_counter()
            loss.backward()
            if i >= 3:
                best = min(best, time.perf_counter() - t0)
            for q in params:
                q.grad = None
        return best

    return (backward_s(True) - backward_s(False)) / n


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {LAYERS} blocks, min of {REPEATS} repeats")
    print("| block | calls forward | calls backward | host forward (µs) | host backward (µs) | µs per call |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (make, shape) in BLOCKS.items():
        nf, nb = calls(make, shape)
        tf, tb = host_time(make, shape)
        print(f"| {name} | {nf} | {nb} | {tf * 1e6:.0f} | {tb * 1e6:.0f} | {(tf + tb) / (nf + nb) * 1e6:.1f} |")
    print()
    print(f"Megatron DDP gradient-accumulation hook: {hook_time_per_param() * 1e6:.1f} µs of backward host per parameter")


if __name__ == "__main__":
    main()
