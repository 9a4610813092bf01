"""What a plan costs, as the api reports it: `predicted.cost` and `predicted.run` (planner.cost.energy),
and `plan --power-caps` (planner.search.power_caps) on a search result."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ..core.errors import BadInput
from ..plan import Plan
from .load import require
from .requests import PlanRequest

if TYPE_CHECKING:
    from ..cost.evaluate import Estimate
    from ..search.orchestration.driver import SearchResult


def cost_json(plan: Plan, est: Estimate, tokens: int | None = None) -> dict:
    """`{"cost": dollars and energy per step and token, "reliability": interruptions, checkpoints and
    goodput}` (planner.cost.energy.RunCost, planner.cost.reliability.Reliability), and with `tokens`
    `"run"`: the steps, wall time, dollars and MWh of a run of that many tokens, and its expected wall
    time, interruptions and dollars with failures."""
    from ..cost.energy import rented_nodes, run_cost
    from ..cost.reliability import reliability

    cost = run_cost(plan, est)
    failures = reliability(plan, est, rented_nodes(plan))
    out = {"cost": cost.to_json(), "reliability": failures.to_json()}
    if tokens:
        wall = failures.run_wall_s(tokens)
        out["run"] = {**cost.for_tokens(tokens).to_json(), "expected_wall_s": wall,
                      "expected_interruptions": wall / failures.mtbf_s,
                      "expected_usd": None if cost.usd_per_hour is None else cost.usd_per_hour * wall / 3600}
    return out


def with_power_caps(result: SearchResult, request: PlanRequest, price: Callable[[Plan], Estimate]) -> SearchResult:
    """`result` with its stages' power caps (planner.search.power_caps), each trial priced by `price`
    (as `evaluate --plan` prices a plan, or as the search prices its plans); BadInput where a GPU has
    no power figures or measured inputs price it."""
    from ..search.power_caps import choose_caps

    if request.profiles or request.calibrations:
        raise BadInput("power caps are priced from the analytic model; drop --profile and --calibration",
                       "--power-caps")
    unknown = [g.name for g in result.plan.cluster.gpu_types if g.power is None]
    if unknown:
        raise BadInput(f"GPU {unknown[0]} has no power figures (power_W)", "--power-caps")
    require(request.max_cap_slowdown, "--max-cap-slowdown")
    choice = choose_caps(result.plan, price, request.max_cap_slowdown)
    return replace(result, plan=choice.plan, estimate=choice.estimate, power_caps=choice)
