"""What one training step does on one representative rank, as a task graph.

``ir`` (tasks, ``StepGraph``), ``mesh`` (rank ↔ GPU groups), ``work`` (ops and parameter counts per
unit), ``schedule`` (micro-batch skeleton, bucketing), ``prefetch``, and one builder per framework:
``ddp``, ``deepspeed`` (ZeRO 0-3, ZeRO++, 1-bit Adam), ``fsdp``, plus ``offload``. ``build``
dispatches; ``volume`` counts bytes per rank from a graph.
"""
