"""The command line through click's CliRunner: outputs, exit codes, JSON on stdout only."""

from __future__ import annotations

import json

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes import cluster_params
from planner.inputs.hardware import load_cluster
from planner.inputs.model import catalog_names, load_model
from planner.plan import Training, plan_to_json, uniform_plan

from .conftest import CATALOG_NAMES, evaluate_args, invoke, ok_json, small_cluster_spec

EVALUATE_KEYS = {"fits", "step_time_s", "tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "mfu",
                 "peak_memory_GiB", "breakdown_s"}
BREAKDOWN_KEYS = {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"}


# --- listings -------------------------------------------------------------------------------


def test_gpus_json_lists_every_catalog_name():
    rows = ok_json(invoke("gpus", "--json"))
    assert sorted(r["name"] for r in rows) == sorted(CATALOG_NAMES)
    assert len(rows) == len(CATALOG_NAMES) == 29
    v100 = next(r for r in rows if r["name"] == "V100-SXM2-32GB")
    assert "bf16" not in v100["peak_tflops"] and v100["memory_GiB"] == 32


def test_gpus_table_prints_every_name():
    result = invoke("gpus", env={"COLUMNS": "200"})  # wide enough that no name wraps
    assert result.exit_code == 0
    for name in CATALOG_NAMES:
        assert name in result.stdout


def test_models_json_lists_the_catalog_with_parameter_counts():
    rows = ok_json(invoke("models", "--json"))
    assert [r["name"] for r in rows] == catalog_names()
    gpt3 = next(r for r in rows if r["name"] == "gpt3-175b")
    assert gpt3["params"] == pytest.approx(174.6e9, rel=0.001)
    assert gpt3["layers"] == 96 and gpt3["hidden"] == 12288


def test_help_exits_zero():
    result = invoke("--help")
    assert result.exit_code == 0 and "evaluate" in result.stdout


# --- evaluate with flags ---------------------------------------------------------------------


LLAMA_ON_DGX = ["evaluate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--global-batch", "64",
                "--seq-len", "4096", "--tp", "4", "--pp", "2", "--dp", "4", "--micro-batch", "1",
                "--recompute", "selective", "--json"]


def test_evaluate_json_prints_the_documented_keys_and_nothing_else():
    report = ok_json(invoke(*LLAMA_ON_DGX))
    assert EVALUATE_KEYS <= set(report)
    assert set(report["breakdown_s"]) == BREAKDOWN_KEYS
    assert report["fits"] is True
    assert set(report["peak_memory_GiB"]) == {"A100-SXM4-80GB"}
    assert 0 < report["peak_memory_GiB"]["A100-SXM4-80GB"] < 80
    assert report["step_time_s"] > 0 and 0 < report["mfu"] < 1
    assert report["tokens_per_s"] == pytest.approx(64 * 4096 / report["step_time_s"])
    assert report["samples_per_s"] == pytest.approx(64 / report["step_time_s"])
    assert sum(report["breakdown_s"].values()) == pytest.approx(report["step_time_s"], rel=1e-9)


def test_evaluate_json_matches_the_library(small_cluster_file, gpt2, small_cluster):
    report = ok_json(invoke(*evaluate_args(cluster=str(small_cluster_file), global_batch=16, micro_batch=2)))
    plan = uniform_plan(gpt2, small_cluster, Training(16, 512, "bf16", 2), tp=1, pp=1, dp=4)
    # the CLI prices under the plan's runtime (megatron: bf16 gradients reduced in fp32)
    params = cluster_params(small_cluster.gpu_types, plan.training.runtime)
    assert report["step_time_s"] == pytest.approx(evaluate(plan, params).step_time_s, rel=1e-12)


def test_evaluate_output_file_holds_the_same_json(tmp_path):
    out = tmp_path / "report.json"
    result = invoke(*LLAMA_ON_DGX, "-o", str(out))
    assert json.loads(out.read_text()) == ok_json(result)


def test_evaluate_without_json_prints_a_table():
    args = [a for a in LLAMA_ON_DGX if a != "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "Step time" in result.stdout and "A100-SXM4-80GB" in result.stdout


@pytest.fixture
def one_node_file(tmp_path):
    path = tmp_path / "one-node.yaml"
    path.write_text(json.dumps(small_cluster_spec(nodes=1, gpus_per_node=8)))
    return path


def test_config_that_does_not_fit_exits_1_with_json_and_names_the_overflow(one_node_file):
    result = invoke("evaluate", "--model", "llama-3-70b", "--cluster", str(one_node_file),
                    "--global-batch", "8", "--seq-len", "4096", "--tp", "8", "--pp", "1", "--dp", "1",
                    "--micro-batch", "1", "--recompute", "none", "--json")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    report = json.loads(result.stdout)
    assert report["fits"] is False
    assert report["peak_memory_GiB"]["A100-SXM4-80GB"] > 80
    worst = max(report["overflows"], key=lambda o: o["over_GiB"])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"rank {worst['rank']}" in lines[0]
    assert "A100-SXM4-80GB" in lines[0]
    assert f"over by {worst['over_GiB']:.1f} GiB" in lines[0]


def test_config_that_does_not_fit_exits_1_without_json_too(one_node_file):
    result = invoke("evaluate", "--model", "llama-3-70b", "--cluster", str(one_node_file),
                    "--global-batch", "8", "--seq-len", "4096", "--tp", "8", "--pp", "1", "--dp", "1",
                    "--micro-batch", "1")
    assert result.exit_code == 1
    assert "does not fit" in result.stderr and "GiB" in result.stderr


# --- dtype defaulting --------------------------------------------------------------------------


def gpt2_on(cluster: str, gpus: int, *extra: str):
    return invoke(*evaluate_args(cluster=cluster, global_batch=gpus, dp=gpus, seq_len=256, extra=extra))


def test_dtype_defaults_to_bf16_on_an_a100_cluster():
    assert ok_json(gpt2_on("dgx-a100", 32))["config"]["dtype"] == "bf16"


def test_dtype_defaults_to_fp16_when_a_v100_is_present():
    assert ok_json(gpt2_on("a100-v100-mix", 48))["config"]["dtype"] == "fp16"


def test_explicit_bf16_on_a_v100_cluster_is_bad_input():
    result = gpt2_on("a100-v100-mix", 48, "--dtype", "bf16")
    assert result.exit_code == 2
    assert "--dtype" in result.stderr and "V100-SXM2-32GB" in result.stderr
    assert result.stdout == ""


def test_explicit_fp32_on_a_v100_cluster_is_accepted():
    assert ok_json(gpt2_on("a100-v100-mix", 48, "--dtype", "fp32"))["config"]["dtype"] == "fp32"


# --- evaluate --plan ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [
    dict(training=Training(64, 4096, "bf16", 1), tp=4, pp=2, dp=4, zero=1, recompute="selective"),
    # runtime: any (ZeRO-2 with a pipeline, GPipe: Megatron-LM runs neither)
    dict(training=Training(64, 2048, "bf16", 2, "interleaved", 2, runtime="any"), tp=2, pp=4, dp=4, zero=2,
         recompute="full", sequence_parallel=True),
    dict(training=Training(32, 2048, "bf16", 1, "gpipe", runtime="any"), tp=8, pp=4, dp=1),
], ids=["1f1b", "interleaved", "gpipe"])
def test_evaluate_plan_round_trip_reprices_the_same_step_time(tmp_path, layout):
    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")
    training = layout.pop("training")
    plan = uniform_plan(model, cluster, training, **layout)
    direct = evaluate(plan)
    path = tmp_path / "plan.json"
    from types import SimpleNamespace

    from planner.api import plan_json
    path.write_text(json.dumps(plan_json(SimpleNamespace(plan=plan, estimate=direct, solver_json=lambda: None))))
    report = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    assert report["step_time_s"] == pytest.approx(direct.step_time_s, rel=1e-12)
    assert report["config"]["pp"] == layout["pp"]


