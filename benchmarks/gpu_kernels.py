"""Kernel microbenchmarks on one NVIDIA GPU: the measurements behind dtsim's kernel-level constants.

Measures, with PyTorch on the GPU (CUDA events; medians, but the minimum of repeats for ``launch`` and
``stream_gemm``; never on zeros):

* ``ceilings``: a large BF16 GEMM (8,192³) and a device-to-device copy (bytes read + written);
* ``mamf``: the maximum achievable matmul rate, BF16 and FP8 (``torch._scaled_mm``, per-tensor scales),
  over a sweep of large shapes (Bekman's MAMF method, hardware.md §4 [S1]);
* ``launch``: the GPU floor of a tiny kernel issued back to back (the host held off by a sleep kernel
  queued first, so the GPU never waits for it) and inside a CUDA graph; the host's eager dispatch
  per op, without and with autograd recording;
* ``gemm``: BF16 transformer GEMMs in their three layouts (forward ``x·Wᵀ``, input gradient ``g·W``,
  weight gradient ``gᵀ·x``) over hidden sizes, token counts and tensor-parallel splits, against which
  ``simulator.hardware.kernels.gemm_shape_factor`` is checked (``tests/hardware/test_kernels_measured.py``);
* ``fp8``: the same forward GEMMs in FP8 (per-tensor and row-wise scales), and an eager per-tensor cast
  of the input (``to_fp8``: amax, scale and cast as about seven unfused PyTorch kernels through float32,
  an upper bound on a recipe's fused cast, not its cost);
* ``attention``: PyTorch SDPA's flash (FlashAttention-2), cuDNN and memory-efficient backends, head
  dims 64 and 128, causal or not, forward and backward, FLOPs counted as the FlashAttention
  benchmarks do (forward ``4·b·h·s²·d``, halved when causal; backward 2.5x);
* ``grouped``: expert GEMMs of equal total work split ``G`` ways, as one ``torch._grouped_mm`` kernel
  and as ``G`` separate cuBLAS GEMMs round-robin over 4 streams (Transformer Engine's GroupedLinear
  path), BF16 and FP8; the slope over ``G`` is the fixed cost per GEMM;
* ``host``: ``benchmarks/host_dispatch.py``'s eager blocks timed on CPU tensors and on tiny CUDA
  tensors: CUDA time over the CPU-only figures of ``simulator/workload/host.py`` is this host's
  ``host_dispatch_scale`` (``efficiency.yaml``); over the same machine's CPU run, the CUDA share alone;
* ``sinks``: GPT-OSS attention with learnable sinks as Hugging Face's eager path runs it (without its
  explicit row-max subtraction, so a lower bound), against SDPA's flash kernel without sinks;
* ``stream_gemm``: GEMMs back to back on one stream (as a training step issues them) behind a sleep
  kernel: GPU seconds per GEMM, the data the fixed GEMM time is fitted on;
* ``fast_accum``: FP8 forward GEMMs with and without Hopper's fast accumulation;
* ``attention_short``: the flash and cuDNN backends at 512-4,096 tokens (the main-loop fill).

Needs PyTorch with CUDA (not a dtsim dependency). ``python benchmarks/gpu_kernels.py OUT_DIR`` writes
``OUT_DIR/gpu_kernels.json`` (``python benchmarks/gpu_kernels.py OUT_DIR SECTION...`` runs only those
sections) after every section (a section that fails records its error and the
rest still run) and prints a summary; about 1.5 minutes on one H200. Its three runs of 4 December 2026 are
``benchmarks/results/h200_kernels_2026-12-04*.json`` (the second: ``device launch stream_gemm fast_accum
attention_short host``; the third: every section), which ``tests/hardware/test_kernels_measured.py``
checks the model against.
"""

# ruff: noqa: B023  (every lambda is timed inside the loop iteration that binds its variables)
from __future__ import annotations

import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_attention import attention, attention_short, host, sinks  # noqa: E402
from gpu_common import BF16, DEV, OUT, RESULTS, captured, queued, rand, reps_for, section, timed, to_fp8  # noqa: E402


