"""The task IR: what one training step does on one representative rank, as plain data.

A ``StepGraph`` lists tasks **in the order the framework's CPU thread issues them**. Each task runs
on one named stream; a stream executes its tasks strictly in that order (CUDA stream FIFO
semantics), and ``deps`` are cross-stream events (``cudaStreamWaitEvent``). So "DDP launches
buckets strictly in order" or "FSDP BACKWARD_PRE issues the next all-gather before the current
reduce-scatter" is expressed by the order of the tasks, and "backward of layer i needs its gathered
parameters" by a dependency. Nothing here knows hardware: durations come later from the compute
model, the collective model and PCIe/CPU rates (``simulator.engine.costing``).

``device`` names the representative GPU a task runs on: one per pipeline stage (0 without a
pipeline); streams are per device.

Collective sizes follow nccl-tests: ``nbytes`` is the buffer for all_reduce/broadcast/reduce and
the full concatenated size for all_gather/reduce_scatter (formulas.md §3.2).

Tasks are slotted dataclasses, not frozen ones: a frozen dataclass's ``__init__`` sets each field
through ``object.__setattr__`` and cost five times more, on graphs of 10⁴-10⁵ tasks. Nothing
mutates a task after ``GraphBuilder`` appends it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

CommKind = Literal["param_allgather", "grad_reduce", "post_step_gather", "tp", "pp", "cp", "ep"]
ComputeKind = Literal["forward", "backward", "recompute", "optimizer"]
CollectiveOp = Literal["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"]

#: Stream names. One compute stream per GPU; one NCCL stream per process group (collectives of one
#: group serialise on the GPU: formulas.md §4.3); PCIe copy engines per direction; the host CPU.
COMPUTE = "compute"
COMM = "comm"
COMM_REPLICA = "comm_replica"
P2P = "p2p"
#: Megatron TP communication overlap: TP collectives off the compute stream.
TP_COMM = "comm_tp"
D2H = "pcie_d2h"
H2D = "pcie_h2d"
CPU = "cpu"


@dataclass(slots=True)
class ComputeTask:
    """Kernels on the GPU compute stream. ``ops`` are workload ``Op`` objects (FLOPs, bytes, shape)."""

    id: int
    name: str
    kind: ComputeKind
    ops: tuple[Any, ...]
    stream: str = COMPUTE
    deps: tuple[int, ...] = ()
    micro_batch: int = -1
    layer: int = -1
    device: int = 0


@dataclass(slots=True)
class CollectiveTask:
    """``count`` back-to-back calls of one collective of ``nbytes`` each over mesh group ``group``.

    ``group`` names a kind of group of the rank mesh ("dp", "dp_shard", "dp_replicate", "tp"); the
    collective model evaluates it with every concurrent copy of that group placed on the cluster.
    """

    id: int
    name: str
    kind: CommKind
    op: CollectiveOp
    group: str
    nbytes: float
    count: int = 1
    stream: str = COMM
    deps: tuple[int, ...] = ()
    micro_batch: int = -1
    layer: int = -1
    device: int = 0
    #: Framework host time per call on the stream before the collective (e.g. DeepSpeed ZeRO-3's
    #: partitioned-parameter bookkeeping per fetch), seconds.
    host_s: float = 0.0
    #: Back-to-back calls of different sizes issued as one task: ((label, nbytes), ...), ``nbytes``
    #: their sum (ZeRO-3's per-module gathers of one block). Each call is priced on its own and pays
    #: ``host_s``; the Chrome trace shows each as a sub-span.
    parts: tuple[tuple[str, float], ...] = ()
    #: Fraction of the GPU's SMs the collective's kernels hold while it runs, when the framework
    #: sizes them itself (Transformer Engine userbuffers: ``num_sm`` of the GPU's SMs,
    #: ``simulator.parallel.tp_overlap``): compute runs on the rest. ``None``: an NCCL collective,
    #: whose cost to overlapped compute is ``compute_slowdown_during_comm`` (``engine.executor``).
    sm_share: float | None = None


@dataclass(slots=True)
class CopyTask:
    """A host↔device copy over PCIe (offload): ``direction`` is "d2h" or "h2d"; ``source`` "nvme" for
    an upload read from NVMe through the host (ZeRO-Infinity ``offload_param: nvme``), at the smaller of
    the PCIe and the GPU's share of NVMe bandwidth."""

    id: int
    name: str
    direction: Literal["d2h", "h2d"]
    nbytes: float
    stream: str
    deps: tuple[int, ...] = ()
    kind: str = "offload"
    micro_batch: int = -1
    layer: int = -1
    device: int = 0
    source: Literal["host", "nvme"] = "host"


