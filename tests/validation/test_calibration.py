"""The calibration procedure: the grid descent by hand, and (quick form) that the stored parameters
are exactly what benchmarks/calibrate.py converges to from the same inputs.

The quick form checks the descent's stop condition at the stored point — no grid neighbour strictly
improves the training objective — and that the stored training objective is reproduced. The full form is
``python benchmarks/calibrate.py --check`` (refits from the start point; minutes).
If this fails after a change to the simulator, rerun ``python benchmarks/calibrate.py``.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simulator.validation import calibrated
from simulator.validation import calibration as cal
from simulator.validation.suite import Run, load_runs

pytestmark = pytest.mark.validation


def _stored() -> dict:
    return yaml.safe_load(resources.files("simulator.hardware").joinpath("efficiency.yaml").read_text())


def test_descent_reaches_the_minimum_of_a_separable_bowl_by_hand():
    target = (80, 90, 10)
    point, best, evals, moves = cal.descend(lambda p: sum((a - b) ** 2 for a, b in zip(p, target, strict=True)),
                                            tuple(cal.START[p] for p in cal.PARAMS))
    assert point == target and best == 0
    # each step moves every parameter not yet at its target (diagonal neighbours): as many steps as
    # the largest distance, |90 - 75| = 15; at most 26 new neighbours evaluated per step
    assert moves == max(abs(a - cal.START[p]) for a, p in zip(target, cal.PARAMS, strict=True)) == 15
    assert evals <= 1 + 26 * moves + 26


def test_descent_follows_a_diagonal_valley():
    # f = 10·|g − a| + |g + a − 170|: from (75, 75) a step in one share costs 10 and saves 1, so an
    # axis-only descent stops at once (f = 20); the diagonal step keeps g = a and walks to (85, 85).
    def f(p):
        return 10 * abs(p[0] - p[1]) + abs(p[0] + p[1] - 170) + abs(p[2] - 20)

    start = (75, 75, 20)
    assert all(f(n) > f(start) for n in cal.neighbours(start) if sum(x != y for x, y in zip(n, start, strict=True)) == 1)
    point, best, _, moves = cal.descend(f, start)
    assert (point, best, moves) == ((85, 85, 20), 0, 10)


def test_neighbours_stay_inside_bounds():
    low = tuple(cal.BOUNDS[p][0] for p in cal.PARAMS)
    assert len(cal.neighbours(low)) == 7  # every parameter stays or steps up: 2^3 - 1
    assert all(all(cal.BOUNDS[p][0] <= k <= cal.BOUNDS[p][1] for k, p in zip(n, cal.PARAMS, strict=True))
               for n in cal.neighbours(low))


def test_values_round_trip_on_the_grid():
    point = (77, 55, 25)
    assert cal.point_of(cal.values(point)) == point
    assert cal.values(point)["gemm_sustained_of_mamf"] == 0.77


def test_coarse_to_fine_descent_reaches_the_same_minimum_in_fewer_evaluations():
    target = (83, 91, 12)
    start = tuple(cal.START[p] for p in cal.PARAMS)

    def bowl(p):
        return sum((a - b) ** 2 for a, b in zip(p, target, strict=True))

    fine = cal.descend(bowl, start)
    coarse = cal.descend(bowl, start, scales=cal.SCALES)
    assert fine[0] == coarse[0] == target
    assert coarse[2] < fine[2]


def test_source_key_names_the_publication():
    def run(source):
        return Run(id="x", source=source, gpu="A100", framework="FSDP", parallelism="pure_dp", measured={})

    assert cal.source_key(run('Narayanan et al., "Efficient ...", SC21 (arXiv:2104.04473)')) == "arXiv:2104.04473"
    assert cal.source_key(run("Narayanan et al., SC21 (arXiv:2104.04473)")) == "arXiv:2104.04473"
    assert cal.source_key(run("'pytorch/torchtitan docs/performance.md (2024 version)'")) == "pytorch/torchtitan"
    # MLCommons' result repositories: every submitter's logs are one publication
    assert cal.source_key(run("mlcommons/training_results_v5.1 Dell/results/1xXE9685Lx8B200-SXM-180GB/llama2_70b_lora/"
                              "result_0.txt (@4da2d1cd)")) == "mlcommons/training_results_v5.1"
    assert cal.source_key(run("mosaicml/llm-foundry scripts/train/benchmarking/README.md")) == "mosaicml/llm-foundry"
    # FlagPerf's cases are one publication, whatever the case's README
    for case in ("llama2_7b-deepspeed", "chatglm3_6b-deepspeed"):
        assert cal.source_key(run(f"FlagOpen/FlagPerf training/nvidia/{case}/README.md (@x)")) == "FlagOpen/FlagPerf"
    # Together AI's reports and logs under tests/ and its worklogs: one publication
    for path in ("tests/b200/reports/Llama_70B_FP8_Scaling_Benchmark_Report.md", "tests/b200/slurm/OFFICIAL_BASELINES.md",
                 "worklog/2026-05-02_256gpu_benchmark_report.md"):
        assert cal.source_key(run(f"togethercomputer/together-dgxc-benchmarking {path} (@x)")) == \
            "togethercomputer/together-dgxc-benchmarking"
    assert cal.source_key(run("BigScience tr11-176B-ml training README (github.com/x)")) == \
        "BigScience tr11-176B-ml training README"


class _FakeCase:
    """A case whose predicted throughput is ``gemm_sustained_of_mamf × 1000`` tokens/s."""

    def __init__(self, run_id, source, measured):
        self.run = Run(id=run_id, source=source, gpu="A100", framework="FSDP", parallelism="pure_dp",
                       measured={"tokens_per_s_per_gpu": measured})

    def simulate(self, params):
        return type("R", (), {"tokens_per_s_per_gpu": params["gemm_sustained_of_mamf"] * 1000})()


def test_every_source_is_held_out_once_and_predicted_by_the_others():
    # source A's two runs want 0.80, source B's run wants 0.70: held out, each is predicted at the other's value
    cases = [_FakeCase("a1", "A (arXiv:1111.11111)", 800), _FakeCase("a2", "A (arXiv:1111.11111)", 800),
             _FakeCase("b1", "B (arXiv:2222.22222)", 700)]
    full = cal.fit(cases, "ampere")
    assert full.params["gemm_sustained_of_mamf"] == 0.80  # 2 of 3 runs exact beats the compromise
    folds = cal.leave_one_source_out("ampere", cases, full)
    assert [f.source for f in folds] == ["arXiv:1111.11111", "arXiv:2222.22222"]
    assert folds[0].run_ids == ("a1", "a2") and folds[0].params["gemm_sustained_of_mamf"] == 0.70
    assert folds[0].errors == pytest.approx((700 / 800 - 1, 700 / 800 - 1))
    assert folds[1].run_ids == ("b1",) and folds[1].errors == pytest.approx((800 / 700 - 1,))


def test_an_architectures_only_source_is_predicted_with_the_others_mean_parameters():
    # one publication, whose run wants 0.80: holding it out leaves nothing to fit, so it is predicted
    # with the mean of the other architectures' fits, (0.82 + 0.74) / 2 = 0.78, but for the attention
    # share Blackwell holds at Hopper's (TRANSFERRED), 0.57; the measured overlap slowdown stays 0.35
    cases = [_FakeCase("c1", "C (arXiv:3333.33333)", 800)]
    full = cal.fit(cases, "blackwell")
    others = {"ampere": cal.Fit({"gemm_sustained_of_mamf": 0.82, "attention_sustained_of_bench": 0.54,
                                 "compute_slowdown_during_comm": 0.35}, 0.0, 0, 0),
              "hopper": cal.Fit({"gemm_sustained_of_mamf": 0.74, "attention_sustained_of_bench": 0.57,
                                 "compute_slowdown_during_comm": 0.35}, 0.0, 0, 0)}
    (fold,) = cal.leave_one_source_out("blackwell", cases, full, others)
    assert fold.params == {"gemm_sustained_of_mamf": 0.78, "attention_sustained_of_bench": 0.57,
                           "compute_slowdown_during_comm": 0.35}
    assert fold.errors == pytest.approx((780 / 800 - 1,))
    # with no other architecture the full fit is all there is
    (alone,) = cal.leave_one_source_out("blackwell", cases, full)
    assert alone.params == full.params


def test_on_bound_reports_parameters_on_the_box_edge():
    params = {"gemm_sustained_of_mamf": 0.60, "attention_sustained_of_bench": 1.00, "compute_slowdown_during_comm": 0.2}
    # the attention box is 0.30-1.00 of the published kernel benchmark on every architecture
    assert cal.on_bound(params, "ampere") == ["gemm_sustained_of_mamf", "attention_sustained_of_bench"]
    inside = {**params, "gemm_sustained_of_mamf": 0.61, "attention_sustained_of_bench": 0.99}
    assert cal.on_bound(inside, "hopper") == []


@pytest.mark.parametrize("arch", ["ampere", "hopper", "blackwell"])
def test_stored_parameters_are_the_fit_of_the_calibration_runs(arch):
    stored = _stored()
    params = stored[arch]
    provenance = stored["calibration"][arch]
    cases = cal.fitting_cases(load_runs())[arch]
    assert [c.run.id for c in cases] == provenance["fitted_on"]
    assert cal.values(cal.point_of(params)) == params, "stored values are not on the grid"
    assert provenance["on_bound"] == cal.on_bound(params, arch)
    minimum, objective = cal.is_local_minimum(cases, params, arch)
    assert round(objective, 6) == provenance["objective"], "simulator changed: rerun benchmarks/calibrate.py"
    assert minimum, "a neighbour fits better: rerun benchmarks/calibrate.py"
    assert set(provenance["folds"]) == {cal.source_key(c.run) for c in cases}


def test_validate_predicts_each_fitted_run_with_the_fold_that_left_its_publication_out():
    runs = {r.id: r for r in load_runs()}
    folds = _stored()["calibration"]["ampere"]["folds"]
    eff = calibrated.out_of_fold_efficiency(runs["ibm-fsdp-a100-llama27b"])
    fold = folds["foundation-model-stack/fms-fsdp"]["params"]
    assert eff is not None
    assert (eff.gemm_sustained_of_mamf, eff.attention_sustained_of_bench, eff.compute_slowdown_during_comm) == (
        fold["gemm_sustained_of_mamf"], fold["attention_sustained_of_bench"], fold["compute_slowdown_during_comm"])
    # a publication that took no part in the fit keeps the stored full fit
    assert calibrated.out_of_fold_efficiency(runs["korthikanti22-22B-sp-selective"]) is None


def test_a_measured_parameter_is_not_searched_and_never_reported_on_a_bound():
    # the overlap slowdown is measured (pytorch/pytorch PR #179937: H100 matmuls 30-40 % slower under NCCL)
    for arch in ("ampere", "hopper", "blackwell"):
        assert cal.MEASURED[arch]["compute_slowdown_during_comm"] == 35
    assert cal.fitted("ampere") == cal.fitted("hopper") == ("gemm_sustained_of_mamf", "attention_sustained_of_bench")
    assert cal.fitted("blackwell") == ("gemm_sustained_of_mamf",)  # its attention share is TRANSFERRED
    assert cal.fitted("ada") == cal.PARAMS  # an architecture without a measurement fits all three
    cases = [_FakeCase("a1", "A (arXiv:1111.11111)", 800)]
    full = cal.fit(cases, "hopper")
    assert full.params["gemm_sustained_of_mamf"] == 0.80 and full.params["compute_slowdown_during_comm"] == 0.35
    pinned = {"gemm_sustained_of_mamf": 0.70, "attention_sustained_of_bench": 0.50, "compute_slowdown_during_comm": 0.35}
    assert cal.on_bound(pinned, "hopper") == []  # its box is the single measured value, not an edge


def test_profile_refits_the_others_at_each_value_and_shows_an_unidentified_parameter_flat():
    # the fake runs' throughput depends on the GEMM share only: every slowdown value fits it exactly
    cases = [_FakeCase("a1", "A (arXiv:1111.11111)", 800), _FakeCase("a2", "A (arXiv:1111.11111)", 800)]
    fits = cal.profile(cases, "ampere", "compute_slowdown_during_comm", (5, 40, 80))
    assert [f.params["compute_slowdown_during_comm"] for f in fits] == [0.05, 0.40, 0.80]
    assert all(f.params["gemm_sustained_of_mamf"] == 0.80 and f.objective == 0.0 for f in fits)


def test_attention_share_of_llama2_7b_by_hand_and_which_runs_it_admits():
    # Llama 2 7B block per token, forward: QKV + out 2·4096²·(1+2+1), SwiGLU MLP 3·2·4096·11008; causal
    # attention core (QKᵀ and ·V over s/2 keys on average) 2·2·s·4096/2 = 8192·s.
    def share(s: int) -> float:
        return 8192 * s / (8192 * s + 8 * 4096**2 + 6 * 4096 * 11008)

    by_id = {r.id: r for r in load_runs()}
    long_cp = by_id["nemo-longseq2403-llama2-7b-seq64k-64gpu-fp8"]  # TP 4 × CP 2, 65,536 tokens
    short_tp = by_id["nemo-longseq2403-llama2-7b-seq8k-8gpu-fp8"]  # PP 2, 8,192 tokens
    assert cal.attention_share(cal.scenario_for(long_cp)) == pytest.approx(share(65536), rel=1e-3)  # 0.570
    assert cal.attention_share(cal.scenario_for(short_tp)) == pytest.approx(share(8192), rel=1e-3)  # 0.142
    hopper = {c.run.id for c in cal.fitting_cases([long_cp, short_tp])["hopper"]}
    assert hopper == {long_cp.id}  # attention-dominated joins whatever its layout; a short TP/PP run does not


def test_a_transferred_parameter_is_held_at_the_named_architectures_fit():
    # Blackwell's attention share is not identified by its runs: held at Hopper's fit (0.57), the
    # architecture whose fitting runs run the same attention kernels, not at Ampere's (0.96) nor at their
    # mean; only the GEMM share is searched. The fake runs want a GEMM share of 0.80 whatever the attention share.
    others = {"ampere": cal.Fit({"gemm_sustained_of_mamf": 0.82, "attention_sustained_of_bench": 0.96,
                                 "compute_slowdown_during_comm": 0.35}, 0.0, 0, 0),
              "hopper": cal.Fit({"gemm_sustained_of_mamf": 0.74, "attention_sustained_of_bench": 0.57,
                                 "compute_slowdown_during_comm": 0.35}, 0.0, 0, 0)}
    assert cal.held_for("blackwell", others) == {"attention_sustained_of_bench": 57}
    assert cal.held_for("hopper", others) == {}
    # without Hopper's fit, the mean of what there is: (0.96 + 0.54) / 2 = 0.75
    ampere_only = {"ampere": others["ampere"], "ada": cal.Fit({**others["ampere"].params,
                                                             "attention_sustained_of_bench": 0.54}, 0.0, 0, 0)}
    assert cal.held_for("blackwell", ampere_only) == {"attention_sustained_of_bench": 75}
    assert cal.held_for("blackwell", {}) == {}  # nothing to hold it at
    cases = [_FakeCase("c1", "C (arXiv:3333.33333)", 800), _FakeCase("d1", "D (arXiv:4444.44444)", 800)]
    full = cal.fit(cases, "blackwell", held=cal.held_for("blackwell", others))
    assert full.params == {"gemm_sustained_of_mamf": 0.80, "attention_sustained_of_bench": 0.57,
                           "compute_slowdown_during_comm": 0.35}
    # each fold holds it at the same value; a parameter held is never reported on a bound
    folds = cal.leave_one_source_out("blackwell", cases, full, others)
    assert all(f.params["attention_sustained_of_bench"] == 0.57 for f in folds)
    assert cal.on_bound({**full.params, "attention_sustained_of_bench": 1.0}, "blackwell") == []
