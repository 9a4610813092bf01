"""`plan --objective time|cost|energy|goodput` and its constraints (`--max-gpus`, `--max-cost-per-hour`,
`--max-step-time`): which whole nodes of the cluster to rent (planner.search.subsets), each subset
planned for time by the usual search, the choice by the objective.

Why the fastest plan of each subset is enough for cost and goodput: a plan's dollars per step are its
step time times the rent of the nodes it uses, and its goodput its tokens per second times an
efficiency that depends only on those nodes (planner.cost.reliability), so among the plans using one
set of nodes the fastest is the best; the best plan is the best subset's fastest plan (a plan that
leaves nodes of its subset idle is priced on the nodes it uses). Energy adds each GPU's busy time at
running power, which a slower plan can lower: the fastest plan of each subset is priced and the
least taken (docs/cost-and-energy.md). The oracle (tests/test_objective.py) enumerates the subsets
and brute-forces each one's plans.

What prunes a subset without a search (the step time can only grow as nodes are removed: a
subset's plan is a plan of every larger one, idle nodes aside): a larger subset already slower than
`--max-step-time`, or fitting no plan; under `time`, a larger subset that fits; under `cost`, a rent
times the larger subset's step at or above the cheapest plan found. Ties: the lower objective, then
the shorter step, then the subset met first (more GPUs, earlier groups fuller).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ..core.clock import Progress, stop_requested
from ..core.errors import BadInput, NoFeasiblePlan
from ..inputs.hardware import Cluster
from ..search.subsets import Subset, subsets
from .requests import PlanRequest

if TYPE_CHECKING:
    from ..cost.energy import RunCost
    from ..cost.reliability import Reliability
    from ..search.orchestration.driver import SearchResult

OBJECTIVES = ("time", "cost", "energy", "goodput")


@dataclass(frozen=True)
class SubsetOutcome:
    """One subset: its fastest plan on the whole cluster (the other nodes idle) and what it costs, or
    why it has none (`reason`)."""

    subset: Subset
    result: "SearchResult | None" = None
    cost: "RunCost | None" = None
    reason: str = ""
    used: Subset | None = None  # the nodes its plan uses (within `subset`), what it rents
    reliability: "Reliability | None" = None  # its interruptions, checkpoints and goodput

    def value(self, objective: str) -> float:
        """The objective's figure, the less the better: step seconds, dollars or joules per step, or
        the goodput's opposite (tokens per second kept after failures)."""
        assert self.result is not None and self.cost is not None
        if objective == "cost":
            return self.cost.usd_per_step
        if objective == "energy":
            return self.cost.energy_J_per_step
        if objective == "goodput":
            return -self.reliability.goodput_tokens_per_s
        return self.result.estimate.step_time_s


@dataclass(frozen=True)
class ObjectiveResult:
    objective: str
    cluster: Cluster
    chosen: SubsetOutcome
    outcomes: tuple[SubsetOutcome, ...]  # every subset, in the order met
    every_count: bool  # each group tried at every node count (else planner.search.subsets.coarse_sizes)
    proven: bool  # every subset searched or pruned by a bound, every search proven optimal

    @property
    def result(self) -> "SearchResult":
        assert self.chosen.result is not None
        return self.chosen.result

    @property
    def whole(self) -> SubsetOutcome | None:
        """The outcome of the whole cluster, where it was within the constraints."""
        return next((o for o in self.outcomes if o.subset.is_whole(self.cluster)), None)

    def to_json(self) -> dict:
        """`solver.objective` of the plan file."""
        whole = self.whole
        planned = [o for o in self.outcomes if o.result is not None]
        return {"name": self.objective, "proven": self.proven, "every_node_count": self.every_count,
                "subsets": len(self.outcomes), "subsets_planned": len(planned),
                "nodes": {g.name: n for g, n in zip(self.cluster.groups, self.chosen.used.nodes)},
                "idle": [{"group": name, "nodes": nodes, "gpus": gpus}
                         for name, nodes, gpus in self.chosen.used.idle(self.cluster)],
                "all_nodes": None if whole is None or whole.result is None else _figures(whole),
                "all_nodes_note": "" if whole is not None and whole.result is not None
                else (whole.reason if whole is not None else "outside the constraints")}


def _figures(outcome: SubsetOutcome) -> dict:
    assert outcome.result is not None and outcome.cost is not None
    return {"step_time_s": outcome.result.estimate.step_time_s, "usd_per_step": outcome.cost.usd_per_step,
            "energy_J_per_step": outcome.cost.energy_J_per_step,
            "goodput_tokens_per_s": outcome.reliability.goodput_tokens_per_s, "gpus": outcome.cost.gpus_rented}


