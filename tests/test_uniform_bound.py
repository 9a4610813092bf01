"""The uniform configurations are pruned by a lower bound (planner.search.bounds.uniform_bound) without
changing which plan wins: the bound never exceeds the priced step time, and the pruned scan
finds the fastest uniform plan of brute-force pricing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Training
from planner.search.uniform import (UniformSpace, best_uniform_share, improving_uniform, indexed_candidates,
                                    merge_seeds, uniform_candidates)
from planner.search.bounds.uniform_bound import busy_lower_bound_s, screen, surely_overflows
from planner.search.pricing.stage_types import SearchContext, SolverOptions

SPACE = UniformSpace(tp_degrees=(2, 1), micro_batches=(1, 2), recompute_modes=("full", "none"), zero_stages=(1, 0),
                     virtual_stages=(1, 2), schedules=("zbv", "looped-bfs"))


@pytest.fixture(scope="module")
def priced_candidates():
    """Every candidate of SPACE, priced, on 2 H100 + 1 A100 + 3 V100 nodes of 2 GPUs (a TP pair
    and DP groups across types) with a 4-block model whose memory binds on some."""
    model = model_from_dict({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 4,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 8192,
                             "vocab_size": 32000}, "tiny-4")
    gpus = {"H100-SXM5-80GB": {"memory_GiB": 3}, "A100-SXM4-80GB": {"memory_GiB": 3}, "V100-SXM2-32GB": {"memory_GiB": 3}}
    groups = [{"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 2,
               "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}
              for name, gpu, nodes, nic in zip("hav", gpus, (2, 1, 3), (400, 200, 50))]
    cluster = cluster_from_spec({"name": "mixed-12", "gpus": gpus, "node_groups": groups})
    base = Training(24, 1024, "fp16", 1, runtime="any")
    candidates = list(uniform_candidates(SearchContext(model, cluster, base, SolverOptions()), SPACE))
    return model, cluster, base, [(plan, evaluate(plan)) for plan in candidates]


def test_the_bound_never_exceeds_the_priced_step_time(priced_candidates):
    *_, pairs = priced_candidates
    assert len({plan.training.schedule for plan, _ in pairs}) >= 3
    ratios = [busy_lower_bound_s(plan) / estimate.step_time_s for plan, estimate in pairs]
    assert max(ratios) <= 1 + 1e-12
    assert sorted(ratios)[len(ratios) // 2] > 0.3  # and is not trivial
    memo: dict = {}  # memoised chunk computes (as improving_uniform shares them) change nothing
    assert [busy_lower_bound_s(plan, None, memo) for plan, _ in pairs] == [busy_lower_bound_s(plan) for plan, _ in pairs]
    assert memo


def test_the_pruned_scan_finds_the_brute_force_fastest_uniform_plan(priced_candidates):
    model, cluster, base, pairs = priced_candidates
    fitting = [(estimate.step_time_s, i) for i, (_, estimate) in enumerate(pairs) if estimate.fits]
    assert len(fitting) < len(pairs)  # memory binds on some
    best_s, first = min(fitting)  # ties: the first in candidate order
    found = list(improving_uniform(SearchContext(model, cluster, base, SolverOptions()), SPACE))
    assert found[-1][0] == pairs[first][0] and found[-1][1].step_time_s == best_s
    # a caller's bound at the best leaves it (a tie is kept); one below it leaves no plan
    assert list(improving_uniform(SearchContext(model, cluster, base, SolverOptions()), SPACE, bound_s=best_s))[-1][0] == pairs[first][0]
    lowest = min(busy_lower_bound_s(plan) for plan, _ in pairs)
    assert list(improving_uniform(SearchContext(model, cluster, base, SolverOptions()), SPACE, bound_s=lowest * (1 - 1e-9))) == []


def test_surely_overflows_flags_only_plans_that_do_not_fit(priced_candidates):
    *_, pairs = priced_candidates
    flagged = [surely_overflows(plan) for plan, _ in pairs]
    assert not any(flag and estimate.fits for flag, (_, estimate) in zip(flagged, pairs))
    not_fitting = sum(not estimate.fits for _, estimate in pairs)
    assert sum(flagged) >= 0.8 * not_fitting > 0  # and finds most of them
    # checking every replica, it says exactly whether evaluate finds a GPU over its memory
    for plan, estimate in pairs:
        gpu_over = any(not o.gpu.startswith("host memory") for o in estimate.overflows)
        assert surely_overflows(plan, every_replica=True) == gpu_over
    # and with activation offload (uniform.fewest_offloaded's forms)
    one_stage = [plan for plan, _ in pairs if len(plan.stages) == 1 and plan.stages[0].recompute == "none"]
    assert one_stage
    for plan in one_stage:
        for k in (1, 2, 3):
            form = replace(plan, stages=(replace(plan.stages[0], offload_activations=k),))
            gpu_over = any(not o.gpu.startswith("host memory") for o in evaluate(form).overflows)
            assert surely_overflows(form, every_replica=True) == gpu_over


def test_the_screen_bound_with_the_fill_never_exceeds_the_priced_step_time_and_is_tighter(priced_candidates):
    *_, pairs = priced_candidates
    floors = [screen(plan)[0] for plan, _ in pairs]
    assert all(floor <= estimate.step_time_s for floor, (_, estimate) in zip(floors, pairs))
    assert all(floor >= busy_lower_bound_s(plan) * (1 - 1e-6) or plan.stages[0].ep > 1
               for floor, (plan, _) in zip(floors, pairs))
    ratios = sorted(floor / estimate.step_time_s for floor, (_, estimate) in zip(floors, pairs))
    assert ratios[len(ratios) // 2] > 0.8
    assert [screen(plan)[1] for plan, _ in pairs] == [surely_overflows(plan) for plan, _ in pairs]


def test_shares_of_the_uniform_scan_merge_to_the_whole_scan_plan(priced_candidates):
    """Lanes scan the uniform candidates in shares (index modulo n); merged by (step, index), they give
    the plan of the scan in one process, and the shares' indices are the whole scan's."""
    model, cluster, base, pairs = priced_candidates
    plan, estimate = list(improving_uniform(SearchContext(model, cluster, base, SolverOptions()), SPACE))[-1]
    whole = [(i, p) for i, p in indexed_candidates(SearchContext(model, cluster, base, SolverOptions()), SPACE)]
    assert [p for _, p in whole] == [p for p, _ in pairs]
    for n in (2, 3):
        shared = sorted(entry for k in range(n) for entry in indexed_candidates(SearchContext(model, cluster, base, SolverOptions()), SPACE, (k, n)))
        assert [i for i, _ in shared] == [i for i, _ in whole] and [p for _, p in shared] == [p for _, p in whole]
        merged = merge_seeds([best_uniform_share(SearchContext(model, cluster, base, SolverOptions()), SPACE, None, None, None, float("inf"), (k, n))
                              for k in range(n)])
        assert merged.complete and merged.best[1] == plan and merged.best[2].step_time_s == estimate.step_time_s
        assert pairs[merged.best[0]][0] == plan
