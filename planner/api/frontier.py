"""`planner frontier`: the Pareto set of (step time, dollars, energy) over the subsets of whole nodes
of a cluster (planner.api.objective.plan_subsets, every subset within the constraints planned for
time), and the marginal value of each node group: what adding all its nodes to the rest of the
cluster changes in time, dollars and energy."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from ..core.clock import Progress
from ..core.errors import NoFeasiblePlan
from ..inputs.hardware import Cluster
from .objective import SubsetOutcome, plan_subsets
from .requests import PlanRequest


@dataclass(frozen=True)
class Marginal:
    """What a node group adds to the rest of the cluster: the fastest plan on every node against the
    fastest plan without the group's nodes (None where one of them has no plan)."""

    group: str
    gpus: int
    without: SubsetOutcome | None
    whole: SubsetOutcome | None

    def changes(self) -> dict[str, float | None]:
        """Relative change of each figure when the group is added (-0.08: 8 % less)."""
        if self.whole is None or self.whole.result is None or self.without is None or self.without.result is None:
            return {"step_time": None, "usd": None, "energy": None}
        return {"step_time": _ratio(self.whole.result.estimate.step_time_s, self.without.result.estimate.step_time_s),
                "usd": _ratio(self.whole.cost.usd_per_step, self.without.cost.usd_per_step),
                "energy": _ratio(self.whole.cost.energy_J_per_step, self.without.cost.energy_J_per_step)}

    def text(self, gpu: str) -> str:
        """'the 32 V100-SXM2-32GB (v100) cut the step 8.0 % for 31.0 % more dollars and 12.0 % more energy'."""
        who = f"the {self.gpus} {gpu} ({self.group})"
        if self.without is None or self.without.result is None:
            return f"{who}: without them no plan fits"
        if self.whole is None or self.whole.result is None:
            return f"{who}: no plan on every node"
        change = self.changes()
        step = change["step_time"]
        verb = f"cut the step {-step:.1%}" if step < 0 else f"lengthen the step {step:.1%}"
        costs = [f"{abs(v):.1%} {'more' if v >= 0 else 'fewer'} {name}" for name, v in
                 (("dollars", change["usd"]), ("joules", change["energy"])) if v is not None]
        return f"{who} {verb}" + (f" for {' and '.join(costs)}" if costs else "")


@dataclass(frozen=True)
class Frontier:
    cluster: Cluster
    outcomes: tuple[SubsetOutcome, ...]
    pareto: tuple[int, ...]  # indices into outcomes, by step time
    marginals: tuple[Marginal, ...]
    every_count: bool
    proven: bool
    seconds: float
    configurations: tuple[str, ...] = ()  # per outcome, its plan's configuration (ranked.configuration_text)


