"""Power caps per pipeline stage (`plan --power-caps`): a stage off the critical path can compute at a
lower clock, and so a lower power, without lengthening the step (Perseus, Chung et al. SOSP'24,
removes this "energy bloat" per computation; here per stage, as `nvidia-smi -pl` sets it).

Coordinate descent over the pipeline ranks, least busy first: each rank's stages take the lowest cap
level (planner.cost.power.cap_levels_W) at which the re-priced step stays within `max_slowdown` of
the uncapped step and the energy per step falls; a rank whose GPUs are of several types, or lack
power figures, is left uncapped. Each trial is priced by the cost model as `evaluate` prices a plan
(`price`), so a cap's effect on the fill latency and the tail is counted. Pure: `price` is the
caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..cost.energy import RunCost, run_cost
from ..cost.evaluate import Estimate
from ..cost.power import cap_levels_W, draw_W
from ..plan import Plan

# the step may grow by rounding only where no slowdown is allowed
STEP_TOLERANCE = 1e-9


@dataclass(frozen=True)
class CapChoice:
    """The plan with its stages' caps, its estimate and costs, against the uncapped plan's."""

    plan: Plan
    estimate: Estimate
    cost: RunCost
    uncapped_estimate: Estimate
    uncapped_cost: RunCost
    max_slowdown: float
    trials: int  # plans priced
    skipped: tuple[int, ...]  # pipeline ranks left uncapped: GPUs of several types or without power figures

    @property
    def caps_W(self) -> dict[int, float]:
        """Pipeline rank -> its cap (W), the capped ones only."""
        return {st.pipeline_rank: st.power_cap_W for st in self.plan.stages if st.power_cap_W}

    def to_json(self) -> dict:
        before, after = self.uncapped_cost.energy_J_per_step, self.cost.energy_J_per_step
        return {"caps_W": {str(k): v for k, v in sorted(self.caps_W.items())}, "max_slowdown": self.max_slowdown,
                "uncapped_step_time_s": self.uncapped_estimate.step_time_s,
                "slowdown": self.estimate.step_time_s / self.uncapped_estimate.step_time_s - 1,
                "uncapped_energy_J_per_step": before, "energy_saved_J_per_step": before - after,
                "energy_saved_fraction": (before - after) / before if before else 0.0, "plans_priced": self.trials,
                **({"uncapped_ranks": list(self.skipped)} if self.skipped else {})}


def with_caps(plan: Plan, caps: dict[int, float]) -> Plan:
    """`plan` with each pipeline rank's stages capped at caps[rank] W (0: none)."""
    return replace(plan, stages=tuple(replace(st, power_cap_W=caps.get(st.pipeline_rank, 0.0)) for st in plan.stages))


def choose_caps(plan: Plan, price: Callable[[Plan], Estimate], max_slowdown: float = 0.0) -> CapChoice:
    """The caps per pipeline rank of `plan` (module docstring); `price` prices a plan as evaluate does."""
    uncapped = with_caps(plan, {})
    base = price(uncapped)
    base_cost = run_cost(uncapped, base)
    if base_cost.energy_J_per_step is None:
        raise ValueError("choose_caps needs every GPU's power figures")
    limit = base.step_time_s * (1 + max_slowdown) * (1 + STEP_TOLERANCE)
    caps: dict[int, float] = {}
    best, best_cost, trials, skipped = base, base_cost, 1, []
    for k in _least_busy_first(uncapped, base):
        gpus = {uncapped.cluster.group_of_rank(r).gpu for st in uncapped.stages if st.pipeline_rank == k
                for rep in st.replicas for r in rep.ranks}
        if len(gpus) != 1 or next(iter(gpus)).power is None:
            skipped.append(k)
            continue
        gpu = next(iter(gpus))
        for level in (w for w in cap_levels_W(gpu) if w < draw_W(gpu)):  # a cap above the draw does nothing
            trial = with_caps(uncapped, {**caps, k: level})
            estimate = price(trial)
            trials += 1
            cost = run_cost(trial, estimate)
            if estimate.step_time_s > limit or cost.energy_J_per_step >= best_cost.energy_J_per_step:
                break
            caps[k], best, best_cost = level, estimate, cost
    capped = with_caps(uncapped, caps)
    return CapChoice(capped, best, best_cost, base, base_cost, max_slowdown, trials, tuple(sorted(skipped)))


def _least_busy_first(plan: Plan, estimate: Estimate) -> list[int]:
    """The pipeline ranks by their busiest GPU's active seconds, least first (ties: lower rank)."""
    busiest: dict[int, float] = {}
    for st in plan.stages:
        for rep in st.replicas:
            for rank in rep.ranks:
                active = estimate.active_s_by_rank.get(rank, 0.0)
                busiest[st.pipeline_rank] = max(busiest.get(st.pipeline_rank, 0.0), active)
    return sorted(busiest, key=lambda k: (busiest[k], k))
