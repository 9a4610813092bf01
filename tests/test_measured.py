"""Pricing a GPU type from measured layer times (`--profile GPU=FILE`)."""

from __future__ import annotations

import json

import pytest

from planner.inputs.measured import MIN_FRACTION, KindTimes, _interpolate

from .conftest import invoke, synthetic_profile


def test_interpolation_is_linear_between_points_and_extends_past_them():
    assert _interpolate([1, 2, 4], [1.0, 2.0, 3.0], 3, "proportional") == pytest.approx(2.5)
    assert _interpolate([1, 2, 4], [1.0, 2.0, 3.0], 8, "proportional") == pytest.approx(5.0)
    assert _interpolate([2, 4], [2.0, 3.0], 1, "proportional") == pytest.approx(1.5)
    assert _interpolate([2], [2.0], 6, "proportional") == pytest.approx(6.0)
    assert _interpolate([2], [2.0], 4, "inverse") == pytest.approx(1.0)
    # a steep extrapolation never goes below a share of the nearest measurement
    assert _interpolate([4, 8], [1.0, 10.0], 1, "proportional") == pytest.approx(MIN_FRACTION * 1.0)


def test_kind_times_interpolate_over_micro_batch_and_tp():
    times = KindTimes((1, 2), (1, 2), ((1.0, 2.0), (0.6, 1.2)), ((2.0, 4.0), (1.2, 2.4)))
    assert times.at(1, 1) == pytest.approx((1.0, 2.0))
    assert times.at(2, 2) == pytest.approx((1.2, 2.4))
    assert times.at(4, 1) == pytest.approx((4.0, 8.0))


ARGS = ["--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
        "--tp", "1", "--pp", "1", "--dp", "32", "--micro-batch", "2", "--json"]


def test_evaluate_with_a_profile_prices_compute_from_the_measured_times(tmp_path):
    path = tmp_path / "a100.json"
    model = synthetic_profile(path)
    result = invoke("evaluate", *ARGS, "--profile", f"A100-SXM4-80GB={path}")
    assert result.exit_code == 0, result.stderr
    compute = json.loads(result.stdout)["breakdown_s"]["compute"]
    # one micro-batch of 2 per replica: every layer's measured forward + backward at b = 2
    assert compute == pytest.approx(model.num_layers * (2e-3 + 4e-3), rel=1e-9)
    analytic = json.loads(invoke("evaluate", *ARGS).stdout)["breakdown_s"]["compute"]
    assert analytic != pytest.approx(compute, rel=0.01)


def test_plan_with_a_profile_uses_it_and_still_reprices_exactly(tmp_path):
    path = tmp_path / "a100.json"
    synthetic_profile(path, scale=50.0)  # a very slow "A100"
    base = ["plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024", "--json"]
    slow = invoke(*base, "--profile", f"a100-sxm4-80gb={path}")
    fast = invoke(*base)
    assert slow.exit_code == 0 and fast.exit_code == 0, slow.stderr + fast.stderr
    assert json.loads(slow.stdout)["predicted"]["step_time_s"] > json.loads(fast.stdout)["predicted"]["step_time_s"]


@pytest.mark.parametrize("spec, needle", [
    ("A100-SXM4-80GB", "GPU=FILE"),
    ("H100-SXM5-80GB={path}", "not a GPU type"),
    ("A100-SXM4-80GB={other_seq}", "seq_len"),
    ("A100-SXM4-80GB={other_model}", "parameters"),
])
def test_bad_profiles_exit_2_naming_the_problem(tmp_path, spec, needle):
    path, other_seq, other_model = tmp_path / "p.json", tmp_path / "s.json", tmp_path / "m.json"
    synthetic_profile(path)
    synthetic_profile(other_seq, seq_len=512)
    synthetic_profile(other_model, model_name="gpt2-medium")
    spec = spec.format(path=path, other_seq=other_seq, other_model=other_model)
    result = invoke("evaluate", *ARGS, "--profile", spec)
    assert result.exit_code == 2 and needle in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.torch
def test_a_real_cpu_profile_prices_compute_within_30_percent_of_its_measured_sum(tmp_path):
    import os
    if not os.environ.get("PLANNER_REQUIRE_TORCH"):
        pytest.importorskip("torch")
    config = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000}
    model_path, profile_path = tmp_path / "tiny.json", tmp_path / "profile.json"
    model_path.write_text(json.dumps(config))
    made = invoke("profile", "--model", model_path, "--seq-len", "64", "--micro-batch", "1,2", "--repeats", "3",
                  "-o", profile_path)
    assert made.exit_code == 0, made.stderr
    cluster = tmp_path / "one.yaml"
    cluster.write_text("node_groups: [{name: g, gpu: A100-SXM4-80GB, nodes: 1, gpus_per_node: 1}]\n")
    result = invoke("evaluate", "--model", model_path, "--cluster", cluster, "--global-batch", "2",
                    "--seq-len", "64", "--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "2",
                    "--profile", f"A100-SXM4-80GB={profile_path}", "--json")
    assert result.exit_code == 0, result.stderr
    compute = json.loads(result.stdout)["breakdown_s"]["compute"]
    profile = json.loads(profile_path.read_text())
    measured = sum(l["measured"]["fwd_s"][1] + l["measured"]["bwd_s"][1] for l in profile["layers"])
    assert compute == pytest.approx(measured, rel=0.30)
