"""How long one all-reduce query takes on a 1,024-GPU fat tree (128 x DGX H100), uncached and cached.

Run: ``python benchmarks/bench_collectives.py``. Prints build time, then for each fidelity and group
layout the first (uncached) and a repeated (cached) query time.
"""

from __future__ import annotations

import time

from simulator.collectives import CollectiveModel
from simulator.config.topology import load_topology
from simulator.network import build_cluster
from simulator.units import GiB


def main() -> None:
    t0 = time.perf_counter()
    cluster = build_cluster(load_topology("dgx-h100"), 128)
    print(f"build: {cluster.n_gpus} GPUs, {cluster.graph.number_of_edges()} edges in {time.perf_counter() - t0:.3f} s")
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
            repeats = 1000
            for _ in range(repeats):
                model.run("all_reduce", groups, GiB)
            t3 = time.perf_counter()
            for k in range(repeats):  # same shape, new sizes: the per-shape cost profile is reused
                model.run("all_reduce", groups, GiB + 4096 * (k + 1))
            t4 = time.perf_counter()
            print(f"{fidelity:>10} | {name:<26} | uncached {1e3 * (t2 - t1):8.1f} ms | cached "
                  f"{1e6 * (t3 - t2) / repeats:7.1f} us | new size {1e6 * (t4 - t3) / repeats:7.1f} us | "
                  f"{r.algorithm}/{r.protocol} busbw {r.busbw_GBps:.1f} GB/s")


if __name__ == "__main__":
    main()