@section("device")
def device_info():
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "sms": p.multi_processor_count, "memory_bytes": p.total_memory,
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "cc": f"{p.major}.{p.minor}"}


@section("ceilings")
def ceilings():
    a, b = rand(8192, 8192), rand(8192, 8192)
    t = timed(lambda: a @ b, reps=20)
    n = 1 << 30
    x, y = torch.empty(n, dtype=torch.uint8, device=DEV), torch.empty(n, dtype=torch.uint8, device=DEV)
    x.random_()
    tc = timed(lambda: y.copy_(x), reps=20, flush=False)
    return {"gemm_8192_bf16_TFLOPs": 2 * 8192**3 / t / 1e12, "copy_GBps_read_plus_write": 2 * n / tc / 1e9}


@section("mamf")
def mamf():
    out = {}
    dims = [4096, 6144, 8192, 10240, 12288, 16384]
    best = (0.0, None)
    for m in dims:
        for k in (4096, 8192, 16384):
            a, b = rand(m, k), rand(k, 8192)
            flop = 2 * m * k * 8192
            r = flop / timed(lambda: a @ b, reps=reps_for(flop)) / 1e12
            best = max(best, (r, (m, 8192, k)))
    out["bf16"] = {"TFLOPs": best[0], "shape_mnk": best[1]}
    best = (0.0, None)
    for m in dims:
        for k in (4096, 8192, 16384):
            a, sa = to_fp8(rand(m, k))
            w, sb = to_fp8(rand(8192, k))
            flop = 2 * m * k * 8192
            f = lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=BF16)  # noqa: E731
            r = flop / timed(f, reps=reps_for(flop)) / 1e12
            best = max(best, (r, (m, 8192, k)))
    out["fp8_tensorwise"] = {"TFLOPs": best[0], "shape_mnk": best[1]}
    return out


@section("launch")
def launch():
    out = {}
    x = torch.zeros(16, device=DEV)
    n = 400
    torch.cuda.synchronize()

    def gpu_floor(op) -> float:
        for _ in range(50):
            op()
        torch.cuda.synchronize()
        return queued(lambda _: op(), n, repeats=5, sleep_cycles=50_000_000)  # ~25 ms asleep

    def graph_floor(op) -> float:
        def ops():
            for _ in range(n):
                op()
        return timed(captured(ops), reps=10, flush=False) / n

    def dispatch(op, k: int = 2000) -> float:
        best = math.inf
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(k):
                op()
            best = min(best, (time.perf_counter() - t0) / k)
        torch.cuda.synchronize()
        return best

    sm = rand(64, 64)
    ops = {"add_16": lambda: x.add_(1.0), "mm_64": lambda: torch.mm(sm, sm),
           "add_4M": (lambda y: (lambda: y.add_(1.0)))(torch.zeros(1 << 22, device=DEV, dtype=BF16))}
    for name, op in ops.items():
        out[name] = {"gpu_floor_s": gpu_floor(op), "graph_floor_s": graph_floor(op), "host_s": dispatch(op)}
    w = torch.randn(16, device=DEV, requires_grad=True)
    out["mul_autograd_host_s"] = dispatch(lambda: x * w)
    leaf = rand(64, 64).requires_grad_()
    out["linear_autograd_host_s"] = dispatch(lambda: F.linear(sm, leaf))
    return out


LINEARS = {"qkv": (1, 3), "proj": (1, 1), "fc1": (1, 4), "fc2": (4, 1)}


