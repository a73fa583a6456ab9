"""The rank mesh: which global ranks (= GPU indices, node-major) form each process group.

Rank order follows Megatron-LM (and picotron): TP innermost, then DP, then PP:
``rank = tp_idx + tp · (dp_idx + dp · pp_idx)``. With TP inside a node, DP peers of one TP index sit
on different GPUs of different nodes, and the ``tp`` copies of each DP group run at the same time.

Group kinds:

* ``dp``: all data-parallel peers (ZeRO / FSDP FULL_SHARD / DDP);
* ``dp_shard`` / ``dp_replicate``: HYBRID_SHARD splits DP into shard groups of ``shard_size``
  consecutive DP ranks (one node's worth) and replica groups across them (formulas.md §4.3);
* ``tp``: tensor-parallel peers;
* ``pp_next``: [stage 0, stage 1] pairs of every DP/TP index (pipeline p2p; representative boundary).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class RankMesh:
    """A ``pp × dp × tp`` grid over ``n_gpus = tp·dp·pp`` GPUs with ``gpus_per_node`` per node."""

    tp: int
    dp: int
    pp: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if min(self.tp, self.dp, self.pp, self.gpus_per_node) < 1:
            raise ValueError("mesh degrees must be >= 1")

    @property
    def n_gpus(self) -> int:
        return self.tp * self.dp * self.pp

    def rank(self, tp_idx: int, dp_idx: int, pp_idx: int = 0) -> int:
        return tp_idx + self.tp * (dp_idx + self.dp * pp_idx)

    @cached_property
    def shard_size(self) -> int:
        """HYBRID_SHARD shard-group size: the DP ranks of one node (``gpus_per_node / tp``), at most dp."""
        per_node = max(1, self.gpus_per_node // self.tp)
        size = min(self.dp, per_node)
        while self.dp % size:
            size -= 1
        return size

    def size(self, kind: str) -> int:
        """Number of ranks in one group of ``kind``."""
        return {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "dp_shard": self.shard_size,
            "dp_replicate": self.dp // self.shard_size,
            "pp_next": 2,
        }[kind]

    def groups(self, kind: str) -> list[list[int]]:
        """Every concurrent copy of a group of ``kind``, each a list of GPU indices."""
        tp, dp, pp = self.tp, self.dp, self.pp
        if kind == "tp":
            return [[self.rank(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)]
        if kind == "dp":
            return [[self.rank(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)]
        if kind == "pp":
            return [[self.rank(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)]
        if kind == "pp_next":
            # Boundary 0→1 of every DP/TP index; the other boundaries send at the same time on other
            # GPUs (a query's groups must not share GPUs), so one boundary stands for all.
            return [[self.rank(t, d, 0), self.rank(t, d, 1)] for d in range(dp) for t in range(tp)]
        g = self.shard_size
        if kind == "dp_shard":
            return [
                [self.rank(t, r * g + j, p) for j in range(g)]
                for p in range(pp) for t in range(tp) for r in range(dp // g)
            ]
        if kind == "dp_replicate":
            return [
                [self.rank(t, r * g + j, p) for r in range(dp // g)]
                for p in range(pp) for t in range(tp) for j in range(g)
            ]
        raise KeyError(f"unknown group kind {kind!r}")
