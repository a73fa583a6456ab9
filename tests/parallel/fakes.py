"""Round-number fakes: ops that carry their own duration, a summing compute model, an α-β network."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.parallel.volume import per_rank_factor
from simulator.parallel.work import StepWork


@dataclass(frozen=True)
class TimedOp:
    name: str
    seconds: float


class SumCompute:
    """time(ops) = Σ op.seconds, scaled by 1/speed. Ops the builders add themselves (FSDP's gradient
    copies and divides: real ``Op``s with bytes, no duration) cost nothing here, so the semantics
    tests time only the round-number work they set."""

    def __init__(self, speed: float = 1.0) -> None:
        self.speed = speed

    def time(self, ops: tuple) -> float:
        return sum(getattr(op, "seconds", 0.0) for op in ops) / self.speed


@dataclass(frozen=True)
class Result:
    time_s: float
    algorithm: str = "ring"


class AlphaBeta:
    """Ring α–β: t = α + f(op, n)·S/B with f = 2(n−1)/n (all_reduce) or (n−1)/n (AG/RS)."""

    def __init__(self, alpha_s: float = 10e-6, bw_Bps: float = 100e9) -> None:
        self.alpha = alpha_s
        self.bw = bw_Bps

    def run(self, op, groups, nbytes):
        n = len(groups[0])
        return Result(self.alpha + per_rank_factor(op, n) * nbytes / self.bw)


def work(n_layers: int = 2, layer_params: float = 1e6, fwd_s: float = 1e-3, bwd_s: float = 2e-3,
         opt_s: float = 0.5e-3, recompute: bool = False, embed_params: float = 0.0, head_params: float = 0.0,
         persistent: float = 0.0) -> StepWork:
    fwd = (TimedOp("layer", fwd_s),)
    return StepWork(
        n_layers=n_layers,
        layer_fwd=fwd,
        layer_bwd=(TimedOp("layer.bwd", bwd_s),),
        layer_recompute=fwd if recompute else (),
        embed_fwd=(),
        embed_bwd=(),
        head_fwd=(),
        head_bwd=(),
        layer_params=layer_params,
        embed_params=embed_params,
        head_params=head_params,
        optimizer=lambda n, adam=0.0, experts=0.0: (TimedOp("adam", opt_s),),
        layer_persistent=persistent,
        recompute_full=recompute,  # the whole block forward again, as full checkpointing does
    )
