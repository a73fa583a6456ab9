"""The loss kernel's HBM traffic and kernels per implementation (simulator.workload.loss), counted by
hand from each implementation's passes over the logits."""

import pytest

from simulator.workload import loss, ops

N = 1_000_000  # logit elements


@pytest.mark.parametrize(("kind", "fwd", "bwd", "fwd_k", "bwd_k"), [
    # Megatron-Core fused: upcast+max (2 read, 4 write), exp in place (4 + 4), sum (4), divide in
    # place (4 + 4); backward: scale in place (4 + 4), cast down (4 read, 2 write)
    ("fused", 2 + 4 + 8 + 4 + 8, 8 + 4 + 2, 6, 3),
    # PyTorch F.cross_entropy on .float(): upcast (2 + 4), log_softmax 3 fp32 reads + 1 write;
    # backward: dense fp32 NLL gradient (4), softmax backward 3 reads + 1 write, cast down (4 + 2)
    ("eager", 2 + 4 + 16, 4 + 16 + 4 + 2, 3, 4),
    # the same chain on bf16: log_softmax 3 reads + 1 write; backward fill + 3 reads + 1 write
    ("eager_no_upcast", 4 * 2, 5 * 2, 2, 3),
    # Inductor: two reads forward; backward reads the logits and writes their gradient
    ("compiled", 2 * 2, 2 * 2, 2, 1),
    # flash-attn's kernel: one read forward; backward read + write
    ("flash", 2, 2 * 2, 1, 1),
    # Transformer Engine's Triton loss: online_softmax_kernel reads each row once, the loss kernel reads
    # three fp32 statistics per row (not per logit); backward reads the logits, writes the gradient in place
    ("te", 2, 2 * 2, 2, 1),
])
def test_cross_entropy_traffic_per_kind(kind, fwd, bwd, fwd_k, bwd_k):
    op = loss.cross_entropy_op(kind, N, 2)
    (back,) = ops.backward_ops([op])
    assert op.bytes == fwd * N and op.launches == fwd_k
    assert back.bytes == bwd * N and back.launches == bwd_k


def test_head_ops_take_the_resolved_kind(llama3_8b):
    b, s, tp, pb = 1, 2048, 1, 2
    head = {op.name: op for op in ops.head_ops(llama3_8b, b, s, tp, pb, cross_entropy="flash")}
    assert head["cross_entropy"].bytes == 2 * b * s * 128256  # one 16-bit read per logit
