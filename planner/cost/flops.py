"""Model FLOPs, the numerator of MFU, defined once; and the check that no GPU is credited
with more than its peak.

Convention (every MFU and model TFLOP/s the planner prints, in `evaluate`, `plan`, `show`,
sweep rows and the benchmarks, goes through `model_flops_per_sample`):

- forward + backward = 3 x forward: the backward computes the input and the weight
  gradients, each as many FLOPs as the forward (Narayanan et al. 2021, sec 5.1);
  recomputation is not counted (model FLOPs, not hardware FLOPs: Chowdhery et al. 2022,
  PaLM, appendix B);
- every weight GEMM of the model at 2 FLOPs per multiply-add (QKV, attention output, MLP,
  MoE: the top-k experts a token visits, the router; the LM head; no embedding lookup);
- attention scores (QK^T and attention x V) counted CAUSALLY: half of the full
  4 s^2 h forward FLOPs of a layer, 2 s^2 h, i.e. the lower triangle a causal mask keeps.
  This is FlashAttention's count for causal kernels (Dao 2023, FlashAttention-2, sec 4.1:
  causal FLOPs are half the non-causal) and what planner.cost.formulas prices the flash kernel as
  doing (cost.layer_time: causal_skip=True), so MFU and the step time count the same work.
  PaLM appendix B (12 L H Q T per token), Megatron-LM (Narayanan et al. 2021, eq. 3:
  96 B s l h^2 (1 + s/6h + V/16lh)) and torchtitan (`6N + 12 l h q t`, "we do not account
  for sparsity in causal attention") count the FULL s^2: their MFU is higher than ours by
  the ratio full / causal of the whole count, for llama-3-8b 1.07x at 4k tokens, 1.36x at
  32k, 1.70x at 131k (3 x model.Model.fwd_flops_per_sample, the full count, over
  model_flops_per_sample).

A layer read from a layer-profile file (no shapes) counts the forward FLOPs the file gives
(3 x), scaled linearly with the sequence length as the rest of the planner does.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Mapping

from ..inputs.model import Layer, Model

BACKWARD_OVER_FORWARD = 2  # input and weight gradients: 2x the forward FLOPs
CAUSAL_ATTENTION = True  # attention scores count their lower triangle only (module docstring)


@lru_cache(maxsize=4096)  # a pure function of frozen inputs, asked per layer of every plan evaluated
def layer_model_flops_per_sample(layer: Layer, seq_len: int) -> float:
    """Model FLOPs (forward + backward) of one sample of `seq_len` tokens through `layer`."""
    if layer.config is None:
        forward = layer.fwd_flops_per_sample(seq_len)
    else:
        forward = (sum(g.flops_per_sample(seq_len) for g in layer.gemms(seq_len, tp=1))
                   + layer.attention_flops_per_sample(seq_len, tp=1, causal_skip=CAUSAL_ATTENTION))
    return (1 + BACKWARD_OVER_FORWARD) * forward


def layers_model_flops_per_sample(layers: Iterable[Layer], seq_len: int) -> float:
    return sum(layer_model_flops_per_sample(layer, seq_len) for layer in layers)


def model_flops_per_sample(model: Model, seq_len: int) -> float:
    """The MFU numerator per sample (sequence): see the module docstring."""
    return layers_model_flops_per_sample(model.layers, seq_len)


def model_flops_per_token(model: Model, seq_len: int) -> float:
    return model_flops_per_sample(model, seq_len) / seq_len


class NotCredible(AssertionError):
    """An estimate credits a GPU with more FLOP/s than its peak: a bug in the cost model
    (an internal error, not bad input), unless the times were measured (then the profile
    given for that GPU type is faster than the GPU: see `check_credible`)."""


def check_credible(mfu: float, model_flops_per_s_by_rank: Mapping[int, float], peak_by_rank: Mapping[int, float],
                   gpu_by_rank: Mapping[int, str]) -> None:
    """The invariant of every estimate priced by the analytic model: MFU <= 100 % and no
    rank's model FLOP/s above its GPU's peak (model FLOPs are a lower bound on the work a
    GPU does, so a rank above its peak means a time the GPU cannot achieve)."""
    if not mfu <= 1.0 + 1e-9:
        raise NotCredible(f"MFU {mfu:.1%} above 100 %")
    for rank, achieved in sorted(model_flops_per_s_by_rank.items()):
        if not achieved <= peak_by_rank[rank] * (1 + 1e-9):
            raise NotCredible(f"rank {rank} ({gpu_by_rank[rank]}) credited with {achieved / 1e12:.1f} model TFLOP/s, "
                              f"above its peak {peak_by_rank[rank] / 1e12:.1f}")
