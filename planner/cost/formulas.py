"""The analytic cost model: pure functions for the time and memory of a layer, a
collective and an optimizer step. No I/O. Every formula names its source. The ring
collectives live in planner.cost.collectives, the elementwise traffic of a layer in
planner.cost.elementwise, the time its recomputation takes in planner.cost.recompute.

Times are seconds, sizes bytes, rates per second. `CostParams` holds the few physical
parameters fitted to published measurements (benchmarks/fidelity.py): the GEMM
efficiency curve, attention-kernel efficiency, achieved fraction of HBM and link
bandwidth, and a fixed per-device memory reserve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache, partial

from ..inputs.devices import QUANTIZED_FORMATS, peak_key
from ..inputs.hardware import GIB, GpuSpec, Link
from ..inputs.measured import MeasuredTimes
from .collectives import ring_allgather_s, ring_allreduce_s  # noqa: F401 (re-exported)
from .attention_kernels import fused_kernel
from .elementwise import elementwise_bytes
from .recompute import layer_recompute_s
from ..inputs.model import DTYPE_BYTES, Layer
from .sharding import Sharding
from . import fp8 as fp8_cost
from .states import get_optimizer


@dataclass(frozen=True)
class CostParams:
    """Physical parameters of the cost model (one set per GPU type after calibration)."""

    gemm_efficiency: float = 0.72  # fraction of dense peak reached by a large GEMM
    gemm_half_dim: float = 64.0  # smallest GEMM dimension at which efficiency falls to half
    attention_efficiency: float = 0.60  # FlashAttention-2 reaches 50-73% of A100 peak (Dao 2023, sec 4.1)
    # the kernel `attention: flash` runs on the architecture (planner.cost.attention_kernels):
    # "flash2" (FlashAttention-2, Ampere and later) or a memory-efficient kernel priced against
    # standard attention ("cutlass": Volta and Turing, planner.cost.architectures); "standard" where
    # the runtime runs none there (Runtime.flash_attention): standard attention's time and memory
    fused_attention: str = "flash2"
    hbm_efficiency: float = 0.70  # elementwise kernels, fraction of HBM bandwidth
    intra_link_efficiency: float = 0.80  # NCCL bus bandwidth / intra-node link figure
    inter_link_efficiency: float = 0.80  # NCCL bus bandwidth / NIC figure
    # NCCL bus bandwidth / the figure of an intra-node PCIe path (GPUs without NVLink):
    # fitted across AMP's T4 nodes and Sailor's TITAN-RTX/RTX-2080 VMs (link_efficiency)
    # (benchmarks/fit_cost_params.py, "link.pcie_link_efficiency")
    pcie_link_efficiency: float = 0.5
    # NCCL bus bandwidth / an Ethernet NIC's figure (socket transport, no RDMA): fitted across
    # the same two sources ("link.ethernet_link_efficiency")
    ethernet_link_efficiency: float = 0.3
    reserved_memory_bytes: float = 2.0 * GIB  # CUDA context, NCCL buffers, allocator slack
    overlap_grad_reduce: bool = True  # DP reduction overlaps the last backward (Megatron, DDP)
    overlap_tp_comm: bool = True  # backward TP all-reduce overlaps the weight-gradient GEMMs
    overlap_zero_comm: float = 0.0  # share of the ZeRO-3/FSDP collectives prefetching hides behind compute
    # the software stack's (planner.cost.runtimes): fp32 GEMMs on TF32 tensor cores where the GPU has
    # them, HBM traffic of its elementwise kernels relative to fully fused ones, and a fixed
    # host-side time per layer per micro-batch (kernel launches, Python), forward plus backward
    tf32_matmul: bool = False
    elementwise_traffic_factor: float = 1.0
    layer_overhead_s: float = 0.0
    # and of a routed-expert (MoE) layer on top, the host time its GPU waits for (Runtime.moe_layer_host_s)
    moe_layer_host_s: float = 0.0
    # the model runs under torch.compile (torchtitan's compile.enable / training.compile): TorchInductor
    # fuses each chain of pointwise and reduction ops (RMSNorm, SwiGLU's silu * mul, RoPE, the
    # residual adds) into one kernel that reads its inputs and writes its outputs once (Ansel et al.
    # 2024, PyTorch 2, ASPLOS, sec 5), the fused traffic elementwise.elementwise_bytes counts: the
    # runtime's elementwise_traffic_factor (its eager kernels) does not apply
    torch_compile: bool = False
    bf16_fp32_grad_allreduce: bool = False  # under bf16 the DP reduction moves fp32 gradients
    # what "selective" recomputation recomputes under the software: "attention" (Megatron,
    # Korthikanti et al. 2022: the attention-score ops), "op" (torchtitan's per-op policy) or a
    # "+"-joined list of Megatron-core recompute_modules (recompute.PRICED_MODULES: "layernorm+moe_act")
    selective_recompute: str = "attention"
    # how its ring context parallelism passes K and V (planner.cost.context_parallel.cp_comm):
    # "p2p" (Megatron-core/TE: send/recv per step, each behind that step's attention) or
    # "torch-allgather" (PyTorch's context_parallel under torchtitan)
    cp_ring: str = "p2p"
    # how its loss computes cross entropy over the vocabulary, which sets the head's working set
    # in its backward (pricing.transient_activation_bytes): "fused" (Megatron's vocab-parallel
    # cross entropy, Korthikanti et al. 2022 sec 4.3: one fp32 copy of the logits, its gradient
    # computed in place) or "eager" (torch.nn.functional.cross_entropy on fp32 logits under
    # autograd: log_softmax and nll_loss, each backward allocating an fp32 gradient)
    cross_entropy: str = "fused"
    # its unsharded gradients, accumulated over the micro-batches of a step, are fp32 whatever the
    # training dtype (FSDP2 with MixedPrecisionPolicy reduce_dtype float32, torchtitan's
    # mixed_precision_reduce default: _fsdp_param.py to_accumulated_grad_if_needed upcasts the
    # unsharded gradient while gradient sync is off, as torch.distributed.pipelining does until
    # the last micro-batch): replica_memory's gradients below ZeRO-2 at 4 bytes; and its
    # reduce-scatters move them at 4 bytes (states.reduce_scatter_bytes; stage_tail under PP)
    fp32_grad_accumulation: bool = False
    # under bf16 (and fp8, whose parameters and gradients are bf16) its gradient buffers are fp32
    # and its DP reduction moves them at 4 bytes (Megatron-LM arguments.py validate_args: bf16 sets
    # accumulate_allreduce_grads_in_fp32, i.e. megatron-core DistributedDataParallelConfig
    # grad_reduce_in_fp32, whose param_and_grad_buffer.py allocates the grad buffer in fp32; NeMo's
    # bf16_mixed recipe sets grad_reduce_in_fp32 too): replica_memory's gradients below ZeRO-2 at
    # 4 bytes, grad_reduce_s's reduce-scatter / all-reduce at 4 bytes. fp16 keeps 16-bit gradients.
    bf16_fp32_grads: bool = False
    # its tensor parallelism saves the all-gathered input of a column-parallel GEMM for the
    # weight gradient (torch.distributed.tensor.parallel: SequenceParallel norms, then
    # ColwiseParallel's all-gather under autograd, torchtitan's TP plan), where Megatron's
    # sequence-parallel linear saves its shard and gathers again in the backward (Korthikanti et
    # al. 2022, sec 4.2.2): pricing.gathered_input_bytes
    tp_saves_gathered_inputs: bool = False
    # async tensor parallelism (torchtitan's parallelism.enable_async_tensor_parallel, with
    # torch.compile; off by default): each sequence-parallel all-gather / reduce-scatter is fused
    # with the GEMM it feeds or follows (_with_tp_comm)
    tp_async: bool = False
    # fp8 weights in the FSDP / ZeRO-3 all-gather (torchtitan's float8.enable_fsdp_float8_all_gather,
    # off by default, config_manager.py; torchao casts each weight shard before the all-gather,
    # tensorwise scaling only, Fp8Recipe.gathers_fp8): the decoder GEMM weights move at 1 byte
    # (dp_comm.zero_comm, fp8.fp8_gather_params)
    fp8_all_gather: bool = False
    # fp8 (planner.cost.fp8): the fraction of the fp8 peak a large decoder GEMM reaches, the
    # architecture's (planner.cost.architectures); None: its bf16 gemm_efficiency (on Hopper,
    # the one architecture with published fp8 runs, the fits give 0.55 bf16 and 0.6 fp8), and the
    # runtime's recipe (planner.cost.fp8.RECIPES; "" = the runtime has no fp8 path)
    fp8_gemm_efficiency: float | None = None
    fp8_recipe: str = ""

    # MoE under expert parallelism: the busiest expert's routed tokens over the mean; the EP group
    # waits for its busiest rank at the combine all-to-all (ep_rank_imbalance: a rank holds several
    # experts). Switch Transformer trains with capacity factors 1.0-1.25 per expert (Fedus et al.
    # 2021, sec 2.2 and Table 1: 1.25 drops few tokens) and Megatron-core's
    # --moe-expert-capacity-factor bounds each expert's load the same way; 1.25 takes the upper end
    # for dropless routing with an auxiliary balancing loss. Force-balanced routing (benchmarks'
    # --moe-router-force-load-balancing) is 1.0.
    moe_imbalance: float = 1.25
    # how its MoE layers move tokens under expert parallelism (planner.cost.moe.moe_alltoall_s):
    # "alltoall" (Megatron-core's MoEAlltoAllTokenDispatcher: one copy per routed expert over
    # every link) or "flex" (Megatron-core's MoEFlexTokenDispatcher over DeepEP / HybridEP, as in
    # DeepSeek-V3, DeepSeek-AI 2024, sec 3.2.2: a token crosses to another node once per node
    # holding any of its experts, and is forwarded to those experts' GPUs over NVLink)
    moe_dispatcher: str = "alltoall"
    # Megatron-core's expert-parallel communication overlap (CommOverlapConfig.
    # overlap_moe_expert_parallel_comm, --overlap-moe-expert-parallel-comm): the 1F1B steady state
    # runs one micro-batch's forward beside another's backward, layer by layer, so a layer's dispatch
    # and combine all-to-all run under the other micro-batch's compute (DeepSeek-V3's computation-
    # communication overlap, DeepSeek-AI 2024, sec 3.2.1): planner.cost.moe.with_moe_alltoall
    moe_a2a_overlap: bool = False
    # the whole training step captured as one CUDA graph (Megatron-core cuda_graph_impl
    # "full_iteration", with sync-free MoE dispatch): replayed without host launches, so the
    # runtime's host time per layer (layer_overhead_s, moe_layer_host_s) is not spent
    full_iteration_cuda_graph: bool = False
    measured: MeasuredTimes | None = None  # measured layer times replace the compute model

    def with_updates(self, **changes) -> "CostParams":
        return replace(self, **changes)


DEFAULT_PARAMS = CostParams()


# --- compute ------------------------------------------------------------------------------


def gemm_efficiency(rows: float, n: float, k: float, params: CostParams, half_dim: float | None = None) -> float:
    """Fraction of peak a GEMM reaches: saturates in its smallest dimension
    (tile and wave quantization; Calculon, Isaev et al. 2023, models the same with tables).
    `half_dim`: the knee of the path the GEMM runs on (gemm_half_dim); default the fitted one."""
    smallest = min(rows, n, k)
    return params.gemm_efficiency * smallest / (smallest + (params.gemm_half_dim if half_dim is None else half_dim))


# FLOP per HBM byte of the tensor-core path CostParams.gemm_half_dim was fitted on: A100-SXM4-80GB
# bf16, 312 TF/s dense over 2,039 GB/s (NVIDIA A100 datasheet; Narayanan et al. 2021 and
# Korthikanti et al. 2022 ran on it)
FITTED_KNEE_BALANCE = 312e12 * 2 / 2039e9


def gemm_half_dim(gpu: GpuSpec, dtype: str, params: CostParams) -> float:
    """The smallest GEMM dimension at which `dtype`'s GEMMs on `gpu` fall to half efficiency.
    On tensor cores the fitted knee. fp32 GEMMs on the CUDA cores (no TF32: Volta, Turing, or
    TF32 off) run an FFMA pipeline whose FLOP:byte balance (fp32 peak x 4 bytes / HBM bandwidth)
    is a fraction of the fitted path's: a GEMM whose smallest dimension is d does 2d FLOPs per
    output element it writes, so the dimension at which moving the data costs as much as the
    math scales with that balance (the roofline ridge point, Williams, Waterman & Patterson
    2009, CACM 52(4)); the knee scales with it."""
    if dtype != "fp32" or mfu_peak_dtype(gpu, dtype, params) == "tf32":
        return params.gemm_half_dim
    balance = gpu.peak("fp32") * DTYPE_BYTES["fp32"] / gpu.hbm_bandwidth_bytes_per_s
    return params.gemm_half_dim * balance / FITTED_KNEE_BALANCE


def mfu_peak_dtype(gpu: GpuSpec, dtype: str, params: CostParams) -> str:
    """The dtype whose peak MFU divides by on `gpu`: the training dtype's (a quantized dtype's
    format's: fp8 for MXFP8, fp4 for NVFP4), or "tf32" where fp32 GEMMs run on TF32 tensor cores
    (matmul_peak prices them there), so MFU stays <= 100 %."""
    return "tf32" if dtype == "fp32" and params.tf32_matmul and gpu.supports("tf32") else peak_key(dtype)


def matmul_peak(gpu: GpuSpec, dtype: str, params: CostParams) -> float:
    """Peak FLOP/s of the GEMMs: fp32 training runs them on TF32 tensor cores where the
    software allows it (NGC PyTorch containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1;
    upstream PyTorch keeps `allow_tf32` off for matmuls since 1.12) and the GPU has them.
    Quantized training (fp8, MXFP8, NVFP4) runs all but the decoder GEMMs in bf16
    (planner.cost.fp8): the bf16 peak here."""
    if mfu_peak_dtype(gpu, dtype, params) == "tf32":
        return gpu.peak("tf32")
    if dtype in QUANTIZED_FORMATS:
        return gpu.peak("bf16")
    return gpu.peak(dtype)


@dataclass(frozen=True)
class LayerTime:
    """Per micro-batch times of one layer on one TP rank (seconds)."""

    fwd_s: float
    bwd_s: float
    recompute_s: float  # forward work repeated in backward
    tp_comm_fwd_s: float
    tp_comm_bwd_s: float  # includes the all-reduces of a recomputed forward
    # the weight-gradient part of bwd_s (the W pass of a split backward; the rest, with the
    # recomputation, is the input-gradient B pass): Qi et al. 2023, Zero Bubble, sec 2
    wgrad_s: float = 0.0
    ep_comm_fwd_s: float = 0.0  # the MoE dispatch + combine all-to-all (moe_alltoall_s)
    ep_comm_bwd_s: float = 0.0

    @property
    def ep_comm_s(self) -> float:
        return self.ep_comm_fwd_s + self.ep_comm_bwd_s

    @property
    def compute_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.recompute_s

    @property
    def tp_comm_s(self) -> float:
        return self.tp_comm_fwd_s + self.tp_comm_bwd_s


def link_efficiency(link: Link, params: CostParams, intra: bool = True) -> float:
    """The fraction of a link's figure NCCL reaches on it. A PCIe path inside a node (no NVLink:
    peer-to-peer through PCIe switches and the host bridge, or staged through host memory where
    peer access is off, as in VMs) and Ethernet between nodes (NCCL's socket transport, no
    RDMA) have their own figures; NVLink/NVSwitch and RDMA NICs the defaults."""
    kind = link.kind.lower()
    if kind.startswith("pcie"):
        return params.pcie_link_efficiency
    if "ethernet" in kind:
        return params.ethernet_link_efficiency
    return params.intra_link_efficiency if intra else params.inter_link_efficiency


# Backward elementwise kernels read the saved tensor and the incoming gradient and write
# the outgoing gradient (3 accesses where the forward made 2): 1.5x the forward traffic.
ELEMENTWISE_BWD_RATIO = 1.5

# FlashAttention-2 reaches up to 73 % of the peak in the forward pass and up to 63 % in the
# backward (Dao 2023, FlashAttention-2, sec 1 and Figs. 4-6 on A100): its backward runs at this
# fraction of the forward's efficiency (`attention_efficiency` is the forward's)
FLASH_BWD_EFFICIENCY_RATIO = 63 / 73


def attention_s(layer: Layer, gpu: GpuSpec, sh: Sharding, params: CostParams) -> tuple[float, float]:
    """Forward and backward time of one GPU's attention scores (StageDims.attention_share of its
    TP rank's work over the whole sequence). FlashAttention-2 runs QK^T and PV in one kernel
    and skips the causal upper triangle; its backward does 2.5x the forward matmuls (Dao 2023,
    sec 3) at FLASH_BWD_EFFICIENCY_RATIO of the forward's efficiency. Standard attention runs
    them as batched GEMMs with head_dim as the inner dimension. Where the architecture has no
    FlashAttention-2 (CostParams.fused_attention), `flash` runs a memory-efficient kernel priced
    against standard attention (planner.cost.attention_kernels)."""
    if layer.kind != "decoder" or layer.config is None:
        return 0.0, 0.0
    if layer.config.mamba is not None:
        return ssd_scan_s(layer, gpu, sh, params)
    sh = sh.priced(params.fused_attention)  # standard where the runtime runs no fused kernel on the GPU
    peak = matmul_peak(gpu, sh.dtype, params)
    seq_len, tp, b = sh.seq_len, sh.dims.tp, sh.micro_batch
    kernel = fused_kernel(params.fused_attention) if sh.attention == "flash" else None
    # Llama 4's chunked layers run at full causal cost: no runtime priced skips the masked blocks
    # (megatron-core's attention has no chunking, transformers masks a whole sdpa)
    flops = partial(layer.attention_flops_per_sample, seq_len, tp, chunked=False)
    if sh.attention == "flash" and kernel is None:
        attn_flops = sh.dims.attention_share(flops(causal_skip=True) * b)
        attn_fwd = attn_flops / (peak * params.attention_efficiency)
        return attn_fwd, 2.5 * attn_fwd / FLASH_BWD_EFFICIENCY_RATIO
    attn_flops = sh.dims.attention_share(flops(causal_skip=False) * b)
    eff = gemm_efficiency(seq_len, seq_len, layer.config.head_dim, params, gemm_half_dim(gpu, sh.dtype, params))
    attn_fwd = attn_flops / (peak * eff)
    if kernel is None:
        return attn_fwd, 2.0 * attn_fwd
    # a memory-efficient kernel (planner.cost.attention_kernels): standard attention's score GEMMs
    # and its softmax / dropout traffic over the scores (elementwise_bytes; backward 1.5x, as
    # _layer_time prices them), times the kernel's measured ratios, over the causal share it computes
    score_bytes = elementwise_bytes(layer, seq_len, tp, sh.dims.sequence_parallel, "standard", sh.dtype_bytes)[1]
    score_s = sh.dims.attention_share(score_bytes * b) / (gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency)
    causal = flops(causal_skip=True) / flops(causal_skip=False)
    fwd_ratio, bwd_ratio = kernel.ratios(sh.dtype)
    return (causal * fwd_ratio * (attn_fwd + score_s),
            causal * bwd_ratio * (2.0 * attn_fwd + ELEMENTWISE_BWD_RATIO * score_s))


def ssd_scan_s(layer: Layer, gpu: GpuSpec, sh: Sharding, params: CostParams) -> tuple[float, float]:
    """Forward and backward time of a Mamba-2 mixer's SSD scan on one TP rank (planner.inputs.mamba):
    its chunked kernels are batched matmuls over chunks, as FlashAttention's are over key blocks,
    priced at the fused attention's efficiency (`attention_efficiency`), and no faster than the HBM
    traffic of their fp32 chunk states (the roofline's memory bound, Williams et al. 2009). The
    backward recomputes the forward's states (mamba_ssm _mamba_chunk_scan_combined_bwd) and takes
    the gradients of each matmul's two operands: three times the forward."""
    seq_len = sh.dims.local_seq_len(sh.seq_len)
    flops = layer.scan_flops_per_sample(seq_len, sh.dims.tp) * sh.micro_batch
    traffic = sh.dims.compute_share(seq_len * sh.micro_batch * layer.config.mamba.scan_bytes_per_token(sh.dtype_bytes))
    fwd = max(flops / (matmul_peak(gpu, sh.dtype, params) * params.attention_efficiency),
              traffic / (gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency))
    return fwd, 3.0 * fwd


@lru_cache(maxsize=65536)
def layer_time(layer: Layer, gpu: GpuSpec, sh: Sharding, tp_link: Link, params: CostParams) -> LayerTime:
    """Time of one layer for one micro-batch on one rank of a TP group of `sh.tp` GPUs (a
    blend of decoder shapes, model.Model.decoder_stand_in: their count-weighted mean), without
    the expert-parallel all-to-all (planner.cost.moe.with_moe_alltoall adds it); with
    context parallelism on one of its cp ranks, every figure but the attention scores at the
    GPU's seq_len / cp tokens (StageDims.local_seq_len; its collectives: cost.context_parallel)."""
    if layer.blend:
        times = [(layer_time(part, gpu, sh, tp_link, params), n) for part, n in layer.blend]
        total = sum(n for _, n in times)
        return LayerTime(*(sum(getattr(t, f.name) * n for t, n in times) / total for f in fields(LayerTime)))
    return _layer_time(layer, gpu, sh, tp_link, params)


def _layer_time(layer: Layer, gpu: GpuSpec, sh: Sharding, tp_link: Link, params: CostParams) -> LayerTime:
    """layer_time of one layer shape, without the expert-parallel all-to-all."""
    sh = sh.priced(params.fused_attention)  # the attention the runtime runs on this GPU (Sharding.priced)
    dtype, micro_batch, attention, recompute = sh.dtype, sh.micro_batch, sh.attention, sh.recompute
    seq_len = sh.dims.local_seq_len(sh.seq_len)
    tp, sequence_parallel = sh.dims.tp, sh.dims.sequence_parallel
    peak = matmul_peak(gpu, dtype, params)
    nb = DTYPE_BYTES[dtype]
    b = micro_batch
    measured = params.measured.times(layer.kind) if params.measured is not None else None
    if measured is not None:
        return _measured_layer_time(layer, measured, sh, tp_link, params)
    if layer.config is None:  # a layer-profile entry without shapes: FLOPs at the plateau
        flops = sh.dims.compute_share(layer.fwd_flops_per_sample(sh.seq_len) * b)
        fwd = flops / (peak * params.gemm_efficiency)
        recompute_s = fwd if recompute == "full" else 0.0
        # backward = input-gradient + weight-gradient GEMMs, each the forward's FLOPs (Qi et al. 2023, sec 2)
        return LayerTime(fwd, 2 * fwd, recompute_s, 0.0, 0.0, fwd)
    hbm = gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency

    gemm_times, gemm_bwd_times, cast_fwd_bytes, cast_bwd_bytes = _gemm_times(layer, gpu, sh, params, seq_len, peak)
    gemm_fwd, gemm_bwd = sum(gemm_times), sum(gemm_bwd_times)

    attn_fwd, attn_bwd = attention_s(layer, gpu, sh, params)

    other_bytes, score_bytes = elementwise_bytes(layer, seq_len, tp, sequence_parallel, attention, nb, sh.dims.ep)
    elem_fwd = other_bytes * b / hbm * (1.0 if params.torch_compile else params.elementwise_traffic_factor)
    score_fwd = score_bytes * b / hbm
    # backward elementwise traffic: ELEMENTWISE_BWD_RATIO x the forward's;
    # the runtime's fixed host time per layer and micro-batch: a third forward, two thirds backward
    cast_fwd, cast_bwd = cast_fwd_bytes / hbm, cast_bwd_bytes / hbm
    host = layer_host_s(layer, params)
    fwd = gemm_fwd + attn_fwd + elem_fwd + score_fwd + cast_fwd + host / 3
    bwd = gemm_bwd + attn_bwd + ELEMENTWISE_BWD_RATIO * (elem_fwd + score_fwd) + cast_bwd + 2 * host / 3
    recompute_s = layer_recompute_s(layer, sh, params.selective_recompute, host, fwd, gemm_times,
                                    elem_fwd, cast_fwd, attn_fwd, score_fwd,
                                    hbm / (1.0 if params.torch_compile else params.elementwise_traffic_factor))

    # the weight-gradient GEMMs (dW = X^T dY) do the forward GEMMs' FLOPs at the same shapes, half the
    # GEMM backward; attention scores, elementwise kernels and the host time belong to the input
    # gradient (Qi et al. 2023, Zero Bubble, sec 2: T_W ~ T_B for the GEMMs)
    return _with_tp_comm(layer, fwd, bwd, recompute_s, gemm_fwd, b, seq_len, tp, sequence_parallel, recompute,
                         tp_link, nb, params, gemm_bwd / 2)


def layer_host_s(layer: Layer, params: CostParams) -> float:
    """The runtime's host time per layer and micro-batch, forward plus backward, that its GPU waits
    for (none where the whole step is one CUDA graph: CostParams.full_iteration_cuda_graph)."""
    if params.full_iteration_cuda_graph:
        return 0.0
    return params.layer_overhead_s + (params.moe_layer_host_s if layer.config.num_experts > 1 else 0.0)


def _measured_layer_time(layer: Layer, measured, sh: Sharding, tp_link: Link, params: CostParams) -> LayerTime:
    """_layer_time from the measured forward and backward of this layer kind (planner profile),
    interpolated; full recomputation repeats the forward; communication stays analytic."""
    b, tp = sh.micro_batch, sh.dims.tp
    fwd, bwd = measured.at(b, tp)
    # measured over whole sequences: CP splits the work cp ways (StageDims.compute_share)
    fwd, bwd = fwd / sh.dims.cp, bwd / sh.dims.cp
    recompute_s = fwd if sh.recompute == "full" else 0.0
    # a measured backward is not split: its weight-gradient GEMMs repeat the forward's
    # FLOPs (Narayanan et al. 2021, sec 5.1), at most half the backward (Qi et al. 2023, sec 2)
    wgrad = min(fwd, bwd / 2)
    return _with_tp_comm(layer, fwd, bwd, recompute_s, fwd, b, sh.dims.local_seq_len(sh.seq_len), tp,
                         sh.dims.sequence_parallel, sh.recompute, tp_link, DTYPE_BYTES[sh.dtype], params, wgrad)


def _gemm_times(layer: Layer, gpu: GpuSpec, sh: Sharding, params: CostParams, seq_len: int,
                peak: float) -> tuple[list[float], list[float], float, float]:
    """Forward and backward time of each of the layer's GEMMs (Layer.gemms' order) and the bytes
    of its fp8 casts, forward and backward.

    GEMMs: forward 2mnk; backward computes the input and the weight gradients, 2x forward
    (Narayanan et al. 2021, sec 5.1).
    Under a quantized dtype a decoder block's GEMMs run at its format's peak
    (planner.cost.fp8.gemm_flops_per_s) and pay the recipe's casts, memory-bound
    (planner.cost.fp8.cast_bytes).
    Routed experts run as a grouped GEMM, each expert's GEMM at its own shape (rows: the tokens
    routed to it) and no faster than its memory traffic (expert_gemm_traffic_s); under EP the
    group waits for its busiest rank (CostParams.moe_imbalance)."""
    b = sh.micro_batch
    recipe = fp8_cost.quantized_linears(layer, sh.dtype, params.fp8_recipe)
    imbalance = ep_rank_imbalance(params.moe_imbalance, layer.config.num_experts, sh.dims.ep)
    knee = gemm_half_dim(gpu, sh.dtype, params)
    gemm_times, gemm_bwd_times, cast_fwd_bytes, cast_bwd_bytes = [], [], 0.0, 0.0
    for g in layer.gemms(seq_len, sh.dims.tp, sh.dims.ep, sh.dims.etp):
        rows = b * g.rows
        if recipe is not None:
            shape = gemm_efficiency(rows, g.n, g.k, params) / params.gemm_efficiency
            fp8_eff = params.gemm_efficiency if params.fp8_gemm_efficiency is None else params.fp8_gemm_efficiency
            rate = fp8_cost.gemm_flops_per_s(gpu, recipe, fp8_eff, shape, recipe.gemm_rate)
            bwd_rate = fp8_cost.gemm_flops_per_s(gpu, recipe, fp8_eff, shape, recipe.bwd_gemm_rate)
            fwd_b, bwd_b = fp8_cost.cast_bytes(rows, g.n, g.k, g.count, recipe, g.linears)
            cast_fwd_bytes, cast_bwd_bytes = cast_fwd_bytes + fwd_b, cast_bwd_bytes + bwd_b
        else:
            rate = bwd_rate = peak * gemm_efficiency(rows, g.n, g.k, params, knee)
        seconds = g.count * 2.0 * rows * g.n * g.k / rate
        bwd_seconds = 2 * g.count * 2.0 * rows * g.n * g.k / bwd_rate  # input and weight gradients
        if g.expert:
            in_bytes = recipe.operand_bytes if recipe is not None else sh.dtype_bytes
            traffic = expert_gemm_traffic_s(rows, g.n, g.k, g.count, in_bytes, sh.dtype_bytes,
                                            gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency)
            # the input- and weight-gradient GEMMs move as much again each
            seconds, bwd_seconds = max(seconds, traffic) * imbalance, max(bwd_seconds, 2 * traffic) * imbalance
        gemm_times.append(seconds)
        gemm_bwd_times.append(bwd_seconds)
    return gemm_times, gemm_bwd_times, cast_fwd_bytes, cast_bwd_bytes


def ep_rank_imbalance(expert_imbalance: float, num_experts: int, ep: int) -> float:
    """The busiest EP rank's routed tokens over the mean, from the busiest expert's
    (CostParams.moe_imbalance): a rank sums the loads of its num_experts / ep experts, whose excess
    over the mean, independent from expert to expert, shrinks as the square root of their number
    (the central limit theorem); one expert per rank keeps the expert's figure; no EP, none."""
    if ep <= 1:
        return 1.0
    return 1.0 + (expert_imbalance - 1.0) / math.sqrt(max(1, num_experts // ep))


def expert_gemm_traffic_s(rows: float, n: float, k: float, count: int, in_bytes: float, out_bytes: int,
                          hbm_bytes_per_s: float) -> float:
    """HBM time of `count` expert GEMMs rows x n x k (a grouped GEMM: Megatron-core GroupedMLP /
    TEGroupedLinear, one GEMM per local expert): each reads its input and its expert's weight and
    writes its output once, the roofline's memory bound (Williams et al. 2009). With few rows
    per expert the weight reads dominate, and a narrow expert (its FFN split over expert TP)
    brings less work per byte: the GEMM turns memory-bound."""
    return count * ((rows * k + k * n) * in_bytes + rows * n * out_bytes) / hbm_bytes_per_s


def hidden_fraction_of_steps(steps: int) -> float:
    """Share of a computation split into `steps` equal steps that can hide a transfer: every step
    but the first, which has nothing to wait for (a decomposed collective-GEMM, Wang et al. 2022)."""
    return (steps - 1) / steps


def _with_tp_comm(layer: Layer, fwd: float, bwd: float, recompute_s: float, gemm_fwd: float, b: int,
                  seq_len: int, tp: int, sequence_parallel: bool, recompute: str, tp_link: Link, nb: int,
                  params: CostParams, wgrad_s: float = 0.0) -> LayerTime:
    """Add the tensor-parallel communication of one layer for one micro-batch.

    Korthikanti et al. 2022, sec 4.2.2: a block all-reduces b*s*h twice forward and twice
    backward (once each for a hybrid model's one-branch layer: ModelConfig.sublayers); with
    sequence parallelism each all-reduce becomes a reduce-scatter plus an all-gather of the same
    total volume. The vocab-parallel embedding all-reduces its
    output; the head its input gradient.
    """
    tp_fwd = tp_bwd = 0.0
    if tp > 1 and layer.config is not None:
        activation = nb * b * seq_len * layer.config.hidden
        one = (2 * ring_allgather_s(activation, tp, tp_link, link_efficiency(tp_link, params))
               if sequence_parallel else
               ring_allreduce_s(activation, tp, tp_link, link_efficiency(tp_link, params)))
        # residual branches: attention and MLP, one in a hybrid's layer; an MTP module's projection
        # gathers its column-parallel output (megatron-core MultiTokenPredictionLayer): counted as one more
        branches = layer.config.sublayers + layer.config.mtp_module
        if layer.kind == "decoder" and params.tp_async and sequence_parallel:
            # async TP (Wang et al. 2022, Overlap Communication with Dependent Computation via
            # Decomposition, sec 3; PyTorch's fused_all_gather_matmul / fused_matmul_reduce_scatter,
            # "Introducing Async Tensor Parallelism in PyTorch", 2024): a collective and its GEMM
            # are split into tp steps, step k's transfer (copy engines) under step k-1's partial
            # GEMM; the local shard's GEMM has nothing to wait for, so (tp-1)/tp of the GEMMs
            # hide the transfers; the block's four collectives pooled against its forward GEMMs.
            # Forward only: the post measures ~29 % forward and ~8 % end-to-end speedup on Llama 3
            # 8B, what an unchanged backward (2/3 of the step) leaves; a recomputed forward is a forward
            tp_fwd = max(0.0, branches * one - gemm_fwd * hidden_fraction_of_steps(tp))
            tp_bwd = branches * one + (tp_fwd if recompute == "full" else 0.0)
        elif layer.kind == "decoder":
            tp_fwd, tp_bwd = branches * one, branches * one
            if params.overlap_tp_comm:
                # Megatron overlaps the input-gradient all-reduce of the column-parallel GEMMs
                # (QKV, MLP-in) with their weight-gradient GEMMs (Korthikanti et al. 2022, sec
                # 4.2.2): one all-reduce per branch hides, together up to half that GEMM time.
                wgrad = gemm_fwd / 2
                tp_bwd = (branches - 1) * one + max(0.0, one - wgrad)
            if recompute == "full":
                tp_bwd += branches * one
        elif layer.kind == "embedding":
            tp_fwd = one
        else:
            tp_bwd = one
    return LayerTime(fwd, bwd, recompute_s, tp_fwd, tp_bwd, wgrad_s)


def optimizer_step_s(params_on_device: float, gpu: GpuSpec, params: CostParams, optimizer: str = "adamw") -> float:
    """A fused optimizer step over the device's (ZeRO-sharded) parameters: memory-bound
    traffic (planner.cost.states: Optimizer.step_traffic_bytes; fused Adam: ADAM_TRAFFIC_BYTES)."""
    return (params_on_device * get_optimizer(optimizer).step_traffic_bytes
            / (gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency))


def hierarchical_allreduce_s(nbytes: float, ranks_per_node: int, nodes: int, intra: Link,
                             inter: Link, params: CostParams) -> float:
    """All-reduce over `nodes` x `ranks_per_node` GPUs: reduce-scatter inside each node,
    all-reduce of the 1/k shard across nodes, all-gather inside each node (NCCL's
    hierarchical algorithm; Jia et al. 2018). `inter` is one GPU's share of its NIC."""
    if nodes <= 1:
        return ring_allreduce_s(nbytes, ranks_per_node, intra, link_efficiency(intra, params))
    k = ranks_per_node
    return (ring_allgather_s(nbytes, k, intra, link_efficiency(intra, params), "reduce_scatter")
            + ring_allreduce_s(nbytes / k, nodes, inter, link_efficiency(inter, params, intra=False))
            + ring_allgather_s(nbytes, k, intra, link_efficiency(intra, params)))
