"""`planner validate` and the shipped JSON Schemas (formats.md sections 3 and 5)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import click
import jsonschema
import pytest

from planner.api import plan_json
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan
from planner.search.orchestration.driver import solve
from planner.cli.validate import add_commands
from planner.verify.plan_checks import json_path, load_schema, validate_plan_data
from planner.verify.validate import validate_profile_data

from .conftest import runner, write_json


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def solved_plan() -> dict:
    """A real plan from the solver: gpt2 on the consumer cluster (one stage, four replicas)."""
    result = solve(load_model("gpt2"), load_cluster("consumer-3090-4090"), Training(64, 1024, "fp16", 1))
    return plan_json(result)


@pytest.fixture(scope="module")
def pipeline_plan() -> dict:
    """A uniform two-stage pipeline (pp 2 x dp 8) on the same cluster, in the plan-file form."""
    plan = uniform_plan(load_model("gpt2"), load_cluster("consumer-3090-4090"), Training(64, 1024, "fp16", 4),
                        tp=1, pp=2, dp=8)
    result = SimpleNamespace(plan=plan, estimate=evaluate(plan),
                             solver_json=lambda: {"seconds": 0.0, "optimal": False, "gap": None,
                                                  "candidates": 1, "method": "uniform"})
    return plan_json(result)


@pytest.fixture
def plan(solved_plan) -> dict:
    return copy.deepcopy(solved_plan)


def paths(problems) -> list[str]:
    return [p for p, _ in problems]


def message_at(problems, path: str) -> str:
    found = [m for p, m in problems if p == path]
    assert found, (path, problems)
    return found[0]


def hand_profile(measured: bool = True) -> dict:
    """A layer profile written by hand after formats.md section 3 (a two-block toy model)."""
    def layer(name, kind, params, flops):
        entry = {"name": name, "kind": kind, "params": params, "fwd_flops_per_sample": flops,
                 "act_bytes_per_sample": 4194304, "out_bytes_per_sample": 1048576}
        if measured:
            entry["measured"] = {"micro_batch": [1, 2, 4], "tp": [1],
                                 "fwd_s": [0.001, 0.0019, 0.0037], "bwd_s": [0.002, 0.0038, 0.0075],
                                 "by_tp": {"1": {"fwd_s": [0.001, 0.0019, 0.0037],
                                                 "bwd_s": [0.002, 0.0038, 0.0075],
                                                 "saved_bytes_per_sample": [4194304, 4194304, 4194304]}}}
        return entry

    return {"format": "planner.profile/v1", "model": "toy", "dtype": "fp32", "seq_len": 512,
            "source": "measured" if measured else "analytic", "device": "cpu",
            "layers": [layer("embed", "embedding", 6_000_000, 0),
                       layer("block.0", "decoder", 7_000_000, 7.5e9),
                       layer("block.1", "decoder", 7_000_000, 7.5e9),
                       layer("head", "head", 1024, 6.0e9)]}


def cli(*args: str):
    group = click.Group()
    add_commands(group)
    return runner().invoke(group, [str(a) for a in args])


# --- the schemas -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["plan", "profile"])
def test_schemas_ship_in_the_package_and_are_valid_draft_2020_12(kind):
    schema = load_schema(kind)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_solver_plans_validate_against_the_schema_and_survive_a_json_round_trip(solved_plan, pipeline_plan):
    for data in (solved_plan, pipeline_plan):
        jsonschema.Draft202012Validator(load_schema("plan")).validate(data)
        assert validate_plan_data(data) == []
        again = json.loads(json.dumps(data))
        assert again == data
        assert validate_plan_data(again) == []
    assert len(pipeline_plan["stages"]) == 2


def test_an_unknown_key_is_a_problem_at_its_path_naming_the_nearest_key(plan):
    plan["note"] = "hand-edited"
    plan["stages"][0]["recompte"] = "full"
    plan["stages"][0]["replicas"][0]["colour"] = "red"
    problems = dict(validate_plan_data(plan))
    assert problems["stages[0].recompte"] == "unknown key (did you mean recompute?)"
    assert problems["stages[0].replicas[0].colour"] == "unknown key (known: dp_rank, batch_share, ranks, tp)"
    assert problems["note"].startswith("unknown key (known: format, model, cluster")


def test_the_reports_predicted_and_solver_may_carry_added_keys(plan):
    plan["solver"]["extra"] = {"anything": [1, 2]}
    plan["predicted"]["extra"] = 1
    assert validate_plan_data(plan) == []


def test_json_path_form():
    assert json_path(["stages", 1, "replicas", 0, "batch_share"]) == "stages[1].replicas[0].batch_share"
    assert json_path([]) == ""
    assert json_path([2, "x"]) == "[2].x"


# --- each kind of corruption, at its path ------------------------------------------------------


def test_rank_used_twice(plan):
    plan["stages"][0]["replicas"][1]["ranks"] = list(plan["stages"][0]["replicas"][0]["ranks"])
    problems = validate_plan_data(plan)
    assert "used twice" in message_at(problems, "stages[0].replicas[1].ranks")


def test_rank_used_by_two_pipeline_ranks(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    data["stages"][1]["replicas"][0]["ranks"] = list(data["stages"][0]["replicas"][0]["ranks"])
    assert "already used by pipeline rank 0" in message_at(validate_plan_data(data), "stages[1].replicas")


def test_permuted_pipeline_ranks_are_refused_without_interleaving(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    s0, s1 = data["stages"]
    s0["pipeline_rank"], s1["pipeline_rank"] = 1, 0  # DeepSpeed's `parts` would follow the ranks
    problems = validate_plan_data(data)
    assert message_at(problems, "stages[0].pipeline_rank") == \
        "is 1, expected 0: without interleaving, stage i runs on pipeline rank i"
    assert "expected 1" in message_at(problems, "stages[1].pipeline_rank")


def test_two_1f1b_stages_on_one_pipeline_rank_are_refused(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    s0, s1 = data["stages"]
    s1["pipeline_rank"] = 0  # on stage 0's devices, as an interleaved chunk would be
    for r0, r1 in zip(s0["replicas"], s1["replicas"]):
        r1["ranks"] = list(r0["ranks"])
    used = {r for rep in s0["replicas"] for r in rep["ranks"]}
    data["devices"] = [d for d in data["devices"] if d["rank"] in used]
    assert data["training"]["virtual_stages"] == 1
    problems = validate_plan_data(data)
    assert problems == [("stages[1].pipeline_rank", "pipeline rank 0 already runs stage 0; stages share a "
                                                    "pipeline rank only when interleaved (virtual_stages > 1)")]


def test_interleaved_stages_may_share_a_pipeline_rank():
    plan = uniform_plan(load_model("gpt2"), load_cluster("consumer-3090-4090"),
                        Training(64, 1024, "fp16", 4, "interleaved", 2), tp=1, pp=2, dp=8)
    result = SimpleNamespace(plan=plan, estimate=evaluate(plan), solver_json=lambda: None)
    data = plan_json(result)
    assert [s["pipeline_rank"] for s in data["stages"]] == [0, 1, 0, 1]
    assert validate_plan_data(data) == []


def test_duplicate_dp_rank_in_a_stage(plan):
    plan["stages"][0]["replicas"][2]["dp_rank"] = 1
    problems = validate_plan_data(plan)
    assert problems == [("stages[0].replicas[2].dp_rank", "dp_rank 1 appears twice in one stage")]


def test_dp_rank_outside_the_stage_dp(plan):
    dp = len(plan["stages"][0]["replicas"])
    plan["stages"][0]["replicas"][-1]["dp_rank"] = dp
    problems = validate_plan_data(plan)
    assert problems == [(f"stages[0].replicas[{dp - 1}].dp_rank",
                         f"is {dp}, outside 0..{dp - 1} (the stage has {dp} replicas)")]


def test_share_sum_broken(plan):
    plan["stages"][0]["replicas"][0]["batch_share"] += 4
    problems = validate_plan_data(plan)
    assert "sum to 68, not the global batch 64" in message_at(problems, "stages[0].replicas")


def test_share_not_whole_micro_batches(plan):
    micro = plan["training"]["micro_batch"]
    assert micro > 1, "the fixture's plan should use micro-batches of more than one sample"
    reps = plan["stages"][0]["replicas"]
    reps[0]["batch_share"] += 1
    reps[1]["batch_share"] -= 1  # the sum still matches the global batch
    problems = validate_plan_data(plan)
    assert "not a whole number of micro-batches" in message_at(problems, "stages[0].replicas[0].batch_share")
    assert "not a whole number of micro-batches" in message_at(problems, "stages[0].replicas[1].batch_share")
    assert "stages[0].replicas" not in paths(problems)


def test_layer_gap(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    first, end = data["stages"][1]["layers"]
    data["stages"][1]["layers"] = [first + 1, end]
    problems = validate_plan_data(data)
    assert f"starts at layer {first + 1}, expected {first}" in message_at(problems, "stages[1].layers")


def test_layers_not_reaching_the_end(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    data["stages"][1]["layers"][1] -= 1
    assert "the model has" in message_at(validate_plan_data(data), "stages")


def test_wrong_type_is_reported_at_the_schema_path(plan):
    plan["stages"][0]["tp"] = "1"
    problems = validate_plan_data(plan)
    assert problems == [("stages[0].tp", "'1' is not of type 'integer'")]


def test_boolean_is_not_an_integer(plan):
    plan["stages"][0]["replicas"][2]["batch_share"] = True
    assert "stages[0].replicas[2].batch_share" in paths(validate_plan_data(plan))


def test_missing_training(plan):
    del plan["training"]
    assert validate_plan_data(plan) == [("training", "missing required key")]


def test_bad_enum_and_wrong_format(plan):
    plan["format"] = "planner.plan/v2"
    plan["training"]["schedule"] = "zero-bubble"
    problems = validate_plan_data(plan)
    assert paths(problems) == ["format", "training.schedule"]


def test_memory_overflow_when_a_gpu_shrinks(plan):
    gpu = plan["devices"][0]["gpu"]
    plan["cluster"]["spec"]["gpus"] = {gpu: {"memory_GiB": 2}}
    problems = validate_plan_data(plan)
    used = [d for d in plan["devices"] if d["gpu"] == gpu]
    assert len(problems) == len(used)
    for j, device in enumerate(plan["devices"]):
        message = message_at(problems, f"devices[{j}]")
        assert message.startswith(f"rank {device['rank']} ({gpu}) needs ")
        assert "GiB of 2.00 GiB" in message


def test_reader_errors_keep_their_path(plan):
    plan["model"]["config"]["model_type"] = "bert"
    problems = validate_plan_data(plan)
    assert len(problems) == 1
    assert problems[0][0] == "model.config.model_type"
    assert "unsupported model_type" in problems[0][1]


def test_devices_must_match_the_cluster(plan):
    plan["devices"][0]["node"] += 1
    plan["devices"].pop()
    problems = validate_plan_data(plan)
    assert "cluster.spec places rank" in message_at(problems, "devices[0].node")
    assert "not listed" in message_at(problems, "devices")


def test_trainer_constraints(plan):
    plan["training"]["seq_len"] = 2048  # gpt2 has 1024 learned positions
    plan["stages"][0]["tp"] = 5
    for replica in plan["stages"][0]["replicas"]:
        replica["ranks"] = list(range(replica["dp_rank"] * 5, replica["dp_rank"] * 5 + 5))
    problems = validate_plan_data(plan)
    assert "learned positions" in message_at(problems, "training.seq_len")
    assert "12 attention heads do not split over tp=5" in message_at(problems, "stages[0].tp")


def test_every_problem_is_listed_at_once(pipeline_plan):
    data = copy.deepcopy(pipeline_plan)
    s0, s1 = data["stages"]
    s0["replicas"][1]["ranks"] = list(s0["replicas"][0]["ranks"])  # rank twice
    s1["replicas"][0]["batch_share"] += data["training"]["micro_batch"]  # sum broken
    s1["layers"][0] += 1  # layer gap
    problems = validate_plan_data(data)
    for path in ("stages[0].replicas[1].ranks", "stages[1].replicas", "stages[1].layers"):
        assert path in paths(problems), (path, problems)


def test_every_schema_problem_is_listed_sorted_by_path(plan):
    plan["stages"][0]["replicas"][3]["ranks"] = ["x"]
    plan["stages"][0]["tp"] = 0
    plan["training"]["dtype"] = "int8"
    del plan["devices"]
    assert paths(validate_plan_data(plan)) == ["devices", "stages[0].replicas[3].ranks[0]", "stages[0].tp",
                                              "training.dtype"]


# --- profiles ----------------------------------------------------------------------------------


def test_hand_written_profiles_validate():
    schema = jsonschema.Draft202012Validator(load_schema("profile"))
    for measured in (True, False):
        data = hand_profile(measured)
        schema.validate(data)
        assert validate_profile_data(data) == []


def test_profile_with_several_tp_degrees_validates():
    data = hand_profile()
    for layer in data["layers"]:
        m = layer["measured"]
        m["tp"] = [1, 2]
        m["fwd_s"] = [m["fwd_s"], [x / 2 for x in m["fwd_s"]]]
        m["bwd_s"] = [m["bwd_s"], [x / 2 for x in m["bwd_s"]]]
    assert validate_profile_data(data) == []


def test_profile_problems_have_paths():
    data = hand_profile()
    data["layers"][1]["kind"] = "attention"
    data["seq_len"] = 0
    assert paths(validate_profile_data(data)) == ["layers[1].kind", "seq_len"]
    data = hand_profile()
    data["layers"][1]["measured"]["bwd_s"] = [0.002, 0.004]  # one time short
    assert paths(validate_profile_data(data)) == ["layers[1].measured.fwd_s"]


# --- the command -------------------------------------------------------------------------------


def test_cli_valid_plan(tmp_path, solved_plan):
    result = cli("validate", write_json(tmp_path, solved_plan))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("valid: plan gpt2 on consumer-3090-4090")
    assert result.stderr == ""
    result = cli("validate", write_json(tmp_path, solved_plan), "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"valid": True, "kind": "plan", "problems": [], "notes": []}


def test_cli_lists_every_problem_on_stderr(tmp_path, plan):
    plan["stages"][0]["replicas"][0]["batch_share"] += 1
    path = write_json(tmp_path, plan)
    result = cli("validate", path)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) >= 2
    assert f"{path}: stages[0].replicas[0].batch_share: 17 is not a whole number" in result.stderr
    assert f"{path}: stages[0].replicas: batch shares sum to 65" in result.stderr
    assert all(line.startswith(f"{path}: ") for line in lines)
    result = cli("validate", path, "--json")
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out["valid"] is False
    assert {"path": "stages[0].replicas", "message": "batch shares sum to 65, not the global batch 64"} \
        in out["problems"]


def test_cli_valid_profile(tmp_path):
    result = cli("validate", write_json(tmp_path, hand_profile(), "profile.json"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("valid: layer profile toy (measured")


@pytest.mark.parametrize("content, needle", [
    (None, "not found"),
    ("{not json", "invalid JSON"),
    ("", "empty"),
])
def test_cli_unreadable_file_is_one_line(tmp_path, content, needle):
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    for extra in ((), ("--json",)):
        result = cli("validate", path, *extra)
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], result.stderr
        assert result.stdout == ""
        assert "Traceback" not in result.output


def test_cli_unknown_format(tmp_path):
    path = write_json(tmp_path, {"format": "something/v9"})
    result = cli("validate", path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{path}: format: neither")
    path = write_json(tmp_path, [1, 2, 3])
    result = cli("validate", path)
    assert result.exit_code == 2
    assert "format" in result.stderr

