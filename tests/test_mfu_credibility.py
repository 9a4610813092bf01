"""The credibility guard: a predicted MFU above the best published MFU of its plan's GPU
architecture and precision (planner/data/mfu_ceilings.yaml) is flagged next to the figure, in
the tables and in JSON; the shipped ceilings are what benchmarks/mfu_ceilings.py generates."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from planner.api import estimate_json, evaluation_plan_json, predicted_json
from planner.api import Evaluation
from planner.cost.evaluate import evaluate
from planner.cost.runtimes import training_params
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.mfu_ceilings import (CEILINGS_PATH, Ceiling, Share, above_published, ceiling_for,
                                         load_ceilings)
from planner.plan import Training, uniform_plan
from planner.report import credibility
from planner.report.tables import mfu_source_lines, mfu_text
from planner.verify.plan_checks import check_plan_data

from .conftest import benchmark_module, invoke, small_cluster_spec


def ceiling(architecture: str, precision: str, mfu: float, run: str = "run-x") -> Ceiling:
    return Ceiling(architecture, precision, mfu, "measured", run, "GPU", f"source of {run}")


# --- the check, over given ceilings --------------------------------------------------------------

def test_an_mfu_above_its_ceiling_names_the_ceiling_and_its_source():
    above = above_published(0.649, [Share("volta", "fp16", 125e12)], [ceiling("volta", "fp16", 0.461, "r1")])
    assert above is not None and above.published_mfu == pytest.approx(0.461)
    assert above.text() == "above the best published Volta fp16 run, 46.1%: r1"
    assert above.sources() == ["r1: source of r1"]
    assert above.to_json() == {
        "published_mfu": 0.461, "architecture": "volta", "precision": "fp16", "source": "r1: source of r1",
        "parts": [{"architecture": "volta", "precision": "fp16", "published_mfu": 0.461, "peak_share": 1.0,
                   "basis": "measured", "run": "r1", "gpu": "GPU", "source": "source of r1"}]}


def test_an_mfu_at_or_below_its_ceiling_as_printed_is_not_flagged():
    ceilings = [ceiling("ampere", "bf16", 0.52)]
    assert above_published(0.45, [Share("ampere", "bf16", 1.0)], ceilings) is None
    assert above_published(0.5204, [Share("ampere", "bf16", 1.0)], ceilings) is None  # prints as 52.0%
    assert above_published(0.5206, [Share("ampere", "bf16", 1.0)], ceilings) is not None


def test_an_architecture_or_precision_without_a_published_run_is_not_checked():
    ceilings = [ceiling("ampere", "bf16", 0.1)]
    assert above_published(0.9, [Share("hopper", "bf16", 1.0)], ceilings) is None
    assert above_published(0.9, [Share("ampere", "fp32", 1.0)], ceilings) is None
    assert above_published(0.9, [Share("ampere", "bf16", 1.0), Share("volta", "fp16", 1.0)], ceilings) is None


def test_fp16_and_bf16_share_their_ceiling_as_they_share_the_peak():
    ceilings = [ceiling("ampere", "bf16", 0.58, "bf16-run"), ceiling("ampere", "fp16", 0.39, "fp16-run")]
    assert ceiling_for(ceilings, "ampere", "fp16").run == "bf16-run"
    assert ceiling_for(ceilings, "ampere", "bf16").run == "bf16-run"
    assert ceiling_for(ceilings, "ampere", "tf32") is None


def test_a_mixed_cluster_is_held_to_its_ceilings_weighted_by_peak():
    ceilings = [ceiling("volta", "fp16", 0.50, "v"), ceiling("ampere", "bf16", 0.60, "a")]
    shares = [Share("ampere", "bf16", 312.0), Share("volta", "fp16", 125.0), Share("volta", "fp16", 125.0)]
    weighted = (312 * 0.60 + 250 * 0.50) / 562
    assert above_published(weighted - 0.002, shares, ceilings) is None
    above = above_published(weighted + 0.002, shares, ceilings)
    assert above.published_mfu == pytest.approx(weighted)
    assert [(c.run, round(s, 4)) for c, s in above.parts] == [("a", round(312 / 562, 4)), ("v", round(250 / 562, 4))]
    assert above.to_json()["architecture"] == "ampere+volta"
    assert above.text().startswith(f"above {weighted:.1%}, the best published runs weighted by peak: Ampere bf16 60.0%")


# --- the shipped ceilings ----------------------------------------------------------------------

def test_the_shipped_ceilings_are_what_the_generator_computes():
    mfu_ceilings = benchmark_module("mfu_ceilings")
    assert mfu_ceilings.render(mfu_ceilings.ceilings(mfu_ceilings.all_rows())) == CEILINGS_PATH.read_text(), \
        "regenerate: python benchmarks/mfu_ceilings.py --write"


def test_every_architecture_the_issue_names_has_a_sourced_ceiling():
    shipped = load_ceilings()
    for architecture in ("volta", "turing", "ampere", "hopper", "blackwell"):
        found = [c for c in shipped if c.architecture == architecture]
        assert found, architecture
        assert all(0 < c.mfu < 1 and c.run and c.source for c in found)
        assert {c.basis for c in found} <= {"measured", "stated_tflops", "stated"}
    stated = [e for e in yaml.safe_load(CEILINGS_PATH.read_text())["ceilings"] if e["basis"] == "stated"]
    assert stated and all(e["quote"] for e in stated)  # a stated figure carries its source's words


# --- in the output -------------------------------------------------------------------------------

@pytest.fixture
def v100_plan(gpt2):
    cluster = cluster_from_spec(small_cluster_spec(gpu="V100-SXM2-32GB"))
    plan = uniform_plan(gpt2, cluster, Training(8, 512, "fp16", 1), tp=1, pp=1, dp=4)
    return plan, evaluate(plan, training_params(cluster.gpu_types, plan.training))


def _ceilings(monkeypatch, mfu: float) -> None:
    """Ships one ceiling, Volta fp16 at `mfu`, in place of the file's."""
    monkeypatch.setattr(credibility, "load_ceilings", lambda: (ceiling("volta", "fp16", mfu, "volta-run"),))


