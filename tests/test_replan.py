"""`planner replan` and `plan --spares K` (planner.api.replan): the changed cluster, the kept placement,
what moves, templates, and the new search against the brute-force oracle on small inputs."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from planner.api import PlanRequest
from planner.api.ranked import domains, ranked
from planner.api.replan import Change, changed_cluster, kept_plan, parse_change, replan, template_changes
from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.cost.move import move_of
from planner.cost.reliability import state_bytes_per_param
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, structural_problems, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.relabel import relabeled
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, tiny_instance

from .conftest import assert_bad_input, invoke, ok_json


def test_losses_and_gains_parse_into_nodes():
    cluster = load_cluster("a100-v100-mix")
    change = parse_change(cluster, ("v100:2", "a100/0"), ("h100:1:H100-SXM5-80GB", "v100:1"))
    assert change.lost == {"v100": (2, 3), "a100": (0,)}
    assert change.gained == {"h100": (1, "H100-SXM5-80GB"), "v100": (1, None)}


@pytest.mark.parametrize("lose, gain, needle", [
    (("v100",), (), "expected GROUP:COUNT"),
    (("v100:5",), (), "has 4 nodes, cannot lose 5"),
    (("gpu:1",), (), "no node group 'gpu'"),
    (("a100/7",), (), "nodes 0-1, not 7"),
    ((), ("h100:1",), "name its GPU"),
    ((), ("a100:1:V100-SXM2-32GB",), "holds A100-SXM4-80GB"),
    ((), (), "nothing changes"),
])
def test_a_malformed_change_is_bad_input(lose, gain, needle):
    with pytest.raises(BadInput, match=needle):
        parse_change(load_cluster("a100-v100-mix"), lose, gain)


def test_the_changed_cluster_keeps_the_survivors_in_order_and_adds_the_gains():
    cluster = load_cluster("a100-v100-mix")
    new, survivors = changed_cluster(cluster, parse_change(cluster, ("v100/1",), ("h100:1:H100-SXM5-80GB",)))
    assert [(g.name, g.nodes) for g in new.groups] == [("a100", 2), ("v100", 3), ("h100", 1)]
    assert survivors[("v100", 0)] == ("v100", 0) and survivors[("v100", 2)] == ("v100", 1)
    assert ("v100", 1) not in survivors
    gone, _ = changed_cluster(cluster, Change({"v100": (0, 1, 2, 3)}, {}))
    assert [g.name for g in gone.groups] == ["a100"]


def test_the_kept_plan_drops_the_lost_replicas_and_moves_only_growing_optimizer_shards():
    cluster = load_cluster("dgx-a100")
    old = uniform_plan(load_model("gpt2"), cluster, Training(64, 1024, "bf16", 1), tp=1, pp=2, dp=16, zero=1)
    new_cluster, survivors = changed_cluster(cluster, Change({"a100": (3,)}, {}))
    kept = kept_plan(old, new_cluster, survivors)
    assert kept is not None and [st.dp for st in kept.stages] == [8, 8]  # one DP degree for every stage
    assert sum(r.batch_share for r in kept.stages[0].replicas) == 64
    move = move_of(old, kept, survivors)
    params = sum(layer.weight_params for layer in old.model.layers[slice(*old.stages[0].layers)])
    rank = kept.stages[0].replicas[0].ranks[0]
    # its optimizer shard grows from 1/16 to 1/8 of the stage's states (12 B per parameter)
    assert move.bytes_by_rank[rank] == pytest.approx(params * 12 * (1 / 8 - 1 / 16))
    unchanged = move_of(old, old, {(g, n): (g, n) for g, n in survivors} | {("a100", 3): ("a100", 3)})
    assert unchanged.total_bytes == 0


def test_layers_only_a_lost_node_held_come_from_the_checkpoint_the_rest_from_peers():
    cluster = load_cluster("dgx-a100")
    training = Training(32, 1024, "bf16", 1)
    old = uniform_plan(load_model("gpt2"), cluster, training, tp=8, pp=4, dp=1)  # one node per stage
    new_cluster, survivors = changed_cluster(cluster, Change({"a100": (3,)}, {}))
    new = uniform_plan(old.model, new_cluster, training, tp=8, pp=3, dp=1)
    move = move_of(old, new, survivors)
    weight_b, state_b = state_bytes_per_param(training)
    only_lost = sum(layer.weight_params for layer in old.model.layers[slice(*old.stages[3].layers)])
    assert move.bytes_by_link["checkpoint"] == pytest.approx(only_lost * (weight_b + state_b))
    assert move.bytes_by_link["inter_node"] > 0 and move.bytes_by_link["intra_node"] == 0
    assert sum(move.bytes_by_link.values()) == pytest.approx(move.total_bytes)


def test_relabelling_moves_the_least_of_every_node_permutation_at_the_same_step():
    cluster = load_cluster("a100-v100-mix")
    training = Training(120, 1024, "fp16", 1)
    old = uniform_plan(load_model("gpt2"), cluster, training, tp=2, pp=4, dp=6)
    change = Change({"v100": (1,)}, {})
    new_cluster, survivors = changed_cluster(cluster, change)
    a100, v100 = new_cluster.groups
    new = _on_nodes(uniform_plan(old.model, new_cluster, training, tp=2, pp=4, dp=5),  # nodes reversed
                    {**{("a100", j): ("a100", a100.nodes - 1 - j) for j in range(a100.nodes)},
                     **{("v100", j): ("v100", v100.nodes - 1 - j) for j in range(v100.nodes)}})
    best = relabeled(old, new, survivors)
    assert evaluate(best).step_time_s == pytest.approx(evaluate(new).step_time_s, rel=1e-12)
    assert not structural_problems(best)
    every = []
    for order_a in itertools.permutations(range(a100.nodes)):
        for order_v in itertools.permutations(range(v100.nodes)):
            nodes = {**{("a100", j): ("a100", k) for j, k in enumerate(order_a)},
                     **{("v100", j): ("v100", k) for j, k in enumerate(order_v)}}
            every.append(move_of(old, _on_nodes(new, nodes), survivors).total_bytes)
    assert move_of(old, best, survivors).total_bytes == pytest.approx(min(every))
    assert min(every) < move_of(old, new, survivors).total_bytes


def _on_nodes(plan, nodes):
    """`plan` with node j of each group moved to node nodes[group, j]."""
    cluster = plan.cluster

    def rank(r):
        device = cluster.device(r)
        group, node = nodes[device.group, device.node]
        g = cluster.group(group)
        return g.first_rank + node * g.gpus_per_node + device.local_rank

    return replace(plan, stages=tuple(replace(st, replicas=tuple(replace(rep, ranks=tuple(map(rank, rep.ranks)))
                                                                  for rep in st.replicas)) for st in plan.stages))


def test_templates_cover_losing_one_to_k_of_the_last_nodes_of_each_group():
    cluster = load_cluster("a100-v100-mix")
    changes = template_changes(cluster, 2)
    assert [(dict(c.lost)) for c in changes] == [{"a100": (1,)}, {"a100": (0, 1)}, {"v100": (3,)}, {"v100": (2, 3)}]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 8, 12])
def test_the_new_search_finds_the_brute_force_optimum_of_the_changed_cluster(seed):
    model, cluster, base = tiny_instance(seed)
    group = max(cluster.groups, key=lambda g: g.nodes)
    change = Change({group.name: (group.nodes - 1,)}, {})
    if sum(g.nodes for g in cluster.groups) == 1:
        pytest.skip("one node: nothing left after a loss")
    new_cluster, _ = changed_cluster(cluster, change)
    expected, _, _ = brute_force(model, new_cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    found = solve(model, new_cluster, base, SolverOptions(**TINY_OPTIONS))
    assert found.estimate.step_time_s == pytest.approx(expected, rel=1e-9)
    old = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).plan
    result = replan(old, change, PlanRequest(time_limit_s=None), horizon_steps=1000.0)
    chosen = result.chosen
    for other in result.candidates:
        assert chosen.score_s(1000.0) <= other.score_s(1000.0)
    assert evaluate(chosen.plan).fits


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 4, 6, 8, 10])
def test_where_the_step_outweighs_the_move_replan_is_the_brute_force_optimum_of_step_and_move(seed):
    model, cluster, base = tiny_instance(seed)
    group = max(cluster.groups, key=lambda g: g.nodes)
    change = Change({group.name: (group.nodes - 1,)}, {})
    new_cluster, survivors = changed_cluster(cluster, change)
    old = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).plan
    horizon = 1e6  # steps: a move of seconds weighs as a step of microseconds
    expected, _, _ = brute_force(
        model, new_cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
        TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"],
        objective=lambda plan, est: horizon * est.step_time_s + move_of(old, plan, survivors).seconds)
    result = tiny_replan(model, base, old, change, horizon)
    # the kept placement may lie outside the brute force's space (it can only be better)
    assert result.chosen.score_s(horizon) <= expected * (1 + 1e-9)


def tiny_replan(model, base, old, change, horizon, max_move_gb=None):
    """replan with the oracle's search space (TINY_OPTIONS) and pricing."""
    options = SolverOptions(**TINY_OPTIONS)

    def rank(cluster, first, limit, accept):
        ranked(lambda sub, left: solve(model, cluster, base, replace(sub, upper_bound_s=limit())), options, first, 17,
               lambda o: domains(o, cluster.num_gpus, base.global_batch, False, False), None, lambda: 0.0, accept)

    return replan(old, change, PlanRequest(time_limit_s=None), horizon_steps=horizon, max_move_gb=max_move_gb,
                  search=lambda cluster: solve(model, cluster, base, options), rank=rank, price=evaluate)


