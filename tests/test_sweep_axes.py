"""`planner sweep` over runtimes, dtypes, optimizers, cp and ep degrees (one product axis each,
as `planner plan` takes them), and the columns that say what each plan is: model name, micro-batch,
schedule, per-stage shape, zero, recompute and peak memory."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import click
import pytest

from planner.api import PlanRequest, plan, plan_json
from planner.cli import PlannerGroup
from planner.cli.sweep import add_commands
from planner.core.errors import BadInput
from planner.sweep.run import COLUMNS

from .conftest import hf_config, runner

CLUSTER = "consumer-3090-4090"


def group() -> click.Group:
    g = PlannerGroup()
    add_commands(g)
    return g


def run(out: Path, *extra, model="gpt2", batch=32):
    args = ["sweep", "--model", str(model), "--cluster", CLUSTER, "--global-batch", str(batch), "--seq-len", "512",
            "--jobs", "1", "-o", str(out), *map(str, extra)]
    return runner().invoke(group(), args)


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def planned(**changes) -> dict:
    request = PlanRequest(model="gpt2", cluster=CLUSTER, global_batch=32, seq_len=512, time_limit_s=None)
    return plan_json(plan(replace(request, **changes)))


def assert_row_is_plans(row: dict, **changes) -> None:
    """The row is what planner.api.plan gives for the same flags: its step time, or its error."""
    try:
        expected = planned(**changes)
    except BadInput as exc:
        assert row["status"] == "error" and row["reason"] == " ".join(str(exc).split()), row
        return
    assert row["status"] == "ok", row
    assert float(row["step_time_s"]) == expected["predicted"]["step_time_s"]


@pytest.mark.slow
def test_runtime_and_dtype_are_axes_of_the_product_in_order(tmp_path):
    out = tmp_path / "r.csv"
    result = run(out, "--runtime", "megatron", "--runtime", "torchtitan", "--dtype", "bf16", "--dtype", "fp16")
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read(out)
    assert [(r["runtime"], r["dtype"]) for r in rows] == [
        ("megatron", "bf16"), ("megatron", "fp16"), ("torchtitan", "bf16"), ("torchtitan", "fp16")]
    assert rows[0]["status"] == rows[1]["status"] == "ok" and rows[3]["status"] == "error", rows
    assert rows[0]["step_time_s"] != rows[1]["step_time_s"]
    for row in rows:
        assert_row_is_plans(row, runtime=row["runtime"], dtype=row["dtype"])


@pytest.mark.slow
def test_optimizer_cp_and_ep_rows_equal_plan_with_those_flags(tmp_path):
    out, plans = tmp_path / "r.csv", tmp_path / "plans"
    result = run(out, "--optimizer", "adamw", "--optimizer", "sgd", "--cp", "2", "--ep", "1", "--plans-dir", plans)
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read(out)
    assert [(r["optimizer"], r["cp_degrees"], r["ep_degrees"]) for r in rows] == [("adamw", "2", "1"),
                                                                                ("sgd", "2", "1")]
    for row in rows:
        assert_row_is_plans(row, optimizer=row["optimizer"], cp_degrees=(2,), ep_degrees=(1,))
        assert json.loads((plans / f"gpt2__{CLUSTER}__32__512__"
                           f"{'' if row['optimizer'] == 'adamw' else row['optimizer'] + '__'}cp2__ep1.json")
                          .read_text())["training"].get("optimizer", "adamw") == row["optimizer"]


def test_columns_describe_the_plan_and_name_the_model_not_its_file(tmp_path):
    config = tmp_path / "some" / "dir" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(hf_config("gpt2") | {"_name_or_path": "my-gpt2"}))
    out = tmp_path / "r.csv"
    result = run(out, model=config)
    assert result.exit_code == 0, (result.output, result.exception)
    [row] = read(out)
    assert list(row) == list(COLUMNS)
    assert row["model"] == str(config) and row["model_name"] == "my-gpt2"
    expected = planned(model=str(config))
    training, stages = expected["training"], expected["stages"]
    assert int(row["micro_batch"]) == training["micro_batch"]
    assert row["schedule"] == training["schedule"]
    assert int(row["virtual_stages"]) == training.get("virtual_stages", 1)
    assert float(row["peak_memory_GiB"]) == max(expected["predicted"]["peak_memory_GiB_by_rank"].values())
    shapes = [s.split(" x")[0] for s in row["stages"].split(" | ")]
    counts = [int(s.split(" x")[1]) if " x" in s else 1 for s in row["stages"].split(" | ")]
    # a stage per chunk: pp ranks of V chunks each (interleaved)
    assert sum(counts) == int(row["pp"]) * int(row["virtual_stages"]) == len(stages)
    assert shapes[0] == f"tp{stages[0]['tp']}.dp{stages[0]['dp']}.cp{stages[0].get('cp', 1)}" \
                        f".ep{stages[0].get('ep', 1)}"
    assert row["zero"] == str(stages[0]["zero"]) and row["recompute"] == stages[0]["recompute"]


def test_catalog_model_name_and_empty_columns_of_a_failed_row(tmp_path):
    out = tmp_path / "r.csv"
    result = run(out, "--runtime", "torchtitan", "--dtype", "fp16")
    assert result.exit_code == 0, (result.output, result.exception)
    [row] = read(out)
    assert row["status"] == "error" and row["model_name"] == "gpt2"
    assert row["stages"] == row["micro_batch"] == row["peak_memory_GiB"] == ""


def test_resume_tells_rows_of_other_runtimes_apart(tmp_path):
    out = tmp_path / "r.csv"
    assert run(out, "--runtime", "torchtitan").exit_code == 0
    result = run(out, "--resume", "--runtime", "megatron", "--runtime", "torchtitan")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "1 kept" in result.stderr
    assert [r["runtime"] for r in read(out)] == ["megatron", "torchtitan"]
