"""Host (CPU) work of the eager code GPT-OSS adds to a Megatron-Core MoE block.

The source of ``simulator.workload.moe_host.EXTRAS``. Same method as
``benchmarks/host_dispatch.py``: each piece rebuilt in plain PyTorch after Megatron-Core's code
(0.14-0.15), run forward and backward on tiny CPU tensors, so that the time is the host's; counted with
``TorchDispatchMode``; min over repeats of a 24-layer stack. Each piece is timed against the same stack
without it (a carrier of one ``mul`` per layer), so what is printed is what the piece adds:

* ``yarn-rope``: ``_apply_rotary_pos_emb_bshd`` (megatron/core/models/common/embeddings/rope_utils.py) on q
  and k, which Megatron-Core runs in eager PyTorch for YaRN (Megatron-Bridge ``utils/fusions.py``
  ``validate_rope_fusion_compatibility`` turns the fused RoPE off for any embedding but plain ``rope``),
  against the fused path (one autograd function per tensor, Transformer Engine's ``FusedRoPEFunc``);
* ``geglu-clamp``: the prelude of ``weighted_bias_quick_geglu_impl`` (megatron/core/fusions/
  fused_bias_geglu.py) with ``clamp_value``: ``chunk``, two ``clamp``, ``cat``, ``view`` and
  ``torch.tensor(linear_offset, device=input.device)``. On a GPU that last call is a blocking
  host-to-device copy (PyTorch ``copy_`` from pageable memory without ``non_blocking``:
  ``at::cuda::memcpy_and_sync``, a ``cudaStreamSynchronize``), which this CPU run cannot show: dtsim
  models it as a host synchronisation (``simulator.workload.moe_host``);
* ``expert-bias``: ``TEGroupedMLP._apply_bias`` (megatron/core/transformer/moe/experts.py):
  ``torch.cat([t + b * p for t, b, p in zip(out.split(splits), biases, probs.split(splits))])`` at
  1-32 local experts.

Prints the ``megatron-flash`` reference block's host time in the same run, then per piece the ATen
calls forward and backward, the host µs forward and backward, the µs per call and the fractions of the
reference block (what ``EXTRAS`` holds, so that they carry over to ``simulator.workload.host.BLOCK_HOST_S``
whatever the machine), and the bias loop's Theil-Sen line over the local experts. Needs PyTorch (``pip install torch`` in a separate virtualenv), then
``python benchmarks/host_dispatch_gptoss.py`` (about 20 s).
"""

from __future__ import annotations

import torch
from host_dispatch import HIDDEN, LAYERS, REPEATS, TOKENS, MegatronLayer, _Count, host_time
from host_dispatch_moe import _line
from torch import nn

HEADS, HEAD_DIM = 4, 16
SHAPE = (TOKENS, 1, HIDDEN)
#: Rounds whose minimum each figure is: the development machine is shared and noisy.
ROUNDS = 5
EXPERT_COUNTS = (1, 2, 4, 8, 16, 32)


class _FusedRoPE(torch.autograd.Function):
    """Transformer Engine's fused RoPE: one extension call each way."""

    @staticmethod
    def forward(ctx, t, freqs):
        return t * 1.0

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.0, None


def _rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope_bshd(t, freqs, mscale: float = 1.0):
    """Megatron-Core ``_apply_rotary_pos_emb_bshd`` (not interleaved, no MLA)."""
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    t = (t * cos_) + (_rotate_half(t) * sin_)
    return torch.cat((t, t_pass), dim=-1)


