"""Model states per device: the optimizers' bytes per parameter, and the weights, gradients
and optimizer states one device holds under ZeRO (planner.cost.formulas re-exports them).
Pure arithmetic; sizes in bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dims import zero_divisors
from ..core.errors import BadInput
from ..inputs.model import DTYPE_BYTES

# Adam in mixed precision (Rajbhandari et al. 2020, ZeRO, sec 3.1): 2 bytes of 16-bit
# weights, 2 of 16-bit gradients and K = 12 of fp32 master weights, momentum and variance.
WEIGHT_BYTES_FP32_TRAINING = 4
OPTIMIZER_BYTES_MIXED = 12
OPTIMIZER_BYTES_FP32 = 8  # fp32 training needs no master copy: momentum + variance
# The fused Adam step reads master weights, gradient, m, v and writes master, m, v and the
# 16-bit copy: 4+2+4+4 + 4+4+4+2 = 28 bytes per parameter, memory-bound.
ADAM_TRAFFIC_BYTES = 28


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's memory and step cost per parameter (Training.optimizer)."""

    name: str
    state_bytes_mixed: float  # fp32 master weights and the optimizer's states (16-bit training)
    state_bytes_fp32: float  # fp32 training: the states only (the weights are the master copy)
    step_traffic_bytes: float  # memory read and written by one fused step (memory-bound)
    # Muon's split (planner.cost.muon): these states and traffic for the decoders' 2-D weights only, AdamW's
    # for the rest, and every step orthogonalizes each matrix (its Newton-Schulz matmuls)
    orthogonalized: bool = False


# 8-bit AdamW (Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization, sec 2): both
# moments in 8 bits, one fp32 absolute maximum per block of 2048 values each
QUANT_SCALE_BYTES = 2 * 4 / 2048
# Adafactor (Shazeer & Stern 2018, sec 3): the second moment of an r x c matrix factored into
# fp32 row and column sums, 4(r + c)/(rc) bytes per parameter: at most 8/1024 for r, c >= 1024;
# no first moment (beta1 = 0, sec 6)
FACTORED_BYTES = 8 / 1024
OPTIMIZERS = {
    # Rajbhandari et al. 2020 (ZeRO, sec 3.1): master, momentum, variance; traffic ADAM_TRAFFIC_BYTES
    "adamw": Optimizer("adamw", OPTIMIZER_BYTES_MIXED, OPTIMIZER_BYTES_FP32, ADAM_TRAFFIC_BYTES),
    # master 4 + two 8-bit moments; reads master, gradient, m, v (4+2+1+1), writes master, m, v, copy (4+1+1+2)
    "adamw-8bit": Optimizer("adamw-8bit", 4 + 2 + QUANT_SCALE_BYTES, 2 + QUANT_SCALE_BYTES, 16),
    # master 4 + factored statistics; reads master and the gradient twice (its row and column
    # means, then the update: 4+2+2), writes master and copy (4+2)
    "adafactor": Optimizer("adafactor", 4 + FACTORED_BYTES, FACTORED_BYTES, 14),
    # AdamW with every state in bf16 (Apex DistributedFusedAdam `dtype=torch.bfloat16`, as NeMo's
    # `optim.dtype: bf16` passes it): a bf16 parameter shard, momentum and variance, 2+2+2 bytes;
    # reads shard, gradient, m, v (2+2+2+2), writes shard, m, v and the copy sent to the all-gather (2+2+2+2)
    "adamw-bf16": Optimizer("adamw-bf16", 6, 4, 16),
    # SGD with momentum (Sutskever et al. 2013): master 4 + momentum 4; reads master, gradient,
    # momentum (4+2+4), writes master, momentum, copy (4+4+2)
    "sgd": Optimizer("sgd", 8, 4, 20),
    # Muon (planner.cost.muon) on the decoders' 2-D weights: fp32 master and fp32 momentum (megatron-core
    # muon.py: Float16OptimizerWithFloat16Params, momentum_buffer like the master); reads master,
    # gradient, momentum (4+2+4), writes momentum, master, copy (4+4+2); its Newton-Schulz matmuls
    # are priced apart (cost.muon). The parameters it leaves to AdamW take AdamW's bytes (model_state_bytes).
    "muon": Optimizer("muon", 8, 4, 20, orthogonalized=True),
}


def get_optimizer(name: str) -> Optimizer:
    optimizer = OPTIMIZERS.get(name)
    if optimizer is None:
        raise BadInput(f"unknown optimizer {name!r}, expected one of {', '.join(OPTIMIZERS)}", field="--optimizer")
    return optimizer



@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    reserved_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.reserved_bytes)


def gradient_bytes(dtype: str) -> int:
    """Bytes of one gradient element: fp32 training keeps fp32 gradients, mixed precision
    16-bit ones (Rajbhandari et al. 2020, sec 3.1)."""
    return WEIGHT_BYTES_FP32_TRAINING if dtype == "fp32" else DTYPE_BYTES[dtype]


def reduce_scatter_bytes(dtype: str, fp32_reduce: bool) -> int:
    """Bytes of one gradient element a ZeRO-2/3 reduce-scatter moves: fp32 where the runtime
    reduces in fp32 (`fp32_reduce`, CostParams.fp32_grad_accumulation: FSDP2's
    MixedPrecisionPolicy reduce_dtype float32, whose foreach_reduce casts the unsharded gradients
    into an fp32 reduce_scatter_input, torch fully_shard _fsdp_collectives.py), else gradient_bytes."""
    return WEIGHT_BYTES_FP32_TRAINING if fp32_reduce else gradient_bytes(dtype)


def model_state_bytes(weight_params: float, dtype: str, zero: int, dp: int,
                      optimizer: str = "adamw", adam_params=0.0) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states on one device (ZeRO, Rajbhandari et al. 2020,
    Figure 1; dims.zero_divisors; the optimizer's states, Optimizer). `weight_params` is
    already divided by the TP degree; under Muon, `adam_params` of them keep AdamW's states (cost.muon)."""
    grad_b = gradient_bytes(dtype)
    opt = get_optimizer(optimizer)
    fp32 = dtype == "fp32"
    if fp32:
        weight_b, opt_b = WEIGHT_BYTES_FP32_TRAINING, opt.state_bytes_fp32
    else:
        weight_b, opt_b = DTYPE_BYTES[dtype], opt.state_bytes_mixed
    weights_div, grads_div, optimizer_div = zero_divisors(zero, dp)
    weights = weight_params * weight_b / weights_div
    grads = weight_params * grad_b / grads_div
    optimizer = weight_params * opt_b / optimizer_div
    if opt.orthogonalized:
        adam = OPTIMIZERS["adamw"]
        optimizer = optimizer + adam_params * ((adam.state_bytes_fp32 if fp32 else adam.state_bytes_mixed) - opt_b) \
            / optimizer_div
    return weights, grads, optimizer