@pytest.mark.slow
def test_at_a_short_horizon_the_next_configurations_are_weighed_with_their_move():
    """Seed 5 at a 10-step horizon: the brute-force optimum of step and move is the fastest plan of
    another configuration (dp 2, 1F1B), not the fastest plan nor the kept one."""
    model, cluster, base = tiny_instance(5)
    group = max(cluster.groups, key=lambda g: g.nodes)
    change = Change({group.name: (group.nodes - 1,)}, {})
    new_cluster, survivors = changed_cluster(cluster, change)
    old = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).plan
    expected, _, _ = brute_force(
        model, new_cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
        TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"],
        objective=lambda plan, est: 10.0 * est.step_time_s + move_of(old, plan, survivors).seconds)
    result = tiny_replan(model, base, old, change, 10.0)
    assert result.chosen.name == "alternative" and result.alternatives_weighed >= 1
    assert result.chosen.score_s(10.0) == pytest.approx(expected, rel=1e-9)
    assert all(result.chosen.score_s(10.0) <= c.score_s(10.0) for c in result.candidates)


def test_plan_with_spares_writes_templates_that_replan_uses_without_a_search(tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", "a100-v100-mix", "--global-batch", "64", "--seq-len",
                    "1024", "--spares", "1", "-o", str(out))
    assert result.exit_code == 0, result.output
    templates = json.loads((tmp_path / "plan.templates.json").read_text())
    assert [entry["lose"] for entry in templates["templates"]] == [{"a100": 1}, {"v100": 1}]
    data = ok_json(invoke("replan", str(out), "--lose", "v100/0", "--json"))
    names = [c["name"] for c in data["solver"]["replan"]["candidates"]]
    assert "template" in names and "scratch" not in names
    assert data["solver"]["replan"]["nodes"] == {"a100": 2, "v100": 3}


