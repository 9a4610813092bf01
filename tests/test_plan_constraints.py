"""`planner plan --tp/--pp/--dp/--max-pp/--ep/--top`, the torchtitan model check at plan time,
`export --lossy` planning again for the target, and the `--runtime any` hint of a failed plan."""

from __future__ import annotations

import json

import pytest

from planner.api import PlanRequest, plan
from planner.core.errors import NoFeasiblePlan
from planner.inputs.hardware import cluster_from_spec

from .conftest import assert_bad_input, invoke, small_cluster_spec

GPT2 = ["--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "32", "--seq-len", "1024"]


def planned(*args: str) -> dict:
    result = invoke("plan", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_tp_and_pp_allow_only_the_degrees_given():
    data = planned(*GPT2, "--tp", "4", "--pp", "2", "--virtual-stages", "1")
    assert {s["tp"] for s in data["stages"]} == {4}
    assert len(data["stages"]) == 2


def test_dp_applies_to_every_stage_under_runtime_any():
    data = planned(*GPT2, "--runtime", "any", "--dp", "4", "--dp", "8")
    assert {len(s["replicas"]) for s in data["stages"]} <= {4, 8}


def test_max_pp_caps_the_pipeline_depth():
    # the fastest 1F1B plan at dp 4 pipelines over more than 2 ranks (interleaved, which hides its
    # sends, is fastest at pp 2)
    free = planned(*GPT2, "--dp", "4", "--virtual-stages", "1")
    assert len(free["stages"]) // free["training"]["virtual_stages"] > 2
    capped = planned(*GPT2, "--dp", "4", "--virtual-stages", "1", "--max-pp", "2")
    assert len(capped["stages"]) // capped["training"]["virtual_stages"] <= 2
    assert {len(s["replicas"]) for s in capped["stages"]} == {4}


@pytest.mark.parametrize("args, flag, needle", [
    (["--tp", "16"], "--tp", "attention heads"),
    (["--tp", "3"], "--tp", "node"),
    (["--dp", "64"], "--dp", "32 GPUs"),
    (["--pp", "40"], "--pp", "exceeds"),
    (["--pp", "4", "--max-pp", "2"], "--pp", "--max-pp 2"),
    (["--ep", "8"], "--ep", "no experts"),
    (["--tp", "0"], "--tp", "positive"),
])
def test_a_degree_no_plan_can_take_is_bad_input(args, flag, needle):
    assert_bad_input(invoke("plan", *GPT2, *args), flag, needle)


def test_allowed_degrees_needing_more_gpus_than_the_cluster_exit_1_with_the_reason():
    result = invoke("plan", *GPT2, "--tp", "4", "--pp", "2", "--dp", "16")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "128 GPUs" in result.stderr and "32" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_ep_n_searches_only_that_degree():
    """`--ep 8` searched ep 1 as well and returned it silently; now every stage takes ep 8."""
    data = planned("--model", "mixtral-8x7b", "--cluster", "dgx-h100-2node", "--global-batch", "64",
                   "--seq-len", "4096", "--ep", "8")
    assert {s.get("ep", 1) for s in data["stages"]} == {8}


def test_top_k_lists_distinct_configurations_fastest_first():
    result = invoke("plan", *GPT2, "--top", "3", "--json")
    assert result.exit_code == 0, result.stderr
    plans = json.loads(result.stdout)
    assert isinstance(plans, list) and len(plans) == 3
    steps = [p["predicted"]["step_time_s"] for p in plans]
    assert steps == sorted(steps)
    keys = {(p["training"]["micro_batch"], p["training"]["virtual_stages"], len(p["stages"]),
             tuple(sorted({s["tp"] for s in p["stages"]})), tuple(sorted({len(s["replicas"]) for s in p["stages"]})))
            for p in plans}
    assert len(keys) == 3
    assert plans[0]["predicted"]["step_time_s"] == planned(*GPT2)["predicted"]["step_time_s"]
    assert plans[0]["solver"]["optimal"] is True
    assert all(p["solver"]["optimal"] is False for p in plans[1:])  # runners-up are never called optimal


def test_top_k_table_says_why_each_loses(tmp_path):
    path = tmp_path / "best.json"
    result = invoke("plan", *GPT2, "--top", "2", "-o", path)
    assert result.exit_code == 0, result.stderr
    assert "fastest configurations" in result.stdout and "why it loses" in result.stdout
    assert " +0." in result.stdout  # the part of the step that grew
    assert json.loads(path.read_text())["format"] == "planner.plan/v1"  # -o: the fastest plan's file


def test_top_k_equals_the_best_plan_of_every_configuration_searched_one_by_one():
    """The ranking against brute force: the best plan of each (tp, pp, dp, micro-batch) alone."""
    from planner.api import plan_top
    from planner.api.ranked import configuration

    cluster = cluster_from_spec(small_cluster_spec(nodes=2, gpus_per_node=4))
    base = dict(model="gpt2", cluster=cluster, global_batch=16, seq_len=512, micro_batches=(1, 2),
                virtual_stages=(1,), zero_bubble=False)
    ranking = plan_top(PlanRequest(**base, top=4))
    assert ranking.proven
    brute = []
    for tp in (1, 2, 4):
        for pp in range(1, 9):
            for dp in range(1, 9):
                if tp * pp * dp > 8:
                    continue
                for b in (1, 2):
                    try:
                        found = plan(PlanRequest(**{**base, "micro_batches": (b,)}, tp_degrees=(tp,),
                                                 pp_degrees=(pp,), dp_degrees=(dp,)))
                    except NoFeasiblePlan:
                        continue
                    assert configuration(found.plan)["tp"] == (tp,)
                    brute.append(found.estimate.step_time_s)
    brute.sort()
    assert [r.estimate.step_time_s for r in ranking.results] == pytest.approx(brute[:4], rel=1e-9)


def test_runtime_torchtitan_refuses_a_model_it_cannot_build_at_plan_time(tmp_path):
    args = ["--model", "mistral-7b", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "2048",
            "--runtime", "torchtitan"]
    line = assert_bad_input(invoke("plan", *args), "--runtime torchtitan", "llama3 flavours")
    # the export's own message, word for word
    made = invoke("plan", *args[:-2], "--runtime", "any", "-o", tmp_path / "q.json")
    assert made.exit_code == 0, made.stderr
    exported = invoke("export", tmp_path / "q.json", "--to", "torchtitan", "--lossy")
    assert exported.exit_code == 2
    reason = line.split("--runtime torchtitan: ", 1)[1]
    assert reason in exported.stderr


@pytest.mark.slow
def test_lossy_plans_again_for_the_target_runtime_and_says_when_the_dtype_changes(tmp_path):
    path = tmp_path / "megatron.json"
    args = ["--model", "llama-3-8b", "--cluster", "a100-v100-mix", "--global-batch", "64", "--seq-len", "1024"]
    assert invoke("plan", *args, "-o", path).exit_code == 0  # fp16: the V100s have no bf16
    result = invoke("export", path, "--to", "torchtitan", "--lossy")
    assert result.exit_code == 0, result.stderr
    lossy = [line for line in result.stderr.splitlines() if "lossy:" in line]
    assert any("no fp16 training" in line and "planned in fp32" in line for line in lossy), lossy
    titan = planned(*args, "--runtime", "torchtitan", "--dtype", "fp32")
    step = titan["predicted"]["step_time_s"]
    assert f"{step:.1f} s per step under torchtitan" in lossy[-1]


def test_no_feasible_plan_names_what_runtime_any_finds():
    result = invoke("plan", "--model", "gpt-neox-20b", "--cluster", "consumer-3090-4090", "--global-batch", "64",
                    "--seq-len", "2048", "--runtime", "fsdp1")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "--runtime any finds one:" in result.stderr and " s, tp " in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
