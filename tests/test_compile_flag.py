"""`--compile` (Training.compile, `training.compile` in the plan JSON): the model under torch.compile,
priced with TorchInductor's fused elementwise kernels (CostParams.torch_compile), torchtitan and
`any` only, exported as torchtitan's `[compile] enable`."""

from __future__ import annotations

import dataclasses
import json
import shlex
import tomllib

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes import cluster_params, training_params
from planner.export import export_megatron, export_torchtitan, export_torchtitan_cli, runnable_form
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.verify.plan_checks import validate_plan_data

from .conftest import assert_bad_input, invoke

H100_SPEC = {"name": "h", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 8}]}


def _cluster_yaml(tmp_path) -> str:
    path = tmp_path / "h100.yaml"
    path.write_text("name: h\nnode_groups:\n  - name: g\n    gpu: H100-SXM5-80GB\n    nodes: 1\n    gpus_per_node: 8\n")
    return str(path)


def _evaluate(tmp_path, *extra):
    return invoke("evaluate", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path), "--global-batch", "16",
                  "--seq-len", "1024", "--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "2", "--zero", "3",
                  "--json", *extra)


@pytest.fixture(scope="module")
def compiled_plan():
    """llama-3-8b (torchtitan's 8B flavour) on 8 H100, FSDP, under torch.compile."""
    training = Training(64, 4096, "bf16", 2, runtime="torchtitan", compile=True)
    return uniform_plan(load_model("llama-3-8b"), cluster_from_spec(H100_SPEC, "test"), training, tp=1, pp=1, dp=8,
                        zero=3)


def test_compile_makes_a_torchtitan_step_faster_and_is_reported(tmp_path):
    eager = _evaluate(tmp_path, "--runtime", "torchtitan")
    compiled = _evaluate(tmp_path, "--runtime", "torchtitan", "--compile")
    assert eager.exit_code == 0 and compiled.exit_code == 0, (eager.output, compiled.output)
    eager_json, compiled_json = json.loads(eager.stdout), json.loads(compiled.stdout)
    assert compiled_json["config"]["compile"] is True and "compile" not in eager_json["config"]
    # fused elementwise kernels: less compute, the same communication
    assert compiled_json["breakdown_s"]["compute"] < eager_json["breakdown_s"]["compute"]
    assert compiled_json["step_time_s"] < eager_json["step_time_s"]
    assert compiled_json["breakdown_s"]["dp_comm"] == eager_json["breakdown_s"]["dp_comm"]


def test_compile_under_any_is_recorded_and_prices_as_megatron_unchanged(compiled_plan):
    """`any` is priced with Megatron-LM's physics, whose fused kernels already cost the fused traffic."""
    plan = dataclasses.replace(compiled_plan, training=dataclasses.replace(compiled_plan.training, runtime="any"))
    eager = dataclasses.replace(plan, training=dataclasses.replace(plan.training, compile=False))
    gpus = plan.cluster.gpu_types
    assert evaluate(plan, training_params(gpus, plan.training)).step_time_s == \
        evaluate(eager, training_params(gpus, eager.training)).step_time_s


@pytest.mark.parametrize("runtime, needle", [("megatron", "Megatron-LM"), ("deepspeed", "Megatron-DeepSpeed"),
                                             ("fsdp1", "fsdp1")])
def test_compile_on_a_runtime_that_cannot_compile_is_one_line_exit_2(tmp_path, runtime, needle):
    assert_bad_input(_evaluate(tmp_path, "--runtime", runtime, "--compile"), "--compile", needle, "torchtitan")


def test_plan_refuses_compile_for_megatron_before_searching(tmp_path):
    result = invoke("plan", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path), "--global-batch", "16",
                    "--seq-len", "1024", "--compile")
    assert_bad_input(result, "--compile", "Megatron-LM")


def test_plan_json_round_trip_keeps_compile_and_reprices_alike(tmp_path, compiled_plan):
    data = plan_to_json(compiled_plan)
    assert data["training"]["compile"] is True
    assert validate_plan_data(json.loads(json.dumps(data))) == []  # schema, runtime capability, memory
    assert plan_from_json(json.loads(json.dumps(data))) == compiled_plan
    eager = plan_to_json(dataclasses.replace(compiled_plan, training=dataclasses.replace(compiled_plan.training,
                                                                                         compile=False)))
    assert "compile" not in eager["training"] and plan_from_json(eager).training.compile is False
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    again = invoke("evaluate", "--plan", str(path), "--json")
    assert again.exit_code == 0, again.output
    priced = evaluate(compiled_plan, cluster_params(compiled_plan.cluster.gpu_types, "torchtitan", torch_compile=True))
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(priced.step_time_s, rel=1e-12)
    eager_priced = evaluate(compiled_plan, cluster_params(compiled_plan.cluster.gpu_types, "torchtitan"))
    assert priced.step_time_s < eager_priced.step_time_s  # the file's key is what made it faster
    shown = invoke("show", str(path))
    assert shown.exit_code == 0 and "torch.compile" in shown.stdout.split("Stages")[0]  # the headline


@pytest.mark.parametrize("change, needle", [({"compile": "true"}, "not of type 'boolean'"),
                                            ({"runtime": "megatron"}, "torch.compile")])
def test_a_plan_file_with_a_bad_compile_key_is_invalid(tmp_path, compiled_plan, change, needle):
    data = plan_to_json(compiled_plan)
    data["training"].update(change)
    if change.get("runtime") == "megatron":
        data["stages"][0]["zero"] = 1  # Megatron's distributed optimizer: only compile is left to refuse
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), "training.", needle)


def test_torchtitan_export_enables_compile_and_its_config_manager_reads_it(tmp_path, compiled_plan):
    sections = tomllib.loads(export_torchtitan(compiled_plan, lambda _: None))
    assert sections["compile"] == {"enable": True}
    eager = dataclasses.replace(compiled_plan, training=dataclasses.replace(compiled_plan.training, compile=False))
    assert "compile" not in tomllib.loads(export_torchtitan(eager, lambda _: None))
    config_manager = pytest.importorskip("torchtitan.config").ConfigManager
    job = tmp_path / "job.toml"
    job.write_text(export_torchtitan(compiled_plan, lambda _: None))
    from_toml = config_manager().parse_args(["--job.config_file", str(job)])
    from_cli = config_manager().parse_args(shlex.split(export_torchtitan_cli(compiled_plan, lambda _: None)))
    for config in (from_toml, from_cli):
        assert config.compile.enable is True and "model" in config.compile.components


def test_exports_without_compile_drop_it_warned_and_lossy_forms_keep_it_only_for_torchtitan(compiled_plan):
    plan = dataclasses.replace(compiled_plan, training=dataclasses.replace(compiled_plan.training, runtime="any"),
                               stages=tuple(dataclasses.replace(s, zero=1) for s in compiled_plan.stages))
    warnings: list[str] = []
    export_megatron(plan, warnings.append)
    assert any("torch.compile" in w and "exported without it" in w for w in warnings), warnings
    assert runnable_form(plan, "torchtitan").training.compile is True
    assert runnable_form(plan, "megatron").training.compile is False
