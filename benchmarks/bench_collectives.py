"""Network-layer speed: cluster build time and collective query time, uncached and cached.

Prints (issue 3 / issue 4 figures):

* ``build_cluster`` for 2,048 and 16,384 H100s (DGX H100, rail-optimised fat tree);
* one all-reduce query on 1,024 GPUs (128 x DGX H100) per fidelity and group layout: the first
  (uncached) query, a repeated (cached) one, and a new message size of the same shape (the
  per-shape cost profile is reused);
* the ZeRO-3 pair on 16,384 GPUs: a ring all-gather and reduce-scatter over all GPUs, uncached.

Run: ``python benchmarks/bench_collectives.py [--quick]`` (``--quick``: fewer repeats, for CI).
"""

from __future__ import annotations

import argparse
import time

from simulator.collectives import CollectiveModel
from simulator.config.topology import load_topology
from simulator.network import build_cluster
from simulator.units import GiB


def best_build(topo, nodes: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        build_cluster(topo, nodes)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (CI smoke run)")
    args = parser.parse_args()
    repeats = 50 if args.quick else 1000
    topo = load_topology("dgx-h100")
    for nodes in (256, 2048):
        print(f"build {8 * nodes:6d} GPUs: {1e3 * best_build(topo, nodes, 3):7.1f} ms (best of 3)")
    cluster = build_cluster(topo, 128)
    layouts = {
        "1 x 1024-GPU group": [list(range(1024))],
        "8 DP groups of 128 (TP=8)": [list(range(j, 1024, 8)) for j in range(8)],
        "128 TP groups of 8": [list(range(8 * k, 8 * k + 8)) for k in range(128)],
    }
    for fidelity in ("analytical", "flow"):
        model = CollectiveModel(cluster, fidelity=fidelity)
        for name, groups in layouts.items():
            t1 = time.perf_counter()
            r = model.run("all_reduce", groups, GiB)
            t2 = time.perf_counter()
            for _ in range(repeats):
                model.run("all_reduce", groups, GiB)
            t3 = time.perf_counter()
            for k in range(repeats):  # same shape, new sizes: the per-shape cost profile is reused
                model.run("all_reduce", groups, GiB + 4096 * (k + 1))
            t4 = time.perf_counter()
            print(f"{fidelity:>10} | {name:<26} | uncached {1e3 * (t2 - t1):8.1f} ms | cached "
                  f"{1e6 * (t3 - t2) / repeats:7.1f} us | new size {1e6 * (t4 - t3) / repeats:7.1f} us | "
                  f"{r.algorithm}/{r.protocol} busbw {r.busbw_GBps:.1f} GB/s")
    big = build_cluster(topo, 2048)
    model = CollectiveModel(big)
    world = [list(range(big.n_gpus))]
    for op in ("all_gather", "reduce_scatter"):
        t0 = time.perf_counter()
        r = model.run(op, world, GiB)
        print(f"analytical | 16384 GPUs {op:<15} | uncached {1e3 * (time.perf_counter() - t0):8.1f} ms | "
              f"{r.algorithm}/{r.protocol} busbw {r.busbw_GBps:.1f} GB/s")


if __name__ == "__main__":
    main()
