"""Import framework configs into scenarios and export scenarios as launchable framework configs.

One module per framework (``megatron``, ``torchtitan``, ``nemo``, ``deepspeed``, ``fsdp`` and
``fsdp_import``, ``accelerate``); ``common`` holds the shared result types, ``pipeline`` the path from
a config to a validated scenario and back, ``logs`` the log readers of ``dtsim calibrate``. Importers
return a
raw scenario fragment plus every flag they ignored with the reason; exporters return the file text
plus what the target cannot express. ``simulator.cli_interop`` wires them to ``dtsim import`` and
``dtsim export``.
"""

from __future__ import annotations

#: ``dtsim import FORMAT`` values.
IMPORT_FORMATS = ("megatron", "torchtitan", "nemo", "deepspeed", "accelerate", "fsdp")
#: ``dtsim export --to`` values.
EXPORT_FORMATS = ("deepspeed", "megatron", "torchtitan", "fsdp", "accelerate")
