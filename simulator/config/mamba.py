"""Mamba-2 (state-space) layers of a hybrid model as a user or the model catalog writes them down.

Key names map one-to-one onto Megatron-Core's ``MambaMixer`` arguments (``mamba_num_heads``,
``mamba_head_dim``, ``mamba_state_dim``, ``mamba_num_groups``, ``d_conv``, ``chunk_size``) and onto the
Hugging Face ``nemotron_h`` config keys (``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``,
``n_groups``, ``conv_kernel``, ``chunk_size``; ``simulator.catalog.hf``). Which layers are Mamba layers is
``model.hybrid_pattern``'s.
"""

from __future__ import annotations

from pydantic import PositiveInt, model_validator

from simulator.config.base import Frozen


class MambaConfig(Frozen):
    """One Mamba-2 mixer (Dao & Gu 2024, arXiv:2405.21060 §7; Megatron-Core ``megatron/core/ssm/mamba_mixer.py``).

    ``n_heads`` heads of ``head_dim`` channels make the inner width ``d_inner = n_heads·head_dim``
    (Nemotron-H 56B: 256 × 64 = 16,384, twice the hidden width); ``n_groups`` groups of heads share one
    ``state_size``-wide B and C (the state-space analogue of grouped-query attention). The depthwise causal
    convolution has ``conv_kernel`` taps over x, B and C; the SSD algorithm splits the sequence into chunks of
    ``chunk_size`` tokens (Megatron-Core's default 128, which ``MambaLayer`` does not override).
    """

    n_heads: PositiveInt
    head_dim: PositiveInt = 64
    state_size: PositiveInt = 128
    n_groups: PositiveInt = 8
    conv_kernel: PositiveInt = 4
    chunk_size: PositiveInt = 128

    @model_validator(mode="after")
    def _check_groups(self) -> MambaConfig:
        if self.n_heads % self.n_groups:
            raise ValueError(f"model.mamba.n_heads ({self.n_heads}) must be a multiple of model.mamba.n_groups "
                             f"({self.n_groups}): each group of heads shares one B and C")
        return self

    @property
    def d_inner(self) -> int:
        """Inner width ``n_heads · head_dim`` (the x and z branches)."""
        return self.n_heads * self.head_dim

    @property
    def bc_dim(self) -> int:
        """Width of B and C together, ``2·n_groups·state_size``."""
        return 2 * self.n_groups * self.state_size

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise convolution: x, B and C, ``d_inner + 2·G·N``."""
        return self.d_inner + self.bc_dim

    @property
    def in_proj_dim(self) -> int:
        """Output width of the input projection: z, x, B, C and one dt per head, ``2·d_inner + 2·G·N + H``
        (Megatron-Core ``MambaMixer.in_proj``)."""
        return 2 * self.d_inner + self.bc_dim + self.n_heads
