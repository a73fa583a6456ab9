"""Small GPT models on one DGX A100 node: how much the kernel-level model adds to the pure roofline.

The regime of the held-out Megatron-LM measurements issue 12 describes (hidden 1,024-2,048, 24
layers, sequence 1,024, fp16, micro-batch 1-8, TP 1-8): Megatron-LM defaults (LayerNorm, GELU,
biases, dropout 0.1, fused kernels, gradients reduced after the backward), with FlashAttention and
without; 4 micro-batches per step. For each configuration the step time with the full model
(launch floors, host dispatch, attention dropout, bias-gradient kernels) and with launch costs off
(``kernels.NONE``: the roofline of the same kernels), and their ratio.

Run: ``python benchmarks/small_models.py`` (about 10 s); docs/compute.md quotes its table.
"""

from __future__ import annotations

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.hardware import attention
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.hardware.kernels import NONE

CASES = [(1024, 1, 1), (1024, 4, 1), (1024, 8, 1), (1024, 1, 8), (2048, 1, 1), (2048, 8, 1), (2048, 4, 4)]


def scenario(h: int, mbs: int, tp: int, flash: bool):
    model = {"name": f"gpt-h{h}", "n_layers": 24, "hidden_size": h, "n_heads": h // 64, "ffn_hidden_size": 4 * h,
             "vocab_size": 50304, "mlp": "gelu", "norm": "layernorm", "linear_bias": True,
             "position_embedding": "learned", "max_position_embeddings": 1024, "tied_embeddings": True,
             "dropout": 0.1}
    raw = {"name": "small", "model": model, "cluster": {"topology": "dgx-a100", "nodes": 1},
           "training": {"seq_len": 1024, "micro_batch_size": mbs, "global_batch_size": 4 * mbs * (8 // tp), "precision": "fp16",
                        "kernels": {"flash_attention": flash}},
           "parallel": {"framework": "ddp", "tp": tp, "overlap_grad_reduce": False}}
    return scenario_from_dict(raw)


def main() -> None:
    print("| hidden | micro-batch | TP | FlashAttention | roofline (ms) | kernel model (ms) | ratio |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    for h, mbs, tp in CASES:
        for flash in (True, False):
            sc = scenario(h, mbs, tp, flash)
            gpu = sc.cluster.gpu_spec
            bare = RooflineComputeModel(gpu, sc.training.precision, for_gpu(gpu), launch=NONE,
                                        attention_impl=attention.for_scenario(sc))
            full = simulate(sc).step_time_s
            roof = simulate(sc, compute_model=bare).step_time_s
            print(f"| {h} | {mbs} | {tp} | {'yes' if flash else 'no'} | {roof * 1e3:.1f} | {full * 1e3:.1f} | "
                  f"{full / roof:.2f} |")


if __name__ == "__main__":
    main()
