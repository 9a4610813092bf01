"""planner.search.bounds.any_bound and rank_floor: neither rules out the search that holds the brute-force
optimum (planner.verify.oracle) against a cutoff just above it, nor puts its floor above that optimum, and
skipping the searches they rule out finds the same plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.runtimes.capability import capability
from planner.core.errors import NoFeasiblePlan
from planner.search.bounds.any_bound import AnyRuntimeBound, ClosedFormBound
from planner.search.bounds.rank_floor import RankBound
from planner.search.bounds.search_bound import Subproblem
from planner.search.orchestration.space import subproblems, within
from planner.search.pricing.stage_types import SearchContext, SolverOptions
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance

from .conftest import solve_with_and_without_skips

# pipeline_instance(11): the closed-form floor rules out a search there (floor / optimum 1.16)
CASES = [(tiny_instance, 1), (pipeline_instance, 11), (pipeline_instance, 5)]


def _search_of(plan):
    """(b, v, ranks, schedule) of the driver's search that holds `plan` (space.subproblems)."""
    t = plan.training
    return t.micro_batch, t.virtual_stages, (None if t.schedule == "1f1b" else plan.pp), t.schedule


@pytest.mark.slow
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
            context, search = SearchContext(model, cluster, base, options), Subproblem(b_, v_, ranks, schedule)
            assert ClosedFormBound(context).floor_s(search) <= best * (1 + 1e-9)
            assert not AnyRuntimeBound(context).cannot_beat(search, best * (1 + 1e-6))


def test_skipping_the_searches_the_floors_rule_out_finds_the_same_plan(monkeypatch):
    model, cluster, base = pipeline_instance(11)
    base = replace(base, runtime="any")
    options = SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True})
    pruned, full, skipped = solve_with_and_without_skips(monkeypatch, AnyRuntimeBound, model, cluster, base, options)
    assert skipped  # the floors rule some searches out here
    assert pruned.optimal and full.optimal
    assert pruned.plan == full.plan and pruned.estimate.step_time_s == full.estimate.step_time_s


def _alone(monkeypatch, model, cluster, base, options, want):
    """The optimum of the driver's one search `want` = (b, v, ranks, schedule), solved alone (no
    other search, no uniform seed), or None where it has no plan."""
    import planner.search.orchestration.driver as driver
    import planner.search.orchestration.lanes as lanes
    from planner.search.uniform import UniformSeed

    real = driver.runtime_subproblems
    with monkeypatch.context() as patch:
        patch.setattr(driver, "runtime_subproblems",
                      lambda *a, **k: (s for s in real(*a, **k) if (s[0], s[1], s[2], s[4]) == want))
        patch.setattr(lanes, "best_uniform_share", lambda *a, **k: UniformSeed(None))
        try:
            return driver.solve(model, cluster, base, options).estimate.step_time_s
        except NoFeasiblePlan:
            return None


# memory that binds, one- and two-GPU nodes, ZeRO-1 to 3: the in-flight counts per position, the
# deferred W inputs and ZeRO's collectives of rank_floor's costs all count here
@pytest.mark.parametrize("make, seed", [(pipeline_instance, 0), (pipeline_instance, 2), (pipeline_instance, 5),
                                        (tiny_instance, 1)])
def test_rank_floor_never_rules_out_a_search_against_its_own_optimum(monkeypatch, make, seed):
    model, cluster, base = make(seed)
    base = replace(base, runtime="any")
    given = SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True, "zero_stages": (1, 2, 3)})
    verdicts = _rank_floor_at_own_optima(monkeypatch, model, cluster, base, given)
    assert verdicts and not any(at_optimum for at_optimum, _ in verdicts)
    # the floor is not vacuous there: it rules out a cutoff at 80 % of some optimum
    assert any(below for _, below in verdicts)


def _rank_floor_at_own_optima(monkeypatch, model, cluster, base, given: SolverOptions) -> list[tuple[bool, bool]]:
    """Per search of the instance that has a plan: whether rank_floor rules it out against its own
    optimum (solved alone) just above it, and against 80 % of it."""
    cap = capability("any")
    options = within(given, cap)
    verdicts = []
    for b, v, ranks, _, schedule in subproblems(SearchContext(model, cluster, base, options), sum(g.nodes for g in cluster.groups), cap):
        best = _alone(monkeypatch, model, cluster, base, given, (b, v, ranks, schedule))
        if best is None:
            continue
        bound = RankBound(SearchContext(model, cluster, base, options))
        verdicts.append(tuple(bound.cannot_beat(Subproblem(b, v, ranks, schedule), best * factor)
                              for factor in (1 + 1e-6, 0.8)))
    return verdicts