def test_replan_without_templates_searches_and_reports_the_move(tmp_path):
    out = tmp_path / "plan.json"
    assert invoke("plan", "--model", "gpt2", "--cluster", "a100-v100-mix", "--global-batch", "64", "--seq-len",
                  "1024", "-o", str(out)).exit_code == 0
    new = tmp_path / "new.json"
    data = ok_json(invoke("replan", str(out), "--lose", "a100:1", "--gain", "h100:1:H100-SXM5-80GB", "--json",
                          "-o", str(new)))
    report = data["solver"]["replan"]
    assert {c["name"] for c in report["candidates"]} >= {"scratch"}
    assert report["nodes"] == {"a100": 1, "v100": 4, "h100": 1}
    assert invoke("validate", str(new)).exit_code == 0


def test_spares_without_an_output_file_is_bad_input():
    assert_bad_input(invoke("plan", "--spares", "1"), "--spares", "give -o PLAN")


def test_the_failure_replay_keeps_more_goodput_by_replanning_than_by_waiting(monkeypatch):
    from .conftest import benchmark_module

    traces = benchmark_module("failure_traces")
    monkeypatch.setitem(traces.ROWS, "gpt2-mix", ("gpt2", "a100-v100-mix", 64, 1024, {}))
    planner = traces.Planner("gpt2-mix")
    quiet = traces.replay(planner, [], 1.0, "templates")
    # one V100 node down from hour 2 to hour 14 of a one-day run
    events = [(2.0, "v100", 0, "fail"), (14.0, "v100", 0, "return")]
    waited, replanned = (traces.replay(planner, events, 1.0, s) for s in ("wait", "templates"))
    assert waited < replanned < quiet <= planner.full.estimate.tokens_per_s
    # waiting loses the twelve hours down, besides the restart and the work since the last checkpoint
    assert waited < quiet * (1 - 12 / 24) * 1.01


def test_where_the_runtime_splits_unevenly_the_kept_plan_rebalances_shares_over_the_survivors():
    cluster = load_cluster("a100-v100-mix")  # a100: 2 nodes of 8, v100: 4 nodes of 8
    old = uniform_plan(load_model("gpt2"), cluster, Training(96, 1024, "fp16", 1, runtime="any"), tp=1, pp=1, dp=48)
    new_cluster, survivors = changed_cluster(cluster, Change({"a100": (1,)}, {}))
    kept = kept_plan(old, new_cluster, survivors)  # 40 replicas: 96 samples do not split evenly
    assert kept is not None and not structural_problems(kept)
    shares = {new_cluster.group_of_rank(r.ranks[0]).name: r.batch_share for r in kept.stages[0].replicas}
    assert sum(r.batch_share for r in kept.stages[0].replicas) == 96
    assert shares["a100"] > shares["v100"]  # the faster GPUs take more of the batch
    megatron = uniform_plan(load_model("gpt2"), cluster, Training(96, 1024, "fp16", 1), tp=1, pp=1, dp=48)
    assert kept_plan(megatron, new_cluster, survivors) is None  # even shares only: 96 / 40 does not divide
