"""ZeRO-Offload on a Grace-Blackwell rack: host copies ride NVLink-C2C, not PCIe (issue 16 item 4)."""

from __future__ import annotations

import pytest
import yaml

from simulator.api import simulate
from simulator.config.loader import load_scenario
from simulator.config.topology import load_topology, parse_topology

SCENARIO = """
name: offload-gb200
model: llama-2-7b
cluster: {topology: TOPO, nodes: 1, gpus: 8}
training: {seq_len: 1024, micro_batch_size: 1, global_batch_size: 8, precision: bf16}
parallel: {framework: deepspeed, zero_stage: 2, offload_optimizer: cpu}
"""


def _run(tmp_path, topo_ref: str):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("TOPO", topo_ref))
    return simulate(load_scenario(path, []))


def test_offload_copies_use_c2c_bandwidth(tmp_path):
    c2c = _run(tmp_path, "gb200-nvl72")
    # The same rack with the Grace memory reached over the trays' PCIe Gen5 instead of NVLink-C2C.
    data = load_topology("gb200-nvl72").model_dump()
    data["host"]["c2c_GBps"] = None
    data["name"] = "gb200-nvl72-pcie"
    pcie_path = tmp_path / "gb200-pcie.yaml"
    pcie_path.write_text(yaml.safe_dump(parse_topology(data).model_dump(mode="json")))
    pcie = _run(tmp_path, str(pcie_path))
    on_c2c, on_pcie = c2c.breakdown["offload"]["on_link_s"], pcie.breakdown["offload"]["on_link_s"]
    assert on_c2c > 0
    # Same bytes; per-GPU host bandwidth: C2C 900 GB/s bidirectional per superchip [S26] = 450 per
    # direction shared by its 2 GPUs = 225 GB/s, against the superchip's PCIe Gen5 x16 uplink (63 GB/s
    # per direction) shared by the same 2 GPUs = 31.5 GB/s.
    assert on_pcie / on_c2c == pytest.approx(225 / 31.5, rel=1e-6)


def test_cpu_adam_rate_is_shared_by_the_gpus_of_one_host(tmp_path):
    """DeepSpeedCPUAdam runs at 4.5e9 parameters/s per host (efficiency.yaml), shared by the GPU processes
    on that host: an NVL72 compute tray is a host of 4 GPUs, a DGX B200 one of 8. Llama 2 7B
    (6,738,415,616 parameters) with ZeRO-2 over 8 GPUs: each GPU steps 842,301,952 of them."""
    shard = 6_738_415_616 / 8
    gb200 = _run(tmp_path, "gb200-nvl72").breakdown["offload"]["cpu_optimizer_s"]
    dgx = _run(tmp_path, "dgx-b200").breakdown["offload"]["cpu_optimizer_s"]
    assert gb200 == pytest.approx(shard / (4.5e9 / 4), rel=1e-9)
    assert dgx == pytest.approx(shard / (4.5e9 / 8), rel=1e-9)
