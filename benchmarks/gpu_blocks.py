"""Whole transformer blocks timed on one GPU, forward and backward, in plain eager PyTorch (bf16 weights,
SDPA's flash kernel): the data ``tests/hardware/test_blocks_measured.py`` checks dtsim's per-block compute
time against (its GEMMs, attention, norms, activations and launches together, where
``benchmarks/gpu_kernels.py`` checks them one by one).

Blocks (``BLOCKS``): llm-foundry's MPT (LayerNorm, fused Wqkv, GELU MLP; MPT-760m with biases, MPT-7B
without) and torchtitan's Llama 3 8B block in eager mode (RMSNorm as torch code, separate wq/wk/wv,
complex rotary, ``repeat_kv`` by expand, SwiGLU), plus a 1,024-wide GPT block at micro-batch 1 whose
kernels are smaller than their dispatch. SDPA is pinned to its flash backend (FlashAttention-2): left to
choose, torch 2.11 with cuDNN >= 9.15 prefers cuDNN on Hopper. The stored run of 4 December 2026
(``benchmarks/results/h200_blocks_2026-12-04.json``) predates the pin, so which of the two it ran is not
recorded. Each is stacked ``layers`` deep; the forward and the backward of
the stack are timed with CUDA events (median of repeats after warm-up), so host-bound blocks show their
host time as GPU idle between kernels. Needs PyTorch with CUDA: ``python benchmarks/gpu_blocks.py OUT``
writes ``OUT/gpu_blocks.json``; about half a minute on one H200. ``python benchmarks/gpu_blocks.py OUT
SECONDS`` runs the Llama block back to back for that long instead and writes each iteration's time, SM
clock and board power (``OUT/gpu_blocks_sustained.json``) and prints their summary; ``python
benchmarks/gpu_blocks.py --summary FILE`` prints it again from a stored run (PyTorch needed, no GPU).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

DEV, BF16 = "cuda", torch.bfloat16


class MPTBlock(nn.Module):
    """llm-foundry ``MPTBlock``: x + attn(LN(x)); x + ffn(LN(x)) with a fused Wqkv and a GELU MLP."""

    def __init__(self, d: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.norm_1, self.norm_2 = nn.LayerNorm(d, bias=bias), nn.LayerNorm(d, bias=bias)
        self.wqkv, self.out_proj = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)
        self.up, self.down = nn.Linear(d, 4 * d, bias=bias), nn.Linear(4 * d, d, bias=bias)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.wqkv(self.norm_1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.norm_2(x))))


class LlamaBlock(nn.Module):
    """torchtitan Llama 3 ``TransformerBlock`` in eager mode (``benchmarks/host_dispatch.py``'s, full size)."""

    def __init__(self, d: int, heads: int, kv_heads: int, ffn: int, seq: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.attention_norm, self.ffn_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))
        self.wq, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)
        # complex64 rotary table, kept out of Module.to(bf16) (which would drop its imaginary part)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), torch.rand(self.hd // 2))
        self.freqs = torch.polar(torch.ones_like(angles), angles).to(DEV)

    @staticmethod
    def _rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    def _rope(self, t):
        tc = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(tc * self.freqs.view(1, t.shape[1], 1, -1)).flatten(3).type_as(t)

    def forward(self, x):
        b, s, _ = x.shape
        n = self._rms(x, self.attention_norm)
        q = self._rope(self.wq(n).view(b, s, -1, self.hd))
        k = self._rope(self.wk(n).view(b, s, -1, self.hd))
        v = self.wv(n).view(b, s, -1, self.hd)
        rep = self.heads // self.kv_heads
        k = k[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.hd).reshape(b, s, self.heads, self.hd)
        v = v[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.hd).reshape(b, s, self.heads, self.hd)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
        m = self._rms(h, self.ffn_norm)
        return h + self.w2(F.silu(self.w1(m)) * self.w3(m))