def needs_subsets(request: PlanRequest) -> bool:
    """Whether the request chooses among subsets of nodes (else it is `plan` as usual)."""
    return request.objective != "time" or request.max_gpus is not None or request.max_cost_per_hour is not None \
        or request.max_step_time_s is not None


def check_objective(request: PlanRequest, cluster: Cluster) -> None:
    """Bad input where the objective or a constraint needs a figure the cluster lacks."""
    from . import require

    for value, flag in ((request.max_gpus, "--max-gpus"), (request.max_cost_per_hour, "--max-cost-per-hour"),
                        (request.max_step_time_s, "--max-step-time"), (request.tokens, "--tokens")):
        if value is not None:
            require(value, flag)
    if request.objective not in OBJECTIVES:
        raise BadInput(f"expected one of {', '.join(OBJECTIVES)}, got {request.objective!r}", "--objective")
    if request.top > 1 and needs_subsets(request):
        raise BadInput("lists the fastest plans of one cluster; it does not combine with --objective cost|energy "
                       "or the --max-* constraints", "--top")
    if request.objective == "cost" or request.max_cost_per_hour is not None:
        flag = "--objective cost" if request.objective == "cost" else "--max-cost-per-hour"
        unpriced = [g.name for g in cluster.groups if g.price_usd_per_gpu_s is None]
        if unpriced:
            raise BadInput(f"node group {unpriced[0]!r} has no price: set price_per_gpu_hour in the cluster file "
                           f"(its GPU has none in the catalog)", flag)
    if request.objective == "energy":
        unknown = [g.gpu.name for g in cluster.groups if g.gpu.power is None]
        if unknown:
            raise BadInput(f"GPU {unknown[0]} has no power figures (power_W) in the catalog or the cluster file",
                           "--objective energy")


def plan_objective(request: PlanRequest, on_progress: Callable[[Progress], None] | None = None,
                   warn=None, clock: Callable[[], float] = time.perf_counter) -> ObjectiveResult:
    """The plan of least `request.objective` over the subsets of whole nodes within the constraints
    (module docstring); NoFeasiblePlan where no subset has a plan within them."""
    return choose(request, *plan_subsets(request, True, on_progress, warn, clock))


def choose(request: PlanRequest, cluster: Cluster, outcomes: tuple[SubsetOutcome, ...], every: bool,
           proven: bool) -> ObjectiveResult:
    """The outcome of least objective within --max-step-time (ties: the shorter step, then the first met)."""
    best = None
    for outcome in outcomes:
        if outcome.result is not None and _within(outcome, request) and (
                best is None or _key(outcome, request.objective) < _key(best, request.objective)):
            best = outcome
    if best is None:
        reasons = sorted({o.reason for o in outcomes if o.reason} | (
            {f"every plan is slower than --max-step-time {request.max_step_time_s:g} s"}
            if request.max_step_time_s is not None else set()))
        raise NoFeasiblePlan("no subset of the cluster's nodes has a plan within the constraints: "
                             + "; ".join(reasons[:3]))
    return ObjectiveResult(request.objective, cluster, best, outcomes, every, proven)


def plan_subsets(request: PlanRequest, prune: bool, on_progress: Callable[[Progress], None] | None = None,
                 warn=None, clock: Callable[[], float] = time.perf_counter
                 ) -> tuple[Cluster, tuple[SubsetOutcome, ...], bool, bool]:
    """subset_outcomes of the request's inputs, checked."""
    from . import search_inputs

    model, cluster, training, options = search_inputs(request, warn)
    check_objective(request, cluster)
    return subset_outcomes(model, cluster, training, options, request, prune, on_progress, clock)


