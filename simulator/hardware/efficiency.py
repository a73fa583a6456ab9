"""Efficiency parameters of the compute model as data (``efficiency.yaml``), looked up per architecture."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources

from simulator import yamlio
from simulator.config.hardware import GPUSpec


@dataclass(frozen=True)
class Efficiency:
    """See ``efficiency.yaml`` for each value's meaning and source. All fractions are in (0, 1]."""

    gemm_fraction: float
    gemm_sustained_of_mamf: float
    gemm_half_dim: float
    flash_attention_fraction: float
    attention_sustained_of_bench: float
    hbm_fraction: float
    pcie_fraction: float
    compute_slowdown_during_comm: float
    cpu_adam_params_per_s_per_node: float
    nvme_Bps_per_node: float
    #: Host layer (``simulator.workload.host``): a training host's CPU time per PyTorch call over the
    #: CPU-only benchmark that measured the eager blocks' host times.
    host_dispatch_scale: float = 1.0


@lru_cache(maxsize=1)
def _table() -> dict[str, dict]:
    return yamlio.safe_load(resources.files(__package__).joinpath("efficiency.yaml").read_text())


def for_gpu(gpu: GPUSpec) -> Efficiency:
    """Defaults overlaid with the host layer's fitted values for the architecture's platform (``host``),
    the architecture's measured values (``measured``), then its entry.

    The GEMM fraction used by the compute model is ``MAMF × gemm_sustained_of_mamf``, MAMF from the
    GPU catalog (or the planning default when the catalog has none).
    """
    table = _table()
    values = dict(table["default"])
    values.update((table.get("host") or {}).get(gpu.arch, {}))
    values.update(table.get("measured", {}).get(gpu.arch, {}))
    values.update(table.get(gpu.arch, {}))
    names = {f.name for f in fields(Efficiency)}
    eff = Efficiency(**{k: float(v) for k, v in values.items() if k in names})
    best = gpu.mamf_fraction if gpu.mamf_fraction is not None else eff.gemm_fraction
    return replace(eff, gemm_fraction=best * eff.gemm_sustained_of_mamf)


def calibrated_archs() -> tuple[str, ...]:
    """The architectures ``efficiency.yaml`` has fitted values for (the validation set's), sorted."""
    return tuple(sorted(arch for arch, v in _table().items()
                        if arch != "default" and isinstance(v, dict) and "gemm_sustained_of_mamf" in v))


def is_calibrated(gpu: GPUSpec) -> bool:
    """True when ``efficiency.yaml`` has fitted values for the GPU's architecture (validation set)."""
    return gpu.arch in calibrated_archs()
