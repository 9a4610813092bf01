"""The driver's searches (space.subproblems), two at a time, with a result that does not depend
on how they are run.

Search j starts from the best plan of searches 0 .. j-2 (and the uniform seed where it came first,
or the caller's bound), not from j-1's: so searches j-1 and j can run at the same time, and what
search j finds depends only on the searches before j-1, never on which of two running searches finished first.
In two processes (`SolverOptions.jobs` 2, planner.search.orchestration.parallel) search j runs on lane
j % LANES, each lane with its own price tables; in one process one lane runs them all in turn,
sharing its tables. The plan is the same either way; `solver.candidates`, the stage
configurations priced, counts the work done, which two lanes partly repeat.
Ties between the plans of different searches go to the smallest (step, nodes used, micro-batch,
V, search index); inside a search, to the plan met first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.clock import SearchClock, SearchTimeout
from ..bounds.any_bound import AnyRuntimeBound
from .build import PlanDraft, draft_plan
from ..decompose import Decomposition
from ..dp import price, run_dp, trace
from ..bounds.rank_costs import KnownCosts
from ..bounds.restriction_bound import RestrictionBound
from ..bounds.search_bound import Bound, Subproblem
from ..pricing.stage_types import SearchContext
from ..pricing.stages import INF, Problem
from ...schedules import get_schedule
from ..uniform import UniformSeed, UniformSpace, best_uniform_share

__all__ = ["LANES", "Lane", "Outcome", "Start", "start_of"]

LANES = 2  # searches j - 1 and j may run at the same time, never three
PROBLEMS_KEPT = 2  # chunked problems a lane keeps with their tables (two groups' searches alternate in one process)

# ties within 1e-6 of the seed go to the search's plan: a plan up to this factor above the
# uniform seed (or the caller's bound) is still searched for
SEED_SLACK = 1 + 2e-6

PlanKey = tuple[float, int, int, int]  # (step s, nodes used, micro-batch, V): smaller wins


@dataclass(frozen=True)
class Start:
    """What a search starts from: the step time of the uniform seed (where it comes first, driver) or
    the caller's bound, and the best plan of the searches before the one just before it."""
    incumbent_s: float
    best: PlanKey | None

    def cutoff_s(self, best: PlanKey | None) -> float:
        """The step time a plan must beat: the best known, or the incumbent within SEED_SLACK."""
        return min(INF if best is None else best[0], self.incumbent_s * SEED_SLACK)


@dataclass(frozen=True)
class Outcome:
    """What one search found: its best plan's key where it beat Start.best (the plan stays with
    its lane), the stage configurations it priced, the smallest memory overflow met (why nothing
    fits), and whether it ran to the end (False: the time limit stopped it)."""
    index: int
    found: PlanKey | None
    evaluations: int
    shortfall: tuple[float, str] | None
    complete: bool = True


def start_of(index: int, incumbent_s: float, outcomes: list[Outcome]) -> Start:
    """Search `index`'s start: the best plan found by searches 0 .. index - LANES (all in `outcomes`)."""
    found = [(o.found, o.index) for o in outcomes[:max(0, index - LANES + 1)] if o.found is not None]
    return Start(incumbent_s, min(found)[0] if found else None)


@dataclass(frozen=True)
class SearchInputs:
    """What every search of one `_solve` shares."""
    context: SearchContext
    parts: Decomposition
    searches: tuple[tuple, ...]  # space.subproblems: (b, v, ranks, restriction, schedule name)


