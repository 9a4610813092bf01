"""Quantized training (`--dtype fp8`, `mxfp8`, `nvfp4`): which GPUs and runtimes have it, and
what it changes in a layer.

Under these dtypes the decoder blocks' linear layers (their weight GEMMs) run on the tensor
cores in the quantized format (fp8 with a scale per tensor; MXFP8 with an E8M0 scale per 32
elements; NVFP4's E2M1 with an E4M3 scale per 16 elements and one fp32 scale per tensor:
planner.inputs.devices.QUANTIZED_FORMATS); everything else stays in bf16: attention's softmax
and batched matmuls, the norms and activations, the embedding and the LM head
(Megatron/Transformer Engine keep the output layer in bf16; torchtitan's float8 converter skips
`output` by default), the activations passed between layers, the gradients and the fp32 master weights and Adam states (Micikevicius et al.
2022, "FP8 formats for deep learning", sec 4). So planner.inputs.model.DTYPE_BYTES counts these
dtypes as 2 bytes per element, and this module adds what the format changes:

  gemm_s             a decoder GEMM at the format's peak times the architecture's fp8 GEMM efficiency;
  cast_bytes         the HBM traffic of casting and scaling each GEMM input (the runtime's recipe);
  saved_input_saving the activations a runtime that saves fp8 inputs for the backward does not keep;
  weight_cache_bytes fp8 weight copies a runtime keeps between micro-batches;
  fp8_params_saving  the 16-bit weights fp8 parameters replace.

The runtime's recipe (planner.cost.runtimes: Runtime.fp8_recipe) names its scaling:
Transformer Engine's delayed scaling (Megatron-LM) or torchao float8's dynamic tensorwise
scaling (torchtitan); a runtime without fp8 is refused. A training may choose another recipe of
the same library (Training.fp8_recipe, `--fp8-recipe`: TE's current scaling under Megatron-LM,
torchao's rowwise scaling under torchtitan), which prices its own casts and GEMM kernel rate
(Fp8Recipe.gemm_rate). MXFP8 and NVFP4 run the recipe of the runtime's library for that format
(FORMAT_RECIPES, recipe_for: Transformer Engine's MXFP8BlockScaling and NVFP4BlockScaling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..core.dims import StageDims
from ..core.errors import BadInput
from ..inputs.devices import QUANTIZED_FORMATS, GpuSpec, peak_key
from ..inputs.model import DTYPE_BYTES, Layer
from ..plan import FP8_RECIPE_NAMES


@dataclass(frozen=True)
class Fp8Recipe:
    """How a runtime runs its fp8 linears. The cast figures are HBM bytes per element of a GEMM
    operand moved to scale and cast it (reads of the bf16 tensor, writes of fp8 copies, any
    transposed copy or rescaled GEMM output of that shape), in the pass that moves them: the
    input X (rows x k), the output gradient dY (rows x n, backward only), the weight W (n x k)."""

    name: str
    title: str
    # the library that runs it: a runtime runs every recipe of its default recipe's library
    # (torchtitan's float8 converter passes quantize.linear.float8.recipe_name to torchao)
    library: str
    x_fwd_bytes: float  # per element of X, forward
    x_bwd_bytes: float  # per element of X, backward (a re-cast of X, the rescale of dX = X's shape)
    dy_bwd_bytes: float  # per element of dY, backward
    w_fwd_bytes: float  # per element of W, forward, per micro-batch (0: the fp8 copy is cached)
    w_bwd_bytes: float  # per element of W, backward, per micro-batch (a re-cast, the rescale of dW)
    # resident fp8 copies of each weight element kept between micro-batches (bytes): the fp8
    # data, and its transpose where the GPU's fp8 GEMMs take only the TN layout (non_tn_fp8_gemm)
    weight_data_bytes: float
    weight_transpose_bytes: float
    # the fp8 copy is the parameter itself where the optimizer shards its fp32 master (ZeRO >= 1):
    # no 16-bit copy of the GEMM weights is kept (fp8_params_saving)
    fp8_params: bool
    saves_fp8_inputs: bool  # the linear inputs saved for the backward are kept in fp8
    source: str
    # each linear layer casts its own input (X bytes x Gemm.linears), not one cast per fused GEMM
    input_cast_per_linear: bool = False
    # the rate of the recipe's forward / backward fp8 GEMM kernels over the architecture's fp8
    # GEMM rate (fp8_gemm_efficiency, fitted on per-tensor-scaled kernels): 1.0 for those
    gemm_rate: float = 1.0
    bwd_gemm_rate: float = 1.0
    # the weights can be all-gathered in fp8 under FSDP (CostParams.fp8_all_gather): torchao's
    # tensorwise recipe (torchao/float8/config.py: enable_fsdp_float8_all_gather needs tensorwise
    # scaling; fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts the shard)
    gathers_fp8: bool = False
    # the training dtype whose GEMMs it runs (QUANTIZED_FORMATS) and the bytes of one quantized
    # operand element as kept and read, its scales included (a saved input, an expert GEMM's operand)
    dtype: str = "fp8"
    operand_bytes: float = 1.0


# torchao's rowwise forward GEMM (torch._scaled_mm's CUTLASS rowwise kernel, fast accumulation)
# over the tensorwise cuBLAS rate: derived, with everything else of the recipe priced as below,
# from torchao's published Llama3-8B 8xH100 torchtitan table (torchao/float8/README.md, "e2e
# training benchmarks", torchao 0.10: bf16 6150, tensorwise 7689.5, rowwise 6768 tokens/s), as
# the rate at which this model prices that run's rowwise / tensorwise throughput as published
# (`python benchmarks/derive_rowwise_rate.py`: 0.717). pytorch/pytorch#147971 measures the
# kernel at 90-100 % of tensorwise for most shapes, down to 50 % for some.
TORCHAO_ROWWISE_GEMM_RATE = 0.717

RECIPES: dict[str, Fp8Recipe] = {
    # Transformer Engine, DelayedScaling (amax_history_len 1024, amax_compute_algo "max": the
    # Megatron/TE defaults): the scale comes from the amax history, so one fused kernel reads the
    # bf16 tensor (2 B), writes it in fp8 and its fp8 transpose for the other GEMM of the
    # backward (1 + 1 B) and records the amax (transformer_engine/common/transpose/cast_transpose.cu);
    # with is_first_microbatch the fp8 weight and its transpose are cast once per step and cached
    # (transformer_engine/pytorch/module/linear.py), and Linear saves its fp8 input for the
    # weight-gradient GEMM (linear.py: ctx.save_for_backward(inputmat_t, ...)). The weights are
    # fp8 parameters (--fp8-param-gather: TE fp8_model_init, as Megatron-LM's fp8 example
    # examples/llama/train_llama3_8b_h100_fp8.sh and NeMo's bf16_with_fp8_mixed recipe,
    # nemo/collections/llm/recipes/precision/mixed_precision.py, set it): a Float8Tensor of 1-byte
    # data and, where the GEMMs need it, a 1-byte transpose (transformer_engine/pytorch/csrc/
    # quantizer.cpp Float8Quantizer::create_tensor), with the fp32 master in the distributed
    # optimizer and no bf16 copy (NeMo docs features/mixed_precision.rst, fp8_params); Megatron
    # refuses it without the distributed optimizer (training/arguments.py validate_args:
    # "--fp8-param-gather only supported with distributed optimizer"), where the bf16 weights and
    # the cached fp8 copies are kept. The amax
    # histories (1024 fp32 per fp8 tensor) are a few kB per layer, left out
    "te-delayed": Fp8Recipe("te-delayed", "Transformer Engine delayed scaling (HYBRID: E4M3 forward, E5M2 backward)",
                            "transformer-engine",
                            x_fwd_bytes=4.0, x_bwd_bytes=0.0, dy_bwd_bytes=4.0, w_fwd_bytes=0.0, w_bwd_bytes=0.0,
                            weight_data_bytes=1.0, weight_transpose_bytes=1.0, fp8_params=True,
                            saves_fp8_inputs=True,
                            source="transformer_engine/pytorch/module/linear.py, common/transpose/cast_transpose.cu"),
    # Transformer Engine, Float8CurrentScaling (Megatron-LM --fp8-recipe tensorwise): the scale is the
    # tensor's own amax, computed now, so a reduction pass reads the bf16 tensor (2 B) before the
    # fused cast-transpose (read 2 B, write the fp8 data and its transpose, 1 + 1 B)
    # (transformer_engine/pytorch/tensor/float8_tensor.py Float8CurrentScalingQuantizer;
    # common/recipe/current_scaling.cu: compute_amax, then the cast); weights, parameters and
    # saved inputs as delayed scaling
    "te-current": Fp8Recipe("te-current",
                            "Transformer Engine current scaling (per tensor, E4M3 forward, E5M2 backward)",
                            "transformer-engine",
                            x_fwd_bytes=6.0, x_bwd_bytes=0.0, dy_bwd_bytes=6.0, w_fwd_bytes=0.0, w_bwd_bytes=0.0,
                            weight_data_bytes=1.0, weight_transpose_bytes=1.0, fp8_params=True,
                            saves_fp8_inputs=True,
                            source="transformer_engine/pytorch/tensor/float8_tensor.py Float8CurrentScalingQuantizer"),
    # torchao float8, dynamic tensorwise scaling (Float8LinearConfig's default recipe): each
    # operand is scaled by its own amax computed now, a reduction pass (read 2 B) before the cast
    # (read 2 B, write 1 B), in the forward for X and W and in the backward for dY and again for
    # W^T (torchao/float8/float8_linear.py: matmul_with_hp_or_float8_args saves the
    # high-precision input and weight and re-casts them in the backward; no fp8 copies kept)
    "torchao-tensorwise": Fp8Recipe("torchao-tensorwise", "torchao float8, dynamic tensorwise scaling", "torchao",
                                    x_fwd_bytes=5.0, x_bwd_bytes=0.0, dy_bwd_bytes=5.0, w_fwd_bytes=5.0,
                                    w_bwd_bytes=5.0, weight_data_bytes=0.0, weight_transpose_bytes=0.0,
                                    fp8_params=False, saves_fp8_inputs=False, gathers_fp8=True,
                                    source="torchao/float8/float8_linear.py, float8_scaling_utils.py"),
    # torchao float8, Float8LinearConfig.from_recipe_name("rowwise"): per-row scales (amax of
    # each row, fp32, rounded to a power of 2) for X, W and dY along the GEMM's contraction, so
    # the backward needs copies scaled along the other axis. torchao's own roofline
    # (torchao/float8/roofline_utils.py, get_tensor_memory_traffic_ovhd_s, "rowwise", unfused):
    # X and dY: read bf16, write fp8 + a bf16 transpose (2 + 1 + 2 B), then read the transpose,
    # write fp8 (2 + 1 B): X 5 B forward, 3 B backward, dY 8 B backward; W: 3 B forward
    # (read, write fp8), 2 x 2 B transpose and 3 B cast backward. The backward GEMMs run
    # without fast accumulation, where torchao calls the tensorwise cuBLAS kernel and rescales
    # the bf16 output afterwards (torchao/float8/float8_ops.py addmm_float8_unwrapped:
    # output *= a_scale * b_scale): a read and a write (2 + 2 B) of dX (X's shape) and of dW
    # (W's shape). Weights are all-gathered in bf16 (fp8 all-gather is tensorwise only:
    # config.py), saved inputs stay bf16, nothing cached. Each Float8Linear casts its own input
    # (float8_linear.py forward; the roofline prices each linear so): torchtitan's q, k, v and
    # w1, w3 each cast the block input, under TP too (torchtitan parallelize_llama: float8 TP,
    # one cast before the sequence-parallel all-gather, is tensorwise only).
    "torchao-rowwise": Fp8Recipe("torchao-rowwise", "torchao float8, dynamic rowwise scaling", "torchao",
                                 x_fwd_bytes=5.0, x_bwd_bytes=3.0 + 4.0, dy_bwd_bytes=8.0, w_fwd_bytes=3.0,
                                 w_bwd_bytes=7.0 + 4.0, weight_data_bytes=0.0, weight_transpose_bytes=0.0,
                                 fp8_params=False, saves_fp8_inputs=False,
                                 source="torchao/float8/roofline_utils.py, float8_ops.py, config.py",
                                 gemm_rate=TORCHAO_ROWWISE_GEMM_RATE, input_cast_per_linear=True),
}


def block_scaled(name: str, title: str, dtype: str, element_bytes: float, block: int, reads: int,
                 source: str) -> Fp8Recipe:
    """A Transformer Engine block-scaled recipe: every GEMM of a Linear, forward (fprop) and backward
    (dgrad, wgrad), takes operands quantized along its contraction dimension, so each tensor is kept
    in two quantized copies, rowwise and columnwise, each with a 1-byte scale per `block` elements
    (operand_bytes), where per-tensor fp8 keeps a transpose: on every GPU, since the blocks run along
    different axes, not only the layout (transformer_engine/common/recipe/__init__.py). One kernel
    writes both copies of X (forward) and dY (backward) after `reads` reads of the bf16 tensor (2 B
    each); the weights are quantized once per step and cached (is_first_microbatch), both copies
    resident, and kept as the quantized parameters; Linear saves the columnwise copy of its input."""
    operand = element_bytes + 1 / block
    cast = 2.0 * reads + 2 * operand
    return Fp8Recipe(name, title, "transformer-engine", x_fwd_bytes=cast, x_bwd_bytes=0.0, dy_bwd_bytes=cast,
                     w_fwd_bytes=0.0, w_bwd_bytes=0.0, weight_data_bytes=2 * operand, weight_transpose_bytes=0.0,
                     fp8_params=True, saves_fp8_inputs=True, source=source, dtype=dtype, operand_bytes=operand)


FORMAT_RECIPES: dict[str, Fp8Recipe] = {
    # MXFP8BlockScaling: E4M3 data with an E8M0 scale per 32 consecutive elements (OCP MX v1.0), the
    # scales local to their block: one read (transformer_engine/pytorch/tensor/mxfp8_tensor.py
    # MXFP8Quantizer, rowwise and columnwise usage). MXFP8 parameters: Megatron-Bridge's
    # bf16_with_mxfp8_mixed sets fp8_param_gather and reuse_grad_buf_for_mxfp8_param_ag, which
    # Megatron-core's optimizer_config.py recommends with mxfp8
    "te-mxfp8": block_scaled("te-mxfp8", "Transformer Engine MXFP8 block scaling (E4M3, E8M0 scale per 32 elements)",
                             "mxfp8", 1.0, 32, 1,
                             "transformer_engine/pytorch/tensor/mxfp8_tensor.py MXFP8Quantizer"),
    # NVFP4BlockScaling: E2M1 data (half a byte) with an E4M3 scale per 16 elements and one fp32
    # scale per tensor, whose amax takes a reduction pass before the quantizing read: two reads; the
    # columnwise copy goes through the random Hadamard transform of the wgrad inputs (TE applies it
    # to the columnwise usage only); weights in 16 x 16 blocks; NVFP4 GEMMs take only the TN layout
    # (transformer_engine/pytorch/tensor/nvfp4_tensor.py NVFP4Quantizer). NVFP4 parameters:
    # Megatron-LM --fp4-param-gather, which Megatron-Bridge's bf16_with_nvfp4_mixed sets
    "te-nvfp4": block_scaled("te-nvfp4", "Transformer Engine NVFP4 block scaling (E2M1, E4M3 scale per 16 elements)",
                             "nvfp4", 0.5, 16, 2,
                             "transformer_engine/pytorch/tensor/nvfp4_tensor.py NVFP4Quantizer"),
}


def recipe_for(dtype: str, recipe: str) -> Fp8Recipe:
    """The recipe that runs `dtype`'s GEMMs under a runtime whose fp8 recipe is `recipe`
    (CostParams.fp8_recipe; "": none): that recipe under fp8, else its library's recipe for the
    format (FORMAT_RECIPES); a runtime without one is bad input."""
    if dtype == "fp8":
        return recipe_of(recipe)
    library = RECIPES[recipe].library if recipe in RECIPES else ""
    for found in FORMAT_RECIPES.values():
        if found.dtype == dtype and found.library == library:
            return found
    raise BadInput(f"{dtype} is priced only under a runtime whose linears run it (megatron: Transformer Engine)",
                   "--dtype")


def quantized_linears(layer: Layer, dtype: str, recipe: str) -> Fp8Recipe | None:
    """The recipe of `layer`'s GEMMs under `dtype` (recipe_for), or None where they stay 16-bit:
    a dtype without a quantized format, a layer other than a decoder block."""
    if dtype not in QUANTIZED_FORMATS or layer.kind != "decoder":
        return None
    return recipe_for(dtype, recipe)


def recipe_of(name: str) -> Fp8Recipe:
    """The recipe `name` (CostParams.fp8_recipe); "" is a runtime without fp8: bad input."""
    if name not in RECIPES:
        raise BadInput("fp8 is priced only under a runtime with an fp8 path (megatron: Transformer Engine, "
                       "torchtitan: torchao float8)", "--dtype")
    return RECIPES[name]


def runtime_recipe(default: str, chosen: str, runtime_name: str) -> str:
    """The recipe a runtime whose default recipe is `default` prices fp8 with when the training
    chose `chosen` (Training.fp8_recipe; "": the default). A recipe of another library is bad input."""
    if not chosen or chosen == default:
        return default
    if chosen not in RECIPES:
        raise BadInput(f"unknown fp8 recipe {chosen!r}, expected one of {', '.join(RECIPES)}", "--fp8-recipe")
    if not default:
        raise BadInput(f"runtime {runtime_name} has no fp8 training path", "--fp8-recipe")
    library = RECIPES[default].library
    if RECIPES[chosen].library != library:
        runs = ", ".join(name for name, r in RECIPES.items() if r.library == library)
        raise BadInput(f"runtime {runtime_name} runs fp8 through {library} ({runs}), not {chosen}", "--fp8-recipe")
    return chosen


# the GPUs named in a refusal, by training dtype
FORMAT_GPUS = {"fp8": "Ada, Hopper, Blackwell, MI300X", "mxfp8": "Blackwell", "nvfp4": "Blackwell"}


def check_fp8(gpus: Iterable[GpuSpec], runtime_name: str, recipe: str, field: str = "--dtype",
              dtype: str = "fp8") -> None:
    """Bad input unless every GPU has tensor cores for `dtype`'s format (GpuSpec.supports: fp8, MXFP8
    or NVFP4, planner.inputs.devices.QUANTIZED_FORMATS) and the runtime runs its linears in it."""
    lacking = [g for g in gpus if not g.supports(dtype)]
    if lacking:
        names = ", ".join(f"{g.name} ({g.architecture or 'unknown architecture'})" for g in lacking)
        raise BadInput(f"{dtype} needs {dtype} tensor cores ({FORMAT_GPUS[dtype]}); {names} has none", field)
    if not recipe:
        paths = "Transformer Engine (--runtime megatron)"
        if dtype == "fp8":
            paths += " or torchao float8 (--runtime torchtitan)"
        raise BadInput(f"runtime {runtime_name} has no {dtype} training path ({dtype} linears need {paths})", field)
    recipe_for(dtype, recipe)


def gemm_flops_per_s(gpu: GpuSpec, recipe: Fp8Recipe, fp8_efficiency: float, shape_factor: float,
                     kernel_rate: float) -> float:
    """Achieved FLOP/s of a quantized GEMM: the peak of the recipe's format (fp8 for fp8 and MXFP8,
    fp4 for NVFP4) x the architecture's fp8 GEMM efficiency (planner.cost.architectures) x the
    shape's saturation (formulas.gemm_efficiency's curve) x the recipe's kernel rate in that pass
    (Fp8Recipe.gemm_rate, bwd_gemm_rate)."""
    return gpu.peak(peak_key(recipe.dtype)) * fp8_efficiency * shape_factor * kernel_rate


def cast_bytes(rows: float, n: float, k: float, count: float, recipe: Fp8Recipe,
               linears: int = 1) -> tuple[float, float]:
    """HBM bytes (forward, backward) of scaling and casting one GEMM's operands to fp8, per
    micro-batch: the input X (rows x k; once per fused linear, Gemm.linears, where the recipe
    casts per linear), the output gradient dY (rows x n), the weight (n x k), each at the
    recipe's bytes per element in that pass (Fp8Recipe's figures)."""
    x = rows * k * (linears if recipe.input_cast_per_linear else 1)
    fwd = count * (recipe.x_fwd_bytes * x + recipe.w_fwd_bytes * n * k)
    bwd = count * (recipe.x_bwd_bytes * x + recipe.dy_bwd_bytes * rows * n + recipe.w_bwd_bytes * n * k)
    return fwd, bwd


def non_tn_fp8_gemm(gpu: GpuSpec) -> bool:
    """cuBLAS runs fp8 GEMMs in every layout, so no transposed fp8 copy is needed: datacenter
    Blackwell (sm_100, sm_103; Transformer Engine utils.py is_non_tn_fp8_gemm_supported: compute
    capability 10.x, 11.x or 13+); Ada and Hopper take only TN (the transposes are kept)."""
    return gpu.architecture == "blackwell" and gpu.segment == "datacenter"


def weight_cache_bytes(layer: Layer, dims: StageDims, dtype: str, recipe: str, gpu: GpuSpec) -> float:
    """Bytes of fp8 weight copies a runtime keeps for `layer` between micro-batches, on one GPU:
    its decoder GEMM weights there (StageDims.weight_share: 1/tp, the routed experts 1/(etp x ep))
    x (the fp8 data, and the transpose unless non_tn_fp8_gemm)."""
    r = quantized_linears(layer, dtype, recipe) if recipe else None
    if r is None:
        return 0.0
    copies = r.weight_data_bytes + (0.0 if non_tn_fp8_gemm(gpu) else r.weight_transpose_bytes)
    return dims.weight_share(layer.weight_params, layer.expert_params) * copies


def fp8_params_saving(layer: Layer, dims: StageDims, dtype: str, recipe: str) -> float:
    """Bytes of 16-bit weights a runtime with fp8 parameters (Fp8Recipe.fp8_params) does not
    keep for `layer` on one GPU, where its optimizer shards the fp32 master (ZeRO >= 1,
    planner.cost.stage_memory decides): the decoder GEMM weights there x the 16-bit width."""
    r = quantized_linears(layer, dtype, recipe) if recipe else None
    if r is None or not r.fp8_params:
        return 0.0
    return dims.weight_share(layer.weight_params, layer.expert_params) * DTYPE_BYTES[dtype]


def fp8_gather_params(layer: Layer, dims: StageDims, dtype: str, recipe: str, all_gather: bool) -> float:
    """Parameters of `layer` on one GPU that an FSDP / ZeRO-3 all-gather moves in fp8 (1 byte):
    its decoder GEMM weights there where the run all-gathers fp8 (CostParams.fp8_all_gather) and
    the recipe can (Fp8Recipe.gathers_fp8); the embedding, the head (torchtitan's filter_fqns
    "output") and the routed experts stay 16-bit."""
    if layer.kind != "decoder":
        return 0.0
    return fp8_gather_block_params(layer.weight_params, layer.expert_params, dims, dtype, recipe, all_gather)


def fp8_gather_block_params(weight_params: float, expert_params: float, dims: StageDims, dtype: str, recipe: str,
                            all_gather: bool) -> float:
    """fp8_gather_params of one decoder block of `weight_params` (whole), `expert_params` of them
    the routed experts': its dense weights on one GPU, where the run and the recipe gather fp8."""
    if not all_gather or dtype != "fp8" or not recipe or not RECIPES[recipe].gathers_fp8:
        return 0.0
    return dims.weight_share(weight_params - expert_params, 0.0)


