"""Activation offloading (``training.activation_offload_layers``, Megatron-Core ``cpu_offloading``):
the memory it frees, the copies it adds to the step graph and the layouts it refuses."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.ir import ComputeTask, CopyTask
from simulator.workload import activations, memory

TINY = {"name": "tiny", "n_layers": 8, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
        "vocab_size": 32000}


def _scenario(n: int, **training) -> object:
    return scenario_from_dict({
        "name": "t", "model": TINY, "cluster": {"topology": "dgx-h100", "nodes": 1},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 16,
                     "activation_offload_layers": n, **training},
        "parallel": {"framework": "fsdp"}})


def test_offloaded_blocks_leave_one_on_the_gpu_and_the_rest_in_host_memory():
    # 8 blocks, 6 offloaded: 8 - 6 + 1 = 3 blocks' activations stay, 5 wait in host memory
    base, off = activations.activations(_scenario(0)), activations.activations(_scenario(6))
    per_block = base.per_layer
    assert off.per_layer == pytest.approx(per_block)
    assert off.layers == pytest.approx(3 * per_block)
    assert off.offloaded == pytest.approx(5 * per_block)
    assert memory.breakdown(_scenario(6)).offloaded_bytes == pytest.approx(5 * per_block)


def test_each_offloaded_block_copies_out_after_its_forward_and_back_before_its_backward():
    sc = _scenario(6)
    ctx = context_for(sc)
    tasks = build_step_graph(ctx).tasks
    copies = [t for t in tasks if isinstance(t, CopyTask) and t.kind == "activation_offload"]
    per_block = activations.activations(sc).per_layer
    # 6 blocks x 2 micro-batches (16 / (1 x 8)) x out and back, each one block's saved tensors
    assert len(copies) == 6 * ctx.n_micro * 2 and {c.nbytes for c in copies} == {per_block}
    by_id = {t.id: t for t in tasks}
    back = {(c.micro_batch, c.layer): c for c in copies if c.direction == "h2d"}
    out = {(c.micro_batch, c.layer): c for c in copies if c.direction == "d2h"}
    first, last = {}, {}  # a block's backward runs in pieces: the first waits, the last ends it
    for t in tasks:
        if isinstance(t, ComputeTask) and t.kind == "backward" and t.layer >= 0:
            first.setdefault((t.micro_batch, t.layer), t)
            last[(t.micro_batch, t.layer)] = t
    for (g, i), h2d in back.items():
        assert out[(g, i)].id in h2d.deps  # back only after it went out
        assert h2d.id in first[(g, i)].deps  # the block's backward waits for it
        if i + 2 < TINY["n_layers"]:  # prefetched one block ahead: after block i + 2's backward
            assert last[(g, i + 2)].id in h2d.deps
    assert all(by_id[d].direction == "d2h" for h in back.values() for d in h.deps if isinstance(by_id[d], CopyTask))
    fwd = {(t.micro_batch, t.layer): t for t in tasks if isinstance(t, ComputeTask) and t.kind == "forward"
           and t.layer >= 0}
    for (g, i), d2h in out.items():  # two buffers: block i + 2's forward waits for block i's copy out
        if i + 2 < TINY["n_layers"]:
            assert d2h.id in fwd[(g, i + 2)].deps


def test_offloading_costs_time_only_when_the_host_link_cannot_keep_up():
    assert simulate(_scenario(6)).step_time_s >= simulate(_scenario(0)).step_time_s


@pytest.mark.parametrize(("training", "parallel", "match"), [
    ({"activation_checkpointing": "full"}, {}, "recomputation"),
    ({}, {"pp": 2}, "pipeline"),
    ({}, {"framework": "deepspeed"}, "DeepSpeed"),
])
def test_refused_layouts_name_the_field(training, parallel, match):
    raw = {"name": "t", "model": TINY, "cluster": {"topology": "dgx-h100", "nodes": 1},
           "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 16,
                        "activation_offload_layers": 4, **training},
           "parallel": {"framework": "fsdp", **parallel}}
    with pytest.raises(InputError, match=match) as err:
        simulate(scenario_from_dict(raw))
    assert err.value.field == "training.activation_offload_layers"
