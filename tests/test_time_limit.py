"""The time limit holds on shapes the exact search cannot finish, and returns the best plan
found so far (a uniform configuration at first), or exit 1 saying none was found in time.

The search reads a ticking clock here (TickingClock: each read moves it one tick), so what these
tests pin is that the search checks its clock often and stops within a few checks of the limit,
whatever the machine's speed; the wall time under a real clock is measured by
`python benchmarks/planning_time.py --rows 3+3+4 --time-limit 2` (its wall column)."""

from __future__ import annotations

import pytest

from planner.core.clock import Progress
from planner.core.errors import NoFeasiblePlan
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, structural_problems
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.stage_types import SearchContext
from planner.search.uniform import UniformSpace, best_uniform

from .conftest import TickingClock, invoke as run_cli, three_types


def timed_solve(nodes: tuple[int, int, int], limit_s: float, exact: bool = True, jobs: int = 1,
                tick_s: float = 2e-4):
    """`exact`: the whole cluster node by node (no decomposition, planner.search.decompose), the slow shape.
    The search's clock ticks `tick_s` per read (about 5,000 reads a second on this shape: 2e-4 keeps the
    ticking seconds near wall seconds); returns the result and the clock's seconds at the end."""
    cluster = cluster_from_spec(three_types(*nodes), "test")
    training = Training(8 * sum(nodes), 4096, "fp16", 1)
    # decomposed: bundles of the trimmed cluster (decompose.trim, runtime megatron) of at most 4 nodes,
    # as the parts: the trimmed search of 8 bundles of 14 nodes (its own test: tests/test_trim.py) takes 20 s
    options = SolverOptions(time_limit_s=limit_s, max_exact_nodes=sum(nodes) if exact else 8,
                            max_trimmed_bundle_nodes=4, jobs=jobs, whole_after_parts=exact,
                            clock=TickingClock(tick_s))
    try:
        result = solve(load_model("llama-3-70b"), cluster, training, options)
    except NoFeasiblePlan as exc:
        return exc, options.clock.now_s
    return result, options.clock.now_s


def test_time_limit_returns_the_best_plan_found_so_far_on_a_slow_shape():
    # the exact search of 3 + 3 + 4 nodes node by node takes minutes; with 2 s it must stop in
    # time and still return a valid plan
    result, seconds = timed_solve((3, 3, 4), 2.0)
    assert seconds <= 2.0 * 1.1, seconds  # stopped within a few checks of the limit
    assert not isinstance(result, NoFeasiblePlan), result
    assert not result.optimal and 0 < result.gap < 1
    assert not structural_problems(result.plan) and result.estimate.fits
    assert evaluate(result.plan).step_time_s == pytest.approx(result.estimate.step_time_s)


@pytest.mark.slow
def test_time_limit_holds_where_even_the_first_pass_cannot_finish():
    # 31 + 47 + 50 nodes (1,024 GPUs) searched whole, node by node: the first DP pass alone takes hours
    result, seconds = timed_solve((31, 47, 50), 3.0, tick_s=5e-5)  # about 60,000 reads a second here
    assert seconds <= 3.0 * 1.1, seconds
    if isinstance(result, NoFeasiblePlan):
        assert "time limit" in str(result)
    else:
        assert result.estimate.fits and not result.optimal


@pytest.mark.slow
def test_odd_node_counts_get_a_plan_on_parts_not_the_uniform_fallback():
    # decomposed, 31 + 47 + 50 nodes search as 4 parts and finish well inside the limit
    result, seconds = timed_solve((31, 47, 50), 120.0, exact=False, tick_s=5e-5)
    assert not isinstance(result, NoFeasiblePlan), result
    assert result.decomposition == "parts 31 / 47 / 25+25" and seconds < 120.0 * 0.75
    space = UniformSpace(tp_degrees=(8,), micro_batches=(1,), recompute_modes=("none", "full"), zero_stages=(1,),
                         virtual_stages=(1,), whole_nodes=True)
    uniform = best_uniform(SearchContext(result.plan.model, result.plan.cluster, result.plan.training, SolverOptions()), space)
    assert uniform is None or result.estimate.step_time_s < uniform[1].step_time_s


