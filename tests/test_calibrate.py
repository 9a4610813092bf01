"""`planner calibrate`: fitting efficiencies to a measured profile, and `--calibration`."""

from __future__ import annotations

import json

import pytest
import yaml

from planner.cost.formulas import DEFAULT_PARAMS, layer_time
from planner.core.dims import StageDims
from planner.cost.sharding import Sharding
from planner.inputs.hardware import load_catalog
from planner.inputs.model import load_model

from .conftest import invoke

TRUE = {"gemm_efficiency": 0.45, "hbm_efficiency": 0.5, "attention_efficiency": 0.3}


def profile_from_params(path, params, seq_len=1024, gpu="A100-SXM4-80GB"):
    """A gpt2 profile whose times are the analytic model's with `params` (a known answer)."""
    model = load_model("gpt2")
    spec = load_catalog()[gpu]
    layers = []
    for layer in model.layers:
        fwd, bwd = [], []
        for b in (1, 2, 4):
            lt = layer_time(layer, spec, Sharding("bf16", b, seq_len, "standard", StageDims(), "none"), spec.intra_node,
                            params)
            fwd.append(lt.fwd_s)
            bwd.append(lt.bwd_s)
        layers.append({"name": layer.name, "kind": layer.kind, "params": layer.params,
                       "fwd_flops_per_sample": 0, "act_bytes_per_sample": 0, "out_bytes_per_sample": 0,
                       "measured": {"micro_batch": [1, 2, 4], "fwd_s": fwd, "bwd_s": bwd}})
    path.write_text(json.dumps({"format": "planner.profile/v1", "model": "gpt2", "dtype": "bf16",
                                "seq_len": seq_len, "source": "measured", "layers": layers}))


def test_calibrate_recovers_known_efficiencies_and_cuts_the_error(tmp_path):
    profile, calib = tmp_path / "p.json", tmp_path / "c.yaml"
    profile_from_params(profile, DEFAULT_PARAMS.with_updates(**TRUE))
    result = invoke("calibrate", profile, "--gpu", "a100-sxm4-80gb", "-o", calib, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rms_log_error_after"] < 0.05 < report["rms_log_error_before"]
    assert report["params"]["gemm_efficiency"] == pytest.approx(TRUE["gemm_efficiency"], rel=0.15)
    assert yaml.safe_load(calib.read_text())["gpu"] == "A100-SXM4-80GB"


def test_calibration_moves_evaluate_toward_the_measured_times(tmp_path):
    profile, calib = tmp_path / "p.json", tmp_path / "c.yaml"
    slow = DEFAULT_PARAMS.with_updates(**TRUE)
    profile_from_params(profile, slow)
    assert invoke("calibrate", profile, "--gpu", "A100-SXM4-80GB", "-o", calib).exit_code == 0
    args = ["evaluate", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
            "--tp", "1", "--pp", "1", "--dp", "32", "--micro-batch", "2", "--attention", "standard", "--json"]
    before = json.loads(invoke(*args).stdout)["breakdown_s"]["compute"]
    after = json.loads(invoke(*args, "--calibration", calib).stdout)["breakdown_s"]["compute"]
    model = load_model("gpt2")
    spec = load_catalog()["A100-SXM4-80GB"]
    sharding = Sharding("bf16", 2, 1024, "standard", StageDims(), "none")
    truth = sum(layer_time(l, spec, sharding, spec.intra_node, slow).compute_s
                for l in model.layers)
    assert abs(after - truth) < abs(before - truth)
    assert after == pytest.approx(truth, rel=0.1)


def test_a_calibration_for_a_gpu_not_in_the_cluster_is_bad_input(tmp_path):
    profile, calib = tmp_path / "p.json", tmp_path / "c.yaml"
    profile_from_params(profile, DEFAULT_PARAMS)
    assert invoke("calibrate", profile, "--gpu", "H100-SXM5-80GB", "-o", calib).exit_code == 0
    result = invoke("evaluate", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64",
                    "--seq-len", "1024", "--tp", "1", "--pp", "1", "--dp", "32", "--micro-batch", "2",
                    "--calibration", calib)
    assert result.exit_code == 2 and "H100" in result.stderr
