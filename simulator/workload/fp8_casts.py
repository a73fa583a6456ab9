"""FP8 casts around the linear GEMMs when training in FP8 (``training.precision: fp8``), per scaling
recipe (``training.kernels.fp8_recipe``): the HBM bytes and kernels of casting a GEMM's 16-bit input,
fused into the kernel that produces it or standalone, and of casting its output gradient in the backward.
``workload.ops`` and ``workload.moe_ops`` place them; ``optimizer_ops`` casts the weights once per step.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.scenario import TORCHAO_RECIPES
from simulator.workload.op import Op

#: NVFP4's cast bytes per element: MXFP8's standalone 4 B scaled by what quantizing costs each in Transformer
#: Engine's GEMM profiling guide (``docs/examples/gemm_profiling``, B300 SXM6, the twelve GEMMs of a 4,096-wide
#: layer at 15,872 tokens, per layer: autocast time less pre-quantized time, NVFP4 6.453 - 3.764 = 2.689 ms,
#: MXFP8 8.984 - 7.161 = 1.823 ms): the amax pass, the Hadamard transform and the stochastic rounding make
#: NVFP4's quantization 1.48x MXFP8's.
NVFP4_CAST_BYTES = 4.0 * (6.453 - 3.764) / (8.984 - 7.161)
#: The FP8 casts around one linear GEMM, per recipe: extra HBM bytes per element of the 16-bit tensor
#: cast, and kernels, for a standalone cast and for a cast fused into the kernel that produces the
#: tensor (``None``: never fused). Each cast writes the FP8 tensor and a transposed FP8 copy for the
#: backward GEMMs (Hopper FP8 GEMMs take only the TN layout): read 2 B, write 1 + 1 B = 4 B.
#: ``delayed`` (Transformer Engine delayed scaling): amax comes from the previous iterations, so the
#: cast fuses into the producer (TE ``LayerNormLinear``/``LayerNormMLP`` write the FP8 output of the
#: norm or activation: only the transposed copy, 1 B, is extra); standalone ``cast_transpose`` 1 kernel.
#: ``current`` (TE current scaling): the amax of this tensor must be known before scaling: the producer
#: computes it, then a cast-transpose kernel reads the tensor again (4 B, 1 kernel); standalone an amax
#: pass first (6 B, 2 kernels). ``tensorwise``/``rowwise`` (torchao float8): an amax reduction, then
#: the cast (+ the column-scaled copy for rowwise): 6 B, 2 kernels, never fused into the producer
#: (without ``compile`` the eager chain abs/amax/scale/clamp/cast/transpose is 4 kernels).
#: ``mxfp8`` (Blackwell, 1×32 block scales, local amax; a rowwise and a columnwise copy, 4 B): like
#: ``delayed``, except that a norm cannot produce it (``NORM_UNFUSED_RECIPES``).
#: ``nvfp4`` (Blackwell, Transformer Engine ``NVFP4BlockScaling``: E2M1 data, an E4M3 scale per 16 elements and
#: a per-tensor FP32 scale, so the tensor's amax is needed first; a 16-point random Hadamard transform on the
#: weight-gradient GEMM's inputs, stochastic rounding of the gradients): a pass for the amax, then the
#: quantize, never fused into the producer (U: TE's fused norm and activation kernels are not read for NVFP4),
#: 2 kernels at ``NVFP4_CAST_BYTES`` per element.
#: The weights are cast once per optimizer step (TE caches the FP8 weights across the micro-batches of
#: a step; torchao with FSDP casts the shard before the FP8 all-gather): ``optimizer_ops``. Plain
#: ``te.Linear`` modules (``KernelConfig.fp8_te_modules: linear``) cast their input standalone whatever
#: produced it, and, called without ``is_first_microbatch``, their weight in every forward (TE's
#: ``Linear.forward``: "is_first_microbatch ... When set, this parameter enables additional
#: optimizations: caching of the weights in FP8").
FP8_RECIPES: dict[str, tuple[float, int, tuple[float, int] | None]] = {
    "delayed": (4.0, 1, (1.0, 0)),
    "current": (6.0, 2, (4.0, 1)),
    "tensorwise": (6.0, 2, None),
    "rowwise": (6.0, 2, None),
    "mxfp8": (4.0, 1, (1.0, 0)),
    "nvfp4": (NVFP4_CAST_BYTES, 2, None),
}
FP8_EAGER_TORCHAO_LAUNCHES = 4
#: Recipes whose cast a norm kernel cannot produce: Transformer Engine computes the norm in high precision
#: and quantizes it in a second kernel for an MXFP8 quantizer (``pytorch/csrc/extensions/normalization.cpp``:
#: ``Impl::UNFUSED`` unless ``NVTE_NORM_FWD_USE_CUDNN`` is set and the shape is whole 128 × 128 tiles), while
#: its activation kernels quantize MXFP8 directly (``activation.cpp``: ``Impl::FULLY_FUSED``). So under MXFP8
#: the QKV and MLP-up inputs pay the standalone cast, the MLP-down input the fused one.
NORM_UNFUSED_RECIPES = ("mxfp8",)
#: Once-per-step weight cast: read 2 B, write the FP8 weight and its transpose (1 + 1 B).
#: NVFP4's weight cast (16 x 16 block scales) is priced the same (U).
FP8_WEIGHT_CAST_BYTES = 4
#: Recipes whose linear layers keep their FP8 input (1 B per element, its scale negligible) for the
#: weight-gradient GEMM instead of the 16-bit one: Transformer Engine's ``Linear`` / ``LayerNormLinear``
#: / ``LayerNormMLP`` under ``fp8_autocast`` save the quantized ``inputmat`` (or its FP8 transpose, and
#: from TE 2.x only the column-wise copy: "Discard row-wise data since it is not needed in backward
#: pass", ``module/linear.py``). torchao's float8 linears save the high-precision input and cast it again
#: in the backward (``matmul_with_hp_or_float8_args``), so tensorwise and rowwise are not listed.
SAVES_FP8_INPUTS = ("delayed", "current", "mxfp8", "nvfp4")
#: Bytes per element of such a saved input: 1 (FP8), or NVFP4's column-wise copy, 0.5 B of E2M1 data and one
#: 1-byte E4M3 scale per 16 elements.
SAVED_INPUT_BYTES: dict[str, float] = {"nvfp4": 0.5 + 1 / 16}
#: Recipes whose backward GEMMs rescale their output in a pass of their own. torchao's rowwise recipe
#: runs the two backward GEMMs with precise accumulation (``Float8LinearConfig`` leaves
#: ``gemm_config_grad_input`` / ``gemm_config_grad_weight`` at ``use_fast_accum=False``), and for axiswise
#: scales without fast accumulation ``addmm_float8_unwrapped`` (torchao/float8/float8_ops.py) calls the
#: tensorwise cuBLAS GEMM and scales afterwards, ``output *= post_inverse_scale`` ("The rowwise
#: CUTLASS-based kernel is so slow without fast-accum that we'd rather use the tensorwise cuBLAS-based
#: kernel and do the scaling manually afterwards"; torchao issue #2184: with torch.compile "at least one
#: extra triton kernel per GEMM"). Per backward GEMM one kernel reading and writing its 16-bit output:
#: the data gradient (``m × k``) and the weight gradient (``k × n``), ``RESCALE_BYTES`` per element.
RESCALED_BACKWARD_RECIPES = ("rowwise",)
RESCALE_BYTES = 4
#: Sequence parallelism (``workload.ops.layer_ops``): a norm-fed GEMM's input is cast on the rank's
#: ``1/t`` shard and gathered in FP8 (``tp_allgather_bytes``). A per-tensor FP8 tensor is gathered
#: row-wise and its transposed copy made of the gathered tensor (Transformer Engine
#: ``distributed.py`` ``_all_gather_fp8``: gather the data, then ``_create_transpose``): the shard's
#: cast drops its transposed-copy write (``TRANSPOSED_COPY_BYTES``, the 1 B of ``FP8_RECIPES``) and one
#: transpose kernel reads and writes the gathered FP8 tensor (``SP_TRANSPOSE_BYTES``). MXFP8's
#: column-wise copy has its own block scales along the tokens, so both copies are quantized on the
#: shard and gathered (``_all_gather_mxfp8``): ``SP_GATHERED_COLUMNWISE``.
TRANSPOSED_COPY_BYTES = 1
SP_TRANSPOSE_BYTES = 2
SP_GATHERED_COLUMNWISE = ("mxfp8", "nvfp4")
#: Recipes whose column-wise copy is the transpose of the row-wise FP8 data (Transformer Engine's
#: per-tensor ``Float8Quantizer`` and ``Float8CurrentScalingQuantizer``): needed only where FP8 GEMMs take
#: the TN layout alone. On Blackwell Transformer Engine makes none (``quantizer.cpp``: ``create_transpose =
#: columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``, true from compute capability 10.0), so
#: these bytes and kernels are marked on the op (``Op.transpose_bytes``) for the compute model to drop.
#: MXFP8's column-wise copy has its own scales and is needed on every GPU; torchao's casts are left whole.
TRANSPOSED_RECIPES = ("delayed", "current")


def fp8_cast(name: str, m: float, n: float, k: float, fp8: str, launches: int = 1, eager_cast: bool = False,
             producer: str = "", weight_cast: bool = False, input_share: float = 1.0) -> Op:
    """The FP8 cast of a linear GEMM's ``m × k`` input (``FP8_RECIPES``): fused into its ``producer``
    (``norm`` or ``act``: a fused norm or activation kernel) where the recipe allows it, except a norm under
    ``NORM_UNFUSED_RECIPES``, else standalone; its backward casts the ``m × n`` output gradient.
    ``weight_cast``: the module also casts its ``k × n`` weight in this forward (``te.Linear`` called
    without ``is_first_microbatch``, ``KernelConfig.fp8_te_modules: linear``): ``FP8_WEIGHT_CAST_BYTES``
    per weight element and one cast-transpose kernel per GEMM. ``input_share``: the share of the input
    this rank casts (sequence parallelism: its ``1/t`` shard, cast before the all-gather; ``SP_TRANSPOSE_BYTES``)."""
    per_el, kernels, fused = FP8_RECIPES[fp8]
    if eager_cast and fp8 in TORCHAO_RECIPES:
        kernels = FP8_EAGER_TORCHAO_LAUNCHES
    fusable = producer == "act" or (producer == "norm" and fp8 not in NORM_UNFUSED_RECIPES)
    fwd_el, fwd_k = fused if (fusable and fused is not None) else (per_el, kernels)
    fwd_bytes, fwd_launches = fwd_el * m * k, fwd_k * launches
    t_bytes, t_launches = TRANSPOSED_COPY_BYTES * m * k, 0  # written by the cast kernel itself
    if input_share < 1:
        fwd_bytes *= input_share
        if fp8 not in SP_GATHERED_COLUMNWISE:  # the transposed copy is made of the gathered tensor
            fwd_bytes += (SP_TRANSPOSE_BYTES - TRANSPOSED_COPY_BYTES * input_share) * m * k
            fwd_launches += launches
            t_bytes, t_launches = SP_TRANSPOSE_BYTES * m * k, launches
    if weight_cast:
        fwd_bytes += FP8_WEIGHT_CAST_BYTES * k * n
        fwd_launches += launches
        t_bytes += TRANSPOSED_COPY_BYTES * k * n
    rescales = 2 * launches if fp8 in RESCALED_BACKWARD_RECIPES else 0
    transposed = fp8 in TRANSPOSED_RECIPES
    return Op(f"{name}.fp8_cast", "memory", 0.0, fwd_bytes, m=m, n=n, k=k, fp8_recipe=fp8,
              launches=max(fwd_launches, 1), bwd_launches=kernels * launches + rescales,
              transpose_bytes=t_bytes if transposed else 0.0, transpose_launches=t_launches if transposed else 0)


def fp8_cast_backward(op: Op, launches: int) -> Op:
    """The backward of a cast op: the output gradient (``m × n``) cast and transposed, standalone, at the
    recipe's bytes per element, and under ``RESCALED_BACKWARD_RECIPES`` the rescale of the two backward
    GEMMs' outputs."""
    nbytes = FP8_RECIPES[op.fp8_recipe][0] * op.m * op.n
    if op.fp8_recipe in RESCALED_BACKWARD_RECIPES:
        nbytes += RESCALE_BYTES * (op.m * op.k + op.k * op.n)
    t_bytes = TRANSPOSED_COPY_BYTES * op.m * op.n if op.fp8_recipe in TRANSPOSED_RECIPES else 0.0
    return replace(op, name=f"{op.name}.bwd", bytes=nbytes, recompute=False, launches=launches,
                   transpose_bytes=t_bytes, transpose_launches=0)
