"""Failures, checkpoints and goodput (planner.cost.reliability): Daly's interval and efficiency, the job's
interruption rate from its nodes, the Llama 3 default, spot preemptions, and `--objective goodput`."""

from __future__ import annotations

import math

import pytest
import yaml

from planner.cost.energy import rented_nodes
from planner.cost.evaluate import evaluate
from planner.cost.reliability import (AMPERE_GPU_MTBF_H, BLACKWELL_GPU_MTBF_H, DEFAULT_NODE_MTBF_H,
                                      DEFAULT_RESTART_S, HOPPER_GPU_MTBF_H, checkpoint_bytes, daly_interval_s,
                                      efficiency, gpu_mtbf_h, reliability)
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

from .conftest import assert_bad_input, invoke, ok_json


def plan_on(nodes: int, **group_keys):
    spec = {"name": "c", "node_groups": [{"name": "a", "gpu": "H100-SXM5-80GB", "nodes": nodes, "gpus_per_node": 8,
                                          **group_keys}]}
    cluster = cluster_from_spec(spec)
    plan = uniform_plan(load_model("gpt2"), cluster, Training(8 * nodes * 8, 1024, "bf16", 1), tp=1, pp=1,
                        dp=8 * nodes)
    return plan, evaluate(plan)


def test_the_default_rates_give_llama_3s_one_interruption_every_three_hours_on_16k_h100s():
    job_hours = 1 / (16384 / HOPPER_GPU_MTBF_H + 2048 / DEFAULT_NODE_MTBF_H)
    assert job_hours == pytest.approx(54 * 24 / 419)  # 3.09 h: "one failure every three hours"
    plan, est = plan_on(2)
    failures = reliability(plan, est, rented_nodes(plan))
    assert failures.mtbf_s == pytest.approx(3600 / (16 / HOPPER_GPU_MTBF_H + 2 / DEFAULT_NODE_MTBF_H))


@pytest.mark.parametrize("gpu, expected", [("H100-SXM5-80GB", HOPPER_GPU_MTBF_H), ("A100-SXM4-80GB", AMPERE_GPU_MTBF_H),
                                           ("V100-SXM2-32GB", AMPERE_GPU_MTBF_H), ("B200", BLACKWELL_GPU_MTBF_H)])
def test_each_gpu_fails_at_its_architectures_measured_rate_unless_the_cluster_says(gpu, expected):
    group = cluster_from_spec({"name": "c", "node_groups": [{"name": "a", "gpu": gpu, "nodes": 1, "gpus_per_node": 8}]}).groups[0]
    assert gpu_mtbf_h(group) == pytest.approx(expected)
    told = cluster_from_spec({"name": "c", "node_groups": [{"name": "a", "gpu": gpu, "nodes": 1, "gpus_per_node": 8,
                                                           "gpu_mtbf_hours": 1000}]}).groups[0]
    assert gpu_mtbf_h(told) == 1000
    # Meta's RSC-1 A100 fleet: 6.50 interruptions per 1,000 node-days, all causes together
    assert 24000 / 6.5 == pytest.approx(1 / (8 / AMPERE_GPU_MTBF_H + 1 / DEFAULT_NODE_MTBF_H))


def test_daly_interval_is_youngs_square_root_to_first_order_and_maximises_efficiency():
    write, mtbf, restart = 60.0, 86400.0, 600.0
    tau = daly_interval_s(write, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * write * mtbf) - write, rel=0.01)
    best = efficiency(tau, write, restart, mtbf)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert efficiency(tau * factor, write, restart, mtbf) < best
    assert daly_interval_s(3 * mtbf, mtbf) == mtbf  # a checkpoint longer than 2 M: every M
    assert 0 < best < 1


def test_preemptions_and_node_failures_add_to_the_gpus_rate():
    plan, est = plan_on(2, preemptions_per_hour=0.5, node_mtbf_hours=100)
    failures = reliability(plan, est, rented_nodes(plan))
    rate_per_h = 16 / HOPPER_GPU_MTBF_H + 2 * (1 / 100 + 0.5)
    assert failures.mtbf_s == pytest.approx(3600 / rate_per_h)
    calm, calm_est = plan_on(2)
    assert failures.goodput_tokens_per_s < reliability(calm, calm_est, rented_nodes(calm)).goodput_tokens_per_s


def test_a_checkpoint_holds_the_weights_and_the_optimizer_states_and_writes_at_a_gb_per_node():
    plan, est = plan_on(2)
    assert checkpoint_bytes(plan) == pytest.approx(plan.model.params * (2 + 12))
    failures = reliability(plan, est, rented_nodes(plan))
    assert failures.checkpoint_write_s == pytest.approx(checkpoint_bytes(plan) / (2 * 2e12 / 2048))
    assert failures.restart_s == pytest.approx(DEFAULT_RESTART_S + failures.checkpoint_write_s)


def test_plan_reports_goodput_and_the_run_with_failures():
    data = ok_json(invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64",
                          "--seq-len", "1024", "--tokens", "1000000000", "--json"))
    rel, run = data["predicted"]["reliability"], data["predicted"]["run"]
    assert 0 < rel["efficiency"] < 1 and rel["goodput_tokens_per_s"] < data["predicted"]["tokens_per_s"]
    assert run["expected_wall_s"] > run["wall_s"]
    assert run["expected_interruptions"] == pytest.approx(run["expected_wall_s"] / rel["mtbf_s"])


def test_goodput_objective_drops_a_group_that_is_preempted_often(tmp_path):
    spec = yaml.safe_load(open("profiles/clusters/a100-v100-mix.yaml"))
    spec["node_groups"][1]["preemptions_per_hour"] = 2.0  # a spot group, preempted twice an hour per node
    spec["node_groups"][0]["nodes"], spec["node_groups"][1]["nodes"] = 1, 2  # 5 subsets to plan, not 14
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(spec))
    data = ok_json(invoke("plan", "--cluster", str(path), "--objective", "goodput", "--json"))
    objective = data["solver"]["objective"]
    assert objective["nodes"]["v100"] < 2
    assert objective["all_nodes"]["goodput_tokens_per_s"] < data["predicted"]["reliability"]["goodput_tokens_per_s"]


@pytest.mark.parametrize("key, value, needle", [
    ("gpu_mtbf_hours", 0, "gpu_mtbf_hours: must be a number"),
    ("preemptions_per_hour", -1, "preemptions_per_hour: must be a number from 0 to 60"),
])
def test_bad_failure_figures_are_bad_input(tmp_path, key, value, needle):
    spec = {"name": "x", "node_groups": [{"name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8,
                                          key: value}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_bad_input(invoke("plan", "--model", "gpt2", "--cluster", str(path), "--global-batch", "8",
                            "--seq-len", "1024"), needle)
