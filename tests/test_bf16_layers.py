"""`--bf16-layers START,END`: under a quantized dtype the first and last decoder layers run in bf16
(megatron-core's first_last_layers_bf16), priced as bf16 layers, recorded in the plan file, exported
to Megatron-LM, and refused where a runtime or recipe cannot keep them."""

from __future__ import annotations

import json

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes import training_params
from planner.cost.runtimes.capability import violations
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model, with_bf16_layers
from planner.plan import Training, structural_problems, uniform_plan

from .conftest import assert_bad_input, invoke, ok_json

B200 = {"name": "b200x16", "node_groups": [{"name": "b200", "gpu": "B200", "nodes": 2, "gpus_per_node": 8}]}


@pytest.fixture
def b200(tmp_path):
    path = tmp_path / "b200.json"
    path.write_text(json.dumps(B200))
    return path


def _evaluate(cluster, *extra: str) -> list[str]:
    return ["evaluate", "--model", "llama-3-8b", "--cluster", cluster, "--global-batch", "64", "--seq-len", "4096",
            "--tp", "1", "--pp", "2", "--dp", "8", "--micro-batch", "1", "--dtype", "nvfp4", "--json", *extra]


def test_decoders_kept_in_bf16_slow_an_nvfp4_step_by_their_bf16_time(b200):
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(B200)
    steps = {}
    for kept in ((0, 0), (1, 1), (2, 4)):
        training = Training(64, 4096, "nvfp4", 1, bf16_layers=kept)
        plan = uniform_plan(with_bf16_layers(model, kept), cluster, training, tp=1, pp=2, dp=8, zero=1)
        steps[kept] = evaluate(plan, training_params(cluster.gpu_types, training)).step_time_s
    assert steps[(0, 0)] < steps[(1, 1)] < steps[(2, 4)]
    # so does the CLI's evaluate
    cli = {kept: ok_json(invoke(*_evaluate(b200, *(("--bf16-layers", kept) if kept else ()))))["step_time_s"]
           for kept in ("", "2,4")}
    assert cli[""] < cli["2,4"]


def test_a_plan_file_records_the_kept_layers_and_reads_them_back(b200, tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "llama-3-8b", "--cluster", b200, "--global-batch", "64", "--seq-len", "4096",
                    "--dtype", "mxfp8", "--bf16-layers", "1,2", "--json", "-o", out)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["training"]["bf16_layers"] == [1, 2]
    again = ok_json(invoke("evaluate", "--plan", out, "--json"))
    assert again["step_time_s"] == pytest.approx(data["predicted"]["step_time_s"])
    assert invoke("validate", out).exit_code == 0
    # given beside the plan file, it is the plan file's to say
    assert_bad_input(invoke("evaluate", "--plan", out, "--bf16-layers", "1,2"), "--bf16-layers")


def test_the_megatron_export_keeps_the_same_layers_in_bf16():
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(B200)
    plan = uniform_plan(with_bf16_layers(model, (1, 3)), cluster, Training(64, 4096, "nvfp4", 1, bf16_layers=(1, 3)),
                        tp=1, pp=2, dp=8, zero=1)
    from planner.export import export_plan

    text = export_plan(plan, "megatron", lambda message: None)
    for flag in ("--first-last-layers-bf16", "--num-layers-at-start-in-bf16 1", "--num-layers-at-end-in-bf16 3",
                 "--fp4-recipe nvfp4"):
        assert flag in text, flag


@pytest.mark.parametrize("extra, needle", [
    (("--dtype", "bf16", "--bf16-layers", "1,1"), "needs a quantized dtype"),
    (("--dtype", "fp8", "--bf16-layers", "1,1"), "delayed scaling"),  # megatron's default fp8 recipe
    (("--dtype", "mxfp8", "--bf16-layers", "1"), "START,END"),
    (("--dtype", "mxfp8", "--bf16-layers", "-1,2"), ">= 0"),
    (("--dtype", "mxfp8", "--bf16-layers", "20,20"), "llama-3-8b has 32"),
])
def test_bad_kept_layers_are_bad_input(b200, extra, needle):
    args = ["plan", "--model", "llama-3-8b", "--cluster", b200, "--global-batch", "64", "--seq-len", "4096", *extra]
    assert_bad_input(invoke(*args), "--bf16-layers", needle)


def test_current_scaling_fp8_keeps_them_and_torchtitan_refuses(b200):
    base = ["plan", "--model", "llama-3-8b", "--cluster", b200, "--global-batch", "64", "--seq-len", "4096",
            "--dtype", "fp8", "--bf16-layers", "1,1"]
    assert invoke(*base, "--fp8-recipe", "te-current").exit_code == 0
    assert_bad_input(invoke(*base, "--runtime", "torchtitan"), "--bf16-layers", "keeps no decoder layers in bf16")


def test_megatron_keeps_at_most_one_pipeline_ranks_layers_at_each_end():
    # megatron-core: num_layers_at_{start,end}_in_bf16 <= num_layers // pp (transformer_config.py)
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(B200)
    for kept, allowed in (((8, 8), True), ((9, 0), False)):
        plan = uniform_plan(with_bf16_layers(model, kept), cluster, Training(64, 4096, "mxfp8", 1, bf16_layers=kept),
                            tp=1, pp=4, dp=4, zero=1)
        assert (not violations(plan, "megatron")) == allowed, violations(plan, "megatron")
        assert not violations(plan, "any")


def test_a_plan_whose_model_does_not_mark_the_kept_layers_is_invalid():
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(B200)
    plan = uniform_plan(model, cluster, Training(64, 4096, "mxfp8", 1, bf16_layers=(1, 1)), tp=1, pp=2, dp=8, zero=1)
    assert any(path == "training.bf16_layers" for path, _ in structural_problems(plan))