@section("gemm")
def gemm():
    rows = []
    for d in (1024, 2048, 4096, 8192):
        for tokens in (1024, 4096, 16384):
            for tp in (1, 8):
                for name, (fi, fo) in LINEARS.items():
                    n_in, n_out = d * fi, d * fo
                    if name in ("qkv", "fc1"):
                        n_out //= tp
                    else:
                        n_in //= tp
                    x, w, g = rand(tokens, n_in), rand(n_out, n_in), rand(tokens, n_out)
                    flop = 2 * tokens * n_in * n_out
                    r = reps_for(flop)
                    t_fwd = timed(lambda: F.linear(x, w), reps=r)
                    t_dgrad = timed(lambda: g @ w, reps=r)
                    t_wgrad = timed(lambda: g.t() @ x, reps=r)
                    rows.append({"d": d, "tokens": tokens, "tp": tp, "linear": name, "n_in": n_in, "n_out": n_out,
                                 "flop": flop, "fwd_s": t_fwd, "dgrad_s": t_dgrad, "wgrad_s": t_wgrad})
    squares = []
    for s in (256, 512, 1024, 2048, 4096, 8192):
        a, b = rand(s, s), rand(s, s)
        squares.append({"mnk": s, "s": timed(lambda: a @ b, reps=reps_for(2 * s**3))})
    return {"linears": rows, "squares": squares}


@section("fp8")
def fp8():
    rows = []
    for d in (2048, 4096, 8192):
        for tokens in (4096, 16384):
            for name, (fi, fo) in LINEARS.items():
                n_in, n_out = d * fi, d * fo
                x, w = rand(tokens, n_in), rand(n_out, n_in)
                xq, sx = to_fp8(x)
                wq, sw = to_fp8(w)
                flop = 2 * tokens * n_in * n_out
                r = reps_for(flop)
                t_bf16 = timed(lambda: F.linear(x, w), reps=r)
                t_t = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=BF16), reps=r)
                sxr = torch.rand(tokens, 1, device=DEV) + 0.5
                swr = torch.rand(1, n_out, device=DEV) + 0.5
                try:
                    t_r = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=sxr, scale_b=swr, out_dtype=BF16), reps=r)
                except Exception as e:  # noqa: BLE001
                    t_r = repr(e)
                # what a per-tensor recipe adds per operand: amax (one read) and scaled cast (read + write)
                t_cast = timed(lambda: to_fp8(x), reps=10)
                t_cast_t = timed(lambda: to_fp8(x)[0].t().contiguous(), reps=10)
                rows.append({"d": d, "tokens": tokens, "linear": name, "n_in": n_in, "n_out": n_out, "flop": flop,
                             "bf16_s": t_bf16, "fp8_tensorwise_s": t_t, "fp8_rowwise_s": t_r,
                             "cast_input_s": t_cast, "cast_and_transpose_input_s": t_cast_t,
                             "input_bytes_bf16": 2 * tokens * n_in})
    return {"linears": rows}


@section("grouped")
def grouped():
    rows = []
    total, k = 32768, 2048
    streams = [torch.cuda.Stream() for _ in range(4)]

    def multi_stream(chunks, ws, mm):
        main = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(main)
        for i, (c, w) in enumerate(zip(chunks, ws, strict=True)):
            with torch.cuda.stream(streams[i % 4]):
                mm(c, w)
        for s in streams:
            main.wait_stream(s)

    for n in (768, 1536):
        for groups in (4, 8, 16, 32, 64):
            m = total // groups
            x = rand(total, k)
            w = rand(groups, n, k)
            flop = 2 * total * n * k
            row = {"n": n, "k": k, "groups": groups, "m_per_group": m, "flop": flop}
            chunks = list(x.split(m))
            bf = lambda c, wi: F.linear(c, wi)  # noqa: E731
            fn = lambda: multi_stream(chunks, list(w), bf)  # noqa: E731
            row["bf16_multistream_eager_s"] = timed(fn, reps=10)
            row["bf16_multistream_graph_s"] = timed(captured(fn), reps=10)
            offs = torch.arange(m, total + 1, m, device=DEV, dtype=torch.int32)
            try:
                row["bf16_grouped_mm_s"] = timed(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs), reps=10)
            except Exception as e:  # noqa: BLE001
                row["bf16_grouped_mm_s"] = repr(e)[:300]
            xq, sx = to_fp8(x)
            wq = [to_fp8(wi) for wi in w]
            cq = list(xq.split(m))
            f8 = lambda c, wi: torch._scaled_mm(c, wi[0].t(), scale_a=sx, scale_b=wi[1], out_dtype=BF16)  # noqa: E731
            fn8 = lambda: multi_stream(cq, wq, f8)  # noqa: E731
            row["fp8_multistream_eager_s"] = timed(fn8, reps=10)
            row["fp8_multistream_graph_s"] = timed(captured(fn8), reps=10)
            row["bf16_single_gemm_s"] = timed(lambda: F.linear(x, w[0]), reps=10)
            rows.append(row)
    return {"rows": rows}


