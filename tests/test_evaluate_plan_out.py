"""`planner evaluate --plan-out FILE`: a hand-chosen configuration as a plan file that validate,
export and `evaluate --plan` read, priced as evaluate priced it (formats.md section 5)."""

from __future__ import annotations

import json

from .conftest import assert_bad_input, invoke, synthetic_profile

# tp 2 x pp 2 x dp 8 on the 32 GPUs of dgx-a100, interleaved over 2 chunks per rank
HAND = ["--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
        "--tp", "2", "--pp", "2", "--dp", "8", "--micro-batch", "2", "--virtual-stages", "2",
        "--recompute", "selective", "--zero", "1", "--sequence-parallel"]


def test_plan_out_writes_exactly_the_evaluated_configuration(tmp_path):
    out = tmp_path / "hand.json"
    result = invoke("evaluate", *HAND, "--json", "--plan-out", out)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)  # --json: stdout stays one JSON object
    data = json.loads(out.read_text())
    assert data["format"] == "planner.plan/v1"
    t = data["training"]
    assert (t["global_batch"], t["seq_len"], t["dtype"], t["micro_batch"], t["schedule"], t["virtual_stages"],
            t["runtime"]) == (64, 1024, "bf16", 2, "interleaved", 2, "megatron")
    assert len(data["stages"]) == 4  # pp 2 x 2 chunks
    for stage in data["stages"]:
        assert (stage["tp"], stage["dp"], stage["zero"], stage["recompute"], stage["sequence_parallel"]) == \
               (2, 8, 1, "selective", True)
    assert [s["pipeline_rank"] for s in data["stages"]] == [0, 1, 0, 1]
    assert sorted(r for s in data["stages"] for rep in s["replicas"] for r in rep["ranks"]) == \
           sorted(list(range(32)) * 2)  # each rank runs its two chunks
    assert data["predicted"]["step_time_s"] == report["step_time_s"]
    assert data["predicted"]["peak_memory_GiB_by_rank"]["0"] > 0


def test_a_plan_out_file_validates_exports_and_reprices_to_the_same_step(tmp_path):
    out = tmp_path / "hand.json"
    assert invoke("evaluate", *HAND, "--plan-out", out).exit_code == 0
    checked = invoke("validate", out)
    assert checked.exit_code == 0 and checked.stderr == "", checked.stderr
    exported = invoke("export", out, "--to", "megatron")
    assert exported.exit_code == 0, exported.stderr
    assert "--tensor-model-parallel-size 2" in exported.stdout and "--sequence-parallel" in exported.stdout
    again = invoke("evaluate", "--plan", out, "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == json.loads(out.read_text())["predicted"]["step_time_s"]


def test_o_keeps_writing_the_report_beside_the_plan(tmp_path):
    report, plan = tmp_path / "report.json", tmp_path / "plan.json"
    result = invoke("evaluate", *HAND, "-o", report, "--plan-out", plan)
    assert result.exit_code == 0, result.stderr
    assert f"plan written to {plan}" in result.stdout.replace("\n", "")
    assert "fits" in json.loads(report.read_text()) and "format" not in json.loads(report.read_text())
    assert json.loads(plan.read_text())["format"] == "planner.plan/v1"


def test_plan_out_onto_the_report_file_is_bad_input(tmp_path):
    same = tmp_path / "same.json"
    assert_bad_input(invoke("evaluate", *HAND, "-o", same, "--plan-out", same), "--plan-out", "-o")
    assert not same.exists()


def test_a_configuration_that_does_not_fit_writes_no_plan_and_exits_1(tmp_path):
    out = tmp_path / "big.json"
    result = invoke("evaluate", "--model", "llama-3-8b", "--cluster", "consumer-3090-4090", "--global-batch", "64",
                    "--seq-len", "1024", "--tp", "1", "--pp", "1", "--dp", "16", "--micro-batch", "4",
                    "--plan-out", out)
    assert result.exit_code == 1
    assert "does not fit" in result.stderr and f"no plan written to {out}" in result.stderr
    assert not out.exists()


def test_a_configuration_its_runtime_cannot_run_is_bad_input_and_writes_nothing(tmp_path):
    hand, out = tmp_path / "hand.json", tmp_path / "deepspeed.json"
    assert invoke("evaluate", *HAND, "--plan-out", hand).exit_code == 0
    # DeepSpeed's pipeline engine has no interleaved schedule: priced, but not a plan it runs
    result = invoke("evaluate", "--plan", hand, "--runtime", "deepspeed", "--plan-out", out)
    assert_bad_input(result, "--plan-out", "training.runtime", "interleaved")
    assert not out.exists()


def test_plan_out_of_a_plan_file_under_another_runtime_is_made_for_that_runtime(tmp_path):
    hand, out = tmp_path / "hand.json", tmp_path / "titan.json"
    assert invoke("evaluate", *HAND, "--plan-out", hand).exit_code == 0
    result = invoke("evaluate", "--plan", hand, "--runtime", "torchtitan", "--json", "--plan-out", out)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["training"]["runtime"] == "torchtitan"
    assert data["predicted"]["step_time_s"] == json.loads(result.stdout)["step_time_s"]
    assert invoke("validate", out).exit_code == 0


def test_plan_out_records_the_measured_profile_it_was_priced_with(tmp_path):
    profile, out = tmp_path / "a100.json", tmp_path / "measured.json"
    synthetic_profile(profile)
    spec = f"A100-SXM4-80GB={profile}"
    result = invoke("evaluate", *HAND, "--profile", spec, "--plan-out", out)
    assert result.exit_code == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["predicted"]["priced_with"] == {"profiles": [spec], "calibrations": []}
    checked = invoke("validate", out)
    assert checked.exit_code == 0 and checked.stderr == "", checked.stderr
