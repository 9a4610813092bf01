"""ZB-H1 in the plan search (planner.search.pricing.deferred), runtime any: the search equals the brute
force that enumerates ZB-H1 too, picks it where its smaller bubble wins, and its per-position
memory caps and least shares agree with what evaluate and the plan checks ask."""

from __future__ import annotations

import random
from itertools import product

import numpy as np
import pytest

from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.shares import UNCAPPED, min_makespan, solve_shares_ilp
from planner.search.pricing.stage_types import SearchContext, deferred_share_cap
from planner.search.orchestration.space import subproblems, within
from planner.cost.runtimes.capability import capability
from planner.verify.oracle import brute_force
from planner.verify.instances import pipeline_instance, tiny_instance


ZB_OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"), virtual_stages=(1,),
                  offload=False, zero_bubble=True)
# the cheap oracle instances: forced pipelines (7, 9: ZB-H1 wins; 8, 10: 1F1B, the memory or
# the shares bind) and a mixed-type tiny instance with interleaving where ZB-H1 wins (32)
CASES = [("pipe", 7, (1,)), ("pipe", 8, (1,)), ("pipe", 9, (1,)), ("pipe", 10, (1,)), ("tiny", 32, (1, 2))]


@pytest.fixture(scope="module")
def zero_bubble_results():
    out = {}
    for kind, seed, vs in CASES:
        model, cluster, base = (pipeline_instance if kind == "pipe" else tiny_instance)(seed)
        options = SolverOptions(**{**ZB_OPTIONS, "virtual_stages": vs})
        with_zb = solve(model, cluster, base, options)
        without = solve(model, cluster, base, SolverOptions(**{**ZB_OPTIONS, "virtual_stages": vs,
                                                               "zero_bubble": False}))
        out[(kind, seed)] = (model, cluster, base, vs, with_zb, without)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind,seed", [(k, s) for k, s, _ in CASES])
def test_search_with_zero_bubble_equals_brute_force(zero_bubble_results, kind, seed):
    model, cluster, base, vs, result, _ = zero_bubble_results[(kind, seed)]
    expected, _, _ = brute_force(model, cluster, base, ZB_OPTIONS["micro_batches"], ZB_OPTIONS["tp_degrees"],
                                 ZB_OPTIONS["recompute_modes"], virtual_stages=vs, zero_bubble=True)
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def test_zero_bubble_is_chosen_where_it_wins_and_1f1b_is_strictly_slower_there(zero_bubble_results):
    chosen = 0
    for (kind, seed), (_, _, _, _, result, without) in zero_bubble_results.items():
        plan = result.plan
        if plan.training.schedule == "zb-h1":
            chosen += 1
            assert plan.pp >= 2
            # every replica takes at least pp micro-batches (planner.plan's zero-bubble check)
            assert min(r.batch_share // plan.training.micro_batch for s in plan.stages for r in s.replicas) >= plan.pp
            assert without.estimate.step_time_s > result.estimate.step_time_s * (1 + 1e-9)
        else:
            assert without.estimate.step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-12)
    assert chosen >= 3, chosen


def test_zero_bubble_is_searched_only_where_the_runtime_runs_it():
    model, cluster, base = pipeline_instance(7)
    for runtime, expected in (("any", {"1f1b", "interleaved", "zb-h1"}), ("megatron", {"1f1b", "interleaved"}),
                              ("torchtitan", {"1f1b", "interleaved"}), ("deepspeed", {"1f1b"})):
        options = within(SolverOptions(), capability(runtime))
        names = {sub[4] for sub in subproblems(SearchContext(model, cluster, base, options), 3, capability(runtime))}
        assert names == expected, runtime
    off = within(SolverOptions(zero_bubble=False), capability("any"))
    assert "zb-h1" not in {sub[4] for sub in subproblems(SearchContext(model, cluster, base, off), 3, capability("any"))}