@section("stream_gemm")
def stream_gemm():
    """GEMMs back to back on one stream, as a training step issues them: ``n`` of one shape (8 operand sets
    in rotation) queued behind a sleep kernel so the host never starves the GPU; GPU seconds per GEMM."""
    n = 64
    rows = []
    shapes = [(s, s, s) for s in (128, 256, 512, 1024, 2048, 4096)]
    for d, tokens in ((1024, 1024), (1024, 4096), (2048, 1024), (2048, 4096), (4096, 4096)):
        for name, (fi, fo) in LINEARS.items():
            n_in, n_out = d * fi, d * fo
            if name in ("qkv", "fc1"):
                n_out //= 8
            else:
                n_in //= 8
            shapes.append((tokens, n_out, n_in))
    for m, nn, k in shapes:
        sets = [(rand(m, k), rand(nn, k)) for _ in range(8)]
        for a, b in sets:
            F.linear(a, b)
        torch.cuda.synchronize()
        best = queued(lambda i: F.linear(*sets[i % 8]), n, repeats=3, sleep_cycles=20_000_000)
        rows.append({"m": m, "n": nn, "k": k, "flop": 2 * m * nn * k, "s_per_gemm": best})
    return {"rows": rows, "n": n}


@section("fast_accum")
def fast_accum():
    rows = []
    for d, tokens in ((4096, 4096), (4096, 16384), (8192, 4096), (8192, 16384)):
        for name, (fi, fo) in LINEARS.items():
            n_in, n_out = d * fi, d * fo
            xq, sx = to_fp8(rand(tokens, n_in))
            wq, sw = to_fp8(rand(n_out, n_in))
            flop = 2 * tokens * n_in * n_out
            t = {acc: timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=BF16,
                                                      use_fast_accum=acc), reps=reps_for(flop))
                 for acc in (False, True)}
            rows.append({"d": d, "tokens": tokens, "linear": name, "flop": flop, "precise_s": t[False],
                         "fast_s": t[True]})
    return {"rows": rows}


def summary() -> None:
    r = RESULTS
    print(json.dumps({k: r[k] for k in ("device", "ceilings", "mamf") if k in r}, indent=None))
    if "launch" in r and "error" not in r["launch"]:
        print("launch", json.dumps(r["launch"]))
    if "attention" in r and "rows" in r["attention"]:
        for row in r["attention"]["rows"]:
            if "error" in row:
                print("attn", row["impl"], row["head_dim"], row["causal"], row["seq"], "ERR", row["error"][:80])
            else:
                print(f"attn {row['impl']:9} hd{row['head_dim']} causal={row['causal']!s:5} s={row['seq']:6} "
                      f"fwd {row['fwd_TFLOPs']:.0f} bwd {row['bwd_TFLOPs']:.0f}")
    if "grouped" in r and "rows" in r["grouped"]:
        for row in r["grouped"]["rows"]:
            print("grouped", {k: (round(v * 1e6, 1) if isinstance(v, float) else v) for k, v in row.items()})
    if "host" in r:
        print("host", json.dumps(r["host"]))
    if "sinks" in r:
        print("sinks", json.dumps(r["sinks"]))
    for key in ("stream_gemm", "fast_accum", "attention_short"):
        for row in r.get(key, {}).get("rows", []):
            print(key, row)
    print("seconds", r.get("_seconds"))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    every = {"device": device_info, "ceilings": ceilings, "launch": launch, "gemm": gemm, "grouped": grouped,
             "attention": attention, "fp8": fp8, "host": host, "mamf": mamf, "sinks": sinks,
             "stream_gemm": stream_gemm, "fast_accum": fast_accum, "attention_short": attention_short}
    for name in sys.argv[2:] or every:
        every[name]()
    summary()
