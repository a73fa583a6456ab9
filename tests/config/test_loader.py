"""Scenario loading: resolution, overrides and every bad-input path gives one clear message."""

from __future__ import annotations

import pytest
import yaml

from simulator.config.loader import load_scenario, scenario_from_dict
from simulator.errors import InputError

BASE = {
    "name": "t",
    "model": "llama-3-8b",
    "cluster": {"topology": "dgx-h100", "nodes": 2},
    "training": {"seq_len": 4096, "micro_batch_size": 2, "global_batch_size": 512},
    "parallel": {"zero_stage": 3, "framework": "deepspeed"},
}


def _error(raw, overrides=None) -> str:
    with pytest.raises(InputError) as info:
        scenario_from_dict(raw, overrides=overrides)
    return str(info.value)


def test_bundled_scenario_resolves(olmo_scenario_path):
    s = load_scenario(olmo_scenario_path)
    assert s.model.name == "olmo-2-7b"
    assert s.cluster.gpu_spec.name == "h100-sxm"
    assert s.n_gpus == 8 and s.dp == 8
    # G = global batch / (micro batch × dp) = 1024 / (2 × 8) = 64
    assert s.grad_accum_steps == 64
    assert s.tokens_per_step == 1024 * 4096


def test_derived_dp_and_overrides():
    s = scenario_from_dict(BASE, overrides=["parallel.tp=2", "training.global_batch_size=1024"])
    assert s.n_gpus == 16 and s.dp == 8 and s.grad_accum_steps == 1024 // (2 * 8)


def test_gpu_override_in_chassis():
    s = scenario_from_dict(BASE, overrides=["cluster.topology=dgx-a100", "cluster.gpu=a100-40gb"])
    assert s.cluster.gpu_spec.hbm_usable_bytes == 42_405_855_232


def test_scenario_is_frozen():
    s = scenario_from_dict(BASE)
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen assignment
        s.training.seq_len = 8  # type: ignore[misc]


def test_misspelt_key_names_path_and_suggests():
    msg = _error(BASE, overrides=["parallel.zero_stag=2"])
    assert "parallel.zero_stag: unknown key" in msg and "'zero_stage'" in msg


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("model=llama-9b", "model: unknown model 'llama-9b'"),
        ("cluster.gpu=h100", "cluster.gpu: unknown GPU 'h100'"),
        ("cluster.topology=dgx-h1000", "cluster.topology: unknown topology 'dgx-h1000'"),
        ("parallel.reduce_bucket_size=0", "parallel.reduce_bucket_size"),
        ("training.micro_batch_size=-1", "training.micro_batch_size"),
        ("training.micro_batch_size=3", "must be a multiple of micro_batch_size x dp"),
        ("parallel.tp=3", "does not divide"),
        ("parallel.tp=16", "n_kv_heads"),
        ("parallel.pp=64", "exceeds the number of layers"),
        ("parallel.zero_stage=4", "parallel.zero_stage"),
        ("training.precision=fp8", None),  # H100 has FP8: valid
        ("cluster.gpus=12", "multiple of the node size"),
        ("cluster.gpus=64", "exceeds nodes x gpus_per_node"),
        ("parallel.offload_param=cpu", "offload_param needs zero_stage 3"),
    ],
)
def test_bad_values(override, expected):
    raw = dict(BASE)
    if override == "parallel.offload_param=cpu":
        raw = {**BASE, "parallel": {"zero_stage": 2}}
    if expected is None:
        scenario_from_dict(raw, overrides=[override])
        return
    assert expected in _error(raw, overrides=[override])


def test_precision_the_gpu_lacks():
    msg = _error(BASE, overrides=["cluster.topology=dgx-a100", "training.precision=fp8"])
    assert "training.precision" in msg and "fp8" in msg


def test_option_of_another_framework():
    raw = {**BASE, "parallel": {"framework": "ddp", "reduce_bucket_size": 1e8}}
    msg = _error(raw)
    assert "parallel.reduce_bucket_size is a deepspeed option" in msg
    raw = {**BASE, "parallel": {"framework": "ddp", "zero_stage": 2}}
    assert "zero_stage must be 0 with framework ddp" in _error(raw)


def test_fp8_param_gather_needs_fp8_and_a_framework_that_has_it():
    raw = {**BASE, "parallel": {"framework": "fsdp", "fp8_param_gather": True}}
    assert "parallel.fp8_param_gather needs training.precision: fp8" in _error(raw)
    scenario_from_dict(raw, overrides=["training.precision=fp8"])  # valid
    raw = {**BASE, "parallel": {"framework": "deepspeed", "fp8_param_gather": True}}
    assert "parallel.fp8_param_gather is a Megatron (framework ddp) / FSDP option" in _error(
        raw, overrides=["training.precision=fp8"])


def test_missing_section():
    raw = {k: v for k, v in BASE.items() if k != "training"}
    assert "training: required key is missing" in _error(raw)


def test_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_scenario(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(InputError, match="malformed YAML .* line"):
        load_scenario(bad)
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="mapping"):
        load_scenario(not_mapping)


