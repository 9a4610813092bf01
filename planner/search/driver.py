"""Plan search: the fastest plan under the cost model, with a proof of optimality.

Search space (all of it searched jointly):
  * micro-batch size b (options); the 1F1B schedule, ZB-H1 where the runtime runs it (`any`;
    planner.search.deferred: its deferred W inputs in the memory caps per position, at least
    P micro-batches per replica, a DP per depth P), or interleaved 1F1B with V chunks
    per rank (options.virtual_stages), rank k's blocks spread over its chunks as evenly as
    possible but for the embedding's or head's chunk, which takes what is fastest;
  * P pipeline stages over contiguous, uneven layer ranges (embedding with the first,
    head with the last);
  * each stage on whole nodes: any number of nodes of any node groups (so a stage can sit
    on one GPU type, as in Metis, or mix types across its data-parallel replicas, as in
    HAP), its own tensor-parallel degree (inside a node), recompute mode and ZeRO stage
    (1-3); nodes may stay idle;
  * uneven batch shares between a stage's replicas, in whole micro-batches, bounded by
    each replica's memory.
  Sequence parallelism (whenever tp > 1) is always on and ZeRO-0 is left out: under the
  cost model SP and ZeRO-1 are never slower and never use more memory, so fixing them
  keeps the optimum. GPipe is dominated by 1F1B (same time, more memory).

Algorithm. Nodes of one group are interchangeable, so the dynamic programme's state
(planner.search.dp) is (nodes used per group, stages placed, how the next stage's links look),
with the layers placed as a vector, built from the last stage backwards (a stage's
in-flight micro-batches, P - k, is then known). The configurations on one node vector are
merged per block count, keeping only those not dominated in both tau and X
(planner.search.stages). The iteration time T = max_k X_k + sum_k tau_k
(evaluate.pipeline_time_s) has a bottleneck term and a sum, so the DP minimises sum tau
subject to X_k <= W and W descends (Alpa's t_max enumeration, Zheng et al. 2022, sec 5.2):
a plan with X <= W_i found with sum tau = S_i rules out every W in
(min(X_i, UB - S_i), W_i], and the search stops when no plan remains, which proves the
best plan seen optimal. Decoder blocks are identical, so stage costs depend on the block
count only. Interleaved: the in-flight micro-batches of a rank depend on the depth P, so
the DP runs per P with exactly P ranks, and the last rank's V - 1 sends around to rank 0
depend on rank 0's links, so the state carries rank 0's signature from the start; a
rank's tau is its slowest chunk's latency (planner.search.interleave.chunk_latency). The
smallest micro-batch's ZB-H1 searches run first (cheap, one per depth, and often the fastest),
then the 1F1B ones, which with them bound the interleaved ones (space.subproblems); one-chunk
problems of a micro-batch share their position-free prices. A search whose plans all lie at or above
the best plan known is skipped before its tables are built: a restricted one by restriction_bound, the
free one (`any`) by any_bound's closed-form floor or rank_floor's knapsack over whole ranks (on 1:1:2 64
under `any`, 51 of its 60 searches). Ties between the plans of different
searches go to the one met first (explore), in that order. Shares inside the DP come from
the closed-form makespan (shares.min_makespan); the final plan's shares are solved as an
integer program (shares.solve_shares_ilp) and the whole plan is re-priced by
evaluate.evaluate, which must agree.

Runtimes. The space is what the target runtime can run (planner.cost.runtimes.capability,
SolverOptions.space, default Training.runtime): `any` is all of the above. A runtime with one
TP and one DP degree for every stage (Megatron-LM, torchtitan, DeepSpeed) gets one search per
(tp, dp, recompute, ZeRO) it allows, each with only those stage configurations and even batch
shares (shares.even_makespan); a runtime that splits the blocks equally gets one search per
pipeline depth P with every stage holding blocks / P. The union of these searches is the
runtime's space, so the best of them is its optimum. Uniform configurations off whole nodes
(planner.search.uniform) that the runtime can run are priced first: the faster of those and the
search's plan is returned, so a plan is never slower than the best uniform configuration.
Those include what the exact search does not plan: one-stage plans with activation offload, and
the schedules it has no DP for (Schedule.uniform_candidate: ZB-V, whose V puts the embedding and
the head on rank 0; looped BFS, whose ZeRO collectives run once per loop) where the runtime runs
them (space.uniform_schedules); a plan of those is returned not proven optimal.

Scale. Clusters of more than `SolverOptions.exact_node_limit` nodes are searched on parts of nodes
(planner.search.decompose: identical bundles when the node counts allow, else near-equal parts
that need no common divisor; idle parts are a choice); the plans on parts are a subset of
the full space, so such a search reports optimal=false with the gap to a lower bound
(planner.search.bound). A runtime with one DP degree for every stage can rarely use parts of
unequal size (their stages' replica counts differ), so it also searches the cluster trimmed to
identical bundles (decompose.trim; the other nodes idle) and keeps the faster plan (`solve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .bound import compute_lower_bound_s
from ..core.clock import Progress, SearchClock, SearchTimeout
from .decompose import decompose
from .scale import solve_scaled
from .dp import StageChoice, price, run_dp, trace
from ..core.errors import BadInput, NoFeasiblePlan
from ..cost.evaluate import Estimate, evaluate
from ..cost.runtimes.capability import capability, violations
from ..inputs.hardware import Cluster
from .layer_floor import layer_floors, unplaceable_layer
from .no_plan import layer_too_big, long_sequence, no_plan
from .restriction_bound import cannot_beat
from .any_bound import cannot_beat_any
from ..inputs.model import Model
from ..plan import Plan, Replica, Stage, Training, structural_problems
from ..schedules import get_schedule
from .shares import solve_shares_ilp
from .space import in_search_space, outside_exact_search, subproblems as runtime_subproblems, uniform_space, within
from .stages import INF, Problem, SolverOptions
from .uniform import improving_uniform

_uniform_space = uniform_space  # the name tests/test_decompose.py knows

__all__ = ["NothingFaster", "SolverOptions", "SearchResult", "solve", "compute_lower_bound_s"]


class NothingFaster(NoFeasiblePlan):
    """The search was complete and found no plan faster than SolverOptions.upper_bound_s."""


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

    def solver_json(self) -> dict:
        out = {"seconds": self.seconds, "optimal": self.optimal, "gap": self.gap,
               "candidates": self.candidates, "method": self.method, "bundles": self.bundles,
               "decomposition": self.decomposition,
               "lower_bound_step_time_s": self.lower_bound_s}
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


def _build_plan(problem: Problem, choices: list[StageChoice]) -> Plan:
    """The Plan of traced choices: ranks on whole nodes, shares by the ILP; an interleaved
    plan cycles V chunks over the pipeline ranks, each rank taking the same blocks per chunk."""
    cluster, b, v = problem.cluster, problem.b, problem.v
    next_node = [0 for _ in problem.groups]  # stages take each group's nodes in order (planner.search.decompose)
    rank_replicas = []
    recompute_layers = []
    for c in choices:
        flags = (c.has_head, c.has_emb)
        position = problem.position(c.from_end, c.ranks)
        types, k = problem.priced_types(c.cid, flags, position[0])
        recompute_layers.append(0 if k is None else int(k[c.blocks]))
        replicas_ranks: list[tuple[int, ...]] = []
        replica_type: list[int] = []
        type_index = 0
        for i, nodes in enumerate(c.config.nodes):
            if not nodes:
                continue
            group = problem.groups[i]
            # replicas of tp x cp consecutive ranks (cp groups of tp, TP innermost) over the nodes
            # taken, node by node; a CP ring across nodes takes whole nodes (stages._places)
            size = c.config.tp * c.config.cp
            first = group.first_rank + next_node[i] * group.gpus_per_node
            for base in range(first, first + nodes * group.gpus_per_node, size):
                replicas_ranks.append(tuple(range(base, base + size)))
                replica_type.append(type_index)
            next_node[i] += nodes
            type_index += 1
        # per-replica time and memory cap at this rank's block count, as in stage_cost
        times = [float(tm[c.blocks]) for tm in problem.replica_times(types, flags, problem.link(c.cid, c.successor))]
        caps = [int(cap[c.blocks]) for cap in problem.share_caps(types, flags, position)]
        if problem.restriction.even_shares:
            load = problem.microbatches // len(replicas_ranks)  # shares.even_makespan
            assert load * len(replicas_ranks) == problem.microbatches and all(caps[t] >= load for t in replica_type)
            assert load >= problem.inputs.least_share
            shares = [load] * len(replicas_ranks)
        else:
            solution = solve_shares_ilp(problem.microbatches, [times[t] for t in replica_type],
                                        [caps[t] for t in replica_type], problem.options.ilp,
                                        problem.inputs.least_share)
            if not solution.optimal:
                raise RuntimeError("the share ILP did not prove optimality")
            shares = solution.shares
        rank_replicas.append(tuple(Replica(d, n * b, ranks)
                                   for d, (n, ranks) in enumerate(zip(shares, replicas_ranks))))
    stages = []
    first = 0
    pp = len(choices)
    sizes = [chunk_sizes(problem, c) for c in choices]
    for chunk in range(v):
        for k, c in enumerate(choices):
            end = first + sizes[k][chunk] + int(c.has_emb and chunk == 0) + int(c.has_head and chunk == v - 1)
            stages.append(Stage(chunk * pp + k, (first, end), c.config.tp, c.config.zero, c.config.recompute,
                                rank_replicas[k], k, problem.restriction.sequence_parallel and c.config.tp > 1,
                                c.config.cp, c.config.cp_kind, ep=c.config.ep, recompute_layers=recompute_layers[k],
                                offload=c.config.offload))
            first = end
    return Plan(problem.model, cluster, problem.t, tuple(stages))


def chunk_sizes(problem: Problem, choice: StageChoice) -> list[int]:
    """Blocks of each of a rank's V chunks: the embedding's (first) or head's (last) chunk takes
    the count the stage cost chose, the others share the rest as evenly as possible, the
    earlier ones taking the larger parts (interleave.chunk_latency)."""
    v, n = problem.v, choice.blocks
    if not problem.chunked:
        return [n]
    split = problem.stage_cost(choice.cid, choice.from_end, choice.has_emb, choice.successor, choice.ranks).split
    special = None if split is None else int(split[n])
    rest, others = (n, v) if special is None else (n - special, v - 1)
    even = [rest // others + (1 if i < rest % others else 0) for i in range(others)]
    if special is None:
        return even
    return even + [special] if choice.has_head else [special] + even


def solve(model: Model, cluster: Cluster, base: Training, options: SolverOptions = SolverOptions(),
          on_progress: Callable[[Progress], None] | None = None) -> SearchResult:
    """The fastest plan in the search space (module docstring), proven optimal when the
    whole cluster is one bundle and the time limit did not bite.

    With `options.time_limit_s` it returns within the limit (plus the final share ILP and
    re-pricing of one plan) with the best plan found so far, or raises NoFeasiblePlan saying
    that none was found in time: the exact search stops at 3/4 of the limit, and the rest
    goes to uniform configurations of the space (planner.search.uniform), the better plan winning.
    `on_progress` is called about every quarter second. The space is what the runtime
    `options.space` (default base.runtime) can run (module docstring).

    A runtime with one DP degree for every stage on a cluster cut into parts of unequal size
    (planner.search.decompose) is also searched on the cluster trimmed to identical bundles
    (decompose.trim), first, within half the time limit; its plan, mapped back onto the
    cluster with the other nodes idle, bounds the search on parts, and the faster plan is
    returned (ties: the plan on parts). Runs of alike node groups are searched as one group each
    (decompose.merge_alike). (planner.search.scale)"""
    return solve_scaled(model, cluster, base, options, on_progress, _solve)


def _solve(model: Model, cluster: Cluster, base: Training, options: SolverOptions,
           on_progress: Callable[[Progress], None] | None, started: float) -> SearchResult:
    """`solve` on the cluster's own decomposition, the time limit counted from `started`."""
    clock = SearchClock(options.time_limit_s, on_progress, started=started)
    space = options.space or base.runtime
    cap = capability(space)
    if base.dtype not in cap.dtypes:  # (planner.load.resolve_dtype picks one the runtime has)
        raise BadInput(f"the {space} runtime has no {base.dtype} training (it has {', '.join(cap.dtypes)})", "--dtype")
    options = within(options, cap)
    if model.config is None or any(l.kind != "decoder" for l in model.layers[1:-1]) \
            or model.layers[0].kind != "embedding" or model.layers[-1].kind != "head":
        raise BadInput("the solver needs embedding, decoder blocks and head", "--model")
    floor = unplaceable_layer(model, cluster, base, options)
    if floor is not None:
        raise layer_too_big(floor, base, long_sequence(model, cluster, base, options))
    parts = decompose(cluster, options.exact_node_limit(cap.per_stage_dp), options.max_bundle_nodes)
    clock.lower_bound_s = lower_bound = compute_lower_bound_s(model, cluster, base, options)
    subproblems = list(runtime_subproblems(model, cluster, base, sum(parts.counts), options, cap))
    clock.subproblems_total = len(subproblems)
    best: tuple | None = None
    seed: tuple[Plan, Estimate] | None = None
    evaluations = 0
    complete = True
    shortfall = None
    problem = None
    plain: dict[tuple, Problem] = {}  # the first one-chunk problem per micro-batch and restriction (shared)
    # the best uniform configuration off whole nodes (seed) or the caller's bound: prunes the DP
    incumbent_s = INF if options.upper_bound_s is None else options.upper_bound_s

    try:
        # with a time limit the exact search stops at 3/4 of it; the rest prices uniform plans
        clock.phase_limit_s = None if options.time_limit_s is None else options.time_limit_s * 0.75
        for seed in improving_uniform(model, cluster, base, uniform_space(options, cap, whole_nodes=False),
                                      options.params_mapping(), clock,
                                      # on parts of nodes the search may miss whole-node uniform plans too
                                      lambda p: not (parts.exact and in_search_space(p)) and not violations(p, space),
                                      # a plan no faster than the caller's bound is of no use (uniform_bound)
                                      bound_s=incumbent_s):
            incumbent_s = min(incumbent_s, seed[1].step_time_s)
            clock.best_step_s = min(incumbent_s, clock.best_step_s or INF)
        for b, v, ranks, restriction, schedule in subproblems:
            cutoff_s = min(INF if best is None else best[0], incumbent_s * (1 + 2e-6))
            if cannot_beat(model, cluster, base, b, restriction, options, ranks, parts, cutoff_s, schedule) \
                    or (restriction.tp is None  # the free search (`any`); the restricted ones: cannot_beat
                        and cannot_beat_any(model, cluster, base, b, v, ranks, schedule, options, cutoff_s)):
                # the DP would prune every plan of it (restriction_bound, any_bound)
                clock.subproblems_done += 1
                clock.report()
                continue
            # a zero-bubble problem is one per depth: every replica takes at least P micro-batches
            least = ranks if ranks is not None and get_schedule(schedule).split_backward else 1
            if problem is None or (problem.b, problem.v, problem.restriction, problem.inputs.schedule.name,
                                   problem.inputs.least_share) != (b, v, restriction, schedule, least):
                if problem is not None and not problem.chunked:
                    problem.release_position_prices()  # its search is done; bounded memory
                one_chunk = plain.get((b, restriction))
                # one-chunk problems of one micro-batch and restriction share their position-free
                # prices (type arrays, tails: the same whatever the schedule and depth)
                problem = Problem(model, cluster, base, b, parts, options, v, one_chunk, clock, restriction, schedule,
                                  least, one_chunk)
                if not problem.chunked and one_chunk is None:
                    plain[(b, restriction)] = problem

            def explore(bound: float) -> tuple[float, float] | None:
                """DP with every X <= bound: (min sum tau, X of that plan); updates the best."""
                nonlocal best
                # ties within 1e-6 of the seed go to the search's plan
                cutoff = min(INF if best is None else best[0], incumbent_s * (1 + 2e-6))
                finals, layers, moves = run_dp(problem, bound, ranks, cutoff, clock)
                if not finals:
                    return None
                found = None
                for key in sorted(finals):
                    choices = trace(problem, key, layers, moves, bound, ranks)
                    step, sum_tau, max_x = price(problem, choices)
                    used = sum(sum(c.config.nodes) for c in choices)
                    # ties: fewer nodes, then the smaller micro-batch, then fewer virtual stages, then the
                    # search met first (space.subproblems order)
                    if best is None or (step, used, b, v) < best[0:4]:
                        best = (step, used, b, v, problem, choices)
                        clock.best_step_s = min(step, clock.best_step_s or INF)
                    if found is None or (sum_tau, max_x) < found:
                        found = (sum_tau, max_x)
                return found

            # a plan with X >= the best step cannot beat it (T = max X + sum tau > max X)
            evaluations_before = problem.evaluations
            try:
                found = explore(min(INF if best is None else best[0], incumbent_s * (1 + 2e-6)))
                # Descend the bound on the bottleneck X (Alpa's t_max enumeration): the DP found
                # the least sum of latencies S for plans with X <= bound, and a plan p with that S.
                # A plan with X in (X_p, bound] has T > X_p + S = T_p, and one with X >= best - S
                # has T >= best, so the next bound is just below min(X_p, best - S); when no plan
                # remains under the bound, the best plan seen is optimal.
                while found is not None:
                    clock.check()
                    sum_tau, max_x = found
                    bound = min(max_x, min(best[0], incumbent_s * (1 + 2e-6)) - sum_tau)
                    bound -= abs(bound) * 1e-12 + 1e-15
                    if bound <= 0:
                        break
                    found = explore(bound)
            finally:
                evaluations += problem.evaluations - evaluations_before
                if problem.smallest_overflow and (shortfall is None or problem.smallest_overflow[0] < shortfall[0]):
                    shortfall = problem.smallest_overflow
            clock.subproblems_done += 1
            clock.report()
    except SearchTimeout:
        complete = False
    clock.phase_limit_s = None
    if not complete and 1 in options.virtual_stages:
        # cut short: the best uniform configuration of the space (1F1B, stages on whole nodes)
        # in the time left may beat what the exact search found so far, or be the only plan
        previous = seed
        try:
            for seed in improving_uniform(model, cluster, base, uniform_space(options, cap),
                                          options.params_mapping(), clock, lambda p: not violations(p, space)):
                if previous is not None and seed[1].step_time_s >= previous[1].step_time_s:
                    seed = previous
                    continue
                clock.best_step_s = min(seed[1].step_time_s, clock.best_step_s or INF)
        except SearchTimeout:
            pass
    # ties (within 1e-6) go to the exact search's plan
    blended = bool(model.decoder_stand_in().blend) if model.config is not None else False
    if best is not None and (seed is None or best[0] <= seed[1].step_time_s * (1 + 1e-6)):
        step, _, _, _, problem, choices = best
        plan = _build_plan(problem, choices)
        estimate = evaluate(plan, options.params_mapping())
        # decoders of several shapes (DeepSeek-V3's dense first layers, Gemma's windows) are
        # priced by the search as their count-weighted mean (Model.decoder_stand_in); the plan is
        # re-priced layer by layer, so only uniform decoders re-price to the search's figure
        assert blended or abs(estimate.step_time_s - step) <= 1e-6 * step, \
            f"re-priced step {estimate.step_time_s} differs from the search's {step}"
    elif seed is not None:
        plan, estimate = seed
    elif complete and options.upper_bound_s is not None:
        raise NothingFaster(f"no plan faster than {options.upper_bound_s:g} s")
    elif not complete:
        raise NoFeasiblePlan(f"no plan found within the time limit of {options.time_limit_s:g} s "
                             f"({clock.subproblems_done} of {clock.subproblems_total} subproblems searched); "
                             "raise --time-limit")
    else:
        raise no_plan(shortfall, layer_floors(model, cluster, base, options), base,
                      long_sequence(model, cluster, base, options))
    problems = structural_problems(plan)
    assert not problems, f"solver built an invalid plan: {problems}"
    assert not violations(plan, space), f"solver built a plan {space} cannot run: {violations(plan, space)}"
    assert estimate.fits, "solver built a plan that does not fit"
    # activation offload (uniform.fewest_offloaded), ZB-V and looped BFS are priced on uniform plans only, not proven
    optimal = complete and parts.exact and not blended and not outside_exact_search(plan)
    gap = 0.0 if optimal else max(0.0, (estimate.step_time_s - lower_bound) / estimate.step_time_s)
    return SearchResult(plan, estimate, optimal, gap, lower_bound, evaluations, clock.elapsed_s(),
                        1 if parts.exact else parts.largest_part, decomposition=parts.describe())
