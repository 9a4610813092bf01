"""planner.api: the workflows the commands, the sweep and the benchmarks share. Typed errors,
never printing; the sweep's rows are planner.api.plan's plans."""

from __future__ import annotations

import csv
import json

import pytest

from planner import api
from planner.core.errors import BadInput, NoFeasiblePlan
from planner.inputs.hardware import load_cluster

from .conftest import SMALL_CLUSTER_YAML, evaluate_args, invoke, synthetic_profile


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_CLUSTER_YAML)
    return str(path)


def test_plan_returns_the_plan_and_prints_nothing(small, capsys):
    request = api.PlanRequest(model="gpt2", cluster=small, global_batch=16, seq_len=512, micro_batches=(2,),
                              virtual_stages=(1,), time_limit_s=None)
    result = api.plan(request)
    assert result.plan.training.micro_batch == 2 and result.plan.training.virtual_stages == 1
    assert api.plan_json(result)["predicted"]["step_time_s"] == result.estimate.step_time_s
    assert capsys.readouterr() == ("", "")


def test_plan_takes_loaded_models_and_clusters_as_well_as_names(small):
    by_name = api.plan(api.PlanRequest(model="gpt2", cluster=small, global_batch=16, seq_len=512))
    loaded = api.plan(api.PlanRequest(model=by_name.plan.model, cluster=by_name.plan.cluster, global_batch=16,
                                      seq_len=512))
    assert api.plan_json(loaded)["stages"] == api.plan_json(by_name)["stages"]


def test_plan_raises_typed_errors_and_prints_nothing(small, capsys):
    with pytest.raises(BadInput, match="no micro-batch size in \\[2, 4\\] divides the global batch 5"):
        api.plan(api.PlanRequest(model="gpt2", cluster=small, global_batch=5, seq_len=512, micro_batches=(4, 2)))
    with pytest.raises(BadInput) as bad:
        api.plan(api.PlanRequest(model="gpt2", cluster=small, global_batch=16, seq_len=512, solver="glpk"))
    assert bad.value.where == "--solver"
    with pytest.raises(NoFeasiblePlan):
        api.plan(api.PlanRequest(model="llama-3.1-405b", cluster=small, global_batch=16, seq_len=512))
    assert capsys.readouterr() == ("", "")


def test_a_profile_in_another_dtype_warns_through_the_callback_not_on_stderr(tmp_path, capsys):
    path = tmp_path / "a100.json"
    synthetic_profile(path, seq_len=512)  # measured in bf16
    warnings: list[str] = []
    result = api.evaluate(api.EvaluateRequest(
        model="gpt2", cluster="dgx-a100", global_batch=64, seq_len=512, tp=1, pp=1, dp=32, micro_batch=2,
        dtype="fp16", profiles=(f"A100-SXM4-80GB={path}",)), warnings.append)
    assert result.fits
    assert len(warnings) == 1 and "measured in bf16, the plan trains in fp16" in warnings[0]
    assert capsys.readouterr() == ("", "")
    cli = invoke("evaluate", *evaluate_args(cluster="dgx-a100", global_batch=64, dp=32, micro_batch=2,
                                            extra=("--dtype", "fp16", "--profile", f"A100-SXM4-80GB={path}"))[1:])
    assert cli.exit_code == 0
    assert cli.stderr.strip() == f"planner: warning: {warnings[0]}"


def test_evaluate_prices_a_configuration_that_does_not_fit_instead_of_raising():
    request = api.EvaluateRequest(model="llama-3-70b", cluster="dgx-a100", global_batch=32, seq_len=4096, tp=1,
                                  pp=1, dp=32, micro_batch=1)
    result = api.evaluate(request)
    assert not result.fits and result.estimate.overflows
    report = result.to_json()
    assert report["fits"] is False and report["config"]["model"] == "llama-3-70b"


def test_evaluate_plan_file_equals_evaluate_of_the_same_configuration(tmp_path):
    from planner.plan import plan_to_json

    request = api.EvaluateRequest(model="gpt2", cluster=load_cluster("dgx-a100"), global_batch=64, seq_len=1024,
                                  tp=2, pp=2, dp=8, micro_batch=2, recompute="selective")
    direct = api.evaluate(request)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(direct.plan)))
    assert api.evaluate_plan_file(str(path)).to_json() == direct.to_json()


def test_evaluate_names_the_missing_input():
    with pytest.raises(BadInput) as bad:
        api.evaluate(api.EvaluateRequest(model="gpt2", cluster="dgx-a100", global_batch=8, seq_len=512, tp=1, pp=1,
                                         micro_batch=1))
    assert bad.value.where == "--dp" and bad.value.message == "is required"


def test_a_sweep_row_is_the_plan_of_planner_plan_with_the_same_flags(small, tmp_path):
    flags = ["--micro-batch", "2", "--micro-batch", "4", "--virtual-stages", "1", "--time-limit", "60"]
    planned = invoke("plan", "--model", "gpt2", "--cluster", small, "--global-batch", "16", "--seq-len", "512",
                     *flags, "--json")
    assert planned.exit_code == 0, planned.stderr
    plan = json.loads(planned.stdout)
    out, plans = tmp_path / "rows.csv", tmp_path / "plans"
    swept = invoke("sweep", "--model", "gpt2", "--cluster", small, "--global-batch", "16", "--seq-len", "512",
                   *flags, "--jobs", "1", "--plans-dir", plans, "-o", out)
    assert swept.exit_code == 0, swept.stderr
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok"
    assert float(row["step_time_s"]) == pytest.approx(plan["predicted"]["step_time_s"], rel=1e-12)
    (plan_file,) = plans.iterdir()
    swept_plan = json.loads(plan_file.read_text())
    assert swept_plan["stages"] == plan["stages"] and swept_plan["training"] == plan["training"]
    assert plan["training"]["micro_batch"] in (2, 4) and plan["training"]["virtual_stages"] == 1


def test_sweep_refuses_an_out_of_range_micro_batch_before_any_row(small, tmp_path):
    out = tmp_path / "rows.csv"
    result = invoke("sweep", "--model", "gpt2", "--cluster", small, "--global-batch", "16", "--seq-len", "512",
                    "--micro-batch", "0", "-o", out)
    assert result.exit_code == 2 and "--micro-batch" in result.stderr
    assert not out.exists()
