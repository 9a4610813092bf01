"""Model FLOPs, the numerator of MFU, defined once; and the check that no GPU is credited
with more than its peak. Every MFU and model TFLOP/s the planner prints goes through
`model_flops_per_sample`: 3 x forward, no recomputation, causal attention at half the full s^2.
The convention and its sources: docs/cost-model.md, "What sets the step time".
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..inputs.model import Layer, Model

BACKWARD_OVER_FORWARD = 2  # input and weight gradients: 2x the forward FLOPs
CAUSAL_ATTENTION = True  # attention scores count their lower triangle only (module docstring)


def layer_model_flops_per_sample(layer: Layer, seq_len: int) -> float:
    """Model FLOPs (forward + backward) of one sample of `seq_len` tokens through `layer`."""
    if layer.config is None:
        forward = layer.fwd_flops_per_sample(seq_len)
    else:
        forward = (sum(g.flops_per_sample(seq_len) for g in layer.gemms(seq_len, tp=1))
                   + layer.attention_flops_per_sample(seq_len, tp=1, causal_skip=CAUSAL_ATTENTION)
                   + layer.scan_flops_per_sample(seq_len, tp=1))
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