def test_a_plan_above_its_ceiling_says_so_next_to_the_mfu_in_text_and_json(monkeypatch, v100_plan):
    plan, est = v100_plan
    _ceilings(monkeypatch, est.mfu / 2)
    assert mfu_text(est, plan) == (f"MFU {est.mfu:.1%} (above the best published Volta fp16 run, "
                                   f"{est.mfu / 2:.1%}: volta-run)")
    assert mfu_source_lines(plan, est) == ["  published volta-run: source of volta-run"]
    flag = predicted_json(est, plan)["mfu_above_published"]
    assert flag["published_mfu"] == est.mfu / 2 and flag["architecture"] == "volta" and flag["source"]
    assert estimate_json(plan, est)["mfu_above_published"] == flag
    data = evaluation_plan_json(Evaluation(plan, est))
    assert data["predicted"]["mfu_above_published"] == flag
    assert check_plan_data(data, "plan")[1] == []  # the schema takes it


def test_a_plan_below_its_ceiling_carries_no_flag(monkeypatch, v100_plan):
    plan, est = v100_plan
    _ceilings(monkeypatch, min(0.999, est.mfu * 2))
    assert mfu_text(est, plan) == f"MFU {est.mfu:.1%}"
    assert mfu_source_lines(plan, est) == []
    assert "mfu_above_published" not in predicted_json(est, plan)
    assert "mfu_above_published" not in estimate_json(plan, est)
    assert "mfu_above_published" not in evaluation_plan_json(Evaluation(plan, est))["predicted"]


def test_plan_and_evaluate_print_the_flag(monkeypatch, tmp_path):
    monkeypatch.setattr(credibility, "load_ceilings", lambda: (ceiling("volta", "fp16", 0.001, "volta-run"),))
    cluster = tmp_path / "v100.yaml"
    cluster.write_text(json.dumps(small_cluster_spec(gpu="V100-SXM2-32GB")))
    args = ["--model", "gpt2", "--cluster", str(cluster), "--global-batch", "8", "--seq-len", "512"]
    shown = invoke("evaluate", *args, "--tp", "1", "--pp", "1", "--dp", "4", "--micro-batch", "1",
                   env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert "(above the best published Volta fp16 run, 0.1%: volta-run)" in shown.stdout
    assert "\n  published volta-run: source of volta-run\n" in shown.stdout
    planned = invoke("plan", *args, "--time-limit", "30", "--json")
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.stdout)["predicted"]["mfu_above_published"]["published_mfu"] == 0.001
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout)
    for command in (("plan", *args, "--time-limit", "30"), ("show", str(plan_file))):
        text = invoke(*command, env={"COLUMNS": "300"})
        assert text.exit_code == 0, text.output
        assert "(above the best published Volta fp16 run, 0.1%: volta-run)" in text.stdout, command
        assert "\n  published volta-run: source of volta-run\n" in text.stdout, command


@pytest.mark.parametrize("published, column", [(0.001, "0.001"), (0.999, "")])
def test_a_sweep_row_carries_the_ceiling_its_mfu_is_above(monkeypatch, tmp_path, published, column):
    monkeypatch.setattr(credibility, "load_ceilings", lambda: (ceiling("volta", "fp16", published),))
    cluster = tmp_path / "v100.yaml"
    cluster.write_text(json.dumps(small_cluster_spec(gpu="V100-SXM2-32GB")))
    out = tmp_path / "rows.csv"
    result = invoke("sweep", "--model", "gpt2", "--cluster", str(cluster), "--global-batch", "8", "--seq-len",
                    "512", "--jobs", "1", "-o", str(out))
    assert result.exit_code == 0, result.output
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok" and row["mfu_above_published"] == column
