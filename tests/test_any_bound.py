"""planner.search.any_bound: the floor of one unrestricted search never exceeds the best plan of that
search (the brute-force oracle, tests/oracle.py, per schedule), and skipping the searches it rules out
finds the same plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

import planner.search.driver as driver
from planner.cost.runtimes.capability import capability
from planner.search.any_bound import subproblem_floor_s
from planner.search.rank_floor import rank_floor_s
from planner.search.space import within
from planner.search.stage_types import INF, SolverOptions

from .oracle import brute_force
from .test_search import TINY_OPTIONS, pipeline_instance, tiny_instance

# pipeline_instance(11): the floor rules out a search there (floor / optimum 1.16)
CASES = [(tiny_instance, 1), (pipeline_instance, 11)]


def _floor(model, cluster, base, options, b, v, schedule):
    """The least floor over the depths of the searches of (b, v, schedule) (space.subproblems):
    per depth the larger of any_bound's and rank_floor's."""
    most = min(options.max_stages, sum(g.nodes for g in cluster.groups))
    split = schedule == "zb-h1"
    floors = []
    for p in range(1 if schedule == "1f1b" else 2, most + 1):
        closed = subproblem_floor_s(model, cluster, base, b, v, None if schedule == "1f1b" else p, schedule, options)
        floors.append(max(closed, rank_floor_s(model, cluster, base, b, v, p, schedule, p if split else 1, options, INF)))
    return min(floors)


@pytest.mark.parametrize("make, seed", CASES)
def test_the_floor_never_exceeds_the_brute_force_optimum_of_its_search(make, seed):
    model, cluster, base = make(seed)
    base = replace(base, runtime="any")
    options = within(SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True}), capability("any"))
    for b in TINY_OPTIONS["micro_batches"]:
        if base.global_batch % b:
            continue
        common = dict(zero_stages=(0, 1, 2, 3), runtime="any")
        one_f_one_b, _, _ = brute_force(model, cluster, base, (b,), (1, 2), ("none", "full"), virtual_stages=(1,),
                                        **common)
        either, _, _ = brute_force(model, cluster, base, (b,), (1, 2), ("none", "full"), virtual_stages=(1,),
                                   zero_bubble=True, **common)  # 1F1B or ZB-H1, the faster
        interleaved, _, _ = brute_force(model, cluster, base, (b,), (1, 2), ("none", "full"), virtual_stages=(2,),
                                        **common)
        f1 = _floor(model, cluster, base, options, b, 1, "1f1b")
        assert f1 <= one_f_one_b * (1 + 1e-9)
        assert min(f1, _floor(model, cluster, base, options, b, 1, "zb-h1")) <= either * (1 + 1e-9)
        assert _floor(model, cluster, base, options, b, 2, "interleaved") <= interleaved * (1 + 1e-9)


def test_skipping_the_searches_the_floor_rules_out_finds_the_same_plan(monkeypatch):
    model, cluster, base = pipeline_instance(11)
    base = replace(base, runtime="any")
    options = SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True})
    skipped = []
    real = driver.cannot_beat_any

    def counted(*args):
        out = real(*args)
        skipped.append(out)
        return out
    monkeypatch.setattr(driver, "cannot_beat_any", counted)
    pruned = driver.solve(model, cluster, base, options)
    assert any(skipped)  # the floor rules some searches out here
    monkeypatch.setattr(driver, "cannot_beat_any", lambda *args: False)
    full = driver.solve(model, cluster, base, options)
    assert pruned.optimal and full.optimal
    assert pruned.plan == full.plan and pruned.estimate.step_time_s == full.estimate.step_time_s
