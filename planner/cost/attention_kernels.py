"""The fused attention kernel a GPU architecture runs where a plan asks for `attention: flash`,
and whether the runtime runs one there at all (Runtime.flash_attention).

FlashAttention-2 needs compute capability 8.0 or later (flash-attention README: "FlashAttention-2
currently supports Ampere, Ada, or Hopper GPUs"; PyTorch's scaled_dot_product_attention flash
backend likewise). On Volta and Turing, PyTorch's scaled_dot_product_attention and xFormers'
memory_efficient_attention dispatch to the CUTLASS memory-efficient kernel instead (xFormers
PR #362, "Use cutlass for memory-efficient attention": "FlashAttention is not supported on
V100"; any GPU from P100 on). Like FlashAttention it never writes the s x s scores to HBM and
saves only the log-sum-exp for its backward (Rabe & Staats 2021, "Self-attention Does Not Need
O(n^2) Memory"), so its memory is FlashAttention's (planner.inputs.model.act_bytes_per_sample);
its time is that of standard attention (the score GEMMs and the softmax / dropout traffic over
the scores) times the ratios measured against it, over the causal share of the score blocks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusedAttention:
    """A memory-efficient attention kernel priced against standard attention on the same GPU."""

    name: str
    fwd_vs_standard: float  # its forward time / standard attention's forward time, 16-bit inputs
    bwd_vs_standard: float  # its backward time / standard attention's backward time, 16-bit inputs
    fp32_fwd_vs_standard: float  # the same under fp32
    fp32_bwd_vs_standard: float
    source: str

    def ratios(self, dtype: str) -> tuple[float, float]:
        """(forward, backward) time against standard attention for `dtype` training."""
        if dtype == "fp32":
            return self.fp32_fwd_vs_standard, self.fp32_bwd_vs_standard
        return self.fwd_vs_standard, self.bwd_vs_standard


# "flash2": FlashAttention-2 at the architecture's attention_efficiency (planner.cost.formulas.attention_s)
FLASH2 = "flash2"
# "standard": no fused kernel under the runtime on that architecture, so `flash` runs standard
# attention (its time, and the s x s scores it saves for the backward); Runtime.flash_attention
STANDARD = "standard"

KERNELS: dict[str, FusedAttention] = {
    # xFormers PR #362 (github.com/facebookresearch/xformers/pull/362), V100, against the PyTorch
    # (vanilla) implementation over its benchmark shapes, on the median: fp16 forward 5 % slower,
    # backward 15 % slower; fp32 forward 4 % slower, backward 30 % slower. Its causal mask skips the
    # blocks above the diagonal (xFormers PR #389, "MemEffAttention: Add causal support"), which
    # vanilla attention computes
    "cutlass": FusedAttention(
        "cutlass", 1.05, 1.15, 1.04, 1.30,
        "xFormers PR #362 (V100 medians against vanilla attention: fp16 +5 % forward, +15 % backward; "
        "fp32 +4 %, +30 %)"),
}


def fused_kernel(name: str) -> FusedAttention | None:
    """The memory-efficient kernel `name` names; None for FlashAttention-2 (FLASH2) and STANDARD."""
    if name in (FLASH2, STANDARD):
        return None
    return KERNELS[name]


def priced_attention(attention: str, fused_attention: str) -> str:
    """The attention a training's `attention` is priced as where `flash` runs `fused_attention`
    (CostParams.fused_attention): "standard" where no fused kernel runs, else `attention`."""
    return STANDARD if attention == "flash" and fused_attention == STANDARD else attention