#: name: (block factory, micro-batch, sequence, layers stacked)
BLOCKS = {
    "mpt-760m": (lambda: MPTBlock(1536, 12, bias=True), 8, 2048, 8),
    "mpt-7b": (lambda: MPTBlock(4096, 32, bias=False), 4, 2048, 4),
    "llama3-8b": (lambda: LlamaBlock(4096, 32, 8, 14336, 8192), 1, 8192, 4),
    "gpt-1024-mbs1": (lambda: MPTBlock(1024, 16, bias=True), 1, 1024, 16),
}


def build(make, b: int, s: int, layers: int) -> tuple[nn.Module, torch.Tensor]:
    """``layers`` blocks in bf16 on the GPU and an input of ``b × s`` tokens that requires its gradient."""
    torch.manual_seed(0)
    stack = nn.Sequential(*[make() for _ in range(layers)]).to(DEV, BF16)
    d = stack[0].wo.in_features if isinstance(stack[0], LlamaBlock) else stack[0].norm_1.normalized_shape[0]
    return stack, torch.randn(b, s, d, device=DEV, dtype=BF16, requires_grad=True)


def time_block(make, b: int, s: int, layers: int, reps: int = 10) -> dict:
    stack, x = build(make, b, s, layers)
    fwd, bwd = [], []
    for i in range(reps + 3):
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        torch.cuda.synchronize()
        e[0].record()
        y = stack(x)
        e[1].record()
        y.backward(torch.ones_like(y))
        e[2].record()
        e[2].synchronize()
        if i >= 3:
            fwd.append(e[0].elapsed_time(e[1]) * 1e-3 / layers)
            bwd.append(e[1].elapsed_time(e[2]) * 1e-3 / layers)
        x.grad = None
        stack.zero_grad(set_to_none=True)
    fwd.sort()
    bwd.sort()
    return {"micro_batch": b, "seq": s, "layers": layers, "fwd_s_per_block": fwd[len(fwd) // 2],
            "bwd_s_per_block": bwd[len(bwd) // 2]}


def sustained(name: str, seconds: float) -> dict:
    """One block stack run forward and backward back to back for ``seconds``: the time of each iteration
    with the SM clock and board power read after it (NVML), so a training-like load's slowdown under the
    power cap shows as the iterations' time against the first ones'."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    stack, x = build(*BLOCKS[name])
    stack(x).backward(torch.ones_like(x))  # warm-up: library and kernel setup
    x.grad = None
    stack.zero_grad(set_to_none=True)
    rows, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        stack(x).backward(torch.ones_like(x))
        e1.record()
        e1.synchronize()
        rows.append((round(time.perf_counter() - start, 3), e0.elapsed_time(e1) * 1e-3,
                     pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                     pynvml.nvmlDeviceGetPowerUsage(handle) / 1000))
        x.grad = None
        stack.zero_grad(set_to_none=True)
    summary(rows)
    return {"block": name, "layers": len(stack), "columns": ["t_s", "iteration_s", "sm_clock_MHz", "power_W"],
            "rows": rows}


def summary(rows: list) -> None:
    """Median iteration time, SM clock and power of the first ten iterations and of the last quarter."""
    def med(values):
        values = sorted(values)
        return values[len(values) // 2]

    for label, part in (("first 10", rows[:10]), ("last quarter", rows[3 * len(rows) // 4:])):
        print(f"{label}: {len(part)} iterations, {med(r[1] for r in part) * 1e3:.2f} ms, "
              f"{med(r[2] for r in part)} MHz, {med(r[3] for r in part):.0f} W")


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sdpa_backend": "flash"}
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        results.update(run_all(sys.argv[2:]))
    name = "gpu_blocks_sustained.json" if "sustained" in results else "gpu_blocks.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(results, f, indent=1)


def run_all(argv: list) -> dict:
    """The sustained run (``argv``: its seconds) or every block of ``BLOCKS``."""
    results = {}
    if argv:  # gpu_blocks.py OUT SECONDS: the sustained run of the Llama 3 8B block
        results["sustained"] = sustained("llama3-8b", float(argv[0]))
    else:
        for block, (make, b, s, layers) in BLOCKS.items():
            results[block] = time_block(make, b, s, layers)
            print(block, results[block], flush=True)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--summary":  # the summary of a stored sustained run
        with open(sys.argv[2]) as f:
            summary(json.load(f)["sustained"]["rows"])
    else:
        main()