class Lane:
    """Runs its searches in index order, keeping the problems it built (their prices shared between
    its searches) and the best plan it found, which `draft` gives without the problem."""

    def __init__(self, inputs: SearchInputs, clock: SearchClock, known: KnownCosts):
        self.inputs = inputs
        self.clock = clock
        self.known = known  # the skip checks' shared costs (one per solve; a lane process has its copy)
        # a search is skipped where one of these rules it out, in this order (the restricted
        # searches by their restriction, the free one by the closed-form and rank floors; the rank
        # floor's table over the cluster's node vectors where the DP's is as large: the whole cluster node
        # by node, where a DP costs far more: 8 + 16 nodes, llama-3-70b, `any`: a floor 1-3 s, a DP 15-28 s)
        self.bounds: tuple[Bound, ...] = (RestrictionBound(inputs.context, inputs.parts),
                                          AnyRuntimeBound(inputs.context, known,
                                                          inputs.parts.state_vectors if inputs.parts.exact else 0,
                                                          lambda: self.clock.check()))
        self.problems: list[Problem] = []  # kept with their tables, the latest first (_problem)
        self.plain: dict[tuple, Problem] = {}  # the first one-chunk problem per micro-batch and restriction
        self.best: tuple[PlanKey, int, Problem, list] | None = None  # key, search index, problem, choices
        self.shapes: dict = {}  # the stage shapes by nodes used, shared by the lane's problems (Problem.shapes)

    def run(self, index: int, start: Start) -> Outcome:
        """Search `index` from `start`: skipped when a bound shows it cannot beat the cutoff, else the
        DP with Alpa's descending bound on the bottleneck X (docs/solver.md, Algorithm)."""
        b, v, ranks, restriction, schedule = self.inputs.searches[index]
        search = Subproblem(b, v, ranks, schedule, restriction)
        cutoff_s = start.cutoff_s(start.best)
        try:
            # (the time limit holds across searches the floors rule out, each a second or more at scale)
            self.clock.check()
            if any(bound.cannot_beat(search, cutoff_s) for bound in self.bounds):
                return Outcome(index, None, 0, None)  # the DP would prune every plan of it
        except SearchTimeout:
            return Outcome(index, None, 0, None, complete=False)
        problem = self._problem(search)
        best = start.best
        found_here: tuple[PlanKey, list] | None = None

        def explore(bound: float) -> tuple[float, float] | None:
            """DP with every X <= bound: (min sum tau, X of that plan); updates the best."""
            nonlocal best, found_here
            finals, layers, moves = run_dp(problem, bound, ranks, start.cutoff_s(best), self.clock)
            if not finals:
                return None
            found = None
            for key in sorted(finals):
                choices = trace(problem, key, layers, moves, bound, ranks)
                step, sum_tau, max_x = price(problem, choices)
                used = sum(sum(c.config.nodes) for c in choices)
                # ties: fewer nodes, then the smaller micro-batch, then fewer virtual stages, then
                # the plan met first; a plan not under the incumbent (the seed's step within SEED_SLACK,
                # or the caller's bound) is of no use, however the DP's cutoff let it through
                if step < start.incumbent_s * SEED_SLACK and (best is None or (step, used, b, v) < best):
                    best = (step, used, b, v)
                    found_here = (best, choices)
                    self.clock.best_step_s = min(step, self.clock.best_step_s or INF)
                if found is None or (sum_tau, max_x) < found:
                    found = (sum_tau, max_x)
            return found

        evaluations_before = problem.evaluations
        complete = True
        try:
            # a plan with X >= the best step cannot beat it (T = max X + sum tau > max X)
            found = explore(start.cutoff_s(best))
            # Descend the bound on the bottleneck X (Alpa's t_max enumeration): the DP found the
            # least sum of latencies S for plans with X <= bound, and a plan p with that S. A plan
            # with X in (X_p, bound] has T > X_p + S = T_p, and one with X >= best - S has
            # T >= best, so the next bound is just below min(X_p, best - S); when no plan remains
            # under the bound, the best plan seen is optimal.
            while found is not None:
                self.clock.check()
                sum_tau, max_x = found
                bound = min(max_x, start.cutoff_s(best) - sum_tau)
                bound -= abs(bound) * 1e-12 + 1e-15
                if bound <= 0:
                    break
                found = explore(bound)
        except SearchTimeout:
            complete = False
        if found_here is not None and (self.best is None or (found_here[0], index) < self.best[0:2]):
            self.best = (found_here[0], index, problem, found_here[1])
        return Outcome(index, None if found_here is None else found_here[0],
                       problem.evaluations - evaluations_before, problem.smallest_overflow, complete)

    def seed(self, space: UniformSpace, accept, bound_s: float, share: tuple[int, int]) -> UniformSeed:
        """The fastest uniform plan of `space` among the candidates of `share` (uniform.best_uniform_share),
        before the searches or after them (driver): `accept` a picklable callable (a lane process
        receives it)."""
        context = self.inputs.context
        return best_uniform_share(context, space, context.options.params_mapping(), self.clock, accept, bound_s, share)

    def _problem(self, search: Subproblem) -> Problem:
        """The problem of a search: one the lane kept (the last one, or one of its last PROBLEMS_KEPT
        chunked ones: the searches of two groups alternate, space.subproblems) when it has the same
        micro-batch, V, restriction, schedule and least share, else a new one (sharing position-free
        prices)."""
        # a zero-bubble problem is one per depth: every replica takes at least P micro-batches
        b, v, restriction, schedule, least = (search.micro_batch, search.virtual_stages, search.restriction,
                                              search.schedule, search.least_share)
        key = (b, v, restriction, schedule, least)
        for problem in self.problems:
            if (problem.micro_batch, problem.virtual_stages, problem.restriction, problem.inputs.schedule.name,
                    problem.inputs.least_share) == key:
                self.problems.remove(problem)
                self.problems.insert(0, problem)
                return problem
        # a one-chunk problem serves one search (its depth, its micro-batch's 1F1B): done with it,
        # drop its position prices (bounded memory); a chunked one serves every depth of its group
        for done in [problem for problem in self.problems if not problem.chunked]:
            done.release_position_prices()
            self.problems.remove(done)
        del self.problems[PROBLEMS_KEPT - 1:]
        # one-chunk problems of one micro-batch and restriction share their position-free
        # prices (type arrays, tails: the same whatever the schedule and depth), those of a schedule
        # that hides the expert all-to-all apart (priced with it hidden: stage_types.schedule_options)
        plain_key = (b, restriction, get_schedule(schedule).overlaps_ep_comm)
        one_chunk = self.plain.get(plain_key)
        problem = Problem(self.inputs.context, b, self.inputs.parts, v, one_chunk, self.clock, restriction, schedule,
                          least, one_chunk, self.shapes)
        if not problem.chunked and one_chunk is None:
            self.plain[plain_key] = problem
        self.problems.insert(0, problem)
        return problem

    def draft(self) -> tuple[PlanDraft, float]:
        """The lane's best plan without its shares (build.draft_plan) and the step time the search
        priced it at."""
        assert self.best is not None, "draft() on a lane that found no plan"
        (step, _, _, _), _, problem, choices = self.best
        return draft_plan(problem, choices), step
