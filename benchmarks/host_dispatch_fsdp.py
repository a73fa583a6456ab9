"""Host (CPU) time that PyTorch FSDP adds per wrapped unit: its forward and backward hooks.

The source of ``simulator.workload.host.FSDP_UNIT_HOST``. FSDP wraps each transformer block as a unit
and runs Python around it every step: before the forward it all-gathers the unit's parameters (FSDP1
``_pre_forward`` → ``_unshard``; FSDP2 ``FSDPParamGroup.pre_forward`` → ``unshard`` with its
``foreach_all_gather`` copy-in and copy-out), after it frees them (``reshard``), before the backward it
gathers them again and after it reduce-scatters the gradients into the shard (FSDP1
``_post_backward_hook``, FSDP2 ``post_backward`` → ``foreach_reduce``), with the mixed-precision casts,
views and autograd hooks of both. On a small model or a short micro-batch this, not the GPU, sets the pace.

Method of ``benchmarks/host_dispatch.py``: the torchtitan Llama 3 reference block (``LlamaBlock``, hidden 64,
16 tokens, so that its kernels cost next to nothing) in a stack of 24, forward and backward on the CPU, min
over repeats; then the same stack with each block wrapped as an FSDP unit under the ``gloo`` backend in a
one-rank process group (FSDP1 ``FullyShardedDataParallel`` with ``FULL_SHARD`` and ``use_orig_params``;
FSDP2 ``fully_shard``; both with bf16 parameters and fp32 gradient reduction, as torchtitan and
llm-foundry's ``amp_bf16`` runs set them). FSDP's mixed precision runs the block in bf16, whose CPU kernels
cost more than fp32's even on tiny tensors, so FSDP's own time per unit is the wrapped stack's less the
plain stack cast to bf16. It is printed in µs and as fractions of the plain fp32 block's forward and
backward host time measured in the same run (the reference block of ``BLOCK_HOST_S``), which
``simulator.workload.host`` applies to that table, so the machine's speed cancels. A lower bound: on a GPU
host FSDP also records and waits on CUDA events and streams and NCCL enqueues its collectives (``gloo`` on
one rank returns at once); PyTorch issue #173680 (torch 2.10, a Xeon host) profiles FSDP2's
``pre_forward`` at about 1 ms per unit. Needs PyTorch (``pip install torch`` in a separate virtualenv);
about 40 s.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from host_dispatch import BLOCKS, LAYERS, REPEATS, host_time  # the dense reference, same method
from torch import nn


def _wrapped(version: int):
    """A maker of reference blocks each wrapped as an FSDP unit of ``version`` (1 or 2)."""
    make, _ = BLOCKS["llama"]

    def build() -> nn.Module:
        block = make()
        if version == 2:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
            return block
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy

        return FullyShardedDataParallel(block, device_id=torch.device("cpu"), use_orig_params=True,
                                        sharding_strategy=ShardingStrategy.FULL_SHARD,
                                        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16,
                                                                       reduce_dtype=torch.float32))

    return build


def _bf16(make):
    """``make`` cast to bf16, with its input: the block as FSDP's mixed precision runs it."""

    def build() -> nn.Module:
        return make().to(torch.bfloat16)

    return build


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    make, shape = BLOCKS["llama"]
    plain_f, plain_b = host_time(make, shape)
    bf_f, bf_b = host_time(_bf16(make), shape, torch.bfloat16)
    print(f"torch {torch.__version__}, {LAYERS} blocks, min of {REPEATS} repeats; plain block "
          f"{plain_f * 1e6:.0f} µs forward, {plain_b * 1e6:.0f} µs backward (in bf16 {bf_f * 1e6:.0f} / {bf_b * 1e6:.0f})")
    print("| FSDP | host forward per unit (µs) | host backward per unit (µs) | of the block's forward | of its backward |")
    print("|---|---:|---:|---:|---:|")
    for version in (1, 2):
        tf, tb = host_time(_wrapped(version), shape)
        df, db = tf - bf_f, tb - bf_b
        print(f"| FSDP{version} | {df * 1e6:.0f} | {db * 1e6:.0f} | {df / plain_f:.2f} | {db / plain_b:.2f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
