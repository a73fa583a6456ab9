"""Composition root: ``simulate(scenario) -> StepReport``.

Wires every layer in one readable function (ARCHITECTURE.md §1.8): the cluster graph and collective
model (network), the compute model (hardware), the step graph (parallel), the executor (engine),
the FLOP and memory accounting (workload), and the report. The only state kept between calls is
the per-process cache of cluster graphs and collective models (``simulator.model_cache``), keyed by
all they depend on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from simulator import model_cache
from simulator.catalog import gpus
from simulator.collectives import CollectiveModel
from simulator.config.scenario import Scenario
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate as run_graph
from simulator.engine.gcpause import gc_paused
from simulator.engine.summary import pass_window, stage_row, summarize
from simulator.engine.trace import Trace
from simulator.hardware import attention
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import Efficiency, calibrated_archs, for_gpu, is_calibrated
from simulator.hardware.kernels import launch_costs
from simulator.network import build_cluster
from simulator.parallel import deferred_wgrad
from simulator.parallel.build import build_copied_samples, build_step_graph, context_for
from simulator.parallel.checks import check_supported
from simulator.parallel.volume import per_rank
from simulator.report.step_report import StepReport
from simulator.steady_state import Played, play_step
from simulator.workload import flops, memory


@dataclass(frozen=True)
class WhatIf:
    """Scale factors for sensitivity studies and monotonicity checks (1 = as catalogued)."""

    flops_scale: float = 1.0
    hbm_scale: float = 1.0
    network_scale: float = 1.0


class _ScaledCollectives:
    """Divides every collective time by ``scale`` (more bandwidth and lower latency alike)."""

    def __init__(self, inner: Any, scale: float) -> None:
        self.inner, self.scale = inner, scale

    def run(self, op: str, groups: Any, nbytes: float) -> Any:
        res = self.inner.run(op, groups, nbytes)
        return _Scaled(res.time_s / self.scale, getattr(res, "algorithm", ""), getattr(res, "busbw_GBps", 0.0))


@dataclass(frozen=True)
class _Scaled:
    time_s: float
    algorithm: str
    busbw_GBps: float


def _summaries(trace: Any) -> tuple[int, dict[str, Any], list[dict[str, float]]]:
    """Summary of the bottleneck stage (most compute), with the global step time, and per-stage rows
    (busy, idle, pipeline bubble and exposed communication per stage). Spans are grouped by device
    once; only the bottleneck stage gets the full summary (long pipelines have 10⁵ spans)."""
    devices = {span.device for span in trace.spans}
    if len(devices) <= 1:
        summary = summarize(trace)
        summary["bubble_s"] = 0.0
        return (next(iter(devices), 0), summary, [])
    end = trace.end_s
    by_dev: dict[int, list] = {}
    for span in trace.spans:
        by_dev.setdefault(span.device, []).append(span)
    window = pass_window(trace)
    rows = {d: stage_row(spans, window) for d, spans in by_dev.items()}
    device = max(rows, key=lambda d: (rows[d]["compute_busy_s"], -d))
    summary = summarize(Trace(tuple(by_dev[device])))
    summary["step_time_s"] = end
    summary["idle_s"] = end - summary["compute_busy_s"]
    summary["bubble_s"] = rows[device]["bubble_s"]
    stages = [{"stage": d, **row, "idle_s": end - row["compute_busy_s"]} for d, row in sorted(rows.items())]
    return device, summary, stages


def compute_model_for(scenario: Scenario, eff: Efficiency | None = None,
                      what_if: WhatIf = WhatIf()) -> RooflineComputeModel:
    """The compute layer of ``scenario``: its GPU, precision, kernels, attention implementation and host;
    ``eff`` None: the GPU's calibrated efficiencies (``hardware.efficiency.for_gpu``), as ``simulate`` takes."""
    tr, gpu = scenario.training, scenario.cluster.gpu_spec
    return RooflineComputeModel(gpu, tr.precision, eff or for_gpu(gpu), flops_scale=what_if.flops_scale,
                                hbm_scale=what_if.hbm_scale, launch=launch_costs(tr.kernels),
                                attention_impl=attention.for_scenario(scenario),
                                attention_head_dim=attention.head_dim_of(scenario.model),
                                host_scale=scenario.cluster.topology.host.dispatch_scale,
                                fp8_recipe=tr.active_fp8_recipe or "", fp8_attention=tr.kernels.fp8_attention)