@dataclass(slots=True)
class HostTask:
    """Work on the host CPU: the optimizer step over ``n_params`` offloaded parameters (CPU Adam),
    streaming ``nvme_bytes`` of optimizer state from/to NVMe (ZeRO-Infinity) when offloaded there."""

    id: int
    name: str
    n_params: float
    nvme_bytes: float = 0.0
    stream: str = CPU
    deps: tuple[int, ...] = ()
    kind: str = "optimizer"
    micro_batch: int = -1
    layer: int = -1
    device: int = 0


Task = ComputeTask | CollectiveTask | CopyTask | HostTask


@dataclass(frozen=True)
class StepGraph:
    """One optimizer step of one representative rank: tasks in CPU issue order plus metadata."""

    tasks: tuple[Task, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def streams(self) -> dict[tuple[int, str], list[Task]]:
        """Tasks per (device, stream), in issue order. Device = pipeline stage's representative GPU."""
        out: dict[tuple[int, str], list[Task]] = {}
        for task in self.tasks:
            key = (task.device, task.stream)
            tasks = out.get(key)
            if tasks is None:
                tasks = out[key] = []
            tasks.append(task)
        return out

    def collectives(self) -> list[CollectiveTask]:
        return [t for t in self.tasks if isinstance(t, CollectiveTask)]

    def to_json(self) -> str:
        """Dump for debugging; ops are shown by name only."""

        def row(t: Task) -> dict[str, Any]:
            d = asdict(t)
            d["type"] = type(t).__name__
            if "ops" in d:
                d["ops"] = [getattr(op, "name", str(op)) for op in t.ops]  # type: ignore[union-attr]
            return d

        return json.dumps({"meta": self.meta, "tasks": [row(t) for t in self.tasks]}, indent=1, default=str)


class GraphBuilder:
    """Appends tasks in issue order and hands out ids; ``None`` deps are dropped (absent producer).

    ``device`` is the representative GPU (pipeline stage) new tasks go to unless given explicitly.
    """

    def __init__(self) -> None:
        self._tasks: list[Task] = []
        self.device = 0

    @property
    def tasks(self) -> list[Task]:
        """The tasks issued so far (``simulator.parallel.replicate`` appends copies to it)."""
        return self._tasks

    def _deps(self, deps: tuple[int | None, ...] | list[int | None]) -> tuple[int, ...]:
        n = len(deps)  # the common cases first: no set or sort (long pipelines issue 10⁵-10⁶ tasks)
        if n == 0:
            return ()
        if n == 1:
            (d,) = deps
            return () if d is None else (d,)
        return tuple(sorted({d for d in deps if d is not None}))

    # Explicit keywords and positional construction: these run once per task (10⁴-10⁵ per step),
    # and ``**kw`` forwarding cost more than the task itself. ``device=None``: the builder's device.

    def compute(self, name: str, kind: ComputeKind, ops: tuple, deps=(), stream: str = COMPUTE,
                micro_batch: int = -1, layer: int = -1, device: int | None = None) -> int:
        tasks = self._tasks
        tid = len(tasks)
        tasks.append(ComputeTask(tid, name, kind, ops, stream, self._deps(deps) if deps else (), micro_batch, layer,
                                 self.device if device is None else device))
        return tid

    def collective(self, name: str, kind: CommKind, op: CollectiveOp, group: str, nbytes: float, deps=(),
                   count: int = 1, stream: str = COMM, micro_batch: int = -1, layer: int = -1,
                   device: int | None = None, host_s: float = 0.0, parts: tuple = (),
                   sm_share: float | None = None) -> int | None:
        """Append a collective; a zero-byte one is skipped and returns ``None``."""
        if nbytes <= 0 or count <= 0:
            return None
        tasks = self._tasks
        tid = len(tasks)
        tasks.append(CollectiveTask(tid, name, kind, op, group, float(nbytes), count, stream,
                                    self._deps(deps) if deps else (), micro_batch, layer,
                                    self.device if device is None else device, host_s, parts, sm_share))
        return tid

    def copy(self, name: str, direction: Literal["d2h", "h2d"], nbytes: float, deps=(), kind: str = "offload",
             micro_batch: int = -1, layer: int = -1, device: int | None = None,
             source: Literal["host", "nvme"] = "host") -> int | None:
        if nbytes <= 0:
            return None
        tid = len(self._tasks)
        stream = D2H if direction == "d2h" else H2D
        self._tasks.append(CopyTask(tid, name, direction, float(nbytes), stream, self._deps(deps), kind, micro_batch,
                                    layer, self.device if device is None else device, source))
        return tid

    def host(self, name: str, n_params: float, deps=(), nvme_bytes: float = 0.0, stream: str = CPU,
             kind: str = "optimizer", micro_batch: int = -1, layer: int = -1, device: int | None = None) -> int:
        tid = len(self._tasks)
        self._tasks.append(HostTask(tid, name, float(n_params), nvme_bytes, stream, self._deps(deps), kind,
                                    micro_batch, layer, self.device if device is None else device))
        return tid

    def build(self, **meta: Any) -> StepGraph:
        return StepGraph(tuple(self._tasks), dict(meta))
