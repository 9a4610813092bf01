"""Each flag of `planner plan` and `planner evaluate` is declared once, on its request field
(planner.api.flags): the click options, the request the command builds, evaluate's plan-file
conflicts and the flag ranges all come from that declaration."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from planner.api import EvaluateRequest, PlanRequest
from planner.api.flags import declared, flag_figures, from_cli, plan_file_conflicts
from planner.core.errors import BadInput
from planner.cli.evaluate import evaluate_command
from planner.cli.plan import plan_command

from .conftest import invoke

# the options of each command that set no request field
COMMAND_ONLY = {"plan": {"links", "as_json", "output"},
                "evaluate": {"plan_file", "links", "as_json", "output", "plan_out"}}


@pytest.mark.parametrize("command,request_class", [(plan_command, PlanRequest), (evaluate_command, EvaluateRequest)])
def test_every_option_of_a_command_is_its_request_fields_declared_flag(command, request_class):
    flags = {name: flag for name, flag, _ in declared(request_class)}
    options = {p.name: p for p in command.params if p.name not in COMMAND_ONLY[command.name]}
    assert set(options) == set(flags)
    for name, option in options.items():
        assert option.help == flags[name].help
        assert flags[name].name.split("/")[0] in option.opts
        assert bool(option.multiple) == flags[name].repeatable


def test_plan_and_evaluate_share_one_declaration_of_their_common_flags():
    plan = {f.name: f.metadata.get("flag") for f in fields(PlanRequest)}
    evaluate = {f.name: f.metadata.get("flag") for f in fields(EvaluateRequest)}
    for name in ("model", "cluster", "global_batch", "seq_len", "dtype", "fp8_recipe", "compile", "tf32",
                 "attention", "optimizer", "profiles", "calibrations", "runtime"):
        assert plan[name] is evaluate[name]


def test_a_flag_name_has_one_documented_range():
    by_name: dict[str, set[str]] = {}
    for request_class in (PlanRequest, EvaluateRequest):
        for _, flag, _ in declared(request_class):
            by_name.setdefault(flag.long, set()).add(flag.figure)
    assert all(len(figures) == 1 for figures in by_name.values())
    assert flag_figures(PlanRequest, EvaluateRequest)["--seq-len"] == "seq_len"


def test_a_flag_left_out_takes_its_request_fields_default():
    request = from_cli(PlanRequest, {"model": None, "global_batch": None, "seq_len": 1024, "micro_batches": [2, 4],
                                     "fp8_recipe": None, "runtime": None, "jobs": 2})
    assert request == PlanRequest(seq_len=1024, micro_batches=(2, 4), jobs=2)


def test_plan_file_conflicts_name_the_flags_as_typed():
    values = {"model": "gpt2", "tf32": False, "cp": 2, "ep": 1, "recompute": "full", "compile": False}
    assert plan_file_conflicts(EvaluateRequest, values) == ["--model", "--no-tf32", "--cp"]


def test_evaluate_plan_refuses_every_flag_a_plan_file_carries(tmp_path):
    from planner.inputs.hardware import load_cluster
    from planner.inputs.model import load_model
    from planner.plan import Training, plan_to_json, uniform_plan

    plan = uniform_plan(load_model("gpt2"), load_cluster("dgx-a100"), Training(32, 1024, "bf16", 1), tp=1, pp=1, dp=32)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = invoke("evaluate", "--plan", path, "--seq-len", "512", "--no-tf32", "--offload-activations", "1",
                    "--links", "l.yaml")
    assert result.exit_code == 2
    assert "drop --seq-len, --no-tf32, --offload-activations, --links" in result.stderr


def test_the_sweeps_flags_are_its_rows_request_fields_flags():
    from planner.cli.sweep import sweep_command
    from planner.sweep.grid import SWEEP_FLAGS

    options = {p.name: p for p in sweep_command.params}
    plan_flags = {name: flag for name, flag, _ in declared(PlanRequest)}
    for s in SWEEP_FLAGS:
        option, flag = options[s.keyword], plan_flags[s.field]
        assert flag.long in option.opts
        assert tuple(getattr(option.type, "choices", ())) == (flag.type if isinstance(flag.type, tuple) else ())
        assert option.multiple == (bool(s.axis) or flag.repeatable)


def test_a_sweep_row_asks_for_its_axis_values_and_the_sweeps_others():
    from planner.sweep.rows import Combination, plan_combination
    from planner.sweep.grid import row_request

    template = PlanRequest(time_limit_s=None, micro_batches=(2,), optimizer="sgd")
    asked = row_request(Combination(0, "gpt2", "dgx-a100", 64, 1024, runtime="torchtitan", cp=2), template)
    assert asked == PlanRequest(model="gpt2", cluster="dgx-a100", global_batch=64, seq_len=1024, runtime="torchtitan",
                                cp_degrees=(2,), time_limit_s=None, micro_batches=(2,), optimizer="sgd")
    assert plan_combination(Combination(0, "gpt2", "dgx-a100", 64, 1024, ep=2), template)[0]["status"] == "error"


def test_the_sweeps_axes_are_the_combination_attributes_in_grid_order():
    from planner.sweep.grid import AXES
    from planner.sweep.rows import Combination

    attributes = [f.name for f in fields(Combination) if f.name not in ("index", "plan_name")]
    assert [s.axis for s in AXES] == attributes


def test_the_sweep_functions_keywords_are_the_declared_sweep_flags():
    from planner.sweep.grid import KEYWORDS, SWEEP_FLAGS, sweep_keywords

    required = {s.keyword: ["x"] for s in SWEEP_FLAGS if s.required}
    assert list(sweep_keywords(required)) == [s.keyword for s in SWEEP_FLAGS] == list(KEYWORDS)
    with pytest.raises(TypeError, match="'micro_batch'"):
        sweep_keywords({**required, "micro_batch": (2,)})
    with pytest.raises(TypeError, match="'seq_lens'"):
        sweep_keywords({k: v for k, v in required.items() if k != "seq_lens"})


def test_the_sweeps_row_settings_build_the_template_request():
    from planner.sweep.grid import sweep_keywords, template_request

    required = {"models": ["gpt2"], "clusters": ["dgx-a100"], "batches": [64], "seq_lens": [1024]}
    assert template_request(sweep_keywords(required)) == PlanRequest(time_limit_s=None)
    given = sweep_keywords({**required, "time_limit": 5.0, "micro_batches": [2, 4], "virtual_stages": [1],
                            "compare_any": True})
    assert template_request(given) == PlanRequest(time_limit_s=5.0, micro_batches=(2, 4), virtual_stages=(1,),
                                                  compare_any=True)
    with pytest.raises(BadInput, match="--micro-batch"):
        template_request({**given, "micro_batches": [0]})