def simulate(scenario: Scenario, *, efficiency: Efficiency | None = None, what_if: WhatIf = WhatIf(),
             collective_model: Any = None, compute_model: Any = None, cluster: Any = None,
             exact: bool = False) -> StepReport:
    """Simulate one optimizer step of ``scenario`` on its representative ranks (one per pipeline stage).

    ``collective_model`` / ``compute_model`` replace the network or compute layer (tests, studies);
    ``cluster`` reuses an already built cluster graph of the same topology and size (sweeps).
    Long gradient accumulation and 1F1B pipelines are extrapolated from their steady state
    (``simulator.steady_state``, checked, without a per-span trace); ``exact=True`` simulates every
    micro-batch and keeps the trace.
    """
    check_supported(scenario)
    cl, tr, par = scenario.cluster, scenario.training, scenario.parallel
    gpu = cl.gpu_spec
    eff = efficiency or for_gpu(gpu)
    if cluster is None and collective_model is None:
        collective_model = model_cache.PROCESS.get(scenario)  # built once per process and cluster
        cluster = collective_model.cluster
    cluster = cluster or build_cluster(cl.topology, _nodes(scenario), gpu)
    collectives = collective_model or CollectiveModel(cluster, fidelity=cl.network_fidelity,
                                                      algorithm=cl.collective_algorithm)
    if what_if.network_scale != 1.0:
        collectives = _ScaledCollectives(collectives, what_if.network_scale)
    compute = compute_model or compute_model_for(scenario, eff, what_if)
    ctx = context_for(scenario, gpus_per_node=cluster.gpus_per_node)
    pcie = cluster.host_bandwidth_Bps_per_gpu * eff.pcie_fraction
    # The CPU-Adam rate and the NVMe bandwidth are a host's (one OS instance: its CPUs, DRAM and drives),
    # shared by the GPU processes on it: an NVL72 rack is 18 hosts of 4 GPUs, and a job on fewer GPUs
    # than a host holds leaves the whole host to them.
    sharing = min(cl.topology.gpus_per_host or cluster.gpus_per_node, scenario.n_gpus)
    costing = Costing(compute, collectives, ctx.mesh, pcie, eff.cpu_adam_params_per_s_per_node / sharing,
                      eff.nvme_Bps_per_node / sharing)

    def play(n: int, graph: Any = None) -> Played:
        if graph is None:
            graph = build_step_graph(ctx if n == ctx.n_micro else dataclasses.replace(ctx, n_micro=n))
        trace = run_graph(graph, costing.costs(graph), eff.compute_slowdown_during_comm)
        device, summary, stages = _summaries(trace)
        volume, calls = per_rank(graph, ctx.mesh, device)
        return Played(n, graph, trace, device, summary, stages, volume, calls, len(graph.tasks))

    with gc_paused():
        # deferred output-layer weight gradients make the first micro-batches unlike the rest: no samples
        whole = exact or deferred_wgrad.deferred_count(par, ctx.n_micro) > 0
        played = play_step(play, ctx.n_micro, par.pp, par.pipeline_schedule, par.virtual_stages, exact=whole,
                           samples=lambda sizes: build_copied_samples(ctx, sizes))
    graph, device, summary, stages = played.graph, played.device, played.summary, played.stages
    step_flops = flops.for_scenario(scenario)  # MFU's numerator: training.attention_flops convention
    executed = flops.for_scenario(scenario, executed=True)  # HFU's: what the kernels run
    mem = memory.breakdown(scenario).as_dict()
    breakdown = {k: summary[k] for k in ("forward_s", "backward_s", "recompute_s", "optimizer_s", "idle_s",
                                         "compute_busy_s", "bubble_s", "host_bound_s")}
    breakdown["offload"] = summary["offload"]
    breakdown["communication"] = summary["communication"]
    breakdown["by_dimension"] = summary["by_dimension"]
    if par.pp > 1:
        breakdown["stages"] = stages
        breakdown["reported_stage"] = device
    layout = {
        "framework": par.framework,
        "zero_stage": par.effective_zero_stage,
        **({"bf16_optimizer": True} if par.bf16_optimizer(tr.precision) else {}),
        **({"optimizer": "muon"} if tr.optimizer == "muon" else {}),
        "tp": par.tp, "pp": par.pp, "dp": ctx.mesh.dp, "cp": par.cp,
        **({"ep": par.ep, "etp": par.etp, "edp": ctx.mesh.size("edp")} if scenario.model.moe else {}),
        "sequence_parallel": par.sequence_parallel, "distributed_optimizer": par.distributed_optimizer,
        "grad_accum_steps": ctx.n_micro,
        "micro_batch_size": tr.micro_batch_size,
        "gpu": gpu.name, "nodes": _nodes(scenario),
        **({"gpu_power_limit_W": scenario.cluster.gpu_power_limit_W} if scenario.cluster.gpu_power_limit_W else {}),
        "tasks": played.tasks,
        **{k: v for k, v in graph.meta.items() if k in ("sharding_strategy", "prefetch_depth", "schedule",
                                                          "stage_layers", "virtual_stages")},
    }
    return StepReport(
        scenario=scenario.name,
        step_time_s=summary["step_time_s"],
        tokens_per_step=scenario.tokens_per_step,
        n_gpus=scenario.n_gpus,
        model_flops=step_flops.model_flops,
        hardware_flops=executed.hardware_flops,
        peak_flops_per_gpu=gpu.peak_flops(tr.precision),
        breakdown=breakdown,
        memory=mem,
        bytes_per_rank=played.bytes_per_rank,
        layout=layout,
        conventions={
            "mfu": f"model FLOPs (3x forward, attention '{tr.attention_flops}') / (step time x GPUs x dense "
                   f"{tr.precision} peak)",
            "hfu": "FLOPs executed (attention as the kernel runs it: causal with FlashAttention, else full; "
                   "recomputation included) / (step time x GPUs x dense peak)",
        },
        trace=played.trace.spans if played.trace is not None else (),
        warnings=_warnings(scenario, efficiency, ctx.mesh, step_flops.model_flops / (
            summary["step_time_s"] * scenario.n_gpus * gpu.peak_flops(tr.precision))),
        collective_calls=played.calls,
    )


