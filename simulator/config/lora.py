"""``training.lora``: LoRA fine-tuning (Hu et al. 2021, arXiv:2106.09685): the base weights frozen, a trainable
low-rank pair ``B·A`` (rank ``r``) beside each targeted linear layer. Re-exported by ``simulator.config.scenario``;
what it changes in the step: ``simulator.workload.lora``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from simulator.config.base import Frozen

#: The block's linear layers an adapter can target, by their Megatron-Core names: the fused QKV projection
#: (``linear_qkv``), the attention output projection (``linear_proj``), the MLP's first (gate and up) and second
#: (down) projections (``linear_fc1``, ``linear_fc2``).
LoraModule = Literal["qkv", "proj", "fc1", "fc2"]


class LoraConfig(Frozen):
    """The adapters: their rank and the linear layers of every block they sit beside. Defaults: NeMo 2.0's
    ``LoRA`` PEFT (``nemo/collections/llm/peft/lora.py``: ``target_modules`` linear_qkv, linear_proj,
    linear_fc1, linear_fc2; ``dim`` 32)."""

    rank: PositiveInt = Field(32, description="the adapters' rank r (NeMo dim, PEFT r)")
    modules: tuple[LoraModule, ...] = Field(("qkv", "proj", "fc1", "fc2"), min_length=1)
