"""A priced plan's MFU against the best published MFU of its GPUs' architectures and precision
(planner.inputs.mfu_ceilings): what `plan`, `evaluate` and `show` print next to the MFU, and a
plan's `predicted.mfu_above_published`."""

from __future__ import annotations

from ..cost.evaluate import Estimate
from ..cost.formulas import mfu_peak_dtype
from ..cost.runtimes import training_params
from ..inputs.mfu_ceilings import AbovePublished, Share, above_published, load_ceilings
from ..plan import Plan


def mfu_above_published(plan: Plan, est: Estimate) -> AbovePublished | None:
    """The published ceiling `est`'s MFU exceeds, or None. Each used rank counts in the
    precision MFU divides its peak by (formulas.mfu_peak_dtype under the plan's training: TF32
    where fp32 GEMMs run on it), with its peak FLOP/s as its weight."""
    gpus = {g.name: g for g in plan.cluster.gpu_types}
    params = training_params(plan.cluster.gpu_types, plan.training)
    precision = {name: mfu_peak_dtype(gpu, plan.training.dtype, params[name]) for name, gpu in gpus.items()}
    shares = [Share(gpus[est.gpu_by_rank[rank]].architecture, precision[est.gpu_by_rank[rank]], peak)
              for rank, peak in sorted(est.peak_flops_by_rank.items())]
    return above_published(est.mfu, shares, load_ceilings())