def subset_outcomes(model, cluster: Cluster, training, options, request: PlanRequest, prune: bool,
                    on_progress: Callable[[Progress], None] | None = None,
                    clock: Callable[[], float] = time.perf_counter
                    ) -> tuple[Cluster, tuple[SubsetOutcome, ...], bool, bool]:
    """Each subset of whole nodes within the request's constraints planned for time by the search of
    `options` (or, with `prune`, left out where a bound shows it cannot be chosen: _pruned), all within
    the request's time limit: the cluster, the outcomes in the order met, whether every node count was
    taken, and whether every search ended proven."""
    from ..cost.energy import rented_nodes, run_cost
    from ..cost.evaluate import evaluate
    from ..cost.reliability import reliability
    from . import with_power_caps

    def price(plan):  # as the search prices its plans
        return evaluate(plan, options.params_mapping())

    started = clock()
    found, every = subsets(cluster, request.max_gpus, request.max_cost_per_hour)
    if not found:
        raise NoFeasiblePlan(f"no set of whole nodes is within --max-gpus {request.max_gpus} and "
                             f"--max-cost-per-hour {request.max_cost_per_hour}")
    outcomes: list[SubsetOutcome] = []
    proven = every
    best: SubsetOutcome | None = None
    for subset in found:
        left = None if request.time_limit_s is None else request.time_limit_s - (clock() - started)
        if (left is not None and left <= 0) or stop_requested():
            outcomes.append(SubsetOutcome(subset, reason="not searched: the time limit was reached"))
            proven = False
            continue
        pruned = _pruned(subset, outcomes, request, best if prune else None, cluster, prune)
        if pruned:
            outcomes.append(SubsetOutcome(subset, reason=pruned))
            continue
        sub, trim = subset.cluster_of(cluster)
        try:
            result = _solve(model, sub, training, replace(options, time_limit_s=left), on_progress)
        except NoFeasiblePlan as exc:
            proven = proven and getattr(exc, "searched", None) is None and not stop_requested()
            outcomes.append(SubsetOutcome(subset, reason=exc.message))
            continue
        plan = trim.plan_on(cluster, result.plan)
        result = replace(result, plan=plan, estimate=price(plan))  # the same figures, rank by rank of `cluster`
        if request.power_caps:
            result = with_power_caps(result, request, price)
        outcome = SubsetOutcome(subset, result, run_cost(result.plan, result.estimate), used=used_nodes(plan),
                                reliability=reliability(result.plan, result.estimate, rented_nodes(result.plan)))
        outcomes.append(outcome)
        proven = proven and result.optimal
        if _within(outcome, request) and (best is None or _key(outcome, request.objective) < _key(
                best, request.objective)):
            best = outcome
    return cluster, tuple(outcomes), every, proven


def used_nodes(plan) -> Subset:
    """The nodes per group of `plan`'s cluster that hold a rank it uses."""
    from ..cost.energy import rented_nodes

    nodes = rented_nodes(plan)
    return Subset(tuple(sum(1 for name, _ in nodes if name == g.name) for g in plan.cluster.groups))


def _solve(model, cluster, training, options, on_progress):
    from ..search.orchestration.driver import solve

    return solve(model, cluster, training, options, on_progress)


def _key(outcome: SubsetOutcome, objective: str) -> tuple:
    return (outcome.value(objective), outcome.result.estimate.step_time_s)


def _within(outcome: SubsetOutcome, request: PlanRequest) -> bool:
    return request.max_step_time_s is None or outcome.result.estimate.step_time_s <= request.max_step_time_s


def _pruned(subset: Subset, outcomes: list[SubsetOutcome], request: PlanRequest, best: SubsetOutcome | None,
            cluster: Cluster, by_objective: bool = True) -> str:
    """Why `subset` need not be searched (module docstring), or "" when it must; without
    `by_objective` only the constraints prune (a frontier needs every plan within them)."""
    larger = [o for o in outcomes if o.subset != subset and o.subset.contains(subset) and not
              o.reason.startswith("not searched")]
    if any(o.result is None and not o.reason.startswith("pruned") for o in larger):
        return "pruned: a larger set of nodes fits no plan"
    planned = [o for o in larger if o.result is not None and o.result.optimal]
    if not planned:
        return ""
    fastest = min(_uncapped_step(o) for o in planned)
    if request.max_step_time_s is not None and fastest > request.max_step_time_s:
        return "pruned: a larger set of nodes is already slower than --max-step-time"
    if not by_objective:
        return ""
    if request.objective == "time" and not request.power_caps and any(_within(o, request) for o in planned):
        return "pruned: a larger set of nodes is at least as fast"
    if request.objective == "cost" and best is not None:
        rent = subset.usd_per_hour(cluster)
        if rent is not None and rent * fastest / 3600.0 >= best.cost.usd_per_step:
            return "pruned: its rent times the step of a larger set of nodes costs more than the plan chosen"
    return ""


def _uncapped_step(outcome: SubsetOutcome) -> float:
    """The step of the outcome's plan before power caps: the least step of its nodes (a bound)."""
    caps = outcome.result.power_caps
    return (caps.uncapped_estimate if caps is not None else outcome.result.estimate).step_time_s
