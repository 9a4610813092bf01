"""`--dtype fp8` (planner.cost.fp8): where it is allowed, what it costs, what plans and exports carry."""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import layer_time
from planner.cost.pricing import saved_activation_bytes
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.export import export_deepspeed, export_megatron, export_torchtitan
from planner.core.errors import BadInput
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan

from .conftest import assert_bad_input, invoke


def _cluster_yaml(tmp_path, gpu: str, gpus: int = 8) -> str:
    path = tmp_path / f"{gpu}.yaml"
    path.write_text(f"name: c\nnode_groups:\n  - name: g\n    gpu: {gpu}\n    nodes: 1\n    gpus_per_node: {gpus}\n")
    return str(path)


def _decoder_time(dtype: str, runtime: str = "megatron") -> float:
    gpu = load_catalog()["H100-SXM5-80GB"]
    model = load_model("llama-3-8b")
    decoder = next(layer for layer in model.layers if layer.kind == "decoder")
    sh = Sharding(dtype, 8, 4096, "flash", StageDims(1), "none")
    return layer_time(decoder, gpu, sh, gpu.intra_node, stack_params(gpu, runtime)).compute_s


@pytest.mark.parametrize("runtime", ["megatron", "torchtitan"])
def test_fp8_decoder_is_faster_than_bf16_on_h100_but_not_twice(runtime):
    bf16, fp8 = _decoder_time("bf16", runtime), _decoder_time("fp8", runtime)
    # the GEMMs run at twice the peak; attention, elementwise kernels and the casts do not
    assert 1.0 < bf16 / fp8 < 2.0, (bf16, fp8)


def test_te_saves_fp8_linear_inputs_torchao_does_not():
    model = load_model("llama-3-8b")
    decoder = next(layer for layer in model.layers if layer.kind == "decoder")
    bf16 = saved_activation_bytes(decoder, Sharding("bf16", 1, 4096, "flash", StageDims(1), "none"), "attention", "te-delayed")
    fp8_sh = Sharding("fp8", 1, 4096, "flash", StageDims(1), "none")
    te = saved_activation_bytes(decoder, fp8_sh, "attention", "te-delayed")
    ao = saved_activation_bytes(decoder, fp8_sh, "attention", "torchao-tensorwise")
    assert te < bf16 and ao == bf16


def test_fp8_refused_on_a100_with_exit_2(tmp_path):
    result = invoke("evaluate", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path, "A100-SXM4-80GB"),
                    "--global-batch", "8", "--seq-len", "512", "--tp", "1", "--pp", "1", "--dp", "8",
                    "--micro-batch", "1", "--dtype", "fp8", "--json")
    assert_bad_input(result, "A100-SXM4-80GB", "fp8")


def test_fp8_refused_under_deepspeed_runtime(tmp_path):
    result = invoke("evaluate", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path, "H100-SXM5-80GB"),
                    "--global-batch", "8", "--seq-len", "512", "--tp", "1", "--pp", "1", "--dp", "8",
                    "--micro-batch", "1", "--dtype", "fp8", "--runtime", "deepspeed", "--json")
    assert_bad_input(result, "deepspeed", "fp8")


def test_fp8_catalog_peaks_only_on_fp8_architectures():
    for gpu in load_catalog().values():
        assert gpu.supports("fp8") == (gpu.architecture in ("ada", "hopper", "blackwell", "cdna3")), gpu.name
        if gpu.supports("fp8"):
            assert gpu.peak("fp8") == pytest.approx(2 * gpu.peak("bf16"), rel=0.02)  # L40S: 733 vs 2 x 362.05, gpu.name


def test_plan_dtype_fp8_json_records_it(tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path, "H100-SXM5-80GB", 4),
                    "--global-batch", "8", "--seq-len", "512", "--dtype", "fp8", "--micro-batch", "1",
                    "-o", str(out))
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads(out.read_text())
    assert data["training"]["dtype"] == "fp8"
    again = invoke("evaluate", "--plan", str(out), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(data["predicted"]["step_time_s"], rel=1e-6)


@pytest.fixture(scope="module")
def fp8_plan():
    cluster = cluster_from_spec({"name": "h", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 1,
                                                                "gpus_per_node": 8}]}, "test")
    return uniform_plan(load_model("llama-3-8b"), cluster, Training(64, 4096, "fp8", 1), tp=2, pp=1, dp=4,
                        zero=1, sequence_parallel=True)


