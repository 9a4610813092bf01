"""`plan --compare-any`: the same search once more under `--runtime any`, for the plan file's
solver.any_runtime_step_s (what a freer runtime would gain), in the time the limit leaves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.errors import NoFeasiblePlan
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Training

if TYPE_CHECKING:  # the search loads when a workflow runs, not on import
    from ..search.orchestration.driver import SearchResult


ANY_RUNTIME_MIN_S = 1.0  # the least time left under --time-limit worth an `any` search
NOT_COMPARED_NOTE = "not searched (--compare-any searches it)"


def with_any_runtime(result: SearchResult, model: Model, cluster: Cluster, training: Training,
                      options) -> SearchResult:
    """`result` with the step time of the same search under `--runtime any` (same cost physics,
    every stage free, the upstream schedules), in the time the limit leaves; skipped, with a note, when too little is left
    or that search does not finish in it."""
    from ..search.orchestration.driver import NothingFaster, solve

    left = None if options.time_limit_s is None else options.time_limit_s - result.seconds
    if left is not None and left < ANY_RUNTIME_MIN_S:
        return replace(result, any_runtime_step_s=None,
                       any_runtime_note=f"not searched: {max(left, 0.0):.1f} s left of the time limit")
    try:
        # the plan found bounds the wider search: only faster plans are looked for. It keeps the
        # upstream runtimes' schedules (no ZB-H1, which none runs as one chunk per rank) but for the
        # uniform-only ones (ZB-V, looped BFS: uniform_schedules): the gain reported is that of the
        # freer stages (uneven shares, per-stage TP; not per-replica TP, whose configurations multiply
        # on clusters of several GPU types), and the time of the default `planner plan` stays that of the
        # two searches without zero bubble
        other = solve(model, cluster, training, replace(options, space="any", time_limit_s=left, zero_bubble=False,
                                                    uniform_schedules=False, per_replica_tp=False, tp_across_types=False,
                                                    upper_bound_s=result.estimate.step_time_s))
    except NothingFaster:
        return replace(result, any_runtime_step_s=result.estimate.step_time_s)
    except NoFeasiblePlan:
        return replace(result, any_runtime_step_s=None, any_runtime_note="not found within the time limit")
    if not other.optimal and other.estimate.step_time_s >= result.estimate.step_time_s:
        return replace(result, any_runtime_step_s=None, any_runtime_note="not proven within the time limit")
    return replace(result, any_runtime_step_s=min(other.estimate.step_time_s, result.estimate.step_time_s))
