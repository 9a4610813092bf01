"""Uniform configurations: the same tp, pp and dp everywhere, even layers and even batch
shares, as a Megatron-LM user would launch them (plan.uniform_plan), and the fastest one
that fits.

The solver prices the uniform configurations of its own search space first (1F1B, every
stage on whole nodes, its tp degrees, micro-batches, recompute modes and ZeRO stages), so it
holds a valid plan within a fraction of a second: that plan bounds the dynamic programme
from the start and is what a time limit returns when the exact search has found nothing
better yet. benchmarks/plan_quality.py uses the wider space (ZeRO-0, interleaving, stages
on parts of nodes) as its heterogeneity-blind baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Callable, Iterator, Mapping

from ..core.clock import SearchClock
from ..cost.formulas import CostParams
from ..core.errors import BadInput
from ..cost.evaluate import Estimate, evaluate
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Plan, Training, uniform_plan
from ..schedules import search_schedule


@dataclass(frozen=True)
class UniformSpace:
    """Which uniform configurations to price."""

    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    recompute_modes: tuple[str, ...] = ("none", "full")
    zero_stages: tuple[int, ...] = (0, 1)  # used when dp > 1; dp = 1 always has ZeRO-0
    virtual_stages: tuple[int, ...] = (1, 2)
    max_stages: int | None = None  # None: any pp
    whole_nodes: bool = False  # every pipeline stage on whole nodes (the solver's space)
    sequence_parallel: bool = True  # with tp > 1


def stages_on_whole_nodes(cluster: Cluster, ranks_per_stage: int) -> bool:
    """Whether the rank ranges [k r, (k + 1) r) each cover whole nodes."""
    boundaries = {g.first_rank + k * g.gpus_per_node for g in cluster.groups for k in range(g.nodes + 1)}
    return all(start in boundaries for start in range(0, cluster.num_gpus + 1, ranks_per_stage))


def uniform_candidates(model: Model, cluster: Cluster, base: Training, space: UniformSpace
                       ) -> Iterator[Plan]:
    """Every uniform plan of `space`, in (tp, micro-batch, recompute, ZeRO, V, pp) order."""
    n = cluster.num_gpus
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    heads = model.config.num_heads if model.config else 1
    for tp, b, recompute, zero, v in product(space.tp_degrees, space.micro_batches, space.recompute_modes,
                                             space.zero_stages, space.virtual_stages):
        if n % tp or heads % tp or any(g.gpus_per_node % tp for g in cluster.groups):
            continue
        if base.global_batch % b or (recompute == "selective" and base.attention == "flash"):
            continue
        schedule = search_schedule(v)
        chunked = schedule.chunks_per_rank(v) > 1
        for pp in range(1, n // tp + 1):
            if (n // tp) % pp or pp * v > blocks or pp < schedule.min_pp or (chunked and blocks % (pp * v)):
                continue
            if space.max_stages is not None and pp > space.max_stages:
                break
            dp = n // (tp * pp)
            if base.global_batch % (dp * b):
                continue
            if space.whole_nodes and not stages_on_whole_nodes(cluster, tp * dp):
                continue
            training = Training(base.global_batch, base.seq_len, base.dtype, b,
                                schedule.name, v, base.attention, base.runtime, base.optimizer)
            try:
                yield uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=dp, zero=zero if dp > 1 else 0,
                                   recompute=recompute, sequence_parallel=space.sequence_parallel and tp > 1)
            except BadInput:
                continue


def improving_uniform(model: Model, cluster: Cluster, base: Training, space: UniformSpace,
                      params: CostParams | Mapping[str, CostParams] | None = None,
                      clock: SearchClock | None = None,
                      accept: Callable[[Plan], bool] | None = None) -> Iterator[tuple[Plan, Estimate]]:
    """Each uniform plan of `space` that fits and is faster than every one before it, in
    candidate order (so ties keep the first); the last one yielded is the fastest. A caller
    cut off by the clock keeps the best so far. `accept`: only the plans it accepts are priced."""
    best_s = float("inf")
    seen: set = set()
    for plan in uniform_candidates(model, cluster, base, space):
        if clock is not None:
            clock.check()
        if accept is not None and not accept(plan):
            continue
        key = (plan.training, plan.stages)
        if key in seen:  # dp = 1 makes every ZeRO stage the same plan
            continue
        seen.add(key)
        estimate = evaluate(plan, params)
        if estimate.fits and estimate.step_time_s < best_s:
            best_s = estimate.step_time_s
            yield plan, estimate


def best_uniform(model: Model, cluster: Cluster, base: Training, space: UniformSpace,
                 params: CostParams | Mapping[str, CostParams] | None = None) -> tuple[Plan, Estimate] | None:
    """The fastest uniform plan of `space` that fits (ties: the first in candidate order),
    or None when none fits."""
    best = None
    for best in improving_uniform(model, cluster, base, space, params):
        pass
    return best
