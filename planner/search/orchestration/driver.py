"""Plan search: the fastest plan under the cost model, with a proof of optimality.

`solve` searches the runtime's space (planner.search.orchestration.space) jointly over micro-batch,
schedule, pipeline stages on whole nodes, per-stage TP, recompute and ZeRO, and uneven batch shares,
by the dynamic programme (planner.search.dp) run once per subproblem, two at a time (lanes), beside
the uniform configurations (planner.search.uniform); large clusters go through scale. The search
space, the algorithm, its pruning and what it proves are in docs/solver.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

from ..bounds.bound import compute_lower_bound_s
from ...core.clock import Progress, SearchClock, SearchTimeout, stop_requested
from ..decompose import Decomposition, decompose
from .scale import solve_scaled
from ...core.errors import BadInput, NoFeasiblePlan, NotFoundInTime, NothingFaster
from ...cost.evaluate import Estimate, evaluate
from ...cost.runtimes.capability import Capability, capability, violations
from ...inputs.hardware import Cluster
from ..bounds.layer_floor import layer_floors, states_floor, unplaceable_layer
from ..pricing.across_types import across_types_possible
from ..pricing.stage_configs import group_tp_degrees
from .no_plan import layer_too_big, long_sequence, no_plan, states_too_big
from ...inputs.model import Model
from ...plan import Plan, Training, structural_problems
from .build import finish_plan
from .lanes import Lane, Outcome, SearchInputs
from .parallel import Searches
from ..bounds.rank_costs import KnownCosts
from .space import (blended_decoders, in_search_space, parts_only, subproblems as runtime_subproblems,
                    uniform_space, unproven_shape, within)
from ..pricing.stage_types import SearchContext
from ..pricing.stages import INF, SolverOptions
from ..uniform import UniformSeed, improving_uniform

_uniform_space = uniform_space  # the name tests/test_decompose.py knows

__all__ = ["NotFoundInTime", "NothingFaster", "SolverOptions", "SearchResult", "solve", "compute_lower_bound_s"]


@dataclass(frozen=True)
class SearchResult:
    plan: Plan
    estimate: Estimate
    optimal: bool
    gap: float
    lower_bound_s: float
    candidates: int
    seconds: float
    bundles: int  # 1: the whole cluster searched node by node; else nodes in its largest part
    method: str = "dp+ilp"
    decomposition: str = "exact"  # planner.search.decompose.Decomposition.describe
    # the same search under `--runtime any` (api.plan): its step time, or None with why not
    any_runtime_step_s: float | None = None
    any_runtime_note: str | None = None
    not_proven: str = ""  # why the plan is not proven optimal ("" where it is)
    # `plan --power-caps`: the caps chosen after the search (planner.search.power_caps.CapChoice)
    power_caps: Any = field(default=None, compare=False)

    def solver_json(self) -> dict:
        out = {"seconds": self.seconds, "optimal": self.optimal, "gap": self.gap,
               "candidates": self.candidates, "method": self.method, "bundles": self.bundles,
               "decomposition": self.decomposition,
               "lower_bound_step_time_s": self.lower_bound_s}
        if not self.optimal:
            out["not_proven"] = self.not_proven
        if self.plan.training.runtime != "any":
            out["any_runtime_step_s"] = self.any_runtime_step_s
            if self.any_runtime_note:
                out["any_runtime_note"] = self.any_runtime_note
        return out

    def any_runtime_gain(self) -> float | None:
        """How much faster the `--runtime any` plan is (0.1 = 10 %), None when not known."""
        if self.any_runtime_step_s is None:
            return None
        return max(0.0, 1.0 - self.any_runtime_step_s / self.estimate.step_time_s)


def solve(model: Model, cluster: Cluster, training: Training, options: SolverOptions = SolverOptions(),
          on_progress: Callable[[Progress], None] | None = None) -> SearchResult:
    """The fastest plan in the search space (docs/solver.md), proven optimal when the
    whole cluster is one bundle and the time limit did not bite.

    With `options.time_limit_s` it returns within the limit (plus the final share ILP and
    re-pricing of one plan) with the best plan found so far, or raises NoFeasiblePlan saying
    that none was found in time: the exact search stops at 3/4 of the limit, and the rest
    goes to uniform configurations of the space (planner.search.uniform), the better plan winning.
    `on_progress` is called about every quarter second. The space is what the runtime
    `options.space` (default training.runtime) can run.

    A runtime with one DP degree for every stage on a cluster cut into parts of unequal size
    (planner.search.decompose) is also searched on the cluster trimmed to identical bundles
    (decompose.trim), first, within half the time limit; its plan, mapped back onto the
    cluster with the other nodes idle, bounds the search on parts, and the faster plan is
    returned (ties: the plan on parts). Runs of alike node groups are searched as one group each
    (decompose.merge_alike). With a time limit, a cluster searched on parts is then searched whole,
    node by node, in the time left, bounded by the plan on parts (SolverOptions.whole_after_parts).
    (planner.search.orchestration.scale)

    Per-replica TP (SolverOptions.per_replica_tp, where the runtime runs it, on two or more node groups)
    widens the space by a TP degree per node group in a stage: the space without it is searched first,
    and its plan bounds the wider search in the time left (_widened)."""
    context = SearchContext(model, cluster, training, options)
    if _widens(context):
        return _widened(context, on_progress)
    return solve_scaled(context, on_progress, _solve)


def _widens(context: SearchContext) -> bool:
    """Whether per-replica TP or TP groups across GPU types add plans: the runtime runs them, and two
    node groups of the cluster can take TP degrees that differ (each degree of the options that divides a
    group's GPUs per node and the heads; StageConfigs._per_replica_tp_shapes), or the cluster has a mixed
    node group whose types a TP degree can span (AcrossTypes)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    cap = capability(options.space or training.runtime, model)
    if cap.uneven_tp_shares and across_types_possible(context, 1, "1f1b"):
        return True
    if not (options.per_replica_tp and cap.per_replica_tp and cap.tensor_parallel and len(cluster.groups) > 1):
        return False
    heads = model.config.tp_heads if model.config else 1
    allowed = [set(group_tp_degrees(options.tp_degrees, g, heads)) for g in cluster.groups]
    allowed = [a for a in allowed if a]
    return len(allowed) > 1 and len(set().union(*allowed)) > 1


def _widened(context: SearchContext, on_progress: Callable[[Progress], None] | None) -> SearchResult:
    """solve with per-replica TP: the plan without it, then only a faster one with it, in the time the
    first search leaves. The narrower plan is returned where the wider search finds none faster: proven
    optimal where both searches ran to the end. Where the narrower space has no plan (or none within the
    caller's bound), the wider one is searched alone in the time left."""
    options = context.options
    started = options.clock()

    def left_s() -> float | None:
        return None if options.time_limit_s is None else options.time_limit_s - (options.clock() - started)

    def wide(bound: float | None) -> SearchResult:
        left = left_s()
        if (left is not None and left <= 0) or stop_requested():
            raise NotFoundInTime("no time left to search per-replica TP")
        return solve_scaled(replace(context, options=replace(options, time_limit_s=left, upper_bound_s=bound)),
                            on_progress, _solve)

    try:
        narrow = solve_scaled(replace(context, options=replace(options, per_replica_tp=False, tp_across_types=False)),
                              on_progress, _solve)
    except NotFoundInTime:
        raise
    except NoFeasiblePlan:  # none (or none within the caller's bound) without per-replica TP
        return replace(wide(options.upper_bound_s), seconds=options.clock() - started)
    try:
        found = wide(narrow.estimate.step_time_s)
    except NothingFaster:  # searched to the end: no faster plan with per-replica TP
        return replace(narrow, seconds=options.clock() - started)
    except NoFeasiblePlan:  # cut short before a faster plan was found
        found = None
    if found is not None and found.optimal and found.estimate.step_time_s >= narrow.estimate.step_time_s:
        # searched to the end, the best it holds no faster (a search returns its uniform scan's best,
        # which its bound does not hold): the narrower plan is the wider space's optimum where it is its own
        return replace(narrow, seconds=options.clock() - started)
    if found is None or found.estimate.step_time_s >= narrow.estimate.step_time_s:
        cut = f"the search with per-replica TP was cut short ({'stopped' if stop_requested() else 'time limit'})"
        if narrow.optimal:  # what is known: no faster plan without them
            cut = ("proven optimal without per-replica TP and TP groups across GPU types; " + cut
                   + " before it ruled out a faster plan with them")
        return replace(narrow, optimal=False, seconds=options.clock() - started,
                       not_proven=narrow.not_proven or cut,
                       gap=max(0.0, 1.0 - narrow.lower_bound_s / narrow.estimate.step_time_s))
    return replace(found, seconds=options.clock() - started, candidates=found.candidates + narrow.candidates)


def _seed_accepts(exact: bool, space: str, plan: Plan) -> bool:
    """The uniform plans the seed prices: on parts of nodes the search may miss whole-node ones too;
    the exact search covers those in its space. Only plans the runtime `space` runs."""
    return not (exact and in_search_space(plan)) and not violations(plan, space)


def _solve(context: SearchContext, on_progress: Callable[[Progress], None] | None, started: float) -> SearchResult:
    """`solve` on the cluster's own decomposition, the time limit counted from `started`."""
    clock = SearchClock(context.options.time_limit_s, on_progress, started=started, now=context.options.clock)
    space = context.options.space or context.training.runtime
    cap = capability(space, context.model)
    context = _checked_context(context, space, cap)
    model, cluster, options = context.model, context.cluster, context.options
    parts = decompose(cluster, options.exact_node_limit(cap.per_stage_dp), options.max_bundle_nodes)
    clock.lower_bound_s = lower_bound = compute_lower_bound_s(context)
    subproblems = list(runtime_subproblems(context, sum(parts.counts), cap, paired=not parts.exact))
    clock.subproblems_total = len(subproblems)
    seed: tuple[Plan, Estimate] | None = None
    complete = True
    # the best uniform configuration off whole nodes (seed) or the caller's bound: prunes the DP
    incumbent_s = INF if options.upper_bound_s is None else options.upper_bound_s
    outcomes: list[Outcome] = []
    inputs = SearchInputs(context, parts, tuple(subproblems))
    known = KnownCosts()  # what the skip checks share (planner.search.bounds.rank_costs)
    with Searches(Lane(inputs, clock, known), options.jobs, clock) as searches:
        seed_space = uniform_space(options, cap, whole_nodes=False)
        accepts = partial(_seed_accepts, parts.exact, space)

        def searched_s() -> float:
            """The step time of the best plan the searches found so far (INF: none)."""
            return min((o.found[0] for o in outcomes if o.found is not None), default=INF)

        def take(found: UniformSeed) -> bool:
            """Keep a seed scan's plan where it is the fastest yet; whether the scan ran to the end."""
            nonlocal seed, incumbent_s
            if found.best is not None and (seed is None or found.best[2].step_time_s < seed[1].step_time_s):
                seed = found.best[1:]  # (plan, estimate)
                incumbent_s = min(incumbent_s, seed[1].step_time_s)
                clock.best_step_s = min(incumbent_s, clock.best_step_s or INF)
            return found.complete

        seeded = False  # whether the seed scan ran to the end
        try:
            # with a time limit the exact search stops at 3/4 of it; the rest prices uniform plans
            clock.phase_limit_s = None if options.time_limit_s is None else options.time_limit_s * 0.75
            # the fastest uniform plan, its candidates shared between the lanes; a plan no faster than
            # the caller's bound is of no use (uniform_bound). On parts of nodes it comes first: its plans
            # (whole-node ones the parts may miss) bound the searches. Searched whole, it prices only the
            # plans outside the exact search's space (_seed_accepts) and comes after the searches, bounded
            # by their best plan: only a faster one can be returned, and uniform_bound rules most out unpriced
            if not parts.exact:
                seeded = take(searches.seed(seed_space, accepts, incumbent_s))
                if not seeded:
                    raise SearchTimeout
            # the searches, two at a time (planner.search.orchestration.lanes)
            outcomes = searches.run(len(subproblems), incumbent_s)
            complete = len(outcomes) == len(subproblems) and all(o.complete for o in outcomes)
            if parts.exact and complete:
                seeded = complete = take(searches.seed(seed_space, accepts, min(incumbent_s, searched_s())))
        except SearchTimeout:
            complete = False
        clock.phase_limit_s = None
        if not complete and 1 in options.virtual_stages:
            seed = _uniform_in_time_left(context, cap, space, clock, seed)
        if not seeded and parts.exact:
            # cut short before the seed scan ended: it runs here (the lane processes keep the phase's
            # limit), in the time left, bounded by the best plan found
            known_s = min(searched_s(), incumbent_s, INF if seed is None else seed[1].step_time_s)
            take(searches.lane.seed(seed_space, accepts, known_s, (0, 1)))
        blended = blended_decoders(model)
        plan, estimate = _chosen_plan(searches, outcomes, seed, complete, blended, clock, context)
    return _result(plan, estimate, outcomes, space, complete, parts, lower_bound, clock)


def _checked_context(context: SearchContext, space: str, cap: Capability) -> SearchContext:
    """The search's context, its options within what the runtime `space` runs (its capability
    `cap`); BadInput where the runtime lacks the dtype or the model is not embedding, decoder
    blocks and head, and the layer error where some layer fits on no stage."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    if training.dtype not in cap.dtypes:  # (planner.api.load.resolve_dtype picks one the runtime has)
        raise BadInput(f"the {space} runtime has no {training.dtype} training (it has {', '.join(cap.dtypes)})", "--dtype")
    options = within(options, cap)
    if model.config is None or any(l.kind != "decoder" for l in model.layers[1:-1]) \
            or model.layers[0].kind != "embedding" or model.layers[-1].kind != "head":
        raise BadInput("the solver needs embedding, decoder blocks and head", "--model")
    context = SearchContext(model, cluster, training, options)
    states = states_floor(context)
    if states.over_bytes > 0:
        raise states_too_big(states, cluster.num_gpus)
    floor = unplaceable_layer(context)
    if floor is not None:
        raise layer_too_big(floor, training, long_sequence(context))
    return context


def _uniform_in_time_left(context: SearchContext, cap: Capability, space: str, clock: SearchClock,
                          seed: tuple[Plan, Estimate] | None) -> tuple[Plan, Estimate] | None:
    """After a search cut short: the best uniform configuration of the space (1F1B, stages on whole
    nodes) in the time left where it beats `seed` (what the exact search found so far may be slower,
    or there is no plan yet), else `seed`."""
    options = context.options
    previous = seed
    try:
        for seed in improving_uniform(context, uniform_space(options, cap),
                                      options.params_mapping(), clock, lambda p: not violations(p, space)):
            if previous is not None and seed[1].step_time_s >= previous[1].step_time_s:
                seed = previous
                continue
            clock.best_step_s = min(seed[1].step_time_s, clock.best_step_s or INF)
    except SearchTimeout:
        pass
    return seed


def _chosen_plan(searches: Searches, outcomes: list[Outcome], seed: tuple[Plan, Estimate] | None, complete: bool,
                 blended: bool, clock: SearchClock, context: SearchContext) -> tuple[Plan, Estimate]:
    """The plan returned, the searches' best or the uniform `seed`, with its estimate; else the
    NoFeasiblePlan that says why there is none."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    if seed is not None and options.upper_bound_s is not None and seed[1].step_time_s >= options.upper_bound_s:
        seed = None  # a plan no faster than the caller's bound is of no use to it (SolverOptions.upper_bound_s)
    found = [(o.found, o.index) for o in outcomes if o.found is not None]
    best = min(found) if found else None  # ties: lanes' module docstring
    # ties (within 1e-6) go to the exact search's plan
    if best is not None and (seed is None or best[0][0] <= seed[1].step_time_s * (1 + 1e-6)):
        draft, step = searches.draft(best[1])
        plan = finish_plan(draft, model, cluster)  # the share ILPs, here (planner.search.orchestration.build)
        estimate = evaluate(plan, options.params_mapping())
        # decoders of several shapes (DeepSeek-V3's dense first layers, Gemma's windows) are
        # priced by the search as their count-weighted mean (Model.decoder_stand_in); the plan is
        # re-priced layer by layer, so only uniform decoders re-price to the search's figure
        assert blended or abs(estimate.step_time_s - step) <= 1e-6 * step, \
            f"re-priced step {estimate.step_time_s} differs from the search's {step}"
        return plan, estimate
    if seed is not None:
        return seed
    if complete and options.upper_bound_s is not None:
        raise NothingFaster(f"no plan faster than {options.upper_bound_s:g} s")
    if not complete:
        counts = (clock.subproblems_done, clock.subproblems_total)
        searched = f"{counts[0]} of {counts[1]} subproblems searched"
        if stop_requested() or options.time_limit_s is None:
            raise NotFoundInTime(f"no plan found before the search was stopped ({searched})", counts)
        raise NotFoundInTime(f"no plan found within the time limit of {options.time_limit_s:g} s "
                             f"({searched}); raise --time-limit", counts)
    shortfall = None
    for o in outcomes:  # the smallest overflow met, the first search's on ties
        if o.shortfall and (shortfall is None or o.shortfall[0] < shortfall[0]):
            shortfall = o.shortfall
    raise no_plan(shortfall, layer_floors(context), training, long_sequence(context))


def _result(plan: Plan, estimate: Estimate, outcomes: list[Outcome], space: str, complete: bool,
            parts: Decomposition, lower_bound: float, clock: SearchClock) -> SearchResult:
    """The SearchResult of the plan chosen, checked valid, runnable by `space` and fitting."""
    evaluations = sum(o.evaluations for o in outcomes)
    problems = structural_problems(plan)
    assert not problems, f"solver built an invalid plan: {problems}"
    assert not violations(plan, space), f"solver built a plan {space} cannot run: {violations(plan, space)}"
    assert estimate.fits, "solver built a plan that does not fit"
    # activation offload (uniform.fewest_offloaded), ZB-V and looped BFS are priced on uniform plans only, not proven
    # proven where the search ran to the end on the whole cluster, priced every block exactly and
    # holds no plan only the uniform scan prices
    why = _not_proven(plan, complete, parts, clock)
    gap = 0.0 if not why else max(0.0, (estimate.step_time_s - lower_bound) / estimate.step_time_s)
    return SearchResult(plan, estimate, not why, gap, lower_bound, evaluations, clock.elapsed_s(),
                        1 if parts.exact else parts.largest_part, decomposition=parts.describe(), not_proven=why)


def _not_proven(plan: Plan, complete: bool, parts: Decomposition, clock: SearchClock) -> str:
    """Why a plan is not proven optimal, the first reason that holds; "" where it is."""
    if not complete:
        return (f"the search was cut short ({'stopped' if stop_requested() else 'time limit'}) after "
                f"{clock.subproblems_done} of {clock.subproblems_total} searches")
    if not parts.exact:
        return parts_only(parts.describe())
    return unproven_shape(plan)
