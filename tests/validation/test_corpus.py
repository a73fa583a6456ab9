"""The validation corpus (``simulator/validation/runs_corpus.yaml``): complete entries, unique ids,
publication keys, and FLOP conventions that reproduce the sources' own figures by hand."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simulator.errors import InputError
from simulator.validation.suite import Run, load_runs, scenario_for
from tests.validation.runs import CORPUS, corpus_run


def test_ids_unique_across_both_files():
    ids = [r.id for r in load_runs()]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 150


def test_every_run_names_its_publication():
    """Leave-one-source-out cross-validation needs the publication of every run, in both files."""
    runs = load_runs()
    assert all(r.source_key for r in runs)
    by_key: dict[str, set[str]] = {}
    for r in runs:
        by_key.setdefault(r.source_key, set()).add(r.gpu)
    assert len(by_key) >= 20


def test_no_measurement_is_listed_twice():
    """A corpus row already in runs.yaml would count one measurement twice in every MAPE."""
    seen: dict[tuple, str] = {}
    for r in load_runs():
        sc = r.scenario or r.extra.get("pending_scenario") or {}
        tr = sc.get("training", {})
        key = (r.source_key, r.gpu, r.extra.get("n_gpus"), str(sc.get("model")), tr.get("seq_len"),
               tr.get("precision"), tr.get("global_batch_size"), r.measured.get("tokens_per_s_per_gpu"),
               r.measured.get("tflops_per_gpu"))
        if r.expressible:
            assert key not in seen, (r.id, seen.get(key))
            seen[key] = r.id


def test_no_reprinted_measurement_is_simulated_twice():
    """Two simulated runs on one GPU type with the same measured tokens/s/GPU to the token are one
    measurement printed twice (Megatron-Bridge's 26.02 GB200 GPT-OSS row repeats 25.11's 15,754
    under another batch and recipe): it would count twice in every MAPE. The TFLOP/s figure is part of the
    measurement: Megatron-Bridge's 26.04.01 table prints tokens/s truncated to bfloat16, so two layouts of
    one model can share a printed 1,024 tokens/s/GPU with different TFLOP/s (2,599 and 2,585 on GB300). So is the GPU
    count: a weak-scaling table that prints its step time to three digits repeats it at several scales (DGX Cloud's
    Nemotron-4 15B: 2.86 s on 32 and on 64 H100, 183,317 and 366,635 tokens/s)."""
    seen: dict[tuple, str] = {}
    for r in load_runs():
        tps = r.measured.get("tokens_per_s_per_gpu")
        key = (r.gpu, r.extra.get("n_gpus"), tps, r.measured.get("tflops_per_gpu"))
        if r.expressible and tps:
            assert key not in seen, (r.id, seen.get(key))
            seen[key] = r.id


def test_a_configuration_measured_again_in_a_later_release_counts_once():
    """NVIDIA's tables (NeMo 24.07 -> 25.07, Megatron-Bridge 25.09 -> 26.02.01) re-measure layouts release
    after release; each configuration counts once, at its latest measurement (docs/validation-corpus.md).
    Two simulated runs of one series with the same printed configuration must come from one publication
    (two settings dtsim cannot tell apart, e.g. torchao's MXFP8 scale rounding), never from two releases. CUDA-graph
    scopes, recomputed modules, the MoE dispatcher and EP overlap are part of a configuration (Together's and
    Megatron-Bridge's ablations measure them side by side)."""
    seen: dict[tuple, Run] = {}
    for r in load_runs():
        if not r.expressible:
            continue
        sc = r.scenario
        tr, pa = sc.get("training", {}), sc.get("parallel", {})
        recipe = (tr.get("kernels") or {}).get("fp8_recipe") or ("delayed" if tr.get("precision") == "fp8" else None)
        key = (r.source_key, r.gpu, r.extra.get("n_gpus"), str(sc.get("model")), tr.get("seq_len"), tr.get("precision"),
               recipe, tr.get("micro_batch_size"), tr.get("global_batch_size"), tr.get("activation_checkpointing"),
               *(pa.get(k, 1) for k in ("tp", "pp", "cp", "ep")), pa.get("virtual_stages"), pa.get("framework"),
               bool(pa.get("tp_comm_overlap")), bool((tr.get("kernels") or {}).get("compile")), tuple(sorted(r.overrides)),
               tuple((tr.get("kernels") or {}).get("cuda_graphs") or ()), tuple(tr.get("recompute_modules") or ()),
               pa.get("moe_dispatcher"), bool(pa.get("moe_a2a_overlap")))
        if key in seen:
            assert seen[key].source == r.source, (r.id, seen[key].id)
        seen[key] = r


def test_the_moe_dispatcher_is_the_one_the_assumptions_state():
    """A run simulated with DeepEP / HybridEP states it (``parallel.moe_dispatcher deepep``) in its assumptions, or
    in those of the run it says it is ``as``, and a run whose assumptions take a dispatcher that way is simulated
    with it, so that a row's scenario and its stated preset cannot drift apart (docs/accuracy-history.md item 42
    corrected five rows whose preset had moved to HybridEP)."""
    runs = {r.id: r for r in load_runs() if r.expressible}

    def states(r: Run, depth: int = 0) -> bool:
        text = r.assumed or ""
        if "moe_dispatcher deepep" in text:
            return True
        first = text.split()[1] if text.startswith("as ") and len(text.split()) > 1 else ""
        return depth < 3 and first in runs and states(runs[first], depth + 1)

    for r in runs.values():
        deepep = (r.scenario.get("parallel") or {}).get("moe_dispatcher") == "deepep"
        assert deepep == states(r), r.id


def test_every_corpus_run_is_complete():
    for run in CORPUS:
        assert run.source and run.source_key and run.flops_convention, run.id
        assert run.extra.get("source_detail"), run.id
        assert run.measured.get("tokens_per_s_per_gpu", 0) > 0, run.id
        assert run.split is None, run.id  # no corpus run is part of the fixed calibration split
        assert run.expressible != bool(run.not_expressible), run.id


def test_every_corpus_scenario_validates():
    for run in CORPUS:
        if run.expressible:
            assert scenario_for(run).n_gpus == run.extra["n_gpus"], run.id


def test_corpus_spans_gpus_frameworks_scales_and_moe():
    gpus = {r.gpu for r in CORPUS}
    assert {"A100", "H100", "H200", "B200"} <= gpus
    assert {"FSDP", "Megatron"} <= {r.framework for r in CORPUS}
    moe_models = {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b"}
    # a model is a catalog name or, for shapes not in the catalog (Code Llama 34B), a mapping
    moe = [r for r in CORPUS if r.expressible and isinstance(r.scenario["model"], str) and r.scenario["model"] in moe_models]
    assert len(moe) >= 10
    # every source either force-balances tokens over experts or caps them at the mean with a capacity factor
    # of 1 (Pai-Megatron-Patch issue #643: --moe-expert-capacity-factor 1.0, token drop): no expert above the mean
    assert all({"model.moe.imbalance=1.0", "model.moe.capacity_factor=1.0"} & set(r.overrides) for r in moe)
    assert {"B200", "GB200", "GB300"} <= {r.gpu for r in CORPUS if r.expressible}


def test_duplicate_id_is_refused():
    text = yaml.safe_dump({"runs": [{"id": "a", "source": "s", "gpu": "A100", "framework": "FSDP",
                                     "parallelism": "pure_dp", "measured": {}}] * 2})
    with pytest.raises(InputError, match="'a' appears twice"):
        load_runs(text)


def test_llmfoundry_mfu_convention_by_hand():
    """MPT-1b, H100, 8 GPUs, seq 2048 row: NumParams 1,315,950,592; MFU 41.82 %; 45,455 tokens/s/GPU.
    collect_results.py: FLOP/token = 6·N + 12·n_layers·d_model·seq (24 layers, d_model 2048, mpt-1b.yaml)."""
    run = corpus_run("llmfoundry-mpt1b-h100-8gpu-seq2048")
    per_token = 6 * 1_315_950_592 + 12 * 24 * 2048 * 2048
    assert run.flops_per_token == pytest.approx(per_token, rel=2e-3)
    assert per_token * 45_455 / 989.5e12 == pytest.approx(0.4182, abs=5e-4)


def test_nemo_tflops_pair_by_hand():
    """NeMo 24.07 LLAMA2-7B row: 16,847 tokens/s/GPU at 776 model TFLOP/s/GPU -> 776e12 / 16,847 FLOP/token."""
    run = corpus_run("nemo2407-llama2-7b-8gpu-fp8")
    assert run.flops_per_token == pytest.approx(776e12 / 16_847, rel=1e-5)
    # ~6 N + attention for Llama 2 7B (6.74e9 params): the convention is model FLOPs, no recompute.
    assert 6 * 6.74e9 < run.flops_per_token < 8 * 6.74e9


def test_corpus_file_ships_with_the_package():
    assert resources.files("simulator.validation").joinpath("runs_corpus.yaml").is_file()


def test_nemo_2407_flop_formula_by_hand_for_nemotron_340b():
    """NeMo 24.07 ``flops_formulas.nemotron`` per token: L·h²·(12 + 12·G/A + 12·f/h + 12·s/h + 6·V/(L·h)), with the
    Nemotron-4 340B shape of NeMo's Nemotron4Config340B (L 96, h 18432, A 96, G 8, f 73728; s 4096; V 256000).
    The table's pair (678 TFLOP/s at 322 tokens/s/GPU) agrees to the rounding of its 3-digit TFLOP/s."""
    run = corpus_run("nemo2407-nemotron-340b-128gpu-fp8")
    L, h, A, G, f, s, V = 96, 18432, 96, 8, 73728, 4096, 256000
    per_token = L * h * h * (12 + 12 * G / A + 12 * f / h + 12 * s / h + 6 * V / (L * h))
    assert run.flops_per_token == pytest.approx(per_token, rel=2e-3)
    assert run.scenario["model"] == "nemotron-4-340b"


def test_nemotron4_340b_report_row_by_hand():
    """The Nemotron-4 340B report's last batch-ramp stage (Table 2): 2,304 sequences of 4,096 tokens every 8.0 s
    on 6,144 H100 is 192.0 tokens/s/GPU; at NeMo's per-token FLOPs of the shape (the formula of the test above,
    12 + 12·G/A = 13, 12·f/h = 48, 12·s/h = 2.67, 6·V/(L·h) = 0.87: 2.105e12) that is 40.9% of the 989 TFLOP/s BF16
    peak, the table's 41-42% MFU."""
    run = corpus_run("nemotron4-340b-report-h100-6144gpu-bf16")
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(2304 * 4096 / 8.0 / 6144)
    assert run.scenario["training"]["global_batch_size"] == 2304 and run.scenario["cluster"]["nodes"] * 8 == 6144
    L, h, A, G, f, s, V = 96, 18432, 96, 8, 73728, 4096, 256000
    per_token = L * h * h * (12 + 12 * G / A + 12 * f / h + 12 * s / h + 6 * V / (L * h))
    assert 0.405 <= run.measured_tokens_per_s_per_gpu * per_token / 989e12 <= 0.425


def test_dgx_cloud_nemotron4_rows_by_hand():
    """DGX Cloud's Nemotron-4 340B table (nemotron/README_340b.md): 4,096 x 32 / 4.61 s / 128 GPUs = 222.1 tokens/s
    per GPU (the table's 28,432 tokens/s over 128), and the README's MFU of that step, 32 x 1.01e16 / 4.61 / 128 /
    989e12 = 55.38%, as printed; its model flops per sequence are 4,096 x (24·L·h² + 12·L·h·s + 48·L·h² +
    6·V·h) = 1.01e16 (the README's Notes, L 96, h 18432, V 256000)."""
    run = corpus_run("dgxc2409-h100-nemotron4-340b-128gpu-bf16")
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(4096 * 32 / 4.61 / 128, rel=1e-4)
    assert run.measured_tokens_per_s_per_gpu == pytest.approx(28432 / 128, rel=1e-3)
    L, h, s, V = 96, 18432, 4096, 256000
    per_sequence = s * (24 * L * h * h + 12 * L * h * s + 48 * L * h * h + 6 * V * h)
    assert per_sequence == pytest.approx(1.01e16, rel=5e-3)
    assert 32 * 1.01e16 / 4.61 / 128 / 989e12 == pytest.approx(0.5538, abs=5e-5)
    fp8 = corpus_run("dgxc2409-h100-nemotron4-340b-2048gpu-fp8")
    assert fp8.measured_tokens_per_s_per_gpu == pytest.approx(600903 / 2048, rel=1e-3)
    # the 15B table (nemotron/README_15b.md): 4,096 x 64 / 2.83 s / 16 GPUs = 5,789 tokens/s per GPU (92,630 / 16), and
    # its MFU, 64 x 434.5e12 / 2.83 / 16 / 989e12 = 62.1%, from 4,096 x (24·L·h² + 12·L·h·s + 48·L·h² + 6·V·h), L 32, h 6144
    small = corpus_run("dgxc2409-h100-nemotron4-15b-16gpu-bf16")
    assert small.measured_tokens_per_s_per_gpu == pytest.approx(92630 / 16, rel=1e-3)
    L, h = 32, 6144
    assert s * (24 * L * h * h + 12 * L * h * s + 48 * L * h * h + 6 * V * h) == pytest.approx(434.5e12, rel=1e-3)
    assert 64 * 434.5e12 / 2.83 / 16 / 989e12 == pytest.approx(0.6210, abs=5e-4)


def test_nemo2_flop_formula_by_hand_for_nemotron4_15b():
    """NeMo 25.02 DGX-B200 Nemotron-15B row (1,387 TFLOP/s at 14,760 tokens/s/GPU) against NeMo 2.0's
    ``flops_formulas.nemotron`` of that period, causal attention counted in full: L·h²·(12 + 12·G/A + 12·f/h +
    12·s/h + 6·V/(L·h)) with Nemotron4Config15B (L 32, h 6144, A 48, G 8, f 24576; s 4096; V 256000)
    = 32·6144²·77.8125 = 9.3998e10 FLOP/token; dtsim's own count of the catalog shape is the same."""
    from simulator.catalog import get_model
    from simulator.workload import flops

    run = corpus_run("nemo2502-b200-nemotron4-15b-64gpu-fp8")
    L, h, A, G, f, s, V = 32, 6144, 48, 8, 24576, 4096, 256000
    per_token = L * h * h * (12 + 12 * G / A + 12 * f / h + 12 * s / h + 6 * V / (L * h))
    assert per_token == pytest.approx(9.3998e10, rel=1e-4)
    assert run.flops_per_token == pytest.approx(per_token, rel=1e-3)
    model = flops.step(get_model("nemotron-4-15b"), 1, s, causal=False)
    assert model.train_flops_per_token == pytest.approx(per_token, rel=1e-3)


def test_megatron_bridge_2509_counts_causal_attention_as_half():
    """Megatron-Bridge 25.09 DGX-B200 LLAMA3_8B (not in the corpus: 25.11 measured its layout again) and
    the corpus's 25.09 rows share flop_utils' convention: Llama 3 8B at s 8192 (L 32, h 4096, A 32, G 8,
    f 14336, V 128256) per token = 6·(L·h²·(2 + 2G/A) + 3·L·h·f + h·V) + 6·L·h·s (half of 12·L·h·s)
    = 5.147e10, against 1,544 TFLOP/s / 29,994 tokens/s = 5.148e10; in full it would be 5.79e10."""
    L, h, A, G, f, V, s = 32, 4096, 32, 8, 14336, 128256, 8192
    dense = 6 * (L * h * h * (2 + 2 * G / A) + 3 * L * h * f + h * V)
    assert dense + 6 * L * h * s == pytest.approx(1544e12 / 29_994, rel=2e-3)
    assert dense + 12 * L * h * s == pytest.approx(5.79e10, rel=2e-3)
    run = corpus_run("mbridge2509-b200-qwen3-30b-a3b-8gpu-fp8cs-tokendrop")
    assert run.flops_per_token == pytest.approx(416e12 / 18_066, rel=1e-5)
    assert run.scenario["training"]["global_batch_size"] == 512


@pytest.mark.parametrize(("name", "num_params", "d_model"), [
    ("mpt-125m", 125_311_488, 768), ("mpt-350m", 355_985_408, 1024),
    ("mpt-760m", 760_470_528, 1536), ("mpt-1b", 1_315_950_592, 2048),
])
def test_small_mpt_shapes_match_the_benchmark_numparams(name, num_params, d_model):
    """llm-foundry benchmark table, seq 2048 rows: NumParams includes a learned-position table of
    2048 x d_model that the catalog (ALiBi, no position parameters) leaves out; the rest matches exactly."""
    from simulator.catalog import get_model
    from simulator.workload.params import count

    assert count(get_model(name)).total == num_params - 2048 * d_model


def test_ids_are_glob_friendly():
    """``dtsim validate --only GLOB`` selects by id: lowercase letters, digits, '.', '_' and '-' only."""
    import re

    for run in load_runs():
        assert re.fullmatch(r"[A-Za-z0-9._-]+", run.id), run.id


def test_megatron_bridge_2606_gpt_oss_convention_by_hand():
    """Megatron-Bridge's 26.06 table counts GPT-OSS 120B's logits and attention, which its 26.04.01 table left out:
    1,081 TFLOP/s at 33,166 tokens/s/GPU is 32.6 GFLOP per token, where 26.04.01's 525 at 19,328 is 27.2. By hand,
    6 x 36 layers x (QKV and output projections 2,880 x (4,096 + 2 x 512) + 4,096 x 2,880, four experts of
    3 x 2,880 x 2,880, the 2,880 x 128 router) = 27.2 G; the logits 6 x 2,880 x 201,088 = 3.47 G; causal attention
    at 4,096 tokens, 3 x 2 x 4,096 x 4,096 per layer in the 18 full blocks and 3 x 4 x 128 x 4,096 in the 18
    window-128 ones, 1.92 G: 32.6 G."""
    by_id = {r.id: r for r in load_runs()}
    new = by_id["mbridge2606-gb300-gpt-oss-120b-64gpu-mxfp8"]
    old = by_id["mbridge260401-gb300-gpt-oss-120b-64gpu-bf16"]
    h, q, kv, experts, k, vocab, layers, s = 2880, 4096, 512, 128, 4, 201088, 36, 4096
    linear = 6 * layers * (h * (q + 2 * kv) + q * h + k * 3 * h * h + h * experts)
    logits = 6 * h * vocab
    attention = 18 * 3 * 2 * s * q + 18 * 3 * 4 * 128 * q
    assert old.flops_per_token == pytest.approx(linear, rel=0.01)
    assert new.flops_per_token == pytest.approx(linear + logits + attention, rel=0.01)


@pytest.mark.parametrize(
    ("run_id", "shape", "expected", "step"),
    [
        # Megatron-Bridge's Qwen3-8B verification card: the card's 512.7 TFLOP/s over its 10,456.348 tokens/s; 1,024 x
        # 4,096 tokens per step over the 25.07032 s step on 16 GPUs
        ("mbverify-h100-qwen3-8b-16gpu-bf16", (36, 4096, 8, 32, 12288, 151936, 4096), 49.03e9, (1024, 25.07032, 16)),
        # Together AI's B300 Llama 3 8B log: its 1,167.0 TFLOP/s over its tokens/s; 128 x 8,192 tokens per step over
        # the 5.7807 s mean step of iterations 31-50 on 8 GPUs
        ("together-b300-llama3-8b-8gpu-bf16", (32, 4096, 8, 32, 14336, 128256, 8192), 51.47e9, (128, 5.7807, 8)),
        # Together AI's DGX-B200 Llama 3.1 8B NVFP4 row: 2,001.6 TFLOP/s over 128 x 8,192 tokens per 3.369 s step on 8 GPUs
        ("together-b200-llama3.1-8b-8gpu-nvfp4", (32, 4096, 8, 32, 14336, 128256, 8192), 51.47e9, (128, 3.369, 8)),
    ],
)
def test_megatron_bridge_general_formula_by_hand(run_id, shape, expected, step):
    """Dense rows whose convention is Megatron-Bridge's flop_utils general formula with causal attention, per token
    18·L·h·f + 12·L·h²·(1 + g/n + s/(2h)) + 6·h·V (L layers, hidden h, n heads in g groups, FFN f, vocabulary V,
    s tokens): Qwen3-8B 32.62 + 12.68 + 3.73 = 49.03 G, Llama 3 8B at 8,192 tokens 33.82 + 14.50 + 3.15 = 51.47 G;
    and each row's tokens/s per GPU is its global batch x sequence over its step time and GPUs."""
    L, h, g, n, f, V, s = shape
    per_token = 18 * L * h * f + 12 * L * h * h * (1 + g / n + s / h / 2) + 6 * h * V
    assert per_token == pytest.approx(expected, rel=1e-3)
    (run,) = [r for r in CORPUS if r.id == run_id]
    assert run.flops_per_token == pytest.approx(per_token, rel=1e-3)
    gbs, step_s, gpus = step
    assert gbs * s / step_s / gpus == pytest.approx(run.measured["tokens_per_s_per_gpu"], rel=1e-5)


def test_megatron_bridge_2606_finetuning_conventions_by_hand():
    """The 26.06 SFT and LoRA rows of Llama 3 70B (L 80, h 8,192, 64 heads in 8 groups, f 28,672, V 128,256) at
    4,096 tokens per packed row, by Megatron-Bridge's flop_utils. SFT, the general formula with causal attention
    over the whole row: 12·L·h·1.5·f + 12·L·h²·(1 + 8/64 + s/(2h)) + 6·h·V = 433.1 G per token. LoRA, its LoRA
    branch: 2/3 of L·h²·(12 + 12·8/64 + 18·f/h + 6·V/(L·h)) = 278.0 G plus 12·L·h·Σs²/s of per-document attention,
    with the Σs² = 842,603 per 4,096-token row of PR #2416 (1.6 G): 279.6 G. The rows imply 432-435 and 278-279 G;
    the attention dtsim simulates is per document of Σs²/s = 206 tokens (training.document_tokens)."""
    L, h, g, n, f, V, s, sq = 80, 8192, 8, 64, 28672, 128256, 4096, 842_603
    sft = 12 * L * h * 1.5 * f + 12 * L * h * h * (1 + g / n + s / h / 2) + 6 * h * V
    lora = 2 / 3 * L * h * h * (12 + 12 * g / n + 18 * f / h + 6 * V / (L * h)) + 12 * L * h * sq / s
    assert sft == pytest.approx(433.1e9, rel=1e-3)
    assert lora == pytest.approx(279.6e9, rel=1e-3)
    rows = [r for r in CORPUS if r.id.startswith(("mbridge2606-sft-", "mbridge2606-lora-"))]
    assert len(rows) == 10
    for run in rows:
        expected = sft if "-sft-" in run.id else lora
        assert run.flops_per_token == pytest.approx(expected, rel=0.01), run.id
        assert run.scenario["training"]["document_tokens"] == round(sq / s)
        assert ("lora" in run.scenario["training"]) == ("-lora-" in run.id)


@pytest.mark.parametrize(("run_id", "printed", "by_hand"), [
    # Llama 3 8B's 8,030,261,248 less its embedding and untied head cut from 128,256 rows to the GPT-2
    # tokenizer's padded 50,304
    ("gcpa4-llama3-8b-8gpu-fp8", 7_391_678_464, 8_030_261_248 - 2 * (128_256 - 50_304) * 4_096),
    # Qwen2.5-7B's 7,615,616,512 less the QKV biases its config turns off, 28 x (3,584 + 2 x 512)
    ("gcpa4-qwen2.5-7b-8gpu-bf16", 7_615_487_488, 7_615_616_512 - 28 * (3_584 + 2 * 512)),
])
def test_gcp_a4_logs_parameter_counts_by_hand(run_id, printed, by_hand):
    """Google Cloud's A4 logs print 'Number of precise model parameters on device'; the hand arithmetic
    and the rows' overrides (vocabulary, no QKV bias) both rebuild it exactly."""
    from simulator.workload import params

    assert by_hand == printed
    run = corpus_run(run_id)
    assert params.count(scenario_for(run).model).total == printed


def test_gcp_a4_tokens_per_second_by_hand():
    """tokens/s per GPU = global batch x sequence / step / GPUs: Llama 3 8B, 128 x 8,192 / 4.326 s / 8."""
    run = corpus_run("gcpa4-llama3-8b-8gpu-fp8")
    assert run.measured["tokens_per_s_per_gpu"] == pytest.approx(128 * 8_192 / 4.326 / 8, abs=0.1)


@pytest.mark.parametrize("run_id, tflops, job", [
    # worklog/2026-05-02_256gpu_benchmark_report.md scoreboard (Together's original cluster, iterations 3-9)
    ("together-b200-grok1-314b-256gpu-fp8", 1464, "87970"),
    ("together-b200-qwen3-235b-a22b-256gpu-bf16", 614, "87951"),
    ("together-b200-qwen3-235b-a22b-256gpu-mxfp8", 514, "87953"),
    ("together-b200-nemotron4-340b-256gpu-fp8", 1245, "87942"),
    ("together-b200-nemotron4-340b-256gpu-bf16", 868, "87943"),
    # worklog/2026-04-27_405b_nvfp4_investigation.md: the latest run of the 256-GPU PP 16 configuration
    ("together-b200-llama3.1-405b-256gpu-nvfp4", 1675, "85444"),
])
def test_together_rows_hold_the_latest_measurement(run_id, tflops, job):
    """Re-measurements count once, at the latest (docs/validation-corpus.md): a Together row whose
    configuration the repository's later sweeps ran again holds the latest figure, with tokens/s per GPU
    = TFLOP/s per GPU / the row's FLOPs per token (e.g. Grok-1 FP8: 1,464e12 / 518.135e9 = 2,825.5)."""
    run = corpus_run(run_id)
    assert run.measured["tflops_per_gpu"] == tflops
    assert job in run.extra["source_detail"]
    assert run.measured["tokens_per_s_per_gpu"] == pytest.approx(tflops * 1e12 / run.flops_per_token, abs=0.1)


def test_together_nemotron4_340b_flops_per_token_by_hand():
    """The 340B rows' FLOPs per token are the convention of Together's 512-GPU run of the recipe (job 84272,
    worklog/2026-04-17_512gpu_benchmark_report.md: 1,234 TFLOP/s/GPU at 1.746 s per step of 128 x 4,096 tokens):
    128 x 4,096 / 1.746 / 512 = 586.5 tokens/s/GPU, 1,234e12 / 586.5 = 2,104 GFLOP per token."""
    by_hand = 1234e12 / (128 * 4096 / 1.746 / 512)
    for dtype in ("fp8", "bf16"):
        assert corpus_run(f"together-b200-nemotron4-340b-256gpu-{dtype}").flops_per_token == \
            pytest.approx(by_hand, rel=0.002)