def saved_input_saving(layer: Layer, seq_len: int, tp: int, sequence_parallel: bool, recompute: str,
                       dtype_bytes: int, operand_bytes: float = 1.0, moe_kept: bool = True) -> float:
    """Bytes per sample a runtime that saves quantized linear inputs (Fp8Recipe.saves_fp8_inputs)
    does not keep: the inputs of the QKV and MLP-in GEMMs (the norm outputs, s x h each), of the
    attention output projection (s x o) and of the MLP-down GEMM (s x f), at `operand_bytes`
    (Fp8Recipe.operand_bytes: 1 in fp8) instead of `dtype_bytes` (model.Layer.act_bytes_per_sample
    counts them at 16 bits). In an MoE block
    the router, a 16-bit linear, keeps the MLP norm output, and Transformer Engine's GroupedLinear
    saves each expert GEMM's input in fp8 as Linear does (transformer_engine/pytorch/module/
    grouped_linear.py: inputmat.update_usage(rowwise_usage=False, columnwise_usage=True), then
    save_for_backward): every routed copy's FC1 input (s x h) and FC2 input (s x f), and the
    shared experts' FC2 input; a hybrid model's layer its one branch's (a Mamba-2 mixer's input and
    output projections). Decoder blocks without multi-latent attention or full recomputation only
    (full recomputation keeps just the block input); with Megatron's "moe" module recompute
    (`moe_kept` False) the MoE layer keeps none of its inputs."""
    c = layer.config
    if layer.kind != "decoder" or c is None or layer.blend or c.mla is not None or recompute == "full":
        return 0.0
    s, h, per = seq_len, c.hidden, dtype_bytes - operand_bytes
    # the mixer's input projection (QKV or a Mamba-2 in_proj) and its output projection
    replicated = per * s * h if c.mixer else 0.0
    sharded = per * s * (c.o_dim + (c.mamba.inner if c.mamba is not None else 0))
    if c.num_experts > 1:  # unless "moe" module recompute keeps none of them (moe_kept False)
        sharded += per * s * (c.experts_top_k * (c.expert_width + c.ffn_hidden) + c.shared_expert_ffn) if moe_kept else 0.0
        # latent experts' down and up projections read the layer input and the combined latent, whole
        replicated += per * s * (h + c.moe_latent) if moe_kept and c.moe_latent else 0.0
    elif c.ffn_hidden:  # a dense MLP: its up and down projections
        replicated += per * s * h
        sharded += per * s * c.ffn_hidden
    return StageDims(tp, sequence_parallel).activation_share(replicated, sharded)


assert tuple(RECIPES) == FP8_RECIPE_NAMES, "planner.plan.FP8_RECIPE_NAMES names the recipes priced here"
assert {r.dtype for r in FORMAT_RECIPES.values()} | {"fp8"} == set(QUANTIZED_FORMATS), "a recipe per format"

__all__ = ["FORMAT_GPUS", "FORMAT_RECIPES", "Fp8Recipe", "RECIPES", "TORCHAO_ROWWISE_GEMM_RATE", "cast_bytes",
           "block_scaled", "check_fp8", "fp8_params_saving", "gemm_flops_per_s", "non_tn_fp8_gemm", "quantized_linears",
           "recipe_for", "recipe_of", "runtime_recipe", "saved_input_saving", "weight_cache_bytes"]