def _ratio(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None or old == 0 else new / old - 1


def figures(outcome: SubsetOutcome) -> tuple[float, float, float]:
    """(step s, dollars, joules) per step, an unknown figure as 0 (it then separates no plan)."""
    cost = outcome.cost
    return (outcome.result.estimate.step_time_s, cost.usd_per_step or 0.0, cost.energy_J_per_step or 0.0)


def pareto_indices(points: list[tuple[float, ...]]) -> tuple[int, ...]:
    """The indices of the points no other point dominates (at most as large in every figure, smaller in
    one); of equal points the first; ordered by the first figure, then index."""
    keep = []
    for i, p in enumerate(points):
        dominated = any(all(a <= b for a, b in zip(q, p)) and (q != p or j < i) for j, q in enumerate(points) if j != i)
        if not dominated:
            keep.append(i)
    return tuple(sorted(keep, key=lambda i: (points[i][0], i)))


def frontier(request: PlanRequest, on_progress: Callable[[Progress], None] | None = None, warn=None,
             clock: Callable[[], float] = time.perf_counter) -> Frontier:
    """The frontier of `request` (module docstring); NoFeasiblePlan where no subset has a plan."""
    started = clock()
    cluster, outcomes, every, proven = plan_subsets(request, False, on_progress, warn, clock)
    if request.power_caps:  # each set's plan capped and, beside it, uncapped: two points of the frontier
        outcomes = tuple(variant for o in outcomes for variant in (o, *_uncapped(o)))
    planned = [i for i, o in enumerate(outcomes) if o.result is not None and (
        request.max_step_time_s is None or o.result.estimate.step_time_s <= request.max_step_time_s)]
    if not planned:
        reasons = sorted({o.reason for o in outcomes if o.reason})
        raise NoFeasiblePlan("no subset of the cluster's nodes has a plan within the constraints: "
                             + "; ".join(reasons[:3]))
    # a plan that leaves nodes of its subset idle is the plan of the nodes it uses: one point per nodes used
    seen: dict = {}
    for i in planned:
        seen.setdefault((outcomes[i].used, _caps(outcomes[i])), i)
    distinct = list(seen.values())
    points = [figures(outcomes[i]) for i in distinct]
    pareto = tuple(distinct[i] for i in pareto_indices(points))
    from .ranked import configuration_text

    texts = tuple("" if o.result is None else configuration_text(o.result.plan)
                  + ("".join(f", rank {k} at {w:g} W" for k, w in _caps(o))) for o in outcomes)
    return Frontier(cluster, outcomes, pareto, marginals(cluster, outcomes), every, proven, clock() - started, texts)


def _uncapped(outcome: SubsetOutcome) -> tuple[SubsetOutcome, ...]:
    """The outcome's plan without its power caps, where it has some."""
    from ..search.power_caps import with_caps

    choice = outcome.result.power_caps if outcome.result is not None else None
    if choice is None or not choice.caps_W:
        return ()
    result = replace(outcome.result, plan=with_caps(choice.plan, {}), estimate=choice.uncapped_estimate,
                     power_caps=None)
    return (replace(outcome, result=result, cost=choice.uncapped_cost),)


def marginals(cluster: Cluster, outcomes: tuple[SubsetOutcome, ...]) -> tuple[Marginal, ...]:
    """Each group's Marginal, where the cluster has more than one group, in group order."""
    if len(cluster.groups) < 2:
        return ()
    by_nodes: dict = {}
    for o in outcomes:  # each set's first outcome: its capped plan under --power-caps
        by_nodes.setdefault(o.subset.nodes, o)
    whole_nodes = tuple(g.nodes for g in cluster.groups)
    out = []
    for index, group in enumerate(cluster.groups):
        without = tuple(0 if i == index else n for i, n in enumerate(whole_nodes))
        out.append(Marginal(group.name, group.num_gpus, by_nodes.get(without), by_nodes.get(whole_nodes)))
    return tuple(out)


def frontier_json(result: Frontier) -> dict:
    """What `planner frontier --json` prints."""
    points = []
    for index, outcome in enumerate(result.outcomes):
        entry = {"nodes": {g.name: n for g, n in zip(result.cluster.groups, outcome.subset.nodes)},
                 "gpus": outcome.subset.gpus(result.cluster), "on_frontier": index in result.pareto}
        if outcome.used is not None and outcome.used != outcome.subset:
            entry["nodes_used"] = {g.name: n for g, n in zip(result.cluster.groups, outcome.used.nodes)}
        if outcome.result is None:
            entry["reason"] = outcome.reason
        else:
            entry.update({"step_time_s": outcome.result.estimate.step_time_s, **outcome.cost.to_json(),
                          "optimal": outcome.result.optimal, "configuration": result.configurations[index],
                          **({"power_caps_W": {str(k): v for k, v in _caps(outcome)}} if _caps(outcome) else {})})
        points.append(entry)
    return {"cluster": result.cluster.name, "proven": result.proven, "every_node_count": result.every_count,
            "seconds": result.seconds, "frontier": list(result.pareto), "points": points,
            "marginal": [{"group": m.group, "gpus": m.gpus, "changes": m.changes(),
                          "text": m.text(result.cluster.group(m.group).gpu.name)} for m in result.marginals]}


def _caps(outcome: SubsetOutcome) -> tuple[tuple[int, float], ...]:
    """The outcome's power caps per pipeline rank, () for none."""
    return tuple(sorted({st.pipeline_rank: st.power_cap_W for st in outcome.result.plan.stages
                         if st.power_cap_W}.items()))