class Carrier(nn.Module):
    """One ``mul`` per layer: the stack every piece is timed in and against."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(HIDDEN))

    def piece(self, x):
        return x

    def forward(self, x):
        return self.piece(x * self.w)


class RoPE(Carrier):
    def __init__(self, eager: bool) -> None:
        super().__init__()
        self.eager = eager
        self.freqs = torch.randn(TOKENS, 1, 1, HEAD_DIM)

    def piece(self, x):
        q = x[..., :HEADS * HEAD_DIM // 2].reshape(TOKENS, 1, HEADS // 2, HEAD_DIM)
        k = x[..., HEADS * HEAD_DIM // 2:].reshape(TOKENS, 1, HEADS // 2, HEAD_DIM)
        if self.eager:
            q, k = _rope_bshd(q, self.freqs, 1.1), _rope_bshd(k, self.freqs, 1.1)
        else:
            q, k = _FusedRoPE.apply(q, self.freqs), _FusedRoPE.apply(k, self.freqs)
        return torch.cat((q.reshape(TOKENS, 1, -1), k.reshape(TOKENS, 1, -1)), -1)


class GeGLUClamp(Carrier):
    def __init__(self, clamp: bool) -> None:
        super().__init__()
        self.clamp = clamp

    def piece(self, x):
        if not self.clamp:
            return x
        ori_shape = x.shape
        x_glu, x_linear = x.chunk(2, -1)
        x = torch.cat((x_glu.clamp(min=None, max=7.0), x_linear.clamp(min=-7.0, max=7.0)), -1)
        x = x.view(-1, ori_shape[-1])
        torch.tensor(1.0, dtype=x.dtype, device=x.device)  # linear_offset (a blocking copy on a GPU)
        return x.view(ori_shape)


class ExpertBias(Carrier):
    def __init__(self, local: int) -> None:
        super().__init__()
        self.local = local
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(HIDDEN)) for _ in range(local)) if local else None
        self.probs = torch.rand(TOKENS, 1)

    def piece(self, x):
        if not self.local:
            return x
        flat = x.view(TOKENS, HIDDEN)
        splits = [TOKENS // self.local] * self.local
        splits[-1] += TOKENS - sum(splits)
        out = torch.cat([t + b * p for t, b, p in
                         zip(flat.split(splits), self.biases, self.probs.split(splits), strict=True)])
        return out.view_as(x)


def _min_of_rounds(make) -> tuple[float, float]:
    """``host_time`` of ``make``'s stack, forward and backward, each the min over ``ROUNDS`` rounds."""
    runs = [host_time(make, SHAPE) for _ in range(ROUNDS)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def _calls(make) -> tuple[int, int]:
    layer, x = make(), torch.randn(*SHAPE, requires_grad=True)
    with _Count() as fwd:
        y = layer(x).sum()
    with _Count() as bwd:
        y.backward()
    return fwd.calls, bwd.calls


def _added(make, base) -> tuple[int, int, float, float]:
    """ATen calls and host seconds (forward, backward) that ``make``'s piece adds over ``base``'s, each
    timing the min over ``ROUNDS`` rounds."""
    (nf, nb), (mf, mb) = _calls(make), _calls(base)
    t, b = _min_of_rounds(make), _min_of_rounds(base)
    return nf - mf, nb - mb, t[0] - b[0], t[1] - b[1]


def _row(name: str, added: tuple[int, int, float, float], ref: tuple[float, float]) -> None:
    nf, nb, tf, tb = added
    per = (tf + tb) / (nf + nb) * 1e6 if nf + nb else float("nan")
    print(f"| {name} | {nf} | {nb} | {tf * 1e6:.0f} | {tb * 1e6:.0f} | {per:.1f} | {tf / ref[0]:.3f} | {tb / ref[1]:.3f} |")


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {LAYERS} layers, min of {REPEATS} repeats and {ROUNDS} rounds; what each piece adds")
    ref = _min_of_rounds(lambda: MegatronLayer(flash=True))
    print(f"megatron-flash reference block: forward {ref[0] * 1e6:.0f} µs, backward {ref[1] * 1e6:.0f} µs")
    print("| piece | calls forward | calls backward | host forward (µs) | host backward (µs) | µs per call "
          "| forward / reference | backward / reference |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    _row("yarn-rope (eager q and k, over the fused path)", _added(lambda: RoPE(True), lambda: RoPE(False)), ref)
    _row("geglu-clamp (clamp prelude and offset tensor)",
         _added(lambda: GeGLUClamp(True), lambda: GeGLUClamp(False)), ref)
    rows = []
    for n in EXPERT_COUNTS:
        rows.append(_added(lambda n=n: ExpertBias(n), lambda: ExpertBias(0)))
        _row(f"expert-bias, {n} local experts", rows[-1], ref)
    for label, i in (("forward", 2), ("backward", 3)):
        a, slope = _line(list(EXPERT_COUNTS), [r[i] / ref[i - 2] for r in rows])
        print(f"expert-bias {label}: {a:.3f} + {slope:.4f} per local expert")


if __name__ == "__main__":
    main()
