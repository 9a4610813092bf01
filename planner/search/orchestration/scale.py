"""How `planner.search.orchestration.driver.solve` meets a large cluster before its dynamic programme: runs of
alike node groups merged into one group (decompose.merge_alike); for a runtime with one DP
degree for every stage on parts of unequal size, the cluster trimmed to identical bundles
(decompose.trim) searched first, its plan bounding the search on parts (driver.solve's docstring);
then, within a time limit, the whole cluster node by node, bounded by the plan on parts, which proves
it optimal where that search ends (docs/solver.md, "Scale: any node counts").
`solve_one` is the driver's search of one cluster on its own decomposition."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from ..bounds.bound import compute_lower_bound_s
from ...core.clock import Progress
from ...core.errors import NoFeasiblePlan, NotFoundInTime, NothingFaster
from ...cost.evaluate import evaluate
from ...cost.runtimes.capability import capability, violations
from ...plan import structural_problems
from ..decompose import decompose, merge_alike, prices_alike, trim
from .space import parts_only, unproven_shape, within
from ..pricing.stage_types import SearchContext
from ..pricing.stages import INF

__all__ = ["solve_scaled"]


def solve_scaled(context: SearchContext, on_progress: Callable[[Progress], None] | None,
                 solve_one: Callable[..., Any]) -> Any:
    """driver.solve (its docstring): merged groups, then the trimmed cluster and the parts, then (with a
    time limit, on a cluster larger than the exact search takes at once) the whole cluster node by
    node; a driver.SearchResult (this module sits below the driver, which passes its `_solve`)."""
    cluster, training, options = context.cluster, context.training, context.options
    merged = merge_alike(cluster, lambda first, second, group: prices_alike(first, second,
                                                                            options.params_for(group.gpu.name)))
    if merged is not None:  # runs of alike groups searched as one group each (decompose.merge_alike)
        inner = solve_scaled(replace(context, cluster=merged.cluster), on_progress, solve_one)
        plan = merged.plan_on(cluster, inner.plan)
        estimate = evaluate(plan, options.params_mapping())
        assert abs(estimate.step_time_s - inner.estimate.step_time_s) <= 1e-9 * inner.estimate.step_time_s, \
            "merged groups price differently"
        assert not structural_problems(plan) and estimate.fits
        return replace(inner, plan=plan, estimate=estimate, decomposition=merged.describe(inner.decomposition))
    started = context.options.clock()
    cap = capability(options.space or training.runtime)
    limit = options.time_limit_s
    nodes = sum(group.nodes for group in cluster.groups)
    whole_at_once = decompose(cluster, options.exact_node_limit(cap.per_stage_dp), options.max_bundle_nodes).exact
    vectors = math.prod(group.nodes + 1 for group in cluster.groups)  # the whole search's node vectors
    if limit is None or not options.whole_after_parts or whole_at_once \
            or vectors > options.whole_search_limit(cap.per_stage_dp):
        return _on_parts(context, on_progress, solve_one, started)
    # larger than the exact search's default: on parts first, in half the time limit, then the whole
    # cluster node by node, bounded by the plan on parts, in the time left
    first, failure = None, None
    try:
        first = _on_parts(replace(context, options=replace(options, time_limit_s=limit / 2)), on_progress,
                          solve_one, started)
    except NoFeasiblePlan as error:
        failure = error  # parts may hold no plan where the whole cluster does
    return _whole(replace(context, options=replace(options, max_exact_nodes=nodes)), first, failure, on_progress,
                  solve_one, started)


def _whole(context: SearchContext, first: Any, failure: NoFeasiblePlan | None,
           on_progress: Callable[[Progress], None] | None, solve_one: Callable[..., Any], started: float) -> Any:
    """The search of the whole cluster node by node (`context.options` say so), bounded by `first`,
    the plan on parts (None where it found none, `failure` saying why). A complete search with no
    faster plan proves `first` optimal, unless the search prices blended decoders or `first` holds
    what only uniform configurations price (driver._result's rule); cut short, the faster plan found."""
    bound = context.options.upper_bound_s
    if first is not None:
        bound = min(INF if bound is None else bound, first.estimate.step_time_s)
    try:
        whole = solve_one(replace(context, options=replace(context.options, upper_bound_s=bound)), on_progress,
                          started)
    except NothingFaster:
        if first is None:
            raise
        why = unproven_shape(first.plan)
        if why:
            return replace(first, not_proven=why, seconds=context.options.clock() - started)
        return replace(first, optimal=True, gap=0.0, bundles=1, decomposition="exact", not_proven="",
                       seconds=context.options.clock() - started)
    except NotFoundInTime as error:
        if first is None:
            raise failure if failure is not None else error
        searched = "" if error.searched is None else f" after {error.searched[0]} of {error.searched[1]} searches"
        return replace(first, not_proven=f"{first.not_proven}; the search of the whole cluster, cut short{searched}, "
                                         "found no faster plan", seconds=context.options.clock() - started)
    if first is not None and first.estimate.step_time_s < whole.estimate.step_time_s:
        # the whole search, cut short, returned a slower plan (its uniform seed or what it found in time)
        note = "" if whole.optimal else f"; the search of the whole cluster found no faster plan ({whole.not_proven})"
        return replace(first, not_proven=first.not_proven + note, seconds=context.options.clock() - started)
    return replace(whole, candidates=whole.candidates + (first.candidates if first is not None else 0),
                   seconds=context.options.clock() - started)


def _on_parts(context: SearchContext, on_progress: Callable[[Progress], None] | None,
              solve_one: Callable[..., Any], started: float) -> Any:
    """The search on the cluster's own decomposition; for a runtime with one DP degree for every stage on
    parts of unequal size, the trimmed cluster first, its plan bounding the search on parts."""
    cluster, training, options = context.cluster, context.training, context.options
    cap = capability(options.space or training.runtime)
    cut = None if cap.per_stage_dp else trim(cluster, options.exact_node_limit(False), options.max_bundle_nodes,
                                             training.global_batch, options.max_trimmed_bundle_nodes)
    if cut is None:
        return solve_one(context, on_progress, started)
    limit = options.time_limit_s
    trimmed = None
    try:
        half = replace(options, time_limit_s=None if limit is None else limit / 2,
                       max_bundle_nodes=max(options.max_bundle_nodes, cut.bundle_nodes))
        inner = solve_one(replace(context, cluster=cut.cluster, options=half), on_progress, started)
        plan = cut.plan_on(cluster, inner.plan)
        trimmed = (plan, evaluate(plan, options.params_mapping()), inner)
        assert not structural_problems(plan) and not violations(plan, options.space or training.runtime), \
            f"a trimmed plan mapped back is invalid: {structural_problems(plan)}"
        assert trimmed[1].fits, "a trimmed plan mapped back does not fit"
    except NoFeasiblePlan:
        pass  # the search on parts says why, if it finds nothing either
    bound = options.upper_bound_s
    if trimmed is not None:
        bound = min(bound if bound is not None else INF, trimmed[1].step_time_s)
    try:
        whole = solve_one(replace(context, options=replace(options, upper_bound_s=bound)), on_progress, started)
    except NoFeasiblePlan:
        if trimmed is None:
            raise
        whole = None
    if trimmed is None or (whole is not None and whole.estimate.step_time_s <= trimmed[1].step_time_s):
        return whole
    plan, estimate, inner = trimmed
    lower_bound = (whole.lower_bound_s if whole is not None
                   else compute_lower_bound_s(replace(context, options=within(options, cap))))
    gap = max(0.0, (estimate.step_time_s - lower_bound) / estimate.step_time_s)
    described = cut.describe(inner.decomposition)
    return replace(inner, plan=plan, estimate=estimate, optimal=False, gap=gap, lower_bound_s=lower_bound,
                   candidates=inner.candidates + (whole.candidates if whole is not None else 0),
                   seconds=context.options.clock() - started, decomposition=described,
                   not_proven=parts_only(described))
