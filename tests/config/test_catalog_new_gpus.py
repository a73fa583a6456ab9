"""The GPUs added for issue 16 / issue 12 item 3: each number typed here from the source named beside it
(tags as in docs/hardware.md), or derived by the arithmetic written in the test."""

from __future__ import annotations

import pytest

from simulator import catalog

NEW_GPUS = ["b300", "gb200", "gb300", "h800", "a800", "h100-sxm-96gb-hbm2e", "mi325x", "mi355x"]


def test_new_gpus_present_with_sources_and_confidence():
    gpus = catalog.gpus()
    for name in NEW_GPUS:
        spec = gpus[name]
        assert spec.sources and spec.confidence in "VSDU", name


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        # HGX B300 table [G3]: BF16 36 PF and FP8 72 PF *with sparsity* for 8 GPUs -> /8 /2 dense.
        ("b300", "bf16", 36_000 / 8 / 2),
        ("b300", "fp8", 72_000 / 8 / 2),
        ("b300", "fp32", 600 / 8),  # FP32 600 TF per 8 GPUs [G3]
        # Lockwood's GB200 (1,200 W) table [S15]: dense BF16 2,500, FP8 5,000.
        ("gb200", "bf16", 2500.0),
        ("gb200", "fp8", 5000.0),
        # GB300 NVL72: 360 PF FP8 for training over 72 GPUs [G1].
        ("gb300", "fp8", 360_000 / 72),
        # H800 keeps H100 SXM's tensor rates (datasheet 1,979 sparse -> 989.5 dense) [G9][S3].
        ("h800", "bf16", 1979 / 2),
        ("a800", "bf16", 312.0),  # A100 SXM rate [S4]
        ("mi325x", "bf16", 1307.4),  # [S20]
        ("mi325x", "fp8", 2614.9),
        # MI355X: 256 CUs x 8,192 FP8 FLOP/clk/CU x 2.4 GHz [G12][G13]; BF16 half of it.
        ("mi355x", "fp8", 256 * 8192 * 2.4e9 / 1e12),
        ("mi355x", "bf16", 256 * 4096 * 2.4e9 / 1e12),
    ],
)
def test_dense_peaks_new(name, dtype, tflops):
    assert catalog.get_gpu(name).peak_flops(dtype) == pytest.approx(tflops * 1e12, rel=1e-4)


@pytest.mark.parametrize(
    ("name", "fp4_tflops"),
    [
        ("b200", 9000.0),  # Lockwood HGX B200 (1,000 W) dense FP4 [S15]
        ("gb200", 10000.0),  # Lockwood GB200 (1,200 W) dense FP4 [S15]
        ("gb300", 15000.0),  # 'Blackwell Ultra tops at 15 FP4 PFLOPS' [G11]
    ],
)
def test_fp4_is_dense(name, fp4_tflops):
    assert catalog.get_gpu(name).peak_tflops.fp4 == pytest.approx(fp4_tflops)


def test_memory_links_and_power():
    g = catalog.get_gpu
    assert g("b300").hbm_GB == 288 and g("b300").hbm_bandwidth_GBps == 8000  # [G1][G2]
    assert g("b300").tdp_W == 1100  # HGX B300 'up to 1,100 W' [G2]
    assert g("gb300").tdp_W == 1400  # [G1]
    assert g("gb200").hbm_GB == 186 and g("gb200").tdp_W == 1200  # [S25][S15]
    assert g("gb300").hbm_bandwidth_GBps == 576_000 / 72  # 576 TB/s per rack [G1]
    # NVLink 5: 1.8 TB/s bidirectional per GPU = 900 per direction.
    for name in ("b300", "gb200", "gb300"):
        assert g(name).nvlink_GBps_per_direction == 1800 / 2
    # H800 / A800: 400 GB/s bidirectional NVLink = 200 per direction [G9][G10].
    assert g("h800").nvlink_GBps_per_direction == 400 / 2
    assert g("a800").nvlink_GBps_per_direction == 400 / 2
    # MI355X: ~153.6 GB/s bidirectional per Infinity Fabric link [G14], one link to each of 7 peers.
    assert g("mi355x").nvlink_GBps_per_direction == pytest.approx(153.6 / 2 * 7)
    assert g("mi355x").tdp_W == 1400 and g("mi325x").tdp_W == 1000  # [G11][S20]
    assert g("mi325x").hbm_GB == 256 and g("mi325x").hbm_bandwidth_GBps == 6000  # [S20]
    # torchtitan's Grand Teton H100: "96GB HBM2e with 2.4 TB/sec", "default 500W power limit" [G8].
    h = g("h100-sxm-96gb-hbm2e")
    assert h.hbm_GB == 96 and h.tdp_W == 500 and h.hbm_bandwidth_GBps == 2400
    assert h.confidence == "U"


