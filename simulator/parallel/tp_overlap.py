"""Tensor-parallel communication overlapped with the GEMMs next to it (``parallel.tp_comm_overlap``).

What the frameworks overlap, and how it is expressed as tasks (no overlap formula: the executor
measures what hides):

* **forward** (and the recomputed forward): the collective after a row-parallel GEMM (out_proj,
  mlp_down) is split into ``k`` chunks pipelined with the GEMM's ``k`` chunks (Megatron-Core
  userbuffers ``--tp-comm-overlap``, Wang et al. ASPLOS'23 "Overlap communication with dependent
  computation via decomposition"; PyTorch async-TP, ``k`` = tp). Two compute and two
  communication tasks give the same critical path as ``k`` chunks: GEMM head (1 chunk) → [comm
  body ((k−1)/k) ‖ GEMM tail (k−1 chunks)] → comm last (1/k): ``g + c/k`` when ``c ≤ g``,
  ``g/k + c`` otherwise, with ``g`` the time of ``k`` GEMMs of ``m/k`` rows;
* **backward**: the all-reduce / reduce-scatter of the input gradient runs while the weight-gradient
  GEMM computes (Megatron's ``async_tensor_model_parallel_allreduce``; the wgrad does not need it),
  and the next unit waits for it.

Without recognisable GEMM names (hand-built test work) the last op of the block is the producer.

With sequence parallelism (Megatron-Core ``--tp-comm-overlap`` requires it) each collective sits
next to the GEMM that produces or consumes it, as Transformer Engine's userbuffers overlap runs them
(``transformer_engine/pytorch/module/base.py`` ``initialize_ub``, the method and SM defaults of
TE 1.x–2.x; NeMo / Megatron-Bridge H100 recipes keep the same pairs):

* forward: the all-gather of a column-parallel GEMM's input (qkv, mlp_up) is a ring exchange beside
  that GEMM (``qkv_fprop``, ``fc1_fprop``: ``tp`` chunks, copy engine, 1 SM): the GEMM runs its
  local chunk and each received one, ``max((k−1)/k·g, c) + g/k``; the reduce-scatter of a
  row-parallel GEMM's output (out_proj, mlp_down) is pipelined with it (``proj_fprop``,
  ``fc2_fprop``: 4 splits, 16 SMs): ``g + c/k`` when ``c ≤ g``, ``g/k + c`` otherwise;
* backward: the all-gather of a row-parallel GEMM's output gradient is a ring exchange beside its
  data-gradient GEMM (``proj_dgrad``, ``fc2_dgrad``); a column-parallel GEMM re-gathers its input
  for the weight gradient beside its data-gradient GEMM and reduce-scatters the data gradient
  beside its weight-gradient GEMM (bulk overlaps ``qkv_dgrad``/``qkv_wgrad``, ``fc1_dgrad``/
  ``fc1_wgrad``: 16 SMs each); what follows waits for the reduce-scatter;
* cost to the GEMM: the comm kernels hold ``num_sm`` of the GPU's SMs (``CollectiveTask.sm_share``:
  16/132 on H100 for pipeline and bulk, 1/132 for the copy-engine ring exchange), not the NCCL
  slowdown; all-gathers carry the FP8-cast input in FP8 training (``StepWork.tp_allgather_bytes``).
With context parallelism the K/V ring runs beside the attention core as without the overlap
(``simulator.parallel.context_parallel``).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from simulator.parallel.ir import COMPUTE, TP_COMM, GraphBuilder

FORWARD_PRODUCERS = ("out_proj", "mlp_down")
#: Column-parallel GEMMs: their input is all-gathered over the sequence (SP), their data gradient
#: reduce-scattered.
COLUMN_PARALLEL = ("qkv", "mlp_up")
_SCALED = ("flops", "bytes", "seconds", "host_s")
#: Transformer Engine userbuffers defaults (``initialize_ub``): SMs of the comm kernels per method,
#: and the pipelined reduce-scatter's splits.
RING_EXCHANGE_SMS = 1
PIPELINE_SMS = 16
BULK_SMS = 16
PIPELINE_SPLITS = 4


def fraction(op: Any, f: float) -> Any:
    """``op`` doing the fraction ``f`` of its work: FLOPs, bytes (and a fake's seconds) scale; a
    GEMM's ``m`` (rows, the dimension chunked) shrinks, so chunk efficiency is the compute model's.
    Its measured host time (``Op.host_s``, the eager module's Python share) splits with it: Transformer
    Engine issues the chunks of one module call from its C++ overlap loop (``split_overlap_rs`` /
    ``split_overlap_ag`` in ``comm_gemm_overlap.cpp``), so the module's Python runs once, not once per
    chunk, and each chunk adds the launch of its own GEMM (``Op.cpp_launches``)."""
    names = {fl.name for fl in dataclasses.fields(op)}
    changes = {n: getattr(op, n) * f for n in _SCALED if n in names and getattr(op, n) is not None}
    if getattr(op, "host_s", None) is not None:
        changes["cpp_launches"] = 1
    if "m" in names and getattr(op, "m", 0):
        changes["m"] = max(1, round(op.m * f))
    return dataclasses.replace(op, **changes)


@lru_cache(maxsize=256)
def forward_plan(ops: tuple, k: int) -> tuple[tuple[tuple, tuple], ...]:
    """[(ops up to and with the GEMM head, (GEMM tail,)), ...] per producer, then (rest, ()).
    Cached on the (hashable, shared) ops tuple so the compute model's per-tuple cache hits."""
    idx = [i for i, op in enumerate(ops) if any(op.name.endswith(p) for p in FORWARD_PRODUCERS)] or [len(ops) - 1]
    out, start = [], 0
    for i in idx:
        chunk = fraction(ops[i], 1 / k)
        # The tail is k−1 chunk GEMMs, not one big one: decomposed GEMMs run at the efficiency of
        # their m/k rows (the compute model's size-dependent efficiency prices the decomposition).
        out.append((tuple(ops[start:i]) + (chunk,), (chunk,) * (k - 1)))
        start = i + 1
    out.append((tuple(ops[start:]), ()))
    return tuple(out)


@lru_cache(maxsize=256)
def backward_split(ops: tuple) -> tuple[tuple, tuple]:
    """A backward piece split after its last data-gradient GEMM: (up to the dgrad, the rest)."""
    idx = [i for i, op in enumerate(ops) if op.name.endswith(".dgrad")]
    cut = (idx[-1] + 1) if idx else len(ops)
    return tuple(ops[:cut]), tuple(ops[cut:])


def _comms(b: GraphBuilder, work: Any, name: str, share: float, count: int, deps, g: int, layer: int) -> list[int]:
    ops = ("reduce_scatter", "all_gather") if work.sequence_parallel else ("all_reduce",)
    out = []
    for op in ops:
        tid = b.collective(f"tp {op} {name}", "tp", op, "tp", work.tp_allreduce_bytes * share, count=count,
                           stream=TP_COMM, deps=deps, micro_batch=g, layer=layer)
        if tid is not None:
            out.append(tid)
    return out


def forward_block(b: GraphBuilder, work: Any, ops: tuple, kind: str, name: str, deps: list, g: int,
                  layer: int) -> tuple[int, list[int]]:
    """A block's forward (or recompute) with chunk-pipelined TP collectives. Returns the last compute
    task and the collectives the next unit must wait for."""
    if work.sequence_parallel and sp_recognised(ops) and standard_block(work):
        return sp_forward_block(b, work, ops, kind, name, deps, g, layer)
    k = max(2, work.tp_degree)
    plan = forward_plan(ops, k)
    producers = len(plan) - 1
    count = max(1, 2 // producers)
    tid = -1
    for i, (head, tail) in enumerate(plan):
        if not tail:  # ops after the last producer
            if head:
                tid = b.compute(f"{name}.{i}", kind, head, deps=deps, micro_batch=g, layer=layer)
                deps = []
            break
        t1 = b.compute(f"{name}.{i}a", kind, head, deps=deps, micro_batch=g, layer=layer)
        _comms(b, work, f"{name}.{i} body", (k - 1) / k, count, (t1,), g, layer)
        tid = b.compute(f"{name}.{i}b", kind, tail, micro_batch=g, layer=layer)
        deps = _comms(b, work, f"{name}.{i} last", 1 / k, count, (tid,), g, layer)
    return tid, list(deps)


def backward_piece(b: GraphBuilder, work: Any, ops: tuple, name: str, deps: list, g: int, layer: int,
                   count: int) -> tuple[int, list[int]]:
    """A backward piece whose input-gradient collective overlaps its weight-gradient GEMMs. Returns
    the piece's last compute task and the collectives the next piece must wait for."""
    if work.sequence_parallel and standard_block(work):
        return sp_backward_piece(b, work, ops, name, deps, g, layer)
    grad_in, rest = backward_split(ops)
    t1 = b.compute(f"{name}", "backward", grad_in, deps=deps, micro_batch=g, layer=layer)
    comm = _comms(b, work, name, 1.0, count, (t1,), g, layer)
    tid = b.compute(f"{name} wgrad", "backward", rest, micro_batch=g, layer=layer) if rest else t1
    return tid, comm


# --- sequence parallelism: every collective beside the GEMM that produces or consumes it ----------


def gather_bytes(work: Any) -> float:
    """Bytes of one sequence-parallel all-gather (FP8 input in FP8 training, else the 16-bit buffer)."""
    return work.tp_allgather_bytes or work.tp_allreduce_bytes


def _share(work: Any, sms: int) -> float | None:
    return sms / work.gpu_sms if work.gpu_sms else None


def _is(op: Any, names: tuple[str, ...], suffix: str = "") -> bool:
    name = op.name[: -len(suffix)] if suffix and op.name.endswith(suffix) else (None if suffix else op.name)
    return name is not None and any(name == n or name.endswith("." + n) for n in names)


def standard_block(work: Any) -> bool:
    """The block's forward has the fused ``qkv`` and the two row-parallel GEMMs the collectives pair
    with (MLA's down/up projections and unnamed test ops keep the generic plan)."""
    return any(_is(op, ("qkv",)) for op in work.layer_fwd) and sp_recognised(work.layer_fwd)


def sp_recognised(ops: tuple, suffix: str = "") -> bool:
    """True when the block's GEMMs carry the names the SP plan pairs collectives with (``suffix``
    ".dgrad" for a backward piece's data-gradient GEMMs)."""
    return (any(_is(op, COLUMN_PARALLEL, suffix) for op in ops)
            and any(_is(op, FORWARD_PRODUCERS, suffix) for op in ops))


class _Stream:
    """Compute tasks of one block issued in order; ops accumulate until a GEMM boundary flushes them.
    A flushed segment holding the attention core gets the K/V ring beside it under CP."""

    def __init__(self, b: GraphBuilder, work: Any, kind: str, name: str, deps: list, g: int, layer: int) -> None:
        self.b, self.work, self.kind, self.name, self.g, self.layer = b, work, kind, name, g, layer
        self.deps: list = list(deps)
        self.ops: list = []
        self.last = -1
        self.n = 0

    def flush(self) -> int:
        """Issue the accumulated ops as compute (waiting for ``deps``); returns the last compute task."""
        if not self.ops:
            return self.last
        ops, self.ops = tuple(self.ops), []
        label = f"{self.name}.{self.n}"
        self.n += 1
        if self.work.cp_kv_bytes > 0 and any(getattr(op, "kind", "") == "attention" for op in ops):
            from simulator.parallel import context_parallel

            if self.kind == "backward":
                self.last = context_parallel.backward_piece(self.b, self.work, ops, label, self.deps, self.g,
                                                            self.layer)
            else:
                self.last = context_parallel.forward_block(self.b, self.work, ops, self.kind, label, self.deps,
                                                           self.g, self.layer)
        else:
            self.last = self.b.compute(label, self.kind, ops, deps=self.deps, micro_batch=self.g, layer=self.layer)
        self.deps = []
        return self.last

    def _ready(self) -> list:
        """Flush; the tasks a collective on the flushed data must wait for."""
        before = self.flush()
        return ([before] if before >= 0 else []) + list(self.deps)

    def comm(self, label: str, op: str, nbytes: float, sms: int, after: list) -> int | None:
        return self.b.collective(f"tp {op} {self.name} {label}", "tp", op, "tp", nbytes, stream=TP_COMM,
                                 deps=after, micro_batch=self.g, layer=self.layer, sm_share=_share(self.work, sms))

    def ring_gather(self, gemm: Any, label: str) -> None:
        """All-gather (ring exchange, ``tp`` chunks) beside ``gemm``: the GEMM's first ``k−1`` chunks
        run while the chunks arrive, the last chunk waits for the whole gather."""
        k = max(2, self.work.tp_degree)
        after = self._ready()
        ag = self.comm(label, "all_gather", gather_bytes(self.work), RING_EXCHANGE_SMS, after)
        chunk = fraction(gemm, 1 / k)
        self.ops = [chunk] * (k - 1)
        self.flush()
        self.ops = [chunk]
        self.deps = [ag] if ag is not None else []

    def pipelined_scatter(self, gemm: Any, label: str) -> None:
        """Reduce-scatter pipelined with ``gemm`` (``PIPELINE_SPLITS`` chunks): head chunk, then the
        body of the collective beside the tail chunks, then its last part; what follows waits."""
        k = PIPELINE_SPLITS
        chunk = fraction(gemm, 1 / k)
        self.ops.append(chunk)
        head = self.flush()
        nbytes = self.work.tp_allreduce_bytes
        self.comm(label + " body", "reduce_scatter", nbytes * (k - 1) / k, PIPELINE_SMS, [head])
        self.ops = [chunk] * (k - 1)
        tail = self.flush()
        last = self.comm(label + " last", "reduce_scatter", nbytes / k, PIPELINE_SMS, [tail])
        self.deps = [last] if last is not None else []


def sp_forward_block(b: GraphBuilder, work: Any, ops: tuple, kind: str, name: str, deps: list, g: int,
                     layer: int) -> tuple[int, list[int]]:
    """A block's forward (or recompute) under SP with userbuffers overlap. Returns the last compute
    task and the collectives the next unit must wait for."""
    st = _Stream(b, work, kind, name, deps, g, layer)
    for op in ops:
        if _is(op, COLUMN_PARALLEL):
            st.ring_gather(op, op.name)
        elif _is(op, FORWARD_PRODUCERS):
            st.pipelined_scatter(op, op.name)
        else:
            st.ops.append(op)
    if st.ops:
        return st.flush(), []
    return st.last, list(st.deps)


def sp_backward_piece(b: GraphBuilder, work: Any, ops: tuple, name: str, deps: list, g: int,
                      layer: int) -> tuple[int, list[int]]:
    """A backward piece under SP with userbuffers overlap. Returns the piece's last compute task and
    the collectives the next piece must wait for."""
    st = _Stream(b, work, "backward", name, deps, g, layer)
    scatter: int | None = None
    for op in ops:
        if _is(op, FORWARD_PRODUCERS, ".dgrad"):
            st.ring_gather(op, op.name)  # the output gradient, gathered beside the data-gradient GEMM
        elif _is(op, COLUMN_PARALLEL, ".dgrad"):
            after = st._ready()
            gathered = st.comm(op.name + " input", "all_gather", gather_bytes(work), BULK_SMS, after)
            st.ops = [op]
            dgrad = st.flush()
            scatter = st.comm(op.name, "reduce_scatter", work.tp_allreduce_bytes, BULK_SMS, [dgrad])
            st.deps = [gathered] if gathered is not None else []
        elif _is(op, COLUMN_PARALLEL, ".wgrad") and scatter is not None:
            st.ops.append(op)
            st.flush()
            st.deps = [scatter]
            scatter = None
        else:
            st.ops.append(op)
    if st.ops:
        return st.flush(), []
    return st.last, list(st.deps)


def async_backward_piece(b: GraphBuilder, work: Any, ops: tuple, name: str, deps: list, g: int,
                         layer: int) -> tuple[int, list[int]]:
    """A backward piece as Megatron-LM runs it without ``--tp-comm-overlap``
    (``LinearWithGradAccumulationAndAsyncCommunication.backward``, the default asynchronous
    tensor-parallel all-reduce): a column-parallel layer's collectives are launched asynchronously on
    NCCL beside its GEMMs (with SP: the input all-gather beside the data-gradient GEMM, the
    reduce-scatter of the data gradient beside the weight-gradient GEMM; without SP: the all-reduce
    of the data gradient beside the weight-gradient GEMM); a row-parallel layer's output-gradient
    all-gather (SP only) runs on the compute stream before its data-gradient GEMM (exposed).
    Returns the piece's last compute task and the collectives the next piece must wait for."""
    st = _Stream(b, work, "backward", name, deps, g, layer)
    sp = work.sequence_parallel
    pending: int | None = None
    for op in ops:
        if sp and _is(op, FORWARD_PRODUCERS, ".dgrad"):
            after = st._ready()
            ag = b.collective(f"tp all_gather {name} {op.name}", "tp", "all_gather", "tp", gather_bytes(work),
                              stream=COMPUTE, deps=after, micro_batch=g, layer=layer)
            st.deps = [ag] if ag is not None else []
            st.ops.append(op)
        elif _is(op, COLUMN_PARALLEL, ".dgrad"):
            gathered = None
            if sp:
                gathered = b.collective(f"tp all_gather {name} {op.name} input", "tp", "all_gather", "tp",
                                        gather_bytes(work), stream=TP_COMM, deps=st._ready(), micro_batch=g,
                                        layer=layer)
            st.ops.append(op)
            dgrad = st.flush()
            red = "reduce_scatter" if sp else "all_reduce"
            pending = b.collective(f"tp {red} {name} {op.name}", "tp", red, "tp", work.tp_allreduce_bytes,
                                   stream=TP_COMM, deps=[dgrad], micro_batch=g, layer=layer)
            st.deps = [gathered] if gathered is not None else []
        elif _is(op, COLUMN_PARALLEL, ".wgrad") and pending is not None:
            st.ops.append(op)
            st.flush()
            st.deps = [pending]
            pending = None
        else:
            st.ops.append(op)
    if st.ops:
        return st.flush(), []
    return st.last, list(st.deps)
