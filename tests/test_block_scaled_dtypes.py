"""`--dtype mxfp8`, `--dtype nvfp4` and `--fp8-recipe te-current` (planner.cost.fp8): which GPUs
and runtimes have them, what they cost, what plans and exports carry."""

from __future__ import annotations

import json

import pytest

from planner.api.load import resolve_dtype
from planner.api.requests import TRAINING_DTYPES
from planner.core.dims import StageDims
from planner.core.errors import BadInput
from planner.cost import fp8 as fp8_cost
from planner.cost.formulas import layer_time, mfu_peak_dtype
from planner.cost.pricing import saved_activation_bytes
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.export import export_deepspeed, export_megatron
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.verify.plan_checks import check_plan_data

from .conftest import assert_bad_input, invoke


def _cluster(gpu: str, gpus: int = 8):
    return cluster_from_spec({"name": "c", "node_groups": [{"name": "g", "gpu": gpu, "nodes": 1,
                                                            "gpus_per_node": gpus}]}, "test")


def _decoder():
    return next(layer for layer in load_model("llama-3-8b").layers if layer.kind == "decoder")


def _time(dtype: str, gpu_name: str = "B200", recipe: str = ""):
    gpu = load_catalog()[gpu_name]
    sh = Sharding(dtype, 8, 4096, "flash", StageDims(1), "none")
    return layer_time(_decoder(), gpu, sh, gpu.intra_node, stack_params(gpu, "megatron", fp8_recipe=recipe))


def test_nvfp4_decoder_gemms_run_at_the_fp4_peak_twice_mxfp8s():
    gpu = load_catalog()["B200"]
    assert gpu.peak("fp4") == 2 * gpu.peak("fp8")
    mx, nv = _time("mxfp8"), _time("nvfp4")
    # the same GEMM shapes at twice the peak; attention and elementwise kernels stay bf16, and
    # NVFP4's amax pass makes its casts dearer, so the block is faster but not twice
    assert 1.0 < mx.compute_s / nv.compute_s < 2.0


def test_mxfp8_runs_at_the_fp8_rate_and_pays_for_two_quantized_copies():
    delayed, mx = _time("fp8"), _time("mxfp8")
    # one kernel writes the rowwise and columnwise MXFP8 copies with their scales: more than
    # delayed scaling's fp8 data and transpose, so the block is a little slower, never faster
    assert delayed.compute_s < mx.compute_s < 1.05 * delayed.compute_s
    r = fp8_cost.FORMAT_RECIPES["te-mxfp8"]
    assert r.x_fwd_bytes > fp8_cost.RECIPES["te-delayed"].x_fwd_bytes


def test_te_current_scaling_reads_each_tensor_once_more_than_delayed_scaling():
    delayed, current = fp8_cost.RECIPES["te-delayed"], fp8_cost.RECIPES["te-current"]
    assert current.x_fwd_bytes == delayed.x_fwd_bytes + 2 and current.dy_bwd_bytes == delayed.dy_bwd_bytes + 2
    assert _time("fp8", "H100-SXM5-80GB", "te-current").compute_s > _time("fp8", "H100-SXM5-80GB").compute_s


def test_block_scaled_weights_keep_both_copies_even_where_fp8_needs_no_transpose():
    gpu = load_catalog()["B200"]  # datacenter Blackwell: per-tensor fp8 GEMMs in any layout
    dims, layer = StageDims(1), _decoder()
    per_weight = {d: fp8_cost.weight_cache_bytes(layer, dims, d, "te-delayed", gpu) / layer.weight_params
                  for d in ("fp8", "mxfp8", "nvfp4")}
    assert per_weight == pytest.approx({"fp8": 1.0, "mxfp8": 2 * (1 + 1 / 32), "nvfp4": 2 * (0.5 + 1 / 16)})


def test_nvfp4_saves_linear_inputs_in_half_a_byte_and_scales():
    sh = {d: Sharding(d, 1, 4096, "flash", StageDims(1), "none") for d in ("bf16", "fp8", "nvfp4")}
    saved = {d: saved_activation_bytes(_decoder(), s, "attention", "te-delayed") for d, s in sh.items()}
    assert saved["nvfp4"] < saved["fp8"] < saved["bf16"]


def test_mfu_divides_by_the_peak_of_the_format_the_gemms_run_in():
    gpu = load_catalog()["B200"]
    params = stack_params(gpu)
    assert [mfu_peak_dtype(gpu, d, params) for d in ("bf16", "fp8", "mxfp8", "nvfp4")] == ["bf16", "fp8", "fp8", "fp4"]


@pytest.mark.parametrize("dtype", ["mxfp8", "nvfp4"])
def test_block_scaled_dtypes_are_refused_before_blackwell_naming_the_gpu(dtype):
    with pytest.raises(BadInput, match=r"H100-SXM5-80GB \(hopper\).*|Blackwell") as error:
        resolve_dtype(_cluster("H100-SXM5-80GB"), dtype, "megatron")
    assert "H100-SXM5-80GB" in str(error.value) and "Blackwell" in str(error.value)


def test_mxfp8_is_refused_under_a_runtime_without_transformer_engine():
    with pytest.raises(BadInput, match="torchtitan runtime has no mxfp8"):
        resolve_dtype(_cluster("B200"), "mxfp8", "torchtitan")


