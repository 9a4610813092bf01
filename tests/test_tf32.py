"""fp32 GEMMs on TF32 (issue 30, item 1): a stated, overridable assumption per runtime, recorded
in the plan, and MFU relative to the peak the GEMMs were priced at (never above 100 %)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from planner.cost.runtimes import RUNTIMES
from planner.verify.plan_checks import load_schema

from .conftest import assert_bad_input, evaluate_args, invoke

# the red-team reproducer of issue 30, item 1
RED_TEAM = ["plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
            "--dtype", "fp32"]


def model_for(runtime: str, titan_debug: str) -> str:
    return titan_debug if runtime == "torchtitan" else "gpt2"


def plan_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, (result.exit_code, result.stderr)
    return json.loads(result.stdout)


def test_red_team_fp32_plan_on_dgx_a100_exits_0_with_mfu_against_the_tf32_peak():
    data = plan_json(*RED_TEAM)
    assert data["training"]["tf32_matmul"] is True  # megatron's stated default (NGC containers)
    assert data["predicted"]["mfu_peak_dtype"] == "tf32"
    assert 0 < data["predicted"]["mfu"] <= 1


@pytest.mark.parametrize("cluster", ["dgx-a100", "dgx-h100-2node"])
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_fp32_plan_of_every_runtime_keeps_mfu_at_most_one(runtime, cluster, titan_debug):
    data = plan_json("plan", "--model", model_for(runtime, titan_debug), "--cluster", cluster, "--global-batch", "64", "--seq-len", "1024",
                     "--dtype", "fp32", "--runtime", runtime)
    tf32 = RUNTIMES[runtime].pricing.tf32_matmul
    assert data["training"]["tf32_matmul"] is tf32
    assert data["predicted"]["mfu_peak_dtype"] == ("tf32" if tf32 else "fp32")
    assert 0 < data["predicted"]["mfu"] <= 1


def fp32_estimate(runtime: str, model: str, *flags: str) -> dict:
    result = invoke(*evaluate_args(model, "dgx-a100", global_batch=32, seq_len=1024, dp=32,
                                   extra=("--dtype", "fp32", "--runtime", runtime, *flags)))
    assert result.exit_code == 0, (result.exit_code, result.stderr)
    return json.loads(result.stdout)


@pytest.mark.parametrize("runtime,flag", [("torchtitan", "--tf32"), ("megatron", "--no-tf32")])
def test_tf32_flag_overrides_the_runtime_default_and_flips_the_priced_step(runtime, flag, titan_debug):
    model = model_for(runtime, titan_debug)
    default, flipped = fp32_estimate(runtime, model), fp32_estimate(runtime, model, flag)
    on, off = (flipped, default) if flag == "--tf32" else (default, flipped)
    assert on["config"]["tf32_matmul"] is True and off["config"]["tf32_matmul"] is False
    assert on["step_time_s"] < off["step_time_s"]  # the A100's TF32 peak is 8x its fp32 peak
    assert (on["mfu_peak_dtype"], off["mfu_peak_dtype"]) == ("tf32", "fp32")
    assert on["mfu"] <= 1 and off["mfu"] <= 1


def test_gpus_without_tf32_keep_their_fp32_peak_beside_those_with_it():
    # a100-v100-mix: 16 A100 (TF32) and 32 V100 (none), all 48 used
    result = invoke("evaluate", "--model", "gpt2", "--cluster", "a100-v100-mix", "--global-batch", "96",
                    "--seq-len", "1024", "--dtype", "fp32", "--tp", "1", "--pp", "1", "--dp", "48",
                    "--micro-batch", "1", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mfu_peak_dtype"] == "tf32+fp32"
    assert 0 < report["mfu"] <= 1


def test_plan_file_records_the_setting_and_evaluate_plan_reprices_it(tmp_path):
    path = tmp_path / "plan.json"
    result = invoke(*RED_TEAM, "--no-tf32", "-o", path)
    assert result.exit_code == 0, result.stderr
    data = json.loads(path.read_text())
    assert data["training"]["tf32_matmul"] is False
    jsonschema.Draft202012Validator(load_schema("plan")).validate(data)
    again = json.loads(invoke("evaluate", "--plan", path, "--json").stdout)
    assert again["step_time_s"] == pytest.approx(data["predicted"]["step_time_s"], rel=1e-9)
    assert again["mfu_peak_dtype"] == "fp32" and again["config"]["tf32_matmul"] is False

    # a plan file without the key (written before it existed) loads under the runtime's default
    del data["training"]["tf32_matmul"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    result = invoke("evaluate", "--plan", old, "--json")
    assert result.exit_code == 0, result.stderr
    priced = json.loads(result.stdout)
    assert priced["mfu_peak_dtype"] == "tf32"  # megatron's default: TF32 on
    assert priced["step_time_s"] < data["predicted"]["step_time_s"]


def test_tf32_flag_under_another_dtype_is_bad_input():
    line = assert_bad_input(invoke(*RED_TEAM[:-2], "--dtype", "bf16", "--tf32"), "--tf32", "fp32")
    assert "bf16" in line


@pytest.mark.parametrize("value,needle", [(True, "fp32 only"), ("yes", "boolean")])
def test_plan_file_with_a_bad_tf32_setting_is_bad_input(tmp_path, value, needle):
    path = tmp_path / "plan.json"
    assert invoke(*RED_TEAM[:-2], "--dtype", "bf16", "-o", path).exit_code == 0
    data = json.loads(path.read_text())
    data["training"]["tf32_matmul"] = value
    path.write_text(json.dumps(data))
    assert_bad_input(invoke("evaluate", "--plan", path, "--json"), "training.tf32_matmul", needle)


def test_evaluate_plan_refuses_a_tf32_flag_beside_the_file(tmp_path):
    path = tmp_path / "plan.json"
    assert invoke(*RED_TEAM, "-o", path).exit_code == 0
    assert_bad_input(invoke("evaluate", "--plan", path, "--no-tf32"), "--no-tf32")


def test_human_output_names_the_tf32_peak_and_setting():
    result = invoke(*RED_TEAM)
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "TF32 matmuls allowed" in text
    assert "of tf32 peak" in text


@pytest.mark.parametrize("flag,line", [("--tf32", "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"),
                                       ("--no-tf32", "export NVIDIA_TF32_OVERRIDE=0")])
def test_launch_scripts_carry_the_tf32_setting_the_plan_was_priced_with(tmp_path, flag, line):
    path, out, launch = tmp_path / "plan.json", tmp_path / "megatron.args", tmp_path / "launch"
    assert invoke(*RED_TEAM, flag, "-o", path).exit_code == 0
    result = invoke("export", path, "--to", "megatron", "-o", out, "--launch-dir", launch)
    assert result.exit_code == 0, result.stderr
    scripts = sorted(launch.iterdir())
    assert scripts and all(line in script.read_text().splitlines() for script in scripts)