def test_no_plan_in_time_exits_1_saying_so():
    result = run_cli("plan", "--model", "llama-3-70b", "--cluster", "h100-a100-v100", "--global-batch", "64",
                     "--seq-len", "4096", "--time-limit", "0.001")
    assert result.exit_code == 1, result.stderr
    assert "no plan found within the time limit" in result.stderr and "--time-limit" in result.stderr
    assert result.stdout == ""


def test_the_uniform_seed_is_never_better_than_the_proven_optimum():
    # the seed lies inside the search space, so the exact search can only match or beat it
    cluster = cluster_from_spec(three_types(1, 1, 2), "test")
    model, training = load_model("llama-3-8b"), Training(128, 4096, "fp16", 1)
    options = SolverOptions(virtual_stages=(1,))
    result = solve(model, cluster, training, options)
    space = UniformSpace(tp_degrees=options.tp_degrees, micro_batches=options.micro_batches,
                         recompute_modes=options.recompute_modes, zero_stages=options.zero_stages,
                         virtual_stages=(1,), max_stages=options.max_stages, whole_nodes=True)
    seed = best_uniform(SearchContext(model, cluster, training, options), space)
    assert result.optimal and seed is not None
    assert result.estimate.step_time_s <= seed[1].step_time_s * (1 + 1e-6)


def test_progress_reports_subproblems_best_step_and_bound():
    reports: list[Progress] = []
    cluster = cluster_from_spec(three_types(1, 1, 2), "test")
    solve(load_model("llama-3-8b"), cluster, Training(128, 4096, "fp16", 1), SolverOptions(virtual_stages=(1,)),
          reports.append)
    assert reports, "no progress reported"
    last = reports[-1]
    assert last.subproblems_done == last.subproblems_total > 0
    assert last.best_step_s is not None and last.best_step_s >= last.lower_bound_s > 0
    assert all(a.elapsed_s <= b.elapsed_s for a, b in zip(reports, reports[1:]))


def test_plan_json_stdout_has_nothing_but_the_plan():
    result = run_cli("plan", "--model", "gpt2", "--cluster", "a100-v100-mix", "--global-batch", "64",
                     "--seq-len", "1024", "--json", "--time-limit", "60")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.lstrip().startswith("{") and result.stdout.rstrip().endswith("}")


def test_a_search_past_the_time_limit_ends_incomplete_before_its_skip_checks():
    """The skip checks (floors) of a search can take seconds at scale and rule out search after search:
    a lane checks its clock first, so past the limit a search ends incomplete, unpriced, and no more
    searches start (planner.search.orchestration.parallel)."""
    from planner.core.clock import SearchClock
    from planner.search.bounds.rank_costs import KnownCosts
    from planner.search.decompose import decompose
    from planner.search.orchestration.lanes import Lane, SearchInputs, Start
    from planner.search.orchestration.space import subproblems, within
    from planner.cost.runtimes.capability import capability

    cluster = cluster_from_spec(three_types(1, 1, 1), "test")
    model, training = load_model("llama-3-8b"), Training(24, 4096, "bf16", 1, runtime="any")
    cap = capability("any")
    context = SearchContext(model, cluster, training, within(SolverOptions(), cap))
    parts = decompose(cluster, 8, 4)
    searches = tuple(subproblems(context, 3, cap))
    ticking = TickingClock(1.0)
    lane = Lane(SearchInputs(context, parts, searches), SearchClock(0.5, now=ticking), KnownCosts())
    outcome = lane.run(0, Start(float("inf"), None))
    assert not outcome.complete and outcome.found is None and outcome.evaluations == 0