def test_megatron_export_carries_fp8_hybrid(fp8_plan):
    text = export_megatron(fp8_plan, lambda _: None)
    for flag in ("--bf16", "--fp8-format hybrid", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max"):
        assert flag in text


def test_torchtitan_export_carries_float8_converter(fp8_plan):
    data = tomllib.loads(export_torchtitan(fp8_plan, lambda _: None))
    assert data["model"]["converters"] == ["quantize.linear.float8"]
    f8 = data["quantize"]["linear"]["float8"]
    # tensorwise: no recipe_name (torchtitan 0.2.2 refuses the float8 all-gather with one); the
    # plan is priced without the fp8 all-gather (Training.fp8_all_gather), so it is exported off
    assert "recipe_name" not in f8 and f8["enable_fsdp_float8_all_gather"] is False
    assert data["training"]["mixed_precision_param"] == "bfloat16"


def test_deepspeed_export_refuses_fp8(fp8_plan):
    with pytest.raises(BadInput, match="fp8"):
        export_deepspeed(fp8_plan, lambda _: None)


def test_fp8_plan_json_loads_back(tmp_path, fp8_plan):
    from planner.verify.plan_checks import load_plan_file

    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan_to_json(fp8_plan)))
    assert load_plan_file(str(path), memory=False).training.dtype == "fp8"


def test_show_prices_an_fp8_plan_under_its_runtime(tmp_path, fp8_plan):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan_to_json(fp8_plan)))
    result = invoke("show", str(path))
    assert result.exit_code == 0, (result.output, result.exception)
    assert "fp8" in result.stdout


# --- torchao rowwise (--fp8-recipe torchao-rowwise) ---------------------------------------


def _titan_decoder_time(dtype: str, recipe: str = "") -> float:
    gpu = load_catalog()["H100-SXM5-80GB"]
    decoder = next(layer for layer in load_model("llama-3-8b").layers if layer.kind == "decoder")
    sh = Sharding(dtype, 8, 4096, "flash", StageDims(1), "none")
    return layer_time(decoder, gpu, sh, gpu.intra_node, stack_params(gpu, "torchtitan", fp8_recipe=recipe)).compute_s


def test_rowwise_decoder_is_slower_than_tensorwise_and_faster_than_bf16_at_8b_shapes():
    bf16 = _titan_decoder_time("bf16")
    tensorwise = _titan_decoder_time("fp8", "torchao-tensorwise")
    rowwise = _titan_decoder_time("fp8", "torchao-rowwise")
    assert tensorwise == _titan_decoder_time("fp8")  # the torchtitan runtime's default
    assert tensorwise < rowwise < bf16, (tensorwise, rowwise, bf16)


def test_rowwise_casts_the_input_once_per_fused_linear_tensorwise_once():
    from planner.cost.fp8 import RECIPES, cast_bytes

    row, tensor = RECIPES["torchao-rowwise"], RECIPES["torchao-tensorwise"]
    one, three = cast_bytes(1000, 768, 4096, 1, row, 1), cast_bytes(1000, 768, 4096, 1, row, 3)
    # forward: X (1000 x 4096) at 5 B per linear; backward: X at 7 B per linear (re-cast, dX rescale)
    assert three[0] - one[0] == 2 * 5.0 * 1000 * 4096 and three[1] - one[1] == 2 * 7.0 * 1000 * 4096
    assert cast_bytes(1000, 768, 4096, 1, tensor, 3) == cast_bytes(1000, 768, 4096, 1, tensor, 1)


def test_rowwise_rate_reproduces_the_published_torchao_ratio():
    """planner.cost.fp8.TORCHAO_ROWWISE_GEMM_RATE is what benchmarks/derive_rowwise_rate.py
    derives: the torchao README's Llama3-8B 8xH100 run priced rowwise / tensorwise = 6768 / 7689.5."""
    import benchmarks.derive_rowwise_rate as derive

    ratio = derive.throughput(1, "fp8", "torchao-rowwise") / derive.throughput(1, "fp8", "torchao-tensorwise")
    assert ratio == pytest.approx(6768 / 7689.5, abs=0.002)


def _evaluate_args(tmp_path, *extra):
    return ("evaluate", "--model", "gpt2", "--cluster", _cluster_yaml(tmp_path, "H100-SXM5-80GB"),
            "--global-batch", "8", "--seq-len", "512", "--tp", "1", "--pp", "1", "--dp", "8",
            "--micro-batch", "1", "--zero", "3", *extra)


