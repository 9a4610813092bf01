"""`planner plan` when the search finds nothing: the search's reason, the degrees the request
allowed (`--tp/--pp/--dp/--ep/--max-pp`), and, under a runtime narrower than `any`, the plan
`--runtime any` finds for the same inputs when a bounded search finds one."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..core.clock import Progress, stop_requested
from ..core.errors import BadInput, NoFeasiblePlan
from ..cost.runtimes.capability import model_problem
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Training
from .requests import PlanRequest
from .restrict import describe_allowed

if TYPE_CHECKING:
    from ..search.orchestration.driver import SearchResult, SolverOptions

ANY_SUGGESTION_S = 30.0  # the most time the `--runtime any` search of a failed plan may take


def solve_or_explain(model: Model, cluster: Cluster, training: Training, options: SolverOptions, request: PlanRequest,
                     on_progress: Callable[[Progress], None] | None = None) -> SearchResult:
    """planner.search.orchestration.driver.solve; its NoFeasiblePlan with the allowed degrees and what `--runtime
    any` finds (a stopped search's is passed on as it is)."""
    from ..search.orchestration.driver import NotFoundInTime, NothingFaster, solve

    started = time.perf_counter()
    try:
        return solve(model, cluster, training, options, on_progress)
    except (NothingFaster, NotFoundInTime):
        raise
    except NoFeasiblePlan as exc:
        if stop_requested():
            raise
        message = exc.message
        allowed = describe_allowed(request)
        if allowed:
            message += f" (allowed: {allowed})"
        if training.runtime != "any" and not model_problem("any", model):  # (a hybrid: `any` cannot build it)
            found = _any_runtime_plan(model, cluster, training, options, time.perf_counter() - started)
            if found is not None:
                from .ranked import configuration_text

                message += (f"; --runtime any finds one: {found.estimate.step_time_s:.3f} s, "
                            f"{configuration_text(found.plan)}")
        raise NoFeasiblePlan(message, exc.shortfall_bytes, exc.device) from exc


def _any_runtime_plan(model: Model, cluster: Cluster, training: Training, options: SolverOptions,
                      spent_s: float) -> SearchResult | None:
    """The plan of the same search under `--runtime any` within ANY_SUGGESTION_S and what is left of
    the time limit after `spent_s` (the failed search's), None if none."""
    from ..search.orchestration.driver import solve

    limit = ANY_SUGGESTION_S
    if options.time_limit_s is not None:
        limit = min(limit, options.time_limit_s - spent_s)
        if limit <= 0:
            return None
    try:
        return solve(model, cluster, replace(training, runtime="any"),
                     replace(options, space=None, time_limit_s=limit, upper_bound_s=None))
    except (NoFeasiblePlan, BadInput):
        return None
