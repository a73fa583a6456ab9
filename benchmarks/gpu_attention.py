"""Attention and host sections of ``benchmarks/gpu_kernels.py`` (see its docstring)."""

# ruff: noqa: B023  (every lambda is timed inside the loop iteration that binds its variables)
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from gpu_common import BF16, DEV, rand, section, timed


def _sdpa_row(impl: str, backend, b: int, heads: int, s: int, hd: int, causal: bool) -> dict:
    """Forward and backward TFLOP/s of SDPA pinned to ``backend`` (FLOPs as the FlashAttention benchmarks
    count them: forward ``4·b·h·s²·d``, halved when causal; backward 2.5x)."""
    from torch.nn.attention import sdpa_kernel
    q, k, v = (rand(b, heads, s, hd).requires_grad_() for _ in range(3))
    flop = 4 * b * heads * s * s * hd / (2 if causal else 1)
    with sdpa_kernel([backend]):
        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=10)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        go = rand(*o.shape)
        bwd = timed(lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True), reps=10)
    return {"impl": impl, "head_dim": hd, "causal": causal, "seq": s, "batch": b, "heads": heads,
            "fwd_TFLOPs": flop / fwd / 1e12, "bwd_TFLOPs": 2.5 * flop / bwd / 1e12}


@section("attention")
def attention():
    from torch.nn.attention import SDPBackend
    rows = []
    backends = {"fa2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for impl, backend in backends.items():
        for hd in (64, 128):
            for causal in (False, True):
                for s in (2048, 8192, 16384):
                    try:
                        rows.append(_sdpa_row(impl, backend, max(1, 32768 // s), 2048 // hd, s, hd, causal))
                    except Exception as e:  # noqa: BLE001 - a backend that refuses a shape is a row, not a failure
                        rows.append({"impl": impl, "head_dim": hd, "causal": causal, "seq": s, "error": repr(e)[:300]})
    return {"rows": rows}


@section("host")
def host():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import host_dispatch as hd
    out = {}
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as host_dispatch.py measures the CPU-only figures
    try:
        for name, (make, shape) in hd.BLOCKS.items():
            out[name] = {"cpu": hd.host_time(make, shape)}
        out["cpu_hook_per_param_s"] = hd.hook_time_per_param()
        torch.set_default_device(DEV)
        for name, (make, shape) in hd.BLOCKS.items():
            out[name]["cuda"] = hd.host_time(make, shape)
            torch.cuda.synchronize()
        out["cuda_hook_per_param_s"] = hd.hook_time_per_param()
    finally:
        torch.set_default_device("cpu")
        torch.set_num_threads(threads)
    return out


@section("sinks")
def sinks():
    """GPT-OSS attention (64 query / 8 KV heads of 64, learnable sinks), 4,096 tokens, batch 1: HF's
    eager path (repeat_kv, scores, sink column, softmax, drop it, ·V; HF also subtracts the row maximum
    in a pass of its own, left out here, so this is a lower bound) against SDPA flash without sinks."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, s, hq, hkv, d = 1, 4096, 64, 8, 64
    q = rand(b, hq, s, d).requires_grad_()
    k, v = (rand(b, hkv, s, d).requires_grad_() for _ in range(2))
    sink = rand(hq).float().requires_grad_()
    mask = torch.full((s, s), float("-inf"), device=DEV).triu(1).to(BF16)
    kk, vv = (t.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_() for t in (k, v))

    def eager():
        kk = k.repeat_interleave(hq // hkv, dim=1)
        vv = v.repeat_interleave(hq // hkv, dim=1)
        w = torch.matmul(q, kk.transpose(2, 3)) * d**-0.5 + mask
        sinks_ = sink.reshape(1, -1, 1, 1).expand(b, -1, s, 1).to(w.dtype)
        p = torch.softmax(torch.cat([w, sinks_], dim=-1).float(), dim=-1)[..., :-1].to(v.dtype)
        return torch.matmul(p, vv)

    def flash():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True)

    out = {}
    flop = 4 * b * hq * s * s * d / 2
    for name, fn in (("eager_sinks", eager), ("sdpa_flash_no_sink", flash)):
        fwd = timed(fn, reps=10)
        o = fn()
        go = rand(*o.shape)
        inputs = (q, k, v, sink) if name == "eager_sinks" else (q, kk, vv)
        bwd = timed(lambda: torch.autograd.grad(o, inputs, go, retain_graph=True), reps=10)
        out[name] = {"fwd_s": fwd, "bwd_s": bwd, "fwd_TFLOPs_causal": flop / fwd / 1e12,
                     "bwd_TFLOPs_causal": 2.5 * flop / bwd / 1e12}
    return out


@section("attention_short")
def attention_short():
    from torch.nn.attention import SDPBackend
    return {"rows": [_sdpa_row(impl, backend, 65536 // s, 16, s, 128, causal)
                     for impl, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
                     for causal in (False, True) for s in (512, 1024, 2048, 4096)]}