def test_evaluate_plan_equals_evaluate_with_the_same_flags(tmp_path):
    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")
    plan = uniform_plan(model, cluster, Training(64, 4096, "bf16", 1), tp=4, pp=2, dp=4, recompute="selective")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    from_plan = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    from_flags = ok_json(invoke(*LLAMA_ON_DGX))
    assert from_plan["step_time_s"] == pytest.approx(from_flags["step_time_s"], rel=1e-12)
    assert from_plan["peak_memory_GiB"] == pytest.approx(from_flags["peak_memory_GiB"])


def test_hand_edited_plan_is_repriced(tmp_path):
    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")
    plan = plan_to_json(uniform_plan(model, cluster, Training(64, 4096, "bf16", 1), tp=4, pp=2, dp=4))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    before = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    for stage in plan["stages"]:
        stage["recompute"] = "full"
    path.write_text(json.dumps(plan))
    after = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    assert after["step_time_s"] > before["step_time_s"]
    assert after["peak_memory_GiB"]["A100-SXM4-80GB"] < before["peak_memory_GiB"]["A100-SXM4-80GB"]


def test_evaluate_plan_refuses_configuration_flags_it_would_ignore(tmp_path):
    from planner.inputs.hardware import load_cluster
    from planner.inputs.model import load_model
    from planner.plan import Training, plan_to_json, uniform_plan
    plan = uniform_plan(load_model("gpt2"), load_cluster("dgx-a100"), Training(32, 1024, "bf16", 1), tp=1, pp=1, dp=32)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = invoke("evaluate", "--plan", path, "--tp", "2")
    assert result.exit_code == 2 and "--tp" in result.stderr and "--plan" in result.stderr


def test_the_core_imports_without_torch():
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None; "
            "import planner.cli, planner.search.orchestration.driver, planner.cost.evaluate, planner.inputs.model; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