def test_model_mapping_and_hf_config_relative_to_scenario(tmp_path):
    (tmp_path / "cfg.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,'
        ' "intermediate_size": 512, "vocab_size": 1000}'
    )
    raw = {**BASE, "model": {"hf_config": "cfg.json"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    s = load_scenario(path)
    assert s.model.n_layers == 2 and s.model.hidden_size == 256
    inline = {**BASE, "model": {"n_layers": 2, "hidden_size": 256, "n_heads": 4, "ffn_hidden_size": 512,
                                "vocab_size": 1000, "mlp": "gelu"}}
    assert scenario_from_dict(inline).model.mlp == "gelu"
    msg = _error({**BASE, "model": {"n_layers": 2, "hidden_size": 256, "n_heads": 3, "ffn_hidden_size": 512,
                                    "vocab_size": 1000}})
    assert "model" in msg and "n_heads" in msg


def test_nested_override_of_catalog_model_and_topology():
    s = scenario_from_dict(BASE, overrides=["model.n_layers=2", "model=llama-2-7b"])
    assert s.model.n_layers == 2 and s.model.vocab_size == 32000  # reference first, then the nested edit


def test_an_override_gpu_bounds_the_nodes_scale_up_bandwidth():
    """cluster.gpu h800 in a DGX H100: the H800's 8 NVLink4 links give 200 GB/s per direction (catalog),
    the chassis' NVSwitches 450 for the H100's 18; the GPU's ports bound it. The bundled GPU and one with
    more links than the fabric (none here) keep the topology's figure."""
    h800 = scenario_from_dict({**BASE, "cluster": {**BASE["cluster"], "gpu": "h800"}})
    assert h800.cluster.topology.intra_node.bandwidth_GBps_per_gpu == 200
    assert scenario_from_dict(BASE).cluster.topology.intra_node.bandwidth_GBps_per_gpu == 450
    from simulator.network import build_cluster

    cluster = build_cluster(h800.cluster.topology, 1, h800.cluster.gpu_spec)
    # a non-blocking NVSwitch node of 8 GPUs: bisection (8/2) x 200 GB/s
    assert cluster.nvlink_bisection_Bps() == pytest.approx(4 * 200e9)


def test_a_gpu_without_scale_up_links_cannot_sit_on_nvswitch():
    msg = _error({**BASE, "cluster": {**BASE["cluster"], "gpu": "h100-pcie"}})
    assert "cluster.gpu h100-pcie" in msg and "PCIe topology" in msg


def test_mxfp8_needs_block_scaled_fp8_gemms():
    """MXFP8 is Blackwell's (and CDNA4's) block-scaled FP8; Hopper's tensor cores scale per tensor only."""
    fp8 = {**BASE["training"], "precision": "fp8", "kernels": {"fp8_recipe": "mxfp8"}}
    msg = _error({**BASE, "training": fp8})
    assert "training.kernels.fp8_recipe mxfp8" in msg and "h100-sxm (hopper)" in msg and "current" in msg
    b200 = scenario_from_dict({**BASE, "cluster": {"topology": "dgx-b200", "nodes": 2}, "training": fp8})
    assert b200.training.kernels.fp8_recipe == "mxfp8"


def test_moe_imbalance_is_bounded_by_experts_over_top_k():
    """A token reaches an expert at most once, so max/mean tokens per expert is at most n_experts/top_k
    (Mixtral 8/2 = 4); above it is a typo (a bug bash's imbalance 100 ran a 1,165 s step)."""
    base = {**BASE, "model": "mixtral-8x7b", "parallel": {"framework": "ddp", "ep": 8}}
    assert "n_experts / top_k" in _error(base, ["model.moe.imbalance=4.5"])
    assert scenario_from_dict(base, overrides=["model.moe.imbalance=4"]).model.moe.imbalance == 4


def test_moe_default_imbalance_is_capped_at_experts_over_top_k():
    """The default 1.25 is capped where no expert can get that much: 7 of 8 experts per token leave at most
    8/7 of the mean (a bug bash found top_k 8 of 8 refused without imbalance being set)."""
    from simulator.config.moe import MoEConfig

    assert MoEConfig(n_experts=8, top_k=8, expert_ffn_hidden_size=64).imbalance == 1.0
    assert MoEConfig(n_experts=8, top_k=7, expert_ffn_hidden_size=64).imbalance == 8 / 7
    assert MoEConfig(n_experts=8, top_k=2, expert_ffn_hidden_size=64).imbalance == 1.25
    with pytest.raises(ValueError, match="n_experts / top_k"):
        MoEConfig(n_experts=8, top_k=8, expert_ffn_hidden_size=64, imbalance=1.25)


def test_ddp_no_sync_on_fsdp_names_fsdp_no_sync():
    """DDP's no_sync under FSDP points to FSDP's own switch (a review found FSDP had none to point to)."""
    fsdp = {**BASE, "parallel": {"framework": "fsdp"}}
    assert "set parallel.fsdp_no_sync" in _error(fsdp, ["parallel.no_sync=true"])
    ddp = {**BASE, "parallel": {"framework": "ddp"}}
    assert "set parallel.no_sync" in _error(ddp, ["parallel.fsdp_no_sync=true"])


def test_moe_capped_default_imbalance_stays_a_default():
    """The capped default is not written back as if the user set it (a review found a reloaded top_k 8
    scenario kept imbalance 1.0 after top_k went back to 2)."""
    from simulator.config.moe import MoEConfig

    capped = MoEConfig(n_experts=8, top_k=8, expert_ffn_hidden_size=64)
    assert capped.imbalance == 1.0 and "imbalance" not in capped.model_fields_set
    again = MoEConfig(**{**capped.model_dump(exclude_unset=True), "top_k": 2})
    assert again.imbalance == 1.25
