"""The README's scenario key table names every scenario key (a key a user cannot find is a key they
cannot set): each field of the scenario's sections, walked recursively, appears in a backticked span of
the table. A bug bash found four missing (training.kernels.compile, training.kernels.fp8_recipe,
training.grad_clipping, parallel.gradient_as_bucket_view) and four model keys."""

from __future__ import annotations

import re
from pathlib import Path

from simulator.config.scenario import Scenario

README = Path(__file__).resolve().parents[2] / "README.md"
#: Fields resolved from a catalog or a file, documented by their reference (cluster.topology, cluster.gpu).
RESOLVED = ("topology", "gpu")


def _keys(model, prefix: str = ""):
    for name, field in model.model_fields.items():
        kinds = getattr(field.annotation, "__args__", None) or (field.annotation,)
        sub = next((k for k in kinds if hasattr(k, "model_fields")), None)
        if sub is not None and name not in RESOLVED:
            yield from _keys(sub, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", name


def test_every_scenario_key_is_in_the_readme_table():
    text = README.read_text()
    table = text[text.index("Every key, with its default:"):text.index("## Adding a GPU")]
    spans = re.findall(r"`([^`]*)`", table)
    missing = [path for path, name in _keys(Scenario) if not any(re.search(rf"\b{name}\b", s) for s in spans)]
    assert not missing, f"README scenario key table lacks {missing}"