def test_usable_memory_uses_the_catalog_ratio():
    # D: label_GB * 2**30 * (42,405,855,232 / 40 GiB), rounded down to a MiB (gpus.yaml header).
    ratio = 42_405_855_232 / (40 * 2**30)
    for name in NEW_GPUS:
        spec = catalog.get_gpu(name)
        expected = int(spec.hbm_GB * 2**30 * ratio) // 2**20 * 2**20
        assert spec.hbm_usable_bytes == expected, name


def test_power_limited_h100_runs_at_the_midpoint_of_torchtitans_bounds():
    # torchtitan [G8]: the 500 W HBM2e H100's "actual peak TFLOPs should be between SXM and NVL".
    # H100 SXM dense BF16 989.5 TF [S3], H100 NVL 835.5 TF [S13]: midpoint / SXM = 912.5 / 989.5.
    h = catalog.get_gpu("h100-sxm-96gb-hbm2e")
    assert h.power_limited_peak_fraction == pytest.approx((989.5 + 835.5) / 2 / 989.5, abs=5e-5)
    # datasheet peaks kept (MFU is quoted against them); the compute model runs at the sustained peak
    assert h.peak_flops("bf16") == 989.5e12
    assert h.sustained_peak_flops("bf16") == pytest.approx(912.5e12, rel=1e-4)
    assert h.sustained_peak_flops("fp8") == pytest.approx(1979e12 * 912.5 / 989.5, rel=1e-4)
    # same GH100 silicon as the SXM part: the same max-achievable-matmul fraction [S1]
    assert h.mamf_fraction == catalog.get_gpu("h100-sxm").mamf_fraction
    # a part without a power cap runs at its datasheet peak
    sxm = catalog.get_gpu("h100-sxm")
    assert sxm.power_limited_peak_fraction is None and sxm.sustained_peak_flops("bf16") == 989.5e12


@pytest.mark.parametrize(("name", "sibling"), [("h200", "h100-sxm"), ("h800", "h100-sxm"), ("a800", "a100-80gb")])
def test_same_silicon_parts_take_the_measured_bf16_mamf_of_their_sibling(name, sibling):
    # [S1] MAMF: H100 SXM 794.5 of 989.5 TF = 0.803, A100 SXM 271.2 of 312 TF = 0.869; H200, H800
    # and A800 are the same silicon at the same clocks and power (hardware.md §0), unmeasured in BF16.
    expected = {"h100-sxm": 794.5 / 989.5, "a100-80gb": 271.2 / 312}[sibling]
    gpu = catalog.get_gpu(name)
    assert gpu.mamf_fraction == catalog.get_gpu(sibling).mamf_fraction
    assert gpu.mamf_fraction == pytest.approx(expected, abs=5e-4)


def test_blackwell_mamf_fractions_from_their_measurements():
    g = catalog.get_gpu
    # [S1] FP8 MAMF: B300 SXM 3,353.3 of 4,500 TF; GB200 SXM 1,822 of 2,500 (BF16), 3,615.6 of 5,000 (FP8)
    assert g("b300").mamf_fraction_fp8 == pytest.approx(3353.3 / 4500, abs=5e-4)
    # GB300 has no MAMF: GB200's times the GB200 / GB300 time ratio of the same twelve grouped-GEMM kernels
    # under the same software [G17] (fused cuDNN + unfused TE, six activations each, ms)
    gb200_ms = [1.498, 0.850, 0.749, 0.720, 1.500, 0.870, 1.907, 1.734, 1.018, 1.329, 1.864, 1.837]
    gb300_ms = [1.364, 0.760, 0.687, 0.698, 1.361, 0.767, 1.681, 1.549, 0.892, 1.170, 1.695, 1.669]
    gain = sum(gb200_ms) / sum(gb300_ms)
    assert g("gb300").mamf_fraction == pytest.approx(1822 / 2500 * gain, abs=5e-4)
    assert g("gb300").mamf_fraction_fp8 == pytest.approx(3615.6 / 5000 * gain, abs=5e-4)