def test_deferred_cap_is_the_most_micro_batches_whose_memory_fits():
    """A replica with n micro-batches at a rank with s in flight and k deferred holds min(n, s)
    whole micro-batches and w of a whole one for each of min(k, n - min(n, s)) more
    (stage_memory.replica_memory with the schedule's counts at n): the cap is the largest such n."""
    rng = random.Random(5)
    for _ in range(300):
        s, k = rng.randint(1, 6), rng.randint(0, 6)
        w = rng.choice([0.0, 0.25, 0.5, 1.0, 1.7])
        room = rng.uniform(-0.5, s + k * w + 2)
        cap = int(deferred_share_cap(np.array([room]), np.array([w]), float(s), float(k))[0])

        def need(n):
            whole = min(n, s)
            return whole + w * min(k, n - whole)
        fitting = [n for n in range(0, 40) if need(n) <= room + 1e-12]
        if room < 0:
            assert cap == 0
        elif len(fitting) == 40:
            assert cap == UNCAPPED
        else:
            assert cap == max(fitting), (room, s, k, w)


def test_least_share_makespan_equals_enumeration_and_the_ilp():
    rng = random.Random(11)
    for _ in range(60):
        counts = [rng.randint(1, 2) for _ in range(rng.randint(1, 2))]
        times = [rng.choice([1.0, 1.5, 2.0, 3.0]) for _ in counts]
        caps = [rng.choice([2, 3, 5, UNCAPPED]) for _ in counts]
        least = rng.randint(1, 3)
        total = rng.randint(1, 9)
        fast = float(min_makespan(total, counts, [np.array(t) for t in times], [np.array(c) for c in caps], least))
        replicas = [(t, c) for n, t, c in zip(counts, times, caps) for _ in range(n)]
        best = float("inf")
        for shares in product(range(least, total + 1), repeat=len(replicas)):
            if sum(shares) == total and all(x <= c for x, (_, c) in zip(shares, replicas)):
                best = min(best, max(x * t for x, (t, _) in zip(shares, replicas)))
        assert fast == pytest.approx(best), (counts, times, caps, least, total)
        if np.isfinite(best):
            ilp = solve_shares_ilp(total, [t for t, _ in replicas], [c for _, c in replicas], least=least)
            assert min(ilp.shares) >= least and sum(ilp.shares) == total
            assert max(x * t for x, (t, _) in zip(ilp.shares, replicas)) == pytest.approx(best)


@pytest.mark.slow
@pytest.mark.parametrize("seed", (6, 8))  # 6: 1F1B with a stage offloaded; 8: ZB-H1
def test_search_with_zero_bubble_and_offload_equals_brute_force(seed):
    from .test_memsave import OFFLOAD_OPTIONS, block_instance
    model, cluster, base = block_instance(seed)
    options = {**OFFLOAD_OPTIONS, "zero_bubble": True}
    expected, _, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                 options["recompute_modes"], virtual_stages=(1,), offload=True, zero_bubble=True)
    result = solve(model, cluster, base, SolverOptions(**options))
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def _old_order(subs: list) -> list:
    """The subproblems in the order before ZB-H1 of the smallest micro-batch went first: every
    1F1B search, then the depth-dependent ones by micro-batch, schedule and depth."""
    plain = [s for s in subs if s[2] is None]
    rest = sorted((s for s in subs if s[2] is not None), key=lambda s: (s[0], s[1], s[4] != "zb-h1", s[2]))
    return plain + rest


def test_zero_bubble_searches_first_find_the_plan_of_the_1f1b_first_order(zero_bubble_results, monkeypatch):
    """The smallest micro-batch's ZB-H1 searches run first (space.subproblems) and bound the
    rest; the plan is the one the 1F1B-first order finds, on instances where ZB-H1 wins and where
    1F1B does."""
    import planner.search.orchestration.driver as driver

    model, cluster, base, vs, result, _ = zero_bubble_results[("pipe", 7)]
    options = SolverOptions(**{**ZB_OPTIONS, "virtual_stages": vs})
    subs = list(subproblems(SearchContext(model, cluster, base, within(options, capability("any"))), 3, capability("any")))
    assert subs[0][4] == "zb-h1" and subs[0][0] == min(s[0] for s in subs)
    assert sorted(map(repr, subs)) == sorted(map(repr, _old_order(subs)))  # the same searches
    original = driver.runtime_subproblems
    monkeypatch.setattr(driver, "runtime_subproblems", lambda *a, **k: _old_order(list(original(*a, **k))))
    for key in (("pipe", 7), ("pipe", 8), ("tiny", 32)):
        model, cluster, base, vs, result, _ = zero_bubble_results[key]
        old = solve(model, cluster, base, SolverOptions(**{**ZB_OPTIONS, "virtual_stages": vs}))
        assert old.plan == result.plan and old.estimate.step_time_s == result.estimate.step_time_s
        assert old.optimal == result.optimal
