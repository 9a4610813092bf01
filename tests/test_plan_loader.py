"""One plan loader for every command: `evaluate --plan`, `show` and every `export` refuse what
`planner validate` refuses, with one line naming the file and the JSON path of the first problem."""

from __future__ import annotations

import copy
import json

import pytest

from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.verify.plan_checks import load_plan_file
from planner.core.errors import BadInput

from .conftest import invoke, write_json

EXPORTS = ["megatron", "deepspeed", "torchtitan", "torchtitan-cli", "rankmap"]
COMMANDS = {"validate": ["validate"], "evaluate": ["evaluate", "--plan"], "show": ["show"],
            # the plan is made for megatron: the other runtimes export it with --lossy (planner.export.runnable)
            **{f"export-{t}": ["export", "--to", t, *(() if t in ("megatron", "rankmap") else ("--lossy",)), "FILE"]
               for t in EXPORTS}}


@pytest.fixture(scope="module")
def good() -> dict:
    """llama-3-8b on dgx-a100, tp 4 x pp 2 x dp 4: valid, fits, and every target exports it."""
    plan = uniform_plan(load_model("llama-3-8b"), load_cluster("dgx-a100"), Training(256, 4096, "bf16", 1),
                        tp=4, pp=2, dp=4, zero=1, recompute="selective", sequence_parallel=True)
    return plan_to_json(plan)


def run(command: str, path) -> object:
    args = COMMANDS[command]
    args = [str(path) if a == "FILE" else a for a in args] if "FILE" in args else [*args, str(path)]
    return invoke(*args)


def edit_spec_gpu(p):  # the cluster spec edited after planning: group a100 now holds H100s
    p["cluster"]["spec"]["node_groups"][0]["gpu"] = "H100-SXM5-80GB"


def shrink_gpu(p):
    p["cluster"]["spec"]["gpus"] = {"A100-SXM4-80GB": {"memory_GiB": 4}}


def swap_pipeline_ranks(p):
    p["stages"][0]["pipeline_rank"], p["stages"][1]["pipeline_rank"] = 1, 0


def duplicate_dp_rank(p):
    p["stages"][1]["replicas"][2]["dp_rank"] = 1


# (edit, JSON path of the first problem, text of its message, several problems?)
CORRUPTIONS = {
    "dp-unlike-replicas": (lambda p: p["stages"][0].update(dp=3), "stages[0].dp", "the stage has 4 replicas", False),
    "string-for-int": (lambda p: p["stages"][1].update(tp="4"), "stages[1].tp", "'4' is not of type", False),
    "string-for-bool": (lambda p: p["stages"][0].update(sequence_parallel="false"),
                        "stages[0].sequence_parallel", "'false' is not of type 'boolean'", False),
    "spec-edited": (edit_spec_gpu, "devices[0].gpu", "cluster.spec places rank 0 at 'H100-SXM5-80GB'", True),
    "memory": (shrink_gpu, "devices[0]", "needs", True),
    "permuted-pipeline-ranks": (swap_pipeline_ranks, "stages[0].pipeline_rank", "is 1, expected 0", True),
    "duplicate-dp-rank": (duplicate_dp_rank, "stages[1].replicas[2].dp_rank", "appears twice", False),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_loads_the_valid_plan(tmp_path, good, command):
    result = run(command, write_json(tmp_path, good))
    assert result.exit_code == 0, (result.output, result.exception)


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "validate"])
def test_every_command_refuses_what_validate_refuses(tmp_path, good, command, corruption):
    edit, json_path, text, several = CORRUPTIONS[corruption]
    data = copy.deepcopy(good)
    edit(data)
    path = write_json(tmp_path, data)
    checked = run("validate", path)
    assert checked.exit_code == 2 and f"{path}: {json_path}: " in checked.stderr
    result = run(command, path)
    if command == "evaluate" and corruption == "memory":  # evaluate's own verdict: exit 1, JSON kept
        assert result.exit_code == 1 and "does not fit" in result.stderr
        return
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    assert lines[0].startswith(f"planner: {path}: {json_path}: invalid plan: ") and text in lines[0], lines[0]
    assert ("more; see `planner validate`)" in lines[0]) == several
    assert result.stdout == ""


def test_the_count_of_further_problems_is_validates(tmp_path, good):
    data = copy.deepcopy(good)
    edit_spec_gpu(data)
    path = write_json(tmp_path, data)
    problems = run("validate", path).stderr.strip().splitlines()
    with pytest.raises(BadInput) as caught:
        load_plan_file(str(path))
    assert len(problems) == 32 and f"(and {len(problems) - 1} more; see `planner validate`)" in str(caught.value)


def test_the_plan_reader_itself_refuses_a_string_bool_behind_the_schema(good):
    data = copy.deepcopy(good)
    data["stages"][0]["sequence_parallel"] = "false"  # bool("false") is True
    with pytest.raises(BadInput) as caught:
        plan_from_json(data, "plan.json")
    assert caught.value.field == "stages[0].sequence_parallel" and "true or false" in caught.value.message


def test_not_a_plan_file_names_format(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"format": "something/v1", "stages": []}))
    for command in ("evaluate", "show", "export-megatron"):
        result = run(command, path)
        assert result.exit_code == 2 and f"{path}: format: not a plan file" in result.stderr