def test_evaluate_fp8_recipe_rowwise_is_priced_and_reported(tmp_path):
    out = tmp_path / "e.json"
    row = invoke(*_evaluate_args(tmp_path, "--dtype", "fp8", "--runtime", "torchtitan", "--fp8-recipe",
                                 "torchao-rowwise", "--json", "-o", str(out)))
    tensor = invoke(*_evaluate_args(tmp_path, "--dtype", "fp8", "--runtime", "torchtitan", "--json"))
    assert row.exit_code == 0 and tensor.exit_code == 0, (row.output, tensor.output)
    data = json.loads(row.stdout)
    assert data["config"]["fp8_recipe"] == "torchao-rowwise"
    assert "fp8_recipe" not in json.loads(tensor.stdout)["config"]
    assert data["step_time_s"] > json.loads(tensor.stdout)["step_time_s"]


@pytest.mark.parametrize("extra, needle", [
    (("--dtype", "fp8", "--fp8-recipe", "torchao-rowwise"), "transformer-engine"),  # megatron runtime
    (("--dtype", "bf16", "--runtime", "torchtitan", "--fp8-recipe", "torchao-rowwise"), "needs dtype fp8"),
    (("--dtype", "fp8", "--runtime", "torchtitan", "--fp8-recipe", "te-delayed"), "torchao"),
])
def test_fp8_recipe_of_another_runtime_or_without_fp8_is_bad_input(tmp_path, extra, needle):
    assert_bad_input(invoke(*_evaluate_args(tmp_path, *extra)), "--fp8-recipe", needle)


@pytest.fixture(scope="module")
def rowwise_plan():
    cluster = cluster_from_spec({"name": "h", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 1,
                                                                "gpus_per_node": 8}]}, "test")
    training = Training(64, 4096, "fp8", 1, runtime="torchtitan", fp8_recipe="torchao-rowwise")
    return uniform_plan(load_model("llama-3-8b"), cluster, training, tp=2, pp=1, dp=4, zero=3,
                        sequence_parallel=True)


def test_rowwise_plan_json_round_trips_and_reprices_alike(tmp_path, rowwise_plan):
    from planner.cost.evaluate import evaluate
    from planner.cost.runtimes import cluster_params

    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan_to_json(rowwise_plan)))
    assert json.loads(path.read_text())["training"]["fp8_recipe"] == "torchao-rowwise"
    again = invoke("evaluate", "--plan", str(path), "--json")
    assert again.exit_code == 0, again.output
    params = cluster_params(rowwise_plan.cluster.gpu_types, "torchtitan", "torchao-rowwise")
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(evaluate(rowwise_plan, params).step_time_s,
                                                                    rel=1e-9)


@pytest.mark.parametrize("recipe, dtype, needle", [("torchao-colwise", "fp8", "torchao-colwise"),
                                                   ("torchao-rowwise", "bf16", "needs dtype fp8")])
def test_plan_file_with_a_bad_fp8_recipe_is_bad_input(tmp_path, rowwise_plan, recipe, dtype, needle):
    data = plan_to_json(rowwise_plan)
    data["training"].update(fp8_recipe=recipe, dtype=dtype)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    assert_bad_input(invoke("evaluate", "--plan", str(path), "--json"), "training.fp8_recipe", needle)


def test_torchtitan_export_of_a_rowwise_plan_names_the_recipe_without_fp8_all_gather(rowwise_plan):
    f8 = tomllib.loads(export_torchtitan(rowwise_plan, lambda _: None))["quantize"]["linear"]["float8"]
    assert f8["recipe_name"] == "rowwise"
    assert f8["enable_fsdp_float8_all_gather"] is False and f8["precompute_float8_dynamic_scale_for_fsdp"] is False


def test_megatron_export_refuses_a_torchao_recipe(rowwise_plan):
    with pytest.raises(BadInput, match="Transformer Engine"):
        export_megatron(rowwise_plan, lambda _: None)


def test_plan_search_keeps_the_chosen_fp8_recipe_in_its_plan(tmp_path, titan_debug):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", titan_debug, "--cluster", _cluster_yaml(tmp_path, "H100-SXM5-80GB", 4),
                    "--global-batch", "8", "--seq-len", "512", "--dtype", "fp8", "--fp8-recipe", "torchao-rowwise",
                    "--runtime", "torchtitan", "--micro-batch", "1", "-o", str(out))
    assert result.exit_code == 0, (result.output, result.exception)
    assert json.loads(out.read_text())["training"]["fp8_recipe"] == "torchao-rowwise"
