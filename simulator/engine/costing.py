"""Resolve every task of a ``StepGraph`` to a duration: compute model, collective model, PCIe, CPU.

Costs are memoised per distinct compute op tuple and per distinct collective (operation, group,
bytes, count, host time): tasks that share one get the same (read-only) ``TaskCost``.

Collectives are evaluated by the network layer for the real placed group together with every
concurrent copy of it (``RankMesh.groups(kind)``), and cached by (operation, group kind, bytes), so
the cost of a step grows with layers × micro-batches × buckets, not with the GPU count
(ARCHITECTURE.md §1.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from simulator.engine.executor import TaskCost
from simulator.parallel.ir import CollectiveTask, ComputeTask, CopyTask, HostTask, StepGraph
from simulator.parallel.mesh import RankMesh

_size = itemgetter(1)  # of a (label, bytes) part

#: Collective prices per collective model, by (mesh, group kind, operation, bytes): a model's results
#: depend on nothing else (``Costing._price``). Weakly keyed: they go with the model (the process's
#: models live in ``simulator.model_cache``, at most 8).
_PRICES: WeakKeyDictionary = WeakKeyDictionary()



class PartRows(Sequence):
    """The trace rows of a task of back-to-back calls: ``{"name", "bytes", "time_s"}`` per call, made
    when read (the Chrome trace reads them; a step has thousands of such tasks and seldom a trace).
    Compares equal to the list of those rows."""

    __slots__ = ("parts", "times")

    def __init__(self, parts: tuple[tuple[str, float], ...], times: list[float]) -> None:
        self.parts, self.times = parts, times

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        label, nbytes = self.parts[i]
        return {"name": label, "bytes": nbytes, "time_s": self.times[i]}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartRows | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics, as the list it stands for

    def __repr__(self) -> str:
        return repr(list(self))


class ComputeModel(Protocol):
    def time(self, ops: tuple) -> float: ...


class CollectiveModel(Protocol):
    """``run(op, groups, nbytes)`` returns an object with ``time_s`` (and optionally ``algorithm``,
    ``busbw_GBps``, ``bytes_on_wire_per_rank``)."""

    def run(self, op: str, groups: Any, nbytes: float) -> Any: ...


class Costing:
    """Durations of tasks on one GPU. ``pcie_Bps`` per direction per GPU; ``cpu_adam_params_per_s``
    and ``nvme_Bps`` are this GPU's shares of the host's CPU-Adam rate and NVMe bandwidth."""

    def __init__(self, compute: ComputeModel, collectives: CollectiveModel, mesh: RankMesh,
                 pcie_Bps: float, cpu_adam_params_per_s: float, nvme_Bps: float = float("inf")) -> None:
        self.compute = compute
        self.collectives = collectives
        self.mesh = mesh
        self.pcie_Bps = pcie_Bps
        self.cpu_adam = cpu_adam_params_per_s
        self.nvme_Bps = nvme_Bps
        self._groups: dict[str, list[list[int]]] = {}
        self._coll: dict[tuple[str, str, float], tuple[float, dict[str, Any]]] = {}
        self._ops: dict[int, tuple[tuple, TaskCost]] = {}
        self._task_costs: dict[tuple, TaskCost] = {}
        self._parts_cache: dict[tuple, tuple[float, list[float], dict[str, Any]]] = {}
        self._last: tuple[tuple, list[TaskCost]] = ((), [])

    def _collective(self, task: CollectiveTask) -> TaskCost:
        if task.parts:
            return self._parts(task)
        key = (task.op, task.group, task.nbytes)
        hit = self._coll.get(key)
        if hit is None:
            price = self._price(task.op, task.group, task.nbytes)
            args = {
                "op": task.op,
                "group": task.group,
                "group_size": price[1],
                "concurrent_groups": price[2],
                "bytes": task.nbytes,
                "algorithm": price[3],
                "busbw_GBps": price[4],
                "bytes_on_wire_per_rank": price[5],
            }
            hit = self._coll[key] = (price[0], args)
        time_s, args = hit
        if task.count != 1:
            args = {**args, "count": task.count}
        if task.host_s:
            args = {**args, "host_s": task.host_s}
        return TaskCost(task.count * (time_s + task.host_s), args)

    def _price(self, op: str, group: str, nbytes: float) -> tuple:
        """(time, group size, concurrent groups, algorithm, bus bandwidth, bytes on the wire per rank)
        of one collective over every copy of ``group`` on the mesh. Shared by every step priced with
        the same collective model (``_PRICES``): listing the groups of a 16,384-rank mesh and keying
        the model's memo by them cost more than the rest of pricing a step."""
        try:
            shared = _PRICES.setdefault(self.collectives, {})
        except TypeError:  # a model that cannot be weakly referenced or hashed: priced per step
            shared = None
        key = (self.mesh, group, op, nbytes)
        price = shared.get(key) if shared is not None else None
        if price is None:
            groups = self._groups.get(group)
            if groups is None:
                groups = self._groups[group] = self.mesh.groups(group)
            res = self.collectives.run(op, groups, nbytes)
            price = (float(res.time_s), len(groups[0]), len(groups), str(getattr(res, "algorithm", "")),
                     float(getattr(res, "busbw_GBps", 0.0) or 0.0),
                     float(getattr(res, "bytes_on_wire_per_rank", 0.0) or 0.0))
            if shared is not None:
                shared[key] = price
        return price

    def _parts(self, task: CollectiveTask) -> TaskCost:
        """Back-to-back calls of one task, each priced alone (latency included) plus its host time.

        The prices depend on the sizes only, so they are memoised per (operation, group, sizes, host
        time, total bytes) with the task's annotations but its rows; each task's rows are its labels
        beside those prices (``PartRows``, read only by the Chrome trace)."""
        parts = task.parts
        key = (task.op, task.group, tuple(map(_size, parts)), task.host_s, task.nbytes)
        hit = self._parts_cache.get(key)
        if hit is None:
            total, times, args, wire, on_link, bus_GB = 0.0, [], {}, 0.0, 0.0, 0.0
            for _, nbytes in parts:
                one = self._collective(CollectiveTask(task.id, "", task.kind, task.op, task.group, nbytes))
                t = one.duration_s + task.host_s
                times.append(t)
                total += t
                args = one.args
                # the whole call's figures, not its last part's: wire bytes add up; bus bandwidth is
                # the parts' bus bytes (busbw x time) over their time on the link
                wire += args.get("bytes_on_wire_per_rank", 0.0)
                on_link += one.duration_s
                bus_GB += args.get("busbw_GBps", 0.0) * one.duration_s
            whole = {"bytes": task.nbytes, "bytes_on_wire_per_rank": wire,
                     "busbw_GBps": bus_GB / on_link if on_link else 0.0}
            hit = self._parts_cache[key] = (total, times, {**args, **whole})
        total, times, base = hit
        args = base.copy()
        args["parts"] = PartRows(parts, times)
        if task.host_s:
            args["host_s"] = task.host_s
        return TaskCost(task.count * total, args)

    def _compute(self, ops: tuple) -> TaskCost:
        """Memoised per distinct ``ops`` tuple (the builders reuse one tuple per unit and pass); the
        tuple is kept with its cost so its ``id`` cannot be reused while the entry lives."""
        hit = self._ops.get(id(ops))
        if hit is None or hit[0] is not ops:
            bound = getattr(self.compute, "host_bound", None)  # compute models without a host side have none
            excess = bound(ops) if bound is not None else 0.0
            share = getattr(self.compute, "recompute_share", None)
            redo = share(ops) if share is not None else 0.0
            args = {"host_bound_s": excess} if excess > 0 else {}
            if redo:
                args["recompute_share"] = redo
            cost = TaskCost(self.compute.time(ops), args)
            hit = self._ops[id(ops)] = (ops, cost)
        return hit[1]

    def cost(self, task: Any) -> TaskCost:
        if isinstance(task, ComputeTask):
            return self._compute(task.ops)
        if isinstance(task, CollectiveTask):
            if task.parts:  # labelled per task (the trace's sub-spans): priced by sizes in ``_parts``
                return self._parts(task)
            key = (task.op, task.group, task.nbytes, task.count, task.host_s, task.parts)
            hit = self._task_costs.get(key)
            if hit is None:
                hit = self._task_costs[key] = self._collective(task)
            return hit
        if isinstance(task, CopyTask):
            bw = min(self.pcie_Bps, self.nvme_Bps) if task.source == "nvme" else self.pcie_Bps
            return TaskCost(task.nbytes / bw, {"bytes": task.nbytes, "direction": task.direction})
        if isinstance(task, HostTask):
            # CPU Adam is memory-bound on the host; NVMe streaming of the states overlaps with it.
            t = max(task.n_params / self.cpu_adam, task.nvme_bytes / self.nvme_Bps)
            return TaskCost(t, {"params": task.n_params, "nvme_bytes": task.nvme_bytes})
        raise TypeError(f"unknown task type {type(task).__name__}")

    def costs(self, graph: StepGraph) -> list[TaskCost]:
        """``cost`` of every task; compute tasks whose ops tuple is already priced take a shortcut
        (the same memo ``_compute`` reads), since they are most of a step's tasks. The leading tasks
        this graph shares (the same objects) with the graph priced before keep their costs: the
        steady-state samples share their first micro-batch (``parallel.build.build_copied_samples``)."""
        tasks = graph.tasks
        before, known = self._last
        i, n = 0, min(len(before), len(tasks))
        while i < n and tasks[i] is before[i]:
            i += 1
        out = known[:i]
        ops_memo, cost = self._ops, self.cost
        append = out.append
        for t in tasks[i:] if i else tasks:
            if type(t) is ComputeTask:
                hit = ops_memo.get(id(t.ops))
                if hit is not None and hit[0] is t.ops:
                    append(hit[1])
                    continue
            append(cost(t))
        self._last = (tasks, out)
        return out
