"""Per-replica TP (Replica.tp): the replicas of one stage at different tensor-parallel degrees, as
Sailor and FlashFlex plan them; the plan format, its checks and the cost model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.runtimes.capability import violations
from planner.inputs.hardware import cluster_from_spec
from planner.plan import Replica, Training, plan_from_json, plan_to_json, structural_problems, uniform_plan

from .conftest import assert_bad_input, invoke, small_cluster_spec, write_json

TRAINING = Training(global_batch=16, seq_len=512, dtype="bf16", micro_batch=1, runtime="any")


@pytest.fixture(scope="module")
def cluster():
    return cluster_from_spec(small_cluster_spec(gpus_per_node=4))


def mixed(plan, shares=(8, 4, 4)):
    """`plan`'s one stage as a TP-2 replica on ranks 0-1 and two TP-1 replicas on ranks 2 and 3."""
    st = plan.stages[0]
    replicas = (Replica(0, shares[0], (0, 1)), Replica(1, shares[1], (2,), tp=1), Replica(2, shares[2], (3,), tp=1))
    return replace(plan, stages=(replace(st, tp=2, replicas=replicas),))


def tp2_dp2(gpt2, cluster):
    return uniform_plan(gpt2, cluster, TRAINING, tp=2, pp=1, dp=2)


def test_a_replica_at_the_stage_degree_is_the_uniform_plan(gpt2, cluster):
    plan = tp2_dp2(gpt2, cluster)
    data = plan_to_json(plan)
    for rep in data["stages"][0]["replicas"]:
        rep["tp"] = 2  # the stage's degree, spelled out
    again = plan_from_json(data)
    assert again.stages == plan.stages
    assert "tp" not in plan_to_json(again)["stages"][0]["replicas"][0]


def test_mixed_replicas_round_trip_with_their_own_degree(gpt2, cluster):
    plan = mixed(tp2_dp2(gpt2, cluster))
    assert structural_problems(plan) == []
    data = plan_to_json(plan)
    assert [r.get("tp") for r in data["stages"][0]["replicas"]] == [None, 1, 1]
    assert plan_from_json(data).stages == plan.stages
    assert plan.stages[0].tp_label() == "1x2,2x1"


def test_each_replica_is_priced_at_its_own_degree(gpt2, cluster):
    """A TP-1 replica holds the whole layers: more memory and, for gpt2 on one A100, a different
    speed than the TP-2 pair; each replica's busy time is its own plan's at that degree."""
    plan = mixed(tp2_dp2(gpt2, cluster))
    est = evaluate(plan)
    assert est.memory_by_rank[2].total_bytes > est.memory_by_rank[0].total_bytes
    assert est.memory_by_rank[2].total_bytes == est.memory_by_rank[3].total_bytes
    # the same replicas alone: tp 2 on ranks 0-1 with its 8 samples, tp 1 on rank 2 with 4
    pair = evaluate(replace(plan, training=replace(TRAINING, global_batch=8), stages=(
        replace(plan.stages[0], replicas=(Replica(0, 8, (0, 1)),)),)))
    single = evaluate(replace(plan, training=replace(TRAINING, global_batch=4), stages=(
        replace(plan.stages[0], tp=1, replicas=(Replica(0, 4, (2,)),)),)))
    assert est.memory_by_rank[0].weights_bytes == pair.memory_by_rank[0].weights_bytes
    assert est.memory_by_rank[2].weights_bytes == single.memory_by_rank[2].weights_bytes
    busy = est.active_s_by_rank
    # active = micro-batches plus the optimizer step, each replica at its own degree (no tail on one replica)
    assert busy[0] == pytest.approx(pair.active_s_by_rank[0], rel=1e-12)
    assert busy[2] == pytest.approx(single.active_s_by_rank[2], rel=1e-12)


