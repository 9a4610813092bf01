"""Uneven tensor-parallel shards (Stage.tp_heads, tp_ffn; HAP): a TP group over a fast and a slow GPU
gives the fast one more heads and FFN columns; the plan format, its invariants, the cost model's
price of each TP position on its own GPU, and the exports that refuse them (`planner run` trains
them: tests/test_runtime.py)."""

import json

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import violations
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Plan, Replica, Stage, Training, plan_from_json, plan_to_json, structural_problems
from planner.verify.plan_checks import consistency_problems

CLUSTER = "workstation-4090-3090"  # ranks 0-1: RTX-4090, 2-3: RTX-3090, one node


def tp_group_plan(heads=(), ffn=(), model="gpt2-medium", **stage) -> Plan:
    """One stage of two TP-2 replicas, each an RTX-4090 (TP position 0) beside an RTX-3090 (position 1)."""
    m = load_model(model)
    st = Stage(0, (0, m.num_layers), 2, 0, "none", (Replica(0, 16, (0, 2)), Replica(1, 16, (1, 3))), 0, True,
               tp_heads=heads, tp_ffn=ffn, **stage)
    return Plan(m, load_cluster(CLUSTER), Training(32, 1024, "bf16", 2, runtime="any"), (st,))


def test_even_shares_written_out_price_as_the_even_split():
    implicit, explicit = evaluate(tp_group_plan()), evaluate(tp_group_plan((8, 8), (2048, 2048)))
    assert explicit.step_time_s == implicit.step_time_s
    assert explicit.memory_by_rank == implicit.memory_by_rank


def test_uneven_split_gives_the_fast_gpu_more_heads_and_a_shorter_step():
    even = evaluate(tp_group_plan()).step_time_s
    to_fast = evaluate(tp_group_plan((12, 4), (3072, 1024))).step_time_s
    to_slow = evaluate(tp_group_plan((4, 12), (1024, 3072))).step_time_s
    assert to_fast < even < to_slow


def test_each_tp_rank_holds_the_memory_of_its_own_slice():
    memory = evaluate(tp_group_plan((12, 4), (3072, 1024))).memory_by_rank
    fast, slow = memory[0], memory[2]  # position 0 (RTX-4090), position 1 (RTX-3090)
    assert fast.weights_bytes > 2 * slow.weights_bytes
    assert memory[1] == fast and memory[3] == slow


def test_the_shares_survive_the_plan_file():
    plan = tp_group_plan((12, 4), (3072, 1024))
    data = plan_to_json(plan)
    assert data["stages"][0]["tp_shares"] == {"heads": [12, 4], "ffn": [3072, 1024]}
    assert plan_from_json(json.loads(json.dumps(data))).stages[0] == plan.stages[0]
    assert "tp_shares" not in plan_to_json(tp_group_plan())["stages"][0]


@pytest.mark.parametrize("heads, ffn, stage, path, words", [
    ((12, 2, 2), (3072, 512, 512), {}, "stages[0].tp_shares", "one of each per TP rank"),
    ((12, 4), (3072,), {}, "stages[0].tp_shares", "one of each per TP rank"),
    ((12, 4), (3072, 1024), {"cp": 2}, "stages[0].tp_shares", "cp 1 and ep 1"),
])
def test_shares_that_do_not_fit_the_stage_are_structural_problems(heads, ffn, stage, path, words):
    problems = structural_problems(tp_group_plan(heads, ffn, **stage))
    assert any(where == path and words in message for where, message in problems), problems


@pytest.mark.parametrize("model, heads, ffn, path, words", [
    ("gpt2-medium", (12, 5), (3072, 1024), "stages[0].tp_shares.heads", "sum to 17, the model has 16 heads"),
    ("gpt2-medium", (12, 4), (3072, 1000), "stages[0].tp_shares.ffn", "sum to 4072"),
    ("gpt2-medium", (12, 4), (3040, 1056), "stages[0].tp_shares.ffn", "multiple of 64"),
    ("llama-3-8b", (26, 6), (10240, 4096), "stages[0].tp_shares.heads", "multiple of 4 (query heads per KV head)"),
    ("qwen3-30b-a3b", (24, 8), (384, 384), "stages[0].tp_shares", "needs a dense decoder"),
])
def test_shares_that_do_not_fit_the_model_are_named(model, heads, ffn, path, words):
    plan = tp_group_plan(heads, ffn, model=model)
    problems = consistency_problems(plan_to_json(plan), plan)
    assert any(where == path and words in message for where, message in problems), problems


def test_gqa_shares_of_whole_kv_groups_are_valid():
    plan = tp_group_plan((24, 8), (10240, 4096), model="llama-3-8b")
    assert consistency_problems(plan_to_json(plan), plan) == [] and structural_problems(plan) == []


def test_malformed_tp_shares_are_bad_input():
    data = plan_to_json(tp_group_plan((12, 4), (3072, 1024)))
    data["stages"][0]["tp_shares"] = {"heads": [12, 0], "ffn": [3072, 1024]}
    with pytest.raises(BadInput, match=r"stages\[0\].tp_shares.heads: must be a non-empty list of positive"):
        plan_from_json(data, "p.json")
    data["stages"][0]["tp_shares"] = [12, 4]
    with pytest.raises(BadInput, match=r"stages\[0\].tp_shares: must be a mapping of heads and ffn"):
        plan_from_json(data, "p.json")


def test_only_runtime_any_prices_uneven_shards_and_megatron_refuses_them():
    plan = tp_group_plan((12, 4), (3072, 1024))
    assert not any("evenly" in v for v in violations(plan, "any"))
    assert any("splits TP evenly (stage 0 gives its TP ranks 12/4 heads)" in v for v in violations(plan, "megatron"))


def test_rankmap_carries_each_ranks_shard(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(tp_group_plan((12, 4), (3072, 1024)))))
    runner = CliRunner()
    assert runner.invoke(main, ["validate", str(path)]).exit_code == 0
    out = runner.invoke(main, ["export", str(path), "--to", "rankmap"])
    assert out.exit_code == 0, out.output
    shards = {r["rank"]: r["tp_shard"] for r in json.loads(out.output)["ranks"]}
    assert shards[0] == {"heads": 12, "ffn": 3072} and shards[3] == {"heads": 4, "ffn": 1024}


def test_the_critical_line_names_both_types_of_a_tp_group_and_the_one_that_paces_it(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(tp_group_plan((12, 4), (3072, 1024)))))
    out = CliRunner().invoke(main, ["evaluate", "--plan", str(path)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "1× RTX-4090 + 1× RTX-3090 (at the RTX-4090's pace) ranks 0, 2" in out.output
    even = tmp_path / "even.json"
    even.write_text(json.dumps(plan_to_json(tp_group_plan())))
    out = CliRunner().invoke(main, ["evaluate", "--plan", str(even)], env={"COLUMNS": "200"})
    assert "(at the RTX-3090's pace)" in out.output
