"""planner.search.any_bound and rank_floor: neither rules out the search that holds the brute-force
optimum (tests/oracle.py) against a cutoff just above it, nor puts its floor above that optimum, and
skipping the searches they rule out finds the same plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.runtimes.capability import capability
from planner.search.any_bound import cannot_beat_any, subproblem_floor_s
from planner.search.space import within
from planner.search.stage_types import SolverOptions

from .oracle import brute_force, solve_with_and_without_skips
from .test_search import TINY_OPTIONS, pipeline_instance, tiny_instance

# pipeline_instance(11): the closed-form floor rules out a search there (floor / optimum 1.16)
CASES = [(tiny_instance, 1), (pipeline_instance, 11), (pipeline_instance, 5)]


def _search_of(plan):
    """(b, v, ranks, schedule) of the driver's search that holds `plan` (space.subproblems)."""
    t = plan.training
    return t.micro_batch, t.virtual_stages, (None if t.schedule == "1f1b" else plan.pp), t.schedule


@pytest.mark.parametrize("make, seed", CASES)
def test_the_search_holding_the_optimum_is_never_ruled_out(make, seed):
    model, cluster, base = make(seed)
    base = replace(base, runtime="any")
    options = within(SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True}), capability("any"))
    for b in TINY_OPTIONS["micro_batches"]:
        if base.global_batch % b:
            continue
        for v, zero_bubble in ((1, False), (1, True), (2, False)):
            best, plan, _ = brute_force(model, cluster, base, (b,), (1, 2), ("none", "full"), zero_stages=(0, 1, 2, 3),
                                        virtual_stages=(v,), runtime="any", zero_bubble=zero_bubble)
            if plan is None:
                continue
            b_, v_, ranks, schedule = _search_of(plan)
            assert subproblem_floor_s(model, cluster, base, b_, v_, ranks, schedule, options) <= best * (1 + 1e-9)
            assert not cannot_beat_any(model, cluster, base, b_, v_, ranks, schedule, options, best * (1 + 1e-6))


def test_skipping_the_searches_the_floors_rule_out_finds_the_same_plan(monkeypatch):
    model, cluster, base = pipeline_instance(11)
    base = replace(base, runtime="any")
    options = SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True})
    pruned, full, skipped = solve_with_and_without_skips(monkeypatch, "cannot_beat_any", model, cluster, base, options)
    assert skipped  # the floors rule some searches out here
    assert pruned.optimal and full.optimal
    assert pruned.plan == full.plan and pruned.estimate.step_time_s == full.estimate.step_time_s