# ZeRO-Offload wins in block_instance 6 and 10 (tests/test_memsave.py): a rank may fit only offloaded
@pytest.mark.parametrize("seed", [6, 10])
def test_rank_floor_with_offload_never_rules_out_a_search_against_its_own_optimum(monkeypatch, seed):
    from .test_memsave import OFFLOAD_OPTIONS, block_instance

    model, cluster, base = block_instance(seed)
    given = SolverOptions(**{**OFFLOAD_OPTIONS, "recompute_modes": ("none", "full"), "virtual_stages": (1, 2),
                             "zero_bubble": True, "zero_stages": (1, 2, 3)})
    verdicts = _rank_floor_at_own_optima(monkeypatch, model, cluster, base, given)
    assert verdicts and not any(at_optimum for at_optimum, _ in verdicts)


@pytest.mark.slow
def test_rank_floor_counts_zero_offload_step_where_a_rank_holds_its_blocks_only_offloaded(monkeypatch):
    """llama-3-70b on 2 H100 + 2 A100 + 4 V100 nodes (benchmarks/planning_time.py's 1:1:2 64), interleaved
    V = 2 on 4 ranks: the relaxation's best ranks put 46 blocks on the H100 nodes, which hold them without
    recomputation only with the optimizer states offloaded; counting ZeRO-Offload's CPU step there (and
    the states where it is off) rules out a cutoff 2 % below the search's own optimum."""
    from planner.inputs.hardware import cluster_from_spec
    from planner.inputs.model import load_model
    from planner.plan import Training

    def group(name, gpu, nodes, bandwidth):
        return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
                "inter_node": {"bandwidth_GBps": bandwidth, "latency_us": 5}}
    cluster = cluster_from_spec({"name": "h100-a100-v100-2-2-4", "node_groups": [
        group("h100", "H100-SXM5-80GB", 2, 400), group("a100", "A100-SXM4-80GB", 2, 200),
        group("v100", "V100-SXM2-32GB", 4, 50)]})
    model, base = load_model("llama-3-70b"), Training(64, 4096, "fp16", 1, runtime="any")
    given = SolverOptions()
    options = within(given, capability("any"))
    assert options.offload
    best = _alone(monkeypatch, model, cluster, base, given, (1, 2, 4, "interleaved"))
    bound, search = RankBound(SearchContext(model, cluster, base, options)), Subproblem(1, 2, 4, "interleaved")
    assert search.least_share == 1
    assert bound.cannot_beat(search, best * 0.98)
    assert not bound.cannot_beat(search, best * (1 + 1e-6))


def test_the_free_search_bound_leaves_a_restricted_search_to_the_restriction_bound():
    """AnyRuntimeBound (a Bound) rules out the free search whose closed-form floor is above the
    cutoff, never a restricted one (RestrictionBound's) and never against no cutoff at all."""
    from planner.search.pricing.stage_types import INF, Restriction

    model, cluster, base = tiny_instance(0)
    options = within(SolverOptions(**TINY_OPTIONS), capability("any"))
    context = SearchContext(model, cluster, replace(base, runtime="any"), options)
    free, restricted = Subproblem(1, 1, None, "1f1b"), Subproblem(1, 1, None, "1f1b", Restriction(tp=1, dp=1))
    floor = ClosedFormBound(context).floor_s(free)
    assert 0 < floor < INF
    bound = AnyRuntimeBound(context)
    assert bound.cannot_beat(free, floor / 2)
    assert not bound.cannot_beat(restricted, floor / 2)
    assert not bound.cannot_beat(free, INF)


def _two_group_cluster(h100_nodes: int, a100_nodes: int):
    from planner.inputs.hardware import cluster_from_spec

    def group(name, gpu, nodes, bandwidth):
        return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
                "inter_node": {"bandwidth_GBps": bandwidth, "latency_us": 5}}
    return cluster_from_spec({"name": f"h100-a100-{h100_nodes}-{a100_nodes}", "node_groups": [
        group("h100", "H100-SXM5-80GB", h100_nodes, 400), group("a100", "A100-SXM4-80GB", a100_nodes, 200)]})