def test_the_gradient_reduction_is_set_by_the_least_tp(gpt2, cluster):
    """The TP-1 replicas reduce the whole model's gradients per rank: the mixed stage reduces as
    slowly as an all-TP-1 stage over the same replica count, not as a TP-2 one."""
    exposed = replace(DEFAULT_PARAMS, overlap_grad_reduce=False)  # (the fastest backward differs)
    plan = mixed(tp2_dp2(gpt2, cluster))
    est = evaluate(plan, exposed)
    all_tp1 = evaluate(replace(plan, stages=(replace(plan.stages[0], tp=1, replicas=(
        Replica(0, 8, (0,)), Replica(1, 4, (2,)), Replica(2, 4, (3,)))),)), exposed)
    all_tp2 = evaluate(tp2_dp2(gpt2, cluster), exposed)
    assert est.breakdown_s["dp_comm"] == pytest.approx(all_tp1.breakdown_s["dp_comm"], rel=1e-12)
    assert est.breakdown_s["dp_comm"] > all_tp2.breakdown_s["dp_comm"]


def test_ranks_must_match_the_replica_degree(gpt2, cluster):
    plan = mixed(tp2_dp2(gpt2, cluster))
    st = plan.stages[0]
    bad = replace(plan, stages=(replace(st, replicas=(st.replicas[0], replace(st.replicas[1], tp=2),
                                                       st.replicas[2])),))
    assert ("stages[0].replicas[1].ranks", "has 1 ranks but tp=2") in structural_problems(bad)


def test_per_replica_tp_needs_cp_and_ep_of_one(gpt2, cluster):
    plan = mixed(tp2_dp2(gpt2, cluster))
    with_cp = replace(plan, stages=(replace(plan.stages[0], cp=2),))
    assert any(path == "stages[0].cp" and "need cp 1" in msg for path, msg in structural_problems(with_cp))


def test_only_the_any_runtime_runs_per_replica_tp(gpt2, cluster):
    plan = mixed(tp2_dp2(gpt2, cluster))
    assert violations(plan, "any") == ()
    assert any("one TP degree per stage" in v and "1x2,2x1" in v for v in violations(plan, "megatron"))


def test_validate_export_and_run_of_a_mixed_plan(tmp_path, gpt2, cluster):
    """validate accepts it and evaluate prices it; Megatron-LM cannot run it (exit 2), and the rankmap
    carries each rank's degree and the ranks its gradients are summed with."""
    plan = mixed(tp2_dp2(gpt2, cluster))
    raw = write_json(tmp_path, plan_to_json(plan), "raw.json")
    path = tmp_path / "plan.json"
    priced = invoke("evaluate", "--plan", raw, "--plan-out", path, "--json")
    assert priced.exit_code == 0, priced.stderr
    assert invoke("validate", path).exit_code == 0
    out = invoke("export", path, "--to", "megatron", "-o", tmp_path / "m")
    assert out.exit_code == 2
    assert "one TP degree per stage" in out.stderr
    rankmap = invoke("export", path, "--to", "rankmap")
    assert rankmap.exit_code == 0, rankmap.stderr
    ranks = {e["rank"]: e for e in json.loads(rankmap.stdout)["ranks"]}
    assert (ranks[0]["tp"], ranks[0]["tp_group"], ranks[2]["tp"], ranks[2]["tp_group"]) == (2, [0, 1], 1, [2])
    # a TP-1 rank reduces with both ranks of the pair (each holds half of its gradients) ...
    assert ranks[2]["dp_group"] == [0, 2, 3]
    assert ranks[1]["dp_group"] == [1, 2, 3]


def test_the_reference_runtime_refuses_zero_under_per_replica_tp(gpt2, cluster):
    """planner run sums a mixed stage's gradients whole (engine.MixedTPReduce); it shards no optimizer
    over replicas whose shards do not line up."""
    from planner.runner.layout import check_runnable

    plan = mixed(tp2_dp2(gpt2, cluster))
    check_runnable(plan, 1)
    with pytest.raises(Exception, match="ZeRO"):
        check_runnable(replace(plan, stages=(replace(plan.stages[0], zero=1),)), 1)


def test_a_replica_degree_that_is_not_a_whole_degree_is_bad_input(tmp_path, gpt2, cluster):
    data = plan_to_json(mixed(tp2_dp2(gpt2, cluster)))
    for bad in (0, "1", 1.5):
        data["stages"][0]["replicas"][1]["tp"] = bad
        result = invoke("validate", write_json(tmp_path, data))
        assert result.exit_code == 2 and "stages[0].replicas[1].tp" in result.stderr, result.stderr


