"""StepReport: the result of simulating one optimizer step, and its JSON form.

Conventions (named, because sources differ; formulas.md §1.3):

* **MFU** = model FLOPs per step / (step time · GPUs · dense peak of the training dtype), with
  model FLOPs = ``3 × forward`` (no recomputation) under ``training.attention_flops`` ("full":
  PaLM App. B / Megatron SC'21 Eq. 3; "causal": Megatron-LM code).
* **HFU** counts the FLOPs actually executed, including recomputation (same attention convention).
* tokens/s = global batch tokens / step time; per GPU divides by all GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepReport:
    """One simulated step. ``breakdown`` and ``memory`` are plain dicts (see ``to_dict``)."""

    scenario: str
    step_time_s: float
    tokens_per_step: int
    n_gpus: int
    model_flops: float
    hardware_flops: float
    peak_flops_per_gpu: float
    breakdown: dict[str, Any]
    memory: dict[str, Any]
    bytes_per_rank: dict[str, float]
    layout: dict[str, Any]
    conventions: dict[str, str]
    trace: tuple = field(default=(), repr=False, compare=False)
    warnings: tuple[str, ...] = ()
    collective_calls: dict[str, int] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.n_gpus

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.step_time_s * self.n_gpus * self.peak_flops_per_gpu)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_time_s * self.n_gpus * self.peak_flops_per_gpu)

    @property
    def fits(self) -> bool:
        return bool(self.memory.get("fits", True))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``step_time_s``, ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``mfu``, ``hfu``,
        ``model_flops_per_step`` and ``hardware_flops_per_step`` (FLOP of all GPUs; MFU's and HFU's
        numerators), ``peak_flops_per_s_per_gpu`` (their denominator, FLOP/s),
        ``breakdown`` (forward_s, backward_s, recompute_s, optimizer_s, host_bound_s (the part of those the
        GPU waits for the CPU to issue kernels), bubble_s, offload{on_link_s,
        exposed_s}, communication{kind: {on_link_s, exposed_s}}, by_dimension{tp|pp|dp: {on_link_s,
        exposed_s}}, and with pp > 1 ``stages`` [{stage, compute_busy_s, bubble_s, exposed_comm_s,
        idle_s}] and ``reported_stage``), ``memory`` (with ``total_bytes``, ``fits``; with pp > 1 or
        sequence parallelism ``stages`` [{stage, layers, in_flight, activations_bytes}]),
        ``bytes_per_rank`` and ``collective_calls`` (per communication kind), ``layout`` and
        ``conventions``."""
        return {
            "scenario": self.scenario,
            "step_time_s": self.step_time_s,
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "n_gpus": self.n_gpus,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_flops_per_step": self.model_flops,
            "hardware_flops_per_step": self.hardware_flops,
            "peak_flops_per_s_per_gpu": self.peak_flops_per_gpu,
            "breakdown": self.breakdown,
            "memory": self.memory,
            "bytes_per_rank": self.bytes_per_rank,
            "collective_calls": self.collective_calls,
            "layout": self.layout,
            "conventions": self.conventions,
            "warnings": list(self.warnings),
        }
