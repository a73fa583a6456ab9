"""The GPU and model catalogs hold datasheet / paper values (numbers typed here from the sources)."""

from __future__ import annotations

import re

import pytest

from simulator import catalog

REQUIRED_GPUS = [
    "v100", "a100-40gb", "a100-80gb", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h100-nvl",
    "h200", "b200", "l40s", "rtx-4090", "rtx-3090", "mi250x", "mi300x",
]
REQUIRED_MODELS = [
    "gpt3-175b", "megatron-gpt-1.7b", "megatron-gpt-530b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
    "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "olmo-2-1b", "olmo-2-7b", "olmo-2-13b", "olmo-2-32b",
    "mpt-7b", "mpt-30b", "mpt-70b", "opt-175b", "bloom-176b",
]


def test_required_gpus_present_with_sources():
    gpus = catalog.gpus()
    for name in REQUIRED_GPUS:
        assert name in gpus, name
        assert gpus[name].sources, f"{name} has no source"


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("h100-sxm", "bf16", 989.5),  # H100 datasheet: 1,979 with sparsity, dense is half
        ("h100-pcie", "bf16", 756.0),  # the PCIe card, not the SXM
        ("a100-80gb", "bf16", 312.0),
        ("a100-40gb", "tf32", 156.0),
        ("v100", "fp16", 125.0),
        ("rtx-4090", "bf16", 165.2),  # FP32-accumulate rate used for mixed-precision training
        ("mi300x", "bf16", 1307.4),
        ("b200", "fp8", 4500.0),
    ],
)
def test_dense_peaks(name, dtype, tflops):
    assert catalog.get_gpu(name).peak_flops(dtype) == pytest.approx(tflops * 1e12)


def test_missing_dtype_is_an_error():
    with pytest.raises(ValueError, match="fp8"):
        catalog.get_gpu("a100-80gb").peak_flops("fp8")


def test_usable_memory_is_measured_not_marketing():
    # deviceQuery on an A100 40GB: 42,405,855,232 bytes (hardware.md [S28]); not 40e9, not 40 GiB.
    assert catalog.get_gpu("a100-40gb").hbm_usable_bytes == 42_405_855_232
    for spec in catalog.gpus().values():
        assert spec.hbm_usable_bytes < spec.hbm_GB * 2**30


def test_bandwidths():
    assert catalog.get_gpu("h100-sxm").nvlink_Bps == 450e9  # per direction (900 bidirectional)
    assert catalog.get_gpu("a100-80gb").hbm_bandwidth_Bps == 2039e9
    assert catalog.get_gpu("a100-40gb").hbm_bandwidth_Bps == 1555e9
    assert not catalog.get_gpu("rtx-4090").p2p


def test_models_present_and_named_consistently():
    models = catalog.models()
    for name in REQUIRED_MODELS:
        assert name in models, name
    for name in models:
        assert re.fullmatch(r"[a-z0-9.\-]+", name), name


def test_unknown_name_lists_valid_names():
    with pytest.raises(KeyError) as info:
        catalog.get_gpu("h100")
    message = info.value.args[0]
    assert "h100-sxm" in message and "a100-80gb" in message


def test_swiglu_limit_needs_experts_with_swiglu():
    # the clamp is costed in the experts' activation only (GPT-OSS); on a dense model it would be ignored
    dense = catalog.get_model("llama-3-8b")
    with pytest.raises(ValueError, match="swiglu_limit"):
        dense.model_validate({**dense.model_dump(), "swiglu_limit": 7.0})