def test_the_rank_floor_takes_a_table_as_large_as_the_whole_cluster_search_it_rules_on():
    """8 + 8 nodes: 81 node vectors, past RANK_FLOOR_LIMITS' 64. Asked alone (or for a search on parts)
    the rank floor gives no answer; for the search of the whole cluster node by node, whose DP runs over
    the same 81 vectors, it prices them and rules out a cutoff no plan can meet."""
    from planner.inputs.model import load_model
    from planner.plan import Training
    from planner.search.bounds.rank_floor import RANK_FLOOR_LIMITS

    cluster = _two_group_cluster(8, 8)
    vectors = 9 * 9
    assert vectors > RANK_FLOOR_LIMITS[0]
    model, base = load_model("llama-3-8b"), Training(128, 4096, "bf16", 1, runtime="any")
    context = SearchContext(model, cluster, base, within(SolverOptions(), capability("any")))
    search = Subproblem(1, 1, 4, "zb-h1")
    assert not RankBound(context).cannot_beat(search, 1e-3)  # (no answer: the table is too large)
    assert RankBound(context, most_vectors=vectors).cannot_beat(search, 1e-3)
    assert not RankBound(context, most_vectors=vectors).cannot_beat(search, float("inf"))


def test_a_lane_of_the_whole_cluster_search_gives_the_rank_floor_its_node_vectors():
    from planner.inputs.model import load_model
    from planner.plan import Training
    from planner.search.bounds.rank_costs import KnownCosts
    from planner.search.bounds.rank_floor import RANK_FLOOR_LIMITS
    from planner.search.decompose import decompose
    from planner.search.orchestration.lanes import Lane, SearchInputs
    from planner.core.clock import SearchClock

    cluster = _two_group_cluster(8, 8)
    model, base = load_model("llama-3-8b"), Training(128, 4096, "bf16", 1, runtime="any")
    context = SearchContext(model, cluster, base, within(SolverOptions(), capability("any")))
    most = {}
    for exact_nodes in (16, 8):  # the whole cluster node by node; parts
        parts = decompose(cluster, exact_nodes, 4)
        lane = Lane(SearchInputs(context, parts, ()), SearchClock(None), KnownCosts())
        most[parts.exact] = next(b for b in lane.bounds if isinstance(b, AnyRuntimeBound)).ranks.most_vectors
    assert most == {True: 81, False: RANK_FLOOR_LIMITS[0]}


def test_the_rank_floor_stops_at_the_time_limit_as_it_prices():
    """A floor over 81 node vectors takes seconds at scale: it calls the search's clock check as it
    prices, so the time limit interrupts it (clock.SearchTimeout), as it does the DP."""
    from planner.core.clock import SearchTimeout
    from planner.inputs.model import load_model
    from planner.plan import Training

    def past_the_limit():
        raise SearchTimeout

    cluster = _two_group_cluster(8, 8)
    model, base = load_model("llama-3-8b"), Training(128, 4096, "bf16", 1, runtime="any")
    context = SearchContext(model, cluster, base, within(SolverOptions(), capability("any")))
    with pytest.raises(SearchTimeout):
        RankBound(context, most_vectors=81, check=past_the_limit).cannot_beat(Subproblem(1, 1, 4, "zb-h1"), 1e-3)


@pytest.mark.parametrize("seed", [1, 5, 11])
def test_a_search_under_a_bound_returns_no_plan_at_or_above_it(seed):
    """SolverOptions.upper_bound_s: the search looks only for faster plans. Bounded just under its own
    optimum it finds none (NothingFaster), never a slower plan that its DP's cutoff let through (a plan
    the caller has no use for, which `plan --runtime any` once finished and priced)."""
    from planner.core.errors import NothingFaster
    from planner.search.orchestration.driver import solve

    model, cluster, base = pipeline_instance(seed)
    base = replace(base, runtime="any")
    options = SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True})
    best = solve(model, cluster, base, options)
    assert best.optimal
    with pytest.raises(NothingFaster):
        solve(model, cluster, base, replace(options, upper_bound_s=best.estimate.step_time_s * (1 - 1e-3)))
