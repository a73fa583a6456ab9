"""Model-state bytes per GPU (parameters, gradients, optimizer states) and their ZeRO sharding: the record
``simulator.workload.memory`` reports and the formula it and ``moe_memory`` apply."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelStateBytes:
    """Per-GPU parameter, gradient and optimizer-state bytes; ``offloaded_bytes`` live in host memory."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    offloaded_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def zero_model_states(
    n_params: float,
    dp: int,
    zero_stage: int,
    param_bytes: float = 2,
    grad_bytes: float = 2,
    optimizer_bytes_per_param: float = 12,
) -> ModelStateBytes:
    """Model states per GPU under ZeRO (Rajbhandari et al. SC'20, Sec. 5.1 and Fig. 1).

    Mixed-precision Adam: ``2Ψ`` params + ``2Ψ`` grads + ``KΨ`` optimizer (K = 12: fp32 master,
    momentum, variance). Stage 1 divides the optimizer by ``N_d``, stage 2 also the gradients,
    stage 3 also the parameters: ``16Ψ``, ``4Ψ + 12Ψ/N_d``, ``2Ψ + 14Ψ/N_d``, ``16Ψ/N_d`` bytes.
    """
    return ModelStateBytes(
        params_bytes=param_bytes * n_params / (dp if zero_stage >= 3 else 1),
        grads_bytes=grad_bytes * n_params / (dp if zero_stage >= 2 else 1),
        optimizer_bytes=optimizer_bytes_per_param * n_params / (dp if zero_stage >= 1 else 1),
    )
