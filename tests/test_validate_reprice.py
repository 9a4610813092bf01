"""`planner validate` recomputes the figures a plan reports: model.params from model.config and
`predicted` by re-pricing the plan (planner.verify.figures)."""

from __future__ import annotations

import json

import pytest

from .conftest import assert_bad_input, invoke, synthetic_profile, write_json

PLAN = ["plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """A plan as `planner plan` writes it."""
    path = tmp_path_factory.mktemp("reprice") / "plan.json"
    result = invoke(*PLAN, "-o", path)
    assert result.exit_code == 0, result.stderr
    return json.loads(path.read_text())


def test_a_plan_as_written_by_plan_validates_clean(planned, tmp_path):
    result = invoke("validate", write_json(tmp_path, planned), "--json")
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    assert json.loads(result.stdout) == {"valid": True, "kind": "plan", "problems": [], "notes": []}


def test_an_edited_step_time_is_refused_naming_the_key_and_both_values(planned, tmp_path):
    data = json.loads(json.dumps(planned))
    true_step = data["predicted"]["step_time_s"]
    data["predicted"]["step_time_s"] = 0.001
    line = assert_bad_input(invoke("validate", write_json(tmp_path, data)), "predicted.step_time_s", "0.001",
                            repr(true_step))
    assert "more figures differ" not in line  # the other figures are the planner's own


def test_edited_params_are_refused_with_the_recount(planned, tmp_path):
    data = json.loads(json.dumps(planned))
    params = data["model"]["params"]
    data["model"]["params"] = params * 2
    assert_bad_input(invoke("validate", write_json(tmp_path, data)), "model.params", str(params * 2), str(params))


def test_an_edited_nested_figure_is_refused(planned, tmp_path):
    data = json.loads(json.dumps(planned))
    data["predicted"]["peak_memory_GiB_by_rank"]["0"] /= 2
    assert_bad_input(invoke("validate", write_json(tmp_path, data)), "predicted.peak_memory_GiB_by_rank.0")


def test_a_figure_within_rounding_is_accepted(planned, tmp_path):
    data = json.loads(json.dumps(planned))
    data["predicted"]["step_time_s"] *= 1 + 1e-12
    assert invoke("validate", write_json(tmp_path, data)).exit_code == 0


def test_a_plan_without_predicted_is_not_compared(planned, tmp_path):
    data = json.loads(json.dumps(planned))
    del data["predicted"]
    assert invoke("validate", write_json(tmp_path, data)).exit_code == 0


def test_export_still_reads_a_plan_whose_figures_differ(planned, tmp_path):
    """Only validate compares them: a plan priced by another planner version still exports."""
    data = json.loads(json.dumps(planned))
    data["predicted"]["step_time_s"] = 0.001
    assert invoke("export", write_json(tmp_path, data), "--to", "megatron").exit_code == 0


@pytest.fixture
def measured_plan(tmp_path):
    """A plan priced with a measured profile (`plan --profile`), and the profile's path."""
    profile = tmp_path / "a100.json"
    synthetic_profile(profile, scale=50.0)
    out = tmp_path / "measured.json"
    result = invoke(*PLAN, "--profile", f"a100-sxm4-80gb={profile}", "-o", out)
    assert result.exit_code == 0, result.stderr
    return out, profile


def test_a_plan_priced_with_a_profile_is_repriced_with_it(measured_plan):
    out, profile = measured_plan
    data = json.loads(out.read_text())
    assert data["predicted"]["priced_with"] == {"profiles": [f"a100-sxm4-80gb={profile}"], "calibrations": []}
    result = invoke("validate", out)
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    data["predicted"]["step_time_s"] *= 2
    assert_bad_input(invoke("validate", write_json(out.parent, data, "edited.json")), "predicted.step_time_s")


def test_a_recorded_profile_that_cannot_be_read_leaves_a_note_not_a_pass_in_silence(measured_plan):
    out, profile = measured_plan
    profile.unlink()
    result = invoke("validate", out)
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "note: predicted not re-checked" in lines[0] and str(profile) in lines[0]
    assert json.loads(invoke("validate", out, "--json").stdout)["notes"][0].startswith("predicted not re-checked")


def test_a_plan_priced_with_a_calibration_is_repriced_with_it(tmp_path):
    from planner.cost.formulas import DEFAULT_PARAMS

    from .test_calibrate import TRUE, profile_from_params

    profile, calibration, out = tmp_path / "p.json", tmp_path / "c.yaml", tmp_path / "calibrated.json"
    profile_from_params(profile, DEFAULT_PARAMS.with_updates(**TRUE))
    assert invoke("calibrate", profile, "--gpu", "A100-SXM4-80GB", "-o", calibration).exit_code == 0
    result = invoke("evaluate", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
                    "--tp", "1", "--pp", "1", "--dp", "32", "--micro-batch", "2", "--calibration", calibration,
                    "--plan-out", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["predicted"]["priced_with"] == {"profiles": [], "calibrations": [str(calibration)]}
    assert invoke("validate", out).exit_code == 0
    data = json.loads(out.read_text())
    del data["predicted"]["priced_with"]  # priced with the calibration, re-priced without it: refused
    assert_bad_input(invoke("validate", write_json(tmp_path, data, "unrecorded.json")), "predicted.step_time_s")