def _warnings(scenario: Scenario, efficiency: Efficiency | None, mesh: Any = None,
              mfu: float = 0.0) -> tuple[str, ...]:
    gpu = scenario.cluster.gpu_spec
    out = []
    if mfu > 1 and scenario.training.attention_flops == "full":
        out.append(f"MFU {100 * mfu:.1f}% exceeds 100% because training.attention_flops 'full' counts the masked "
                   "half of causal attention that the kernels skip; HFU counts executed FLOPs "
                   "(set training.attention_flops: causal for MFU by the executed convention)")
    if mesh is not None and mesh.tp > mesh.gpus_per_node:
        out.append(f"parallel.tp={mesh.tp} exceeds the {mesh.gpus_per_node} GPUs of a node: TP groups span nodes and "
                   "their per-block collectives cross the inter-node network (dtsim run --show-placement)")
    if mesh is not None and mesh.ep * mesh.etp > mesh.gpus_per_node:
        out.append(f"parallel.ep={mesh.ep} x etp={mesh.etp} exceeds the {mesh.gpus_per_node} GPUs of a node: the MoE "
                   "token all-to-alls cross the inter-node network (dtsim run --show-placement; "
                   "parallel.moe_dispatcher: deepep sends each token once per node)")
    par, model = scenario.parallel, scenario.model
    if par.tp_comm_overlap and par.tp > 1 and model.moe is not None and (model.is_mla or par.moe_a2a_overlap):
        where = "the MoE blocks' MLA attention" if model.is_mla else "the blocks paired by parallel.moe_a2a_overlap"
        out.append(f"parallel.tp_comm_overlap: the tensor-parallel collectives of {where} are simulated on the "
                   "compute stream, without the overlap (dtsim pairs collectives only with a standard block's "
                   "qkv / out_proj GEMMs; docs/moe.md)")
    small = _small_buckets(scenario)
    if small:
        out.append(f"{small} holds under {SMALL_BUCKET_BYTES / 2**20:g} MiB: every reduction of it is latency-bound "
                   "(NCCL's per-call cost dominates), and the step slows with the number of calls; the frameworks' "
                   "defaults are 25 MB (DDP) and 5e8 elements (DeepSpeed)")
    chassis = scenario.cluster.topology
    built_for = gpus().get(chassis.gpu)  # None: a topology written for a GPU outside the catalog
    if built_for is not None and built_for.vendor != gpu.vendor:
        out.append(f"cluster.gpu {gpu.name} ({gpu.vendor}) in {chassis.name}, a chassis built for "
                   f"{chassis.gpu} ({built_for.vendor}): no such system is built; the what-if runs the "
                   "chassis' fabric at the GPU's own scale-up link rate")
    if efficiency is None and not is_calibrated(gpu):
        out.append(f"compute efficiencies for {gpu.name} ({gpu.arch}) are uncalibrated defaults "
                   f"(validated architectures: {', '.join(calibrated_archs())}); treat step times as estimates")
    elif efficiency is None and "GeForce" in gpu.form_factor:
        out.append(f"compute efficiencies for {gpu.name} are the {gpu.arch} fit on data-center parts (no GeForce "
                   "run in the validation suite; its clocks, power limit and memory differ): treat step times as "
                   "estimates")
    return tuple(out)


#: A gradient bucket below this many bytes makes every reduction latency-bound: NCCL's per-call latency
#: (tens of µs, docs/network.md) is at least the time 1 MiB takes on a 25 GB/s NIC (42 µs) and many times
#: its time on NVLink (2.3 µs at 450 GB/s).
SMALL_BUCKET_BYTES = 2**20


def _small_buckets(scenario: Scenario) -> str:
    """The bucket setting (with its value) whose buckets hold fewer than ``SMALL_BUCKET_BYTES``, or ''."""
    par = scenario.parallel
    if par.framework == "deepspeed" and par.effective_zero_stage >= 1 and par.reduce_bucket_size * 2 < SMALL_BUCKET_BYTES:
        return f"parallel.reduce_bucket_size {par.reduce_bucket_size:g} (elements, 16-bit)"
    if par.framework == "ddp" and not par.megatron_ddp and par.bucket_cap_mb * 2**20 < SMALL_BUCKET_BYTES:
        return f"parallel.bucket_cap_mb {par.bucket_cap_mb:g}"
    if par.ddp_bucket_size is not None and par.ddp_bucket_size * 2 < SMALL_BUCKET_BYTES:
        return f"parallel.ddp_bucket_size {par.ddp_bucket_size} (elements, 16-bit)"
    return ""


def _nodes(scenario: Scenario) -> int:
    per_node = scenario.cluster.topology.gpus_per_node
    return max(1, -(-scenario.n_gpus // per_node))