def test_a_replica_degree_that_does_not_split_the_heads_is_a_problem(tmp_path, gpt2, cluster):
    """gpt2's 12 heads do not split 8 ways: named at the replica's own tp."""
    big = cluster_from_spec(small_cluster_spec(gpus_per_node=16))
    plan = uniform_plan(gpt2, big, TRAINING, tp=2, pp=1, dp=8)
    st = plan.stages[0]
    replicas = (Replica(0, 8, tuple(range(8)), tp=8),) + tuple(
        Replica(j, 1, (7 + j,), tp=1) for j in range(1, 9))
    data = plan_to_json(replace(plan, stages=(replace(st, replicas=replicas),)))
    result = invoke("validate", write_json(tmp_path, data))
    assert result.exit_code != 0
    assert "stages[0].replicas[0].tp" in result.stdout + result.stderr and "do not split over tp=8" in \
        result.stdout + result.stderr


def test_per_replica_tp_is_searched_under_any_and_left_out_by_the_flag():
    """llama-3-8b on a100-v100-mix under --runtime any: the plan with per-replica TP is at least as fast as
    the one without (its space holds the other), and --no-per-replica-tp gives no replica a degree of its own."""
    from planner import api
    from planner.api import PlanRequest

    request = PlanRequest(model="llama-3-8b", cluster="a100-v100-mix", global_batch=512, seq_len=4096, runtime="any")
    with_it, without = api.plan(request), api.plan(replace(request, per_replica_tp=False))
    assert not any(s.mixed_tp for s in without.plan.stages)
    assert with_it.estimate.step_time_s <= without.estimate.step_time_s * (1 + 1e-12)
    assert with_it.optimal and without.optimal


@pytest.mark.parametrize("wide, chosen, proven", [
    ("faster", "wide", True),  # the wider search found a faster plan
    ("nothing faster", "narrow", True),  # it ran to the end: the narrower plan is optimal in the wider space
    ("slower", "narrow", False),  # cut short, it returned its uniform scan's best, slower than the bound
    ("slower, complete", "narrow", True),  # searched to the end, its uniform scan's best returned
    ("cut short", "narrow", False),  # cut short with no plan
])
def test_per_replica_tp_returns_a_plan_no_slower_than_without(monkeypatch, gpt2, wide, chosen, proven):
    """solve searches without per-replica TP first, then the wider space bounded by that plan: it never
    returns a slower plan than the narrower search, and claims optimality only where both ended."""
    from planner.core.errors import NotFoundInTime, NothingFaster
    from planner.search.orchestration import driver

    two_groups = cluster_from_spec({"name": "two", "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 2},
        {"name": "v", "gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 2}]})
    plan = uniform_plan(gpt2, two_groups, replace(TRAINING, dtype="fp16"), tp=1, pp=1, dp=4)
    est = evaluate(plan)

    def result(step, name):
        return driver.SearchResult(plan, replace(est, step_time_s=step), True, 0.0, 0.5, 1, 0.0, 1,
                                   decomposition=name)

    calls = []

    def fake(context, on_progress, solve_one):
        calls.append(context.options)
        if not context.options.per_replica_tp:
            return result(2.0, "narrow")
        assert context.options.upper_bound_s == 2.0  # bounded by the narrower plan
        if wide == "faster":
            return result(1.5, "wide")
        if wide.startswith("slower"):
            return replace(result(3.0, "wide"), optimal=wide.endswith("complete"))
        raise NothingFaster("none") if wide == "nothing faster" else NotFoundInTime("cut")

    monkeypatch.setattr(driver, "solve_scaled", fake)
    got = driver.solve(gpt2, two_groups, replace(TRAINING, dtype="fp16"), driver.SolverOptions(time_limit_s=60))
    assert [o.per_replica_tp for o in calls] == [False, True]
    assert got.decomposition == chosen and got.optimal is proven