def test_nvfp4_refused_on_h100_with_exit_2(tmp_path):
    path = tmp_path / "h100.yaml"
    path.write_text("name: c\nnode_groups:\n  - name: g\n    gpu: H100-SXM5-80GB\n    nodes: 1\n    gpus_per_node: 8\n")
    result = invoke("evaluate", "--model", "llama-3-8b", "--cluster", str(path), "--global-batch", "8",
                    "--seq-len", "512", "--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1",
                    "--dtype", "nvfp4", "--json")
    assert_bad_input(result, "H100-SXM5-80GB", "nvfp4")


def test_evaluate_nvfp4_on_b200_reports_mfu_of_the_fp4_peak_and_beats_mxfp8(tmp_path):
    path = tmp_path / "b200.yaml"
    path.write_text("name: c\nnode_groups:\n  - name: g\n    gpu: B200\n    nodes: 1\n    gpus_per_node: 8\n")
    steps = {}
    for dtype in ("mxfp8", "nvfp4"):
        result = invoke("evaluate", "--model", "llama-3-8b", "--cluster", str(path), "--global-batch", "64",
                        "--seq-len", "4096", "--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1",
                        "--dtype", dtype, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert data["mfu_peak_dtype"] == {"mxfp8": "fp8", "nvfp4": "fp4"}[dtype]
        steps[dtype] = data["step_time_s"]
    assert steps["nvfp4"] < steps["mxfp8"]


def _plan(dtype: str, recipe: str = "", gpu: str = "B200"):
    return uniform_plan(load_model("llama-3-8b"), _cluster(gpu), Training(64, 4096, dtype, 1, fp8_recipe=recipe),
                        tp=2, pp=1, dp=4, zero=1, sequence_parallel=True)


@pytest.mark.parametrize("dtype", TRAINING_DTYPES)
def test_a_plan_file_of_every_training_dtype_passes_the_plan_file_checks(dtype):
    # what `validate`, `export` and `evaluate --plan` read first (the plan schema)
    gpu = "B200" if dtype in ("mxfp8", "nvfp4") else "H100-SXM5-80GB"
    plan, problems = check_plan_data(plan_to_json(_plan(dtype, gpu=gpu)))
    assert problems == [] and plan is not None and plan.training.dtype == dtype


def test_plan_files_keep_block_scaled_dtypes_and_refuse_them_on_hopper():
    plan = _plan("mxfp8")
    data = plan_to_json(plan)
    assert plan_from_json(data).training.dtype == "mxfp8"
    data["cluster"]["spec"] = {"name": "h", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": 1,
                                                             "gpus_per_node": 8}]}
    with pytest.raises(BadInput, match="H100-SXM5-80GB has no mxfp8 support"):
        plan_from_json(data)


@pytest.mark.parametrize("dtype, recipe, flags, absent", [
    ("mxfp8", "", ("--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8", "--fp8-param-gather",
                   "--reuse-grad-buf-for-mxfp8-param-ag"), ("--fp4-format",)),
    ("nvfp4", "", ("--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4", "--fp4-param-gather"), ("--fp8-format",)),
    ("fp8", "te-current", ("--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise", "--fp8-param-gather"),
     ("--fp8-amax-history-len",)),
])
def test_megatron_export_carries_the_priced_recipe(dtype, recipe, flags, absent):
    text = export_megatron(_plan(dtype, recipe), lambda _: None)
    for flag in flags:
        assert flag in text
    for flag in absent:
        assert flag not in text


def test_deepspeed_export_refuses_mxfp8():
    with pytest.raises(BadInput, match="no mxfp8 training path"):
        export_deepspeed(_plan("mxfp8"), lambda _: None)


def test_the_reference_runtime_refuses_a_quantized_plan_before_starting():
    from planner.runner.launch import RunOptions, run_plan

    with pytest.raises(BadInput, match="reference runtime trains in fp32, bf16, fp16"):
        next(run_plan(_plan("mxfp8"), RunOptions()))


def test_decoders_a_recipe_keeps_in_bf16_are_priced_as_bf16_layers_under_nvfp4():
    # megatron-core first_last_layers_bf16: num_layers_at_start_in_bf16 1, num_layers_at_end_in_bf16 14 (the
    # Nemotron 3 Super NVFP4 recipe), each layer of the hybrid pattern counted; the MTP module (mtp_bf16) too
    from dataclasses import replace

    from planner.cost.pricing import layer_price
    from planner.inputs.model import Model, build_layers

    base = load_model("nemotron-3-super")
    config = replace(base.config, bf16_layers=(1, 14), mtp_bf16=True)
    model = Model(base.name, config, build_layers(config))
    decoders = [layer for layer in model.layers if layer.kind == "decoder"]
    kept = [i for i, layer in enumerate(decoders) if layer.config.high_precision]
    assert kept == [0] + list(range(74, 88)) and model.layers[-1].trail[0].config.high_precision
    gpu = load_catalog()["B200"]
    moe = [layer for layer in decoders if layer.config.num_experts > 1]
    for layer in (moe[-1], moe[20]):  # an MoE layer kept in bf16, one in NVFP4
        sh = Sharding("nvfp4", 1, 8192, "flash", StageDims(1), "none")
        nvfp4 = layer_price(layer, sh, gpu, gpu.intra_node, stack_params(gpu, "megatron"))
        bf16 = layer_price(layer, replace(sh, dtype="bf16"), gpu, gpu.intra_node, stack_params(gpu, "megatron"))
        assert (nvfp4.time_s == bf16.time_s) == layer.config.high_precision
