"""Activation offloading to host memory (``training.activation_offload_layers``) as copies on the PCIe /
NVLink-C2C streams of the step graph.

Megatron-Core's ``cpu_offloading`` runs each of the first ``n`` blocks under Transformer Engine's CPU
offload context (``get_cpu_offload_context``, ``AsyncDoubleBufferGroupOffloadHandler``): after a block's
forward, the tensors it saved for the backward are copied to pinned host memory on a side stream while
the next block computes, and the GPU copy is freed when the copy ends; the forward of block ``i + 2``
waits for block ``i``'s copy (two buffers). In the backward, block ``i``'s tensors are copied back while
block ``i + 1``'s backward runs (one block ahead), and block ``i``'s backward waits for them. Here:

* ``post_forward`` of an offloaded block issues a device-to-host copy of ``work.offload_bytes`` (the
  memory model's bytes one block saves per micro-batch) after the block's forward;
* ``pre_forward`` of block ``i`` waits for the copy of block ``i − 2``;
* ``pre_backward`` of an offloaded block issues its host-to-device copy after its own copy out and
  after the backward of block ``i + 2`` (so it runs beside block ``i + 1``'s), and the backward waits
  for it.

The copies take the host link's bandwidth (``engine.costing``: PCIe per GPU, or the NVLink-C2C share on
Grace superchips), so they are free when a block's compute outlasts its copy and exposed otherwise.
Memory: ``workload.activations`` keeps one offloaded block on the GPU and counts the rest in host memory.
"""

from __future__ import annotations

from typing import Any

from simulator.parallel.ir import GraphBuilder
from simulator.parallel.schedule import WrappedHooks


class OffloadHooks(WrappedHooks):
    """Framework hooks plus the activation copies of the first ``work.offload_layers`` blocks."""

    def __init__(self, inner: Any, ctx: Any) -> None:
        super().__init__(inner, ctx)
        self.n = ctx.work.offload_layers
        self.nbytes = ctx.work.offload_bytes
        self.out: dict[tuple[int, int], int | None] = {}  # (micro-batch, block) -> its copy out
        self.bwd: dict[tuple[int, int], int] = {}  # (micro-batch, block) -> its backward task

    def _offloaded(self, unit: Any) -> bool:
        return isinstance(unit, int) and unit < self.n

    def pre_forward(self, b: GraphBuilder, g: int, unit: Any):
        deps = list(self.inner.pre_forward(b, g, unit))
        if isinstance(unit, int) and self.out.get((g, unit - 2)) is not None:
            deps.append(self.out[(g, unit - 2)])
        return deps

    def post_forward(self, b: GraphBuilder, g: int, unit: Any, task: int) -> None:
        self.inner.post_forward(b, g, unit, task)
        if self._offloaded(unit):
            self.out[(g, unit)] = b.copy(f"offload activations {unit} mb{g}", "d2h", self.nbytes, deps=(task,),
                                         kind="activation_offload", micro_batch=g, layer=unit)

    def pre_backward(self, b: GraphBuilder, g: int, unit: Any):
        deps = list(self.inner.pre_backward(b, g, unit))
        if self._offloaded(unit):
            after = (self.out.get((g, unit)), self.bwd.get((g, unit + 2)))
            back = b.copy(f"reload activations {unit} mb{g}", "h2d", self.nbytes,
                          deps=tuple(d for d in after if d is not None), kind="activation_offload",
                          micro_batch=g, layer=unit)
            deps.append(back)
        return deps

    def post_backward(self, b: GraphBuilder, g: int, unit: Any, task: int) -> None:
        self.inner.post_backward(b, g, unit, task)
        if isinstance(unit, int):
            self.bwd[(g, unit)] = task


def wrap_hooks(make_hooks):
    """``make_hooks`` whose hooks also offload activations (identity without offloading)."""

    def make(ctx):
        hooks = make_hooks(ctx)
        return OffloadHooks(hooks, ctx) if getattr(ctx.work, "offload_layers", 0) else hooks

    return make
