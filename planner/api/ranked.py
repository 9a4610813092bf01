"""`plan --top K`: the K fastest plans of distinct configurations, and what each loses to the first.

A configuration is a plan's (micro-batch, pipeline depth, virtual stages V, and the tp, dp, cp and
ep degrees of its stages); plans that differ only in layer split, batch shares, recompute, ZeRO or
offload are one configuration, the fastest of them standing for it. The ranking partitions the
search space (Lawler 1972; Murty 1968): once the fastest plan of a subspace is taken, the rest of
that subspace is split into disjoint subspaces, the i-th keeping the taken plan's first i - 1
dimensions and excluding its i-th value, each searched as an ordinary restricted search
(SolverOptions' allowed sets). Every plan not yet listed lies in exactly one open subspace, so the
fastest open result is the next configuration. The ranking is proven when every search was
proven optimal and every taken plan's dimensions were single values (a per-stage mix under
`--runtime any` cannot be excluded by an allowed set: its subspace then keeps only its own values).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ..core.clock import stop_requested
from ..core.errors import NoFeasiblePlan
from ..inputs.hardware import GIB
from ..plan import Plan

if TYPE_CHECKING:
    from ..search.orchestration.driver import SearchResult, SolverOptions

# the dimensions a configuration is told apart by, with the SolverOptions field that allows their values
DIMENSIONS = (("micro_batch", "micro_batches"), ("pp", "pp_degrees"), ("v", "virtual_stages"),
              ("tp", "tp_degrees"), ("dp", "dp_degrees"), ("cp", "cp_degrees"), ("ep", "ep_degrees"))


@dataclass(frozen=True)
class Ranking:
    """The plans of `plan --top K`, fastest first; `proven`: each is the next fastest configuration;
    `note`: why fewer than K are listed or why the order is not proven ('' when neither)."""
    results: tuple[SearchResult, ...]
    proven: bool
    note: str = ""


def configuration(plan: Plan) -> dict[str, tuple[int, ...]]:
    """A plan's configuration: each dimension's values over its stages (one value when uniform)."""
    t = plan.training
    return {"micro_batch": (t.micro_batch,), "pp": (plan.pp,), "v": (t.virtual_stages,),
            "tp": tuple(sorted({tp for s in plan.stages for tp in s.tp_degrees})), "dp": tuple(sorted({s.dp for s in plan.stages})),
            "cp": tuple(sorted({s.cp for s in plan.stages})), "ep": tuple(sorted({s.ep for s in plan.stages}))}


def configuration_text(plan: Plan) -> str:
    """'tp 2 pp 4 dp 8 mb 1 1f1b' (cp, ep where > 1; a per-stage mix as 'tp 2/4')."""
    c = configuration(plan)
    words = [f"{name} {'/'.join(map(str, c[name]))}" for name in ("tp", "pp", "dp", "cp", "ep")
             if name in ("tp", "pp", "dp") or c[name] != (1,)]
    schedule = plan.training.schedule + (f" V{plan.training.virtual_stages}" if plan.training.virtual_stages > 1 else "")
    return " ".join(words + [f"mb {plan.training.micro_batch}", schedule])


def loses_by(first: SearchResult, other: SearchResult) -> str:
    """Why `other` is slower than `first`: the part of the step that grew most ('dp_comm +0.012 s')."""
    a, b = first.estimate.breakdown_s, other.estimate.breakdown_s
    name = max(sorted(set(a) | set(b)), key=lambda k: b.get(k, 0.0) - a.get(k, 0.0))
    grown = b.get(name, 0.0) - a.get(name, 0.0)
    return f"{name} +{grown:.3f} s" if grown > 0 else "ties"


def peak_gib(result: SearchResult) -> float:
    return max(m.total_bytes for m in result.estimate.memory_by_rank.values()) / GIB


def domains(options: SolverOptions, num_gpus: int, global_batch: int, experts: bool,
            long_sequence: bool) -> dict[str, tuple[int, ...]]:
    """The values each dimension may take under `options` (an empty pp or dp set: any; cp and ep
    only 1 for a sequence too short for CP, planner.search.pricing.context_parallel, or a dense model)."""
    return {"micro_batch": tuple(b for b in options.micro_batches if global_batch % b == 0),
            "v": options.virtual_stages, "pp": options.pp_degrees or tuple(range(1, options.max_stages + 1)),
            "tp": options.tp_degrees, "dp": options.dp_degrees or tuple(range(1, num_gpus + 1)),
            "cp": options.cp_degrees if long_sequence else (1,), "ep": options.ep_degrees if experts else (1,)}


def _split(options: SolverOptions, plan: Plan, domains_of: Callable[[SolverOptions], dict]
           ) -> tuple[list[SolverOptions], bool]:
    """The subspaces of `options` without `plan`'s configuration (module docstring), and whether
    they cover all of it but that configuration (False where a dimension is a per-stage mix)."""
    config = configuration(plan)
    domains = domains_of(options)
    fixed: dict[str, tuple[int, ...]] = {}
    out, exact = [], True
    for dim, field in DIMENSIONS:
        values = config[dim]
        if len(values) > 1:  # a per-stage mix: kept as it is, its other mixes not searched again
            exact = False
            fixed[field] = tuple(v for v in domains[dim] if v in values)
            continue
        others = tuple(v for v in domains[dim] if v != values[0])
        if others:
            out.append(replace(options, **fixed, **{field: others}))
        fixed[field] = values
    return out, exact


def ranked(solve_one: Callable[[SolverOptions, float | None], SearchResult], options: SolverOptions,
           first: SearchResult, top: int, domains_of: Callable[[SolverOptions], dict], time_limit_s: float | None,
           elapsed_s: Callable[[], float], accept: Callable[[SearchResult], bool] | None = None) -> Ranking:
    """The `top` fastest configurations, `first` (the search's plan under `options`) the fastest.
    `solve_one(options, time limit)` searches a subspace (`domains_of`: the values its dimensions
    may take); the searches share `time_limit_s`. `accept`, where given, sees each next
    configuration in turn and ends the ranking before it by returning False."""
    results = [first]
    proven = first.optimal
    seen = [configuration(first.plan)]
    heap: list[tuple[float, int, SearchResult, SolverOptions]] = []  # (step, order, result, its subspace)
    order = 0
    note = ""
    current, taken = options, first.plan
    while len(results) < top:
        subspaces, exact = _split(current, taken, domains_of)
        proven = proven and exact
        for sub in subspaces:
            left = None if time_limit_s is None else time_limit_s - elapsed_s()
            if stop_requested() or (left is not None and left <= 0):
                return Ranking(tuple(results), False, "the search was stopped before every subspace was searched")
            try:
                found = solve_one(sub, left)
            except NoFeasiblePlan:
                continue
            proven = proven and found.optimal
            heap.append((found.estimate.step_time_s, order, found, sub))
            order += 1
        if not heap:
            note = f"only {len(results)} configurations have a plan that fits"
            break
        heap.sort(key=lambda item: item[:2])
        _, _, found, current = heap.pop(0)
        taken = found.plan
        if configuration(found.plan) in seen:  # a subspace held a configuration listed before
            proven = False
            continue
        if accept is not None and not accept(found):
            break
        seen.append(configuration(found.plan))
        results.append(found)
    return Ranking(tuple(results), proven, note)


def runner_up(result: SearchResult, first: SearchResult) -> SearchResult:
    """A runner-up's account: never called optimal, its gap to the first search's lower bound."""
    step = result.estimate.step_time_s
    return replace(result, optimal=False, lower_bound_s=first.lower_bound_s,
                   gap=max(0.0, (step - first.lower_bound_s) / step))

