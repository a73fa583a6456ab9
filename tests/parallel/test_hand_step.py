"""A 2-GPU, 2-layer step whose time is computed here by hand from compute and α–β numbers."""

from __future__ import annotations

import pytest

from simulator.engine.intervals import exposed
from simulator.units import MiB
from tests.parallel.helpers import ctx, run

ALPHA, BW = 10e-6, 100e9  # fake network: t = α + f·S/B (see fakes.AlphaBeta)


def test_ddp_two_gpus_two_layers_by_hand():
    # Layers: 1e6 params each, fp32 grads (4 B). Forward 1 ms, backward 2 ms per layer, Adam 0.5 ms.
    # Buckets in ready order (layer 1 then layer 0): first 1 MiB = 262,144 params, ready after
    # bwd(layer 1); the rest 2e6 − 262,144 = 1,737,856 params (< 25 MiB) ready after bwd(layer 0).
    # Ring all-reduce on n=2: t = α + 2·(1/2)·S/B = α + S/B.
    b1 = ALPHA + 1 * MiB / BW
    b2 = ALPHA + 1_737_856 * 4 / BW
    # fwd L0 [0,1], fwd L1 [1,2], bwd L1 [2,4], bucket1 [4, 4+b1], bwd L0 [4,6], bucket2 [6, 6+b2],
    # optimizer waits for bucket2: [6+b2, 6.5+b2].
    step = 6.5e-3 + b2
    graph, trace = run(ctx(framework="ddp"))
    assert trace.end_s == pytest.approx(step, rel=1e-12)
    comm, compute = trace.intervals(category="comm"), trace.intervals(category="compute")
    assert exposed(comm, compute) == pytest.approx(b2, rel=1e-9)  # bucket 1 hides under bwd L0
    spans = {s.name: s for s in trace.spans}
    first = spans["allreduce grads@1.0 mb0"]
    assert (first.start_s, first.end_s) == pytest.approx((4e-3, 4e-3 + b1))


def test_zero3_two_gpus_two_layers_by_hand():
    # DeepSpeed stage 3, bf16: each layer all-gathered (2 B/param) in forward and backward and its
    # gradients reduce-scattered (2 B/param), n = 2 ⇒ AG/RS time α + (1/2)·S/B.
    # Prefetch depth 1: the gather of a unit may start once the unit two places earlier is done.
    s = 1e6 * 2
    ag = ALPHA + 0.5 * s / BW  # 20 µs
    # Forward: AG0 [0, ag], AG1 [ag, 2ag] (no dep: it is position 2 of E,0,1,H), fwd0 [ag, ag+1ms],
    # fwd1 [ag+1ms, ag+2ms]. Backward: H; AG(L1) may start after fwd... ; compute here:
    graph, trace = run(ctx(framework="deepspeed", zero_stage=3))
    t = {sp.name: sp for sp in trace.spans}
    assert t["allgather fwd 0 mb0"].start_s == 0.0
    assert t["fwd 0 mb0"].start_s == pytest.approx(ag)
    assert t["fwd 1 mb0"].end_s == pytest.approx(ag + 2e-3)
    # Backward gathers: bwd order H, 1, 0, E. AG(1) needs bwd(H) done? no: depth 1 ⇒ position 1
    # waits for position −1 (none); position 2 (layer 0) waits for position 0 (H). Both were issued
    # after the forward gathers and run at once: AG(1) [2ag, 3ag], AG(0) [3ag, 4ag] — all hidden
    # under the forward. bwd1 [ag+2ms, ag+4ms], RS1 [ag+4ms, ag+4ms+rs], bwd0 [ag+4ms, ag+6ms],
    # bwd0 [ag+4ms, ag+6ms]. reduce_bucket_size (5e8) holds both layers' 2e6 gradients: one
    # reduce-scatter of 4e6 B after bwd0, then the optimizer (0.5 ms).
    rs = ALPHA + 0.5 * 4e6 / BW
    assert t["bwd 1 mb0"].start_s == pytest.approx(ag + 2e-3)
    assert trace.end_s == pytest.approx(ag + 6e-3 + rs + 0.5e-3)
