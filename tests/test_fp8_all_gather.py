"""`--fp8-all-gather` (Training.fp8_all_gather): FSDP all-gathers the decoder GEMM weights in fp8, a
declared training setting: recorded, refused where it cannot run, priced, exported to torchtitan."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import jsonschema
import pytest

from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.cost.runtimes import training_params
from planner.export import export_megatron, export_torchtitan
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.verify.plan_checks import load_schema

from .conftest import assert_bad_input, benchmark_module, invoke


def _cluster_yaml(tmp_path) -> str:
    path = tmp_path / "h100.yaml"
    path.write_text("name: c\nnode_groups:\n  - name: g\n    gpu: H100-SXM5-80GB\n    nodes: 2\n    gpus_per_node: 8\n")
    return str(path)


def _evaluate(tmp_path, *extra: str) -> list[str]:
    return ["evaluate", "--model", "llama-3-8b", "--cluster", _cluster_yaml(tmp_path), "--global-batch", "64",
            "--seq-len", "4096", "--tp", "1", "--pp", "1", "--dp", "16", "--zero", "3", "--micro-batch", "1", *extra]


def _plan(gather: bool = True, recipe: str = ""):
    cluster = cluster_from_spec({"name": "h", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 2,
                                                               "gpus_per_node": 8}]}, "test")
    training = Training(64, 4096, "fp8", 1, runtime="torchtitan", fp8_recipe=recipe, fp8_all_gather=gather)
    return uniform_plan(load_model("llama-3-8b"), cluster, training, tp=1, pp=1, dp=16, zero=3)


def _price(plan):
    return evaluate(plan, training_params(plan.cluster.gpu_types, plan.training))


def test_plan_json_round_trips_the_setting_and_omits_it_when_off():
    data = plan_to_json(_plan())
    assert data["training"]["fp8_all_gather"] is True
    assert plan_from_json(json.loads(json.dumps(data))).training.fp8_all_gather is True
    assert "fp8_all_gather" not in plan_to_json(_plan(gather=False))["training"]


def test_a_plan_file_with_the_setting_and_an_attention_kernel_is_valid_under_the_schema():
    data = plan_to_json(_plan(), predicted={"step_time_s": 1.0, "tokens_per_s": 1.0, "mfu": 0.4,
                                            "bubble_fraction": 0.0, "peak_memory_GiB_by_rank": {"0": 1.0},
                                            "attention_kernel": {"V100-SXM2-32GB": "standard"}})
    schema = jsonschema.Draft202012Validator(load_schema("plan"))
    schema.validate(data)
    data["predicted"]["attention_kernel"] = {"V100-SXM2-32GB": "flash9"}
    with pytest.raises(jsonschema.ValidationError):
        schema.validate(data)


def test_a_plan_file_with_the_setting_under_bf16_is_bad_input():
    data = plan_to_json(_plan())
    data["training"]["dtype"] = "bf16"
    with pytest.raises(BadInput, match="fp8 all-gather needs dtype fp8, not bf16"):
        plan_from_json(data)


def test_fsdp_gathers_the_decoder_weights_at_one_byte_when_set():
    on, off = _price(_plan()), _price(_plan(gather=False))
    assert on.breakdown_s["dp_comm"] < off.breakdown_s["dp_comm"]
    assert training_params(_plan().cluster.gpu_types, _plan().training)["H100-SXM5-80GB"].fp8_all_gather
    # rowwise scaling gathers in bf16: the setting is refused, and priced it would change nothing
    assert _price(_plan(recipe="torchao-rowwise")).step_time_s == _price(_plan(False, "torchao-rowwise")).step_time_s


def test_evaluate_flag_prices_and_reports_it(tmp_path):
    off = json.loads(invoke(*_evaluate(tmp_path, "--dtype", "fp8", "--runtime", "torchtitan", "--json")).stdout)
    result = invoke(*_evaluate(tmp_path, "--dtype", "fp8", "--runtime", "torchtitan", "--fp8-all-gather", "--json"))
    assert result.exit_code == 0, result.stderr
    on = json.loads(result.stdout)
    assert on["config"]["fp8_all_gather"] is True and "fp8_all_gather" not in off["config"]
    assert on["breakdown_s"]["dp_comm"] < off["breakdown_s"]["dp_comm"]
    text = invoke(*_evaluate(tmp_path, "--dtype", "fp8", "--runtime", "torchtitan", "--fp8-all-gather")).stdout
    assert "fp8 FSDP" in text.split("Step time")[0]


@pytest.mark.parametrize("extra, needle", [
    (("--dtype", "bf16", "--runtime", "torchtitan"), "needs dtype fp8, not bf16"),
    (("--dtype", "fp8", "--runtime", "megatron"), "has no fp8 FSDP all-gather (torchtitan has)"),
    (("--dtype", "fp8", "--runtime", "torchtitan", "--fp8-recipe", "torchao-rowwise"),
     "recipe that gathers fp8 weights (torchao-tensorwise), not torchao-rowwise"),
])
def test_the_flag_without_what_it_needs_is_one_line_exit_2(tmp_path, extra, needle):
    assert_bad_input(invoke(*_evaluate(tmp_path, *extra, "--fp8-all-gather")), "--fp8-all-gather", needle)


def test_plan_searches_with_it_and_the_search_matches_the_reprice(tmp_path):
    path = tmp_path / "plan.json"
    result = invoke("plan", "--model", "llama-3-8b", "--cluster", _cluster_yaml(tmp_path), "--global-batch", "64",
                    "--seq-len", "4096", "--dtype", "fp8", "--runtime", "torchtitan", "--fp8-all-gather",
                    "--tp", "1", "--pp", "1", "-o", str(path))
    assert result.exit_code == 0, result.stderr  # the driver asserts the search's step is the re-priced one
    data = json.loads(path.read_text())
    assert data["training"]["fp8_all_gather"] is True and data["stages"][0]["zero"] == 3
    again = json.loads(invoke("evaluate", "--plan", str(path), "--json").stdout)
    assert again["step_time_s"] == pytest.approx(data["predicted"]["step_time_s"], rel=1e-9)


def test_torchtitan_export_turns_on_the_float8_all_gather_only_when_priced_with_it():
    def float8(plan):
        return tomllib.loads(export_torchtitan(plan, lambda _: None))["quantize"]["linear"]["float8"]
    on, off = float8(_plan()), float8(_plan(gather=False))
    assert on["enable_fsdp_float8_all_gather"] is True and on["precompute_float8_dynamic_scale_for_fsdp"] is True
    assert off["enable_fsdp_float8_all_gather"] is False and off["precompute_float8_dynamic_scale_for_fsdp"] is False


def test_other_exporters_refuse_it_and_lossy_drops_it(tmp_path):
    plan = _plan()
    with pytest.raises(BadInput, match="has no fp8 FSDP all-gather"):
        export_megatron(replace(plan, training=replace(plan.training, runtime="megatron")), lambda _: None)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    assert_bad_input(invoke("export", str(path), "--to", "megatron"), "has no fp8 FSDP all-gather")
    lossy = invoke("export", str(path), "--to", "megatron", "--lossy")
    assert lossy.exit_code == 0, lossy.stderr
    assert "lossy: megatron runs" in lossy.stderr


def test_the_replay_sets_it_through_the_training_of_the_runs_whose_preset_states_it():
    fidelity_runs = benchmark_module("fidelity_runs")
    runs = {r["id"]: r for r in fidelity_runs.load_runs()}
    fp8 = fidelity_runs.case(runs["torchtitan-perfdoc-405b-128h100-float8"])
    assert fp8.plan.training.fp8_all_gather and ("fp8_all_gather", True) in fp8.settings
    bf16 = fidelity_runs.case(runs["torchtitan-perfdoc-405b-128h100-none"])
    assert not bf16.plan.training.fp8_all_gather and "fp8_all_gather" not in dict(bf16.settings)
