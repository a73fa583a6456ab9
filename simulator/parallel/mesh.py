"""The rank mesh: which global ranks (= GPU indices, node-major) form each process group.

Rank order follows Megatron-LM (``parallel_state.py``, order "tp-cp-dp-pp") and picotron: TP
innermost, then context parallel, then DP, then PP:
``rank = tp_idx + tp · (cp_idx + cp · (dp_idx + dp · pp_idx))``. With TP inside a node, DP peers of
one TP index sit on different GPUs of different nodes, and the ``tp`` copies of each DP group run at
the same time. ``pp_before_dp`` is Megatron-Core's other order, "tp-cp-pp-dp"
(``--use-tp-pp-dp-mapping``): ``rank = tp_idx + tp · (cp_idx + cp · (pp_idx + pp · dp_idx))``, one
whole pipeline on consecutive ranks (the expert groups keep the default order:
``simulator.parallel.checks`` refuses the mapping for MoE models).

Group kinds:

* ``dp``: the gradient-reduction peers (ZeRO / FSDP FULL_SHARD / DDP): the data-parallel ranks and,
  with context parallelism, their cp ranks too (Megatron ``with_context_parallel=True``; torchtitan
  shards over ``dp_shard_cp``), so ``size("dp") = dp·cp`` while ``RankMesh.dp`` splits the batch;
* ``dp_shard`` / ``dp_replicate``: HYBRID_SHARD splits DP into shard groups of ``shard_size``
  consecutive DP ranks (one node's worth) and replica groups across them (formulas.md §4.3);
* ``tp``: tensor-parallel peers; ``cp``: context-parallel peers; ``pp``: a whole pipeline;
* ``ep`` / ``etp`` / ``edp``: expert-parallel, expert-tensor-parallel and expert-data-parallel
  peers of the MoE blocks (``simulator.parallel.expert``: ``etp × ep × edp`` re-splits a stage's
  ``tp·cp·dp`` ranks, ETP innermost);
* ``pp_next:s``: the [stage s, stage s+1 mod pp] pairs of every TP/CP/DP index (pipeline p2p over
  the boundary after stage ``s``; ``s = pp−1`` is the wrap-around of the interleaved schedule);
  ``pp_next`` alone means boundary 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simulator.parallel.expert_mesh import expert_groups, two_hop_groups


@dataclass(frozen=True)
class RankMesh:
    """A ``pp × dp × cp × tp`` grid over ``n_gpus = tp·cp·dp·pp`` GPUs with ``gpus_per_node`` per node."""

    tp: int
    dp: int
    pp: int
    gpus_per_node: int
    cp: int = 1
    #: Expert parallel and expert tensor parallel degrees (MoE models; 1 otherwise).
    ep: int = 1
    etp: int = 1
    #: Megatron-Core's "tp-cp-pp-dp" rank order (``parallel.use_tp_pp_dp_mapping``).
    pp_before_dp: bool = False

    def __post_init__(self) -> None:
        if min(self.tp, self.dp, self.pp, self.cp, self.gpus_per_node) < 1:
            raise ValueError("mesh degrees must be >= 1")

    @property
    def n_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def formula(self) -> str:
        """The rank order in words, for reports."""
        if self.pp_before_dp:
            return "rank = tp + tp*(cp + cp*(pp + pp*dp)), TP innermost, DP outermost (tp-cp-pp-dp)"
        return "rank = tp + tp*(cp + cp*(dp + dp*pp)), TP innermost"

    def rank(self, tp_idx: int, dp_idx: int, pp_idx: int = 0, cp_idx: int = 0) -> int:
        if self.pp_before_dp:
            return tp_idx + self.tp * (cp_idx + self.cp * (pp_idx + self.pp * dp_idx))
        return tp_idx + self.tp * (cp_idx + self.cp * (dp_idx + self.dp * pp_idx))

    def stage(self, rank: int) -> int:
        """The pipeline stage (pp index) of a global rank."""
        if self.pp_before_dp:
            return rank // (self.tp * self.cp) % self.pp
        return rank // (self.tp * self.cp * self.dp)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    @cached_property
    def shard_size(self) -> int:
        """HYBRID_SHARD shard-group size: the DP ranks of one node (``gpus_per_node / (tp·cp)``), at most dp."""
        per_node = max(1, self.gpus_per_node // (self.tp * self.cp))
        size = min(self.dp, per_node)
        while self.dp % size:
            size -= 1
        return size

    def size(self, kind: str) -> int:
        """Number of ranks in one group of ``kind``."""
        if kind == "dp":  # the frequent kinds without building the table (graph builders ask per task)
            return self.dp * self.cp
        if kind == "tp":
            return self.tp
        if kind.startswith("pp_next"):
            return 2
        if kind in ("ep", "etp", "edp"):
            return {"ep": self.ep, "etp": self.etp, "edp": self.tp * self.cp * self.dp // (self.ep * self.etp)}[kind]
        if kind in ("ep_intra", "ep_inter"):
            return len(self.groups(kind)[0])
        return {
            "dp": self.dp * self.cp,
            "tp": self.tp,
            "cp": self.cp,
            "pp": self.pp,
            "dp_shard": self.shard_size,
            "dp_replicate": self.dp // self.shard_size,
        }[kind]

    def groups(self, kind: str) -> list[list[int]]:
        """Every concurrent copy of a group of ``kind``, each a list of GPU indices."""
        tp, cp, dp, pp = self.tp, self.cp, self.dp, self.pp
        r = self.rank
        if kind in ("ep", "etp", "edp"):
            return expert_groups(tp, cp, dp, pp, self.ep, self.etp, kind)
        if kind in ("ep_intra", "ep_inter"):
            return two_hop_groups(self.groups("ep"), self.node, kind)
        if kind == "tp":
            return [[r(t, d, p, c) for t in range(tp)] for p in range(pp) for d in range(dp) for c in range(cp)]
        if kind == "cp":
            return [[r(t, d, p, c) for c in range(cp)] for p in range(pp) for d in range(dp) for t in range(tp)]
        if kind == "dp":
            return [[r(t, d, p, c) for d in range(dp) for c in range(cp)] for p in range(pp) for t in range(tp)]
        if kind == "pp":
            return [[r(t, d, p, c) for p in range(pp)] for d in range(dp) for c in range(cp) for t in range(tp)]
        if kind.startswith("pp_next"):
            # One boundary's pairs of every TP/CP/DP index: they send at the same time over the same
            # NICs; other boundaries use other GPUs (a query's groups must not share GPUs).
            s = int(kind.partition(":")[2] or 0)
            nxt = (s + 1) % pp
            return [[r(t, d, s, c), r(t, d, nxt, c)] for d in range(dp) for c in range(cp) for t in range(tp)]
        g = self.shard_size
        if kind == "dp_shard":
            return [
                [r(t, rr * g + j, p, c) for j in range(g)]
                for p in range(pp) for c in range(cp) for t in range(tp) for rr in range(dp // g)
            ]
        if kind == "dp_replicate":
            return [
                [r(t, rr * g + j, p, c) for rr in range(dp // g)]
                for p in range(pp) for c in range(cp) for t in range(tp) for j in range(g)
            ]
        raise KeyError(f"unknown group kind {kind!r}")

    def spans_nodes(self, kind: str) -> list[list[int]]:
        """The groups of ``kind`` whose GPUs sit on more than one node."""
        return [g for g in self.groups(kind) if len({self.node(x) for x in g}) > 1]
