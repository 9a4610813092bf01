"""Dollars and energy of a plan (planner.cost.energy), the power model under a cap (planner.cost.power),
power caps per stage (planner.search.power_caps), prices and power in the catalog and cluster files, and
the commands that report them (plan, evaluate, frontier, sweep columns, launch files)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from planner import api
from planner.api import PlanRequest
from planner.api.frontier import pareto_indices
from planner.core.errors import BadInput
from planner.cost.energy import J_PER_MWH, run_cost
from planner.cost.evaluate import evaluate
from planner.cost.power import (AMPERE, POWER_CURVES, VOLTA, cap_levels_W, capped, check_cap, clock_fraction, lowest_cap_W,
                                 running_power_W)
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan
from planner.search.power_caps import choose_caps, with_caps

from .conftest import assert_bad_input, benchmark_module, invoke, ok_json


def two_node_plan(pue: float = 1.0, node_power: float = 0.0, price: float | None = None):
    """gpt2 on two 2-GPU A100 nodes: pp 2 (one node each), dp 2."""
    group = {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 2, "node_power_W": node_power}
    if price is not None:
        group["price_per_gpu_hour"] = price
    cluster = cluster_from_spec({"name": "two", "pue": pue, "node_groups": [group]})
    plan = uniform_plan(load_model("gpt2"), cluster, Training(16, 1024, "bf16", 1), tp=1, pp=2, dp=2)
    return plan, evaluate(plan)


def test_every_catalog_gpu_has_sourced_power_and_price():
    for name, gpu in load_catalog().items():
        assert gpu.power is not None and 0 < gpu.power.idle_W < gpu.power.board_W, name
        assert gpu.power.source and gpu.price_source and gpu.price_usd_per_gpu_s > 0, name


def test_energy_is_running_power_while_active_and_idle_power_while_waiting():
    plan, est = two_node_plan(pue=1.2, node_power=1000.0)
    cost = run_cost(plan, est)
    gpu = plan.cluster.groups[0].gpu
    step = est.step_time_s
    assert running_power_W(gpu) == pytest.approx(AMPERE.draw_fraction * gpu.power.board_W)  # an A100
    gpus = sum(running_power_W(gpu) * a + gpu.power.idle_W * (step - a) for a in est.active_s_by_rank.values())
    assert set(est.active_s_by_rank) == {0, 1, 2, 3}
    assert all(0 < a <= step for a in est.active_s_by_rank.values())
    assert cost.gpu_energy_J_per_step == pytest.approx(gpus)
    assert cost.energy_J_per_step == pytest.approx(1.2 * (gpus + 2 * 1000.0 * step))
    assert cost.energy_J_per_token == pytest.approx(cost.energy_J_per_step / (16 * 1024))


def test_dollars_are_the_rent_of_every_gpu_of_the_nodes_used_for_the_step():
    plan, est = two_node_plan(price=3.6)
    cost = run_cost(plan, est)
    assert cost.usd_per_hour == pytest.approx(4 * 3.6)
    assert cost.usd_per_step == pytest.approx(4 * 3.6 * est.step_time_s / 3600)
    run = cost.for_tokens(16 * 1024 * 10 + 1)
    assert run.steps == 11 and run.wall_s == pytest.approx(11 * est.step_time_s)
    assert run.usd == pytest.approx(11 * cost.usd_per_step)
    assert run.energy_MWh == pytest.approx(11 * cost.energy_J_per_step / J_PER_MWH)


def test_a_cluster_price_of_zero_is_owned_hardware_and_overrides_the_catalog():
    plan, est = two_node_plan(price=0.0)
    assert run_cost(plan, est).usd_per_step == 0.0
    plan, est = two_node_plan()
    assert run_cost(plan, est).usd_per_hour == pytest.approx(4 * load_catalog()["A100-SXM4-80GB"].price_usd_per_gpu_s
                                                             * 3600)


def test_a_gpu_declared_without_price_or_power_reports_them_missing():
    cluster = cluster_from_spec({"name": "own", "gpus": {"MyGPU": {"memory_GiB": 80, "peak_tflops": {"bf16": 300},
                                                                   "hbm_GBps": 2000}},
                                 "node_groups": [{"name": "g", "gpu": "MyGPU", "nodes": 1, "gpus_per_node": 2}]})
    plan = uniform_plan(load_model("gpt2"), cluster, Training(8, 1024, "bf16", 1), tp=1, pp=1, dp=2)
    cost = run_cost(plan, evaluate(plan))
    assert cost.usd_per_step is None and cost.energy_J_per_step is None
    assert cost.missing_price == ("MyGPU",) and cost.missing_power == ("MyGPU",)


@pytest.mark.parametrize("key, value, needle", [
    ("pue", 0.9, "pue: must be a number from 1 to 3"),
    ("price_per_gpu_hour", -1, "price_per_gpu_hour: must be a number from 0 to 1000"),
    ("node_power_W", "a lot", "node_power_W: must be a number"),
    ("power_W", 3, "unknown key"),
])
def test_bad_price_and_power_figures_are_bad_input_naming_the_field(tmp_path, key, value, needle):
    spec = {"name": "x", "node_groups": [{"name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8}]}
    if key == "pue":
        spec["pue"] = value
    else:
        spec["node_groups"][0][key] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = invoke("plan", "--model", "gpt2", "--cluster", str(path), "--global-batch", "8", "--seq-len", "1024")
    assert_bad_input(result, needle)


def test_a_catalog_power_figure_out_of_order_is_bad_input():
    spec = {"name": "x", "gpus": {"A100-SXM4-80GB": {"power_W": {"board": 400, "idle": 450}}},
            "node_groups": [{"name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8}]}
    with pytest.raises(BadInput, match="idle power 450 W must be below the board power 400 W"):
        cluster_from_spec(spec)


# --- the power model -----------------------------------------------------------------------------


def test_a_cap_below_the_training_draw_slows_the_gpu_on_its_architectures_fitted_curve():
    gpu = load_catalog()["V100-PCIE-32GB"]  # 250 W, as in the Zeus trace
    assert clock_fraction(gpu, 250) == 1.0 and clock_fraction(gpu, 0.9 * 250) == 1.0  # above the draw
    # the Zeus trace's V100: 0.78-0.85 of the speed at 150 W, 0.93-0.95 at 200 W (three workloads)
    assert 0.77 <= clock_fraction(gpu, 150) <= 0.86 and 0.92 <= clock_fraction(gpu, 200) <= 0.96
    assert running_power_W(gpu) == pytest.approx(VOLTA.draw_fraction * 250) and running_power_W(gpu, 150) == 150
    a40_like = replace(gpu, architecture="ampere")  # the A40 at 200 of 300 W: 0.885-0.933
    assert 0.83 <= clock_fraction(a40_like, 250 * 2 / 3) <= 0.94
    levels = cap_levels_W(gpu)
    assert levels[0] == 250 and levels[-1] >= lowest_cap_W(gpu) >= VOLTA.floor_fraction * 250
    assert list(levels) == sorted(levels, reverse=True)
    gpu = load_catalog()["A100-SXM4-80GB"]
    slow = capped(gpu, 250)
    assert slow.peak("bf16") == pytest.approx(gpu.peak("bf16") * clock_fraction(gpu, 250))
    assert slow.hbm_bandwidth_bytes_per_s == gpu.hbm_bandwidth_bytes_per_s
    with pytest.raises(BadInput, match="outside A100-SXM4-80GB's caps"):
        check_cap(gpu, 50, "plan", "stages[0].power_cap_W")


@pytest.mark.parametrize("architecture", ["volta", "turing", "ampere"])
def test_each_measured_architectures_curve_is_the_least_squares_fit_of_its_published_sweeps(architecture):
    fitting = benchmark_module("fit_power_curves")
    sweeps = [s for s in yaml.safe_load(fitting.DATA.read_text())["sweeps"] if s["architecture"] == architecture]
    found, _ = fitting.fit(sweeps)
    curve = POWER_CURVES[architecture]
    assert (curve.floor_fraction, curve.exponent) == pytest.approx((found.floor_fraction, found.exponent))
    assert curve.draw_fraction == pytest.approx(found.draw_fraction, abs=5e-4)
    assert fitting.rms(fitting.errors(curve, fitting.points(sweeps))) < 0.05


def test_a_capped_stage_computes_slower_and_draws_its_cap():
    plan, est = two_node_plan()
    capped_plan = with_caps(plan, {0: 200.0})
    slow = evaluate(capped_plan)
    assert slow.step_time_s > est.step_time_s
    ranks = {r for rep in capped_plan.stages[0].replicas for r in rep.ranks}
    assert all(slow.active_s_by_rank[r] > est.active_s_by_rank[r] for r in ranks)
    power = plan.cluster.groups[0].gpu.power
    gpu = plan.cluster.groups[0].gpu
    expected = sum((200.0 if r in ranks else running_power_W(gpu)) * a + power.idle_W * (slow.step_time_s - a)
                   for r, a in slow.active_s_by_rank.items())
    assert run_cost(capped_plan, slow).gpu_energy_J_per_step == pytest.approx(expected)


@pytest.mark.parametrize("slowdown", [0.0, 0.005, 0.05])
def test_power_caps_save_energy_within_the_allowed_slowdown(slowdown):
    result = api.plan(PlanRequest())
    choice = choose_caps(result.plan, api.reprice_plan, slowdown)
    assert choice.estimate.step_time_s <= choice.uncapped_estimate.step_time_s * (1 + slowdown) * (1 + 1e-9)
    assert choice.cost.energy_J_per_step <= choice.uncapped_cost.energy_J_per_step
    if choice.caps_W:
        assert choice.cost.energy_J_per_step < choice.uncapped_cost.energy_J_per_step
    # the chosen plan re-prices to the reported estimate
    assert api.reprice_plan(choice.plan).step_time_s == pytest.approx(choice.estimate.step_time_s, rel=1e-12)


def test_a_slowdown_allowed_caps_the_stages_off_the_critical_path_of_the_example():
    result = api.plan(PlanRequest())
    choice = choose_caps(result.plan, api.reprice_plan, 0.005)
    assert choice.caps_W and choice.to_json()["energy_saved_fraction"] > 0.01


# --- the commands -------------------------------------------------------------------------------


def test_plan_reports_cost_energy_and_the_run_of_n_tokens():
    data = ok_json(invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64",
                          "--seq-len", "1024", "--tokens", "1000000", "--json"))
    cost, run = data["predicted"]["cost"], data["predicted"]["run"]
    assert cost["usd_per_step"] > 0 and cost["energy_J_per_token"] > 0
    assert run["steps"] == -(-1_000_000 // (64 * 1024))
    assert run["usd"] == pytest.approx(run["steps"] * cost["usd_per_step"])


def test_plan_with_power_caps_writes_caps_that_validate_and_reach_the_launch_files(tmp_path):
    out = tmp_path / "plan.json"
    ok_json(invoke("plan", "--power-caps", "--json", "-o", str(out)))
    data = json.loads(out.read_text())
    caps = data["predicted"]["power_caps"]
    assert caps["caps_W"] and caps["slowdown"] <= 0.005 + 1e-12
    assert [s.get("power_cap_W") for s in data["stages"] if s.get("power_cap_W")]
    assert invoke("validate", str(out)).exit_code == 0
    launch = tmp_path / "launch"
    assert invoke("export", str(out), "--to", "megatron", "-o", str(tmp_path / "args.txt"),
                  "--launch-dir", str(launch)).exit_code == 0
    scripts = "".join(p.read_text() for p in sorted(launch.iterdir()))
    for cap in caps["caps_W"].values():
        assert f"-pl {cap:g}" in scripts


def test_a_cap_outside_the_gpus_range_does_not_validate(tmp_path):
    out = tmp_path / "plan.json"
    ok_json(invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
                   "--json", "-o", str(out)))
    data = json.loads(out.read_text())
    data["stages"][0]["power_cap_W"] = 5000
    out.write_text(json.dumps(data))
    result = invoke("validate", str(out))
    assert result.exit_code != 0 and "power_cap_W" in result.output and "outside" in result.output


def small_mix(tmp_path) -> str:
    """The default example's cluster cut to 1 A100 node + 2 V100 nodes: 2 x 3 - 1 subsets to plan."""
    spec = yaml.safe_load(open("profiles/clusters/a100-v100-mix.yaml"))
    spec["node_groups"][0]["nodes"], spec["node_groups"][1]["nodes"] = 1, 2
    path = tmp_path / "small-mix.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_objective_cost_leaves_idle_the_nodes_that_do_not_pay(tmp_path):
    data = ok_json(invoke("plan", "--cluster", small_mix(tmp_path), "--objective", "cost", "--json"))
    objective = data["solver"]["objective"]
    assert objective["name"] == "cost" and objective["proven"]
    assert objective["idle"] and objective["all_nodes"]["usd_per_step"] > data["predicted"]["cost"]["usd_per_step"]
    assert objective["subsets"] == 2 * 3 - 1


def test_objective_cost_without_a_price_is_bad_input(tmp_path):
    spec = {"name": "own", "gpus": {"MyGPU": {"memory_GiB": 80, "peak_tflops": {"bf16": 300}, "hbm_GBps": 2000}},
            "node_groups": [{"name": "g", "gpu": "MyGPU", "nodes": 1, "gpus_per_node": 2}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = invoke("plan", "--model", "gpt2", "--cluster", str(path), "--global-batch", "8", "--seq-len", "1024",
                    "--objective", "cost")
    assert_bad_input(result, "node group 'g' has no price")


def test_max_step_time_below_every_plan_exits_one():
    result = invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
                    "--max-step-time", "0.000001")
    assert result.exit_code == 1 and "max-step-time" in result.output


def test_frontier_lists_the_pareto_set_and_draws_it(tmp_path):
    svg = tmp_path / "f.svg"
    data = ok_json(invoke("frontier", "--cluster", small_mix(tmp_path), "--json", "--svg", str(svg)))
    assert data["frontier"] and data["proven"]
    points = [data["points"][i] for i in data["frontier"]]
    steps = [p["step_time_s"] for p in points]
    assert steps == sorted(steps)
    figures = [(p["step_time_s"], p["usd_per_step"], p["energy_J_per_step"]) for p in points]
    for a in figures:  # no point of the set is at least as good as another in all three, better in one
        assert not any(b != a and all(x <= y for x, y in zip(b, a)) for b in figures)
    others = [(p["step_time_s"], p["usd_per_step"], p["energy_J_per_step"]) for p in data["points"]
              if "step_time_s" in p and not p["on_frontier"]]
    for a in others:  # every other point is dominated by (or equal to) one of the set
        assert any(all(x <= y for x, y in zip(b, a)) for b in figures)
    assert {m["group"] for m in data["marginal"]} == {"a100", "v100"}
    assert svg.read_text().startswith("<svg") and "polyline" in svg.read_text()


def test_pareto_indices_keep_exactly_the_undominated_points():
    points = [(1, 5, 5), (2, 4, 6), (2, 4, 6), (3, 6, 6), (1, 5, 5), (4, 1, 9)]
    assert pareto_indices(points) == (0, 1, 5)


def test_sweep_rows_carry_the_cost_columns(tmp_path):
    out = tmp_path / "rows.jsonl"
    result = invoke("sweep", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
                    "-o", str(out))
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text().splitlines()[0])
    assert row["usd_per_step"] > 0 and row["energy_J_per_token"] > 0


def test_caps_need_power_figures_of_every_gpu():
    cluster = cluster_from_spec({"name": "own", "gpus": {"MyGPU": {"memory_GiB": 80, "peak_tflops": {"bf16": 300},
                                                                   "hbm_GBps": 2000}},
                                 "node_groups": [{"name": "g", "gpu": "MyGPU", "nodes": 1, "gpus_per_node": 2}]})
    with pytest.raises(BadInput, match="no power figures"):
        api.plan(replace(PlanRequest(model="gpt2", cluster=cluster, global_batch=8, seq_len=1024), power_caps=True))


def test_validate_recomputes_the_reported_cost(tmp_path):
    out = tmp_path / "plan.json"
    ok_json(invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "1024",
                   "--json", "-o", str(out)))
    data = json.loads(out.read_text())
    data["predicted"]["cost"]["usd_per_step"] *= 2
    out.write_text(json.dumps(data))
    result = invoke("validate", str(out))
    assert result.exit_code != 0 and "predicted.cost.usd_per_step" in result.output


def test_a_sweep_row_plans_for_its_objective(tmp_path):
    rows = {}
    for objective in ("time", "cost"):
        out = tmp_path / f"{objective}.jsonl"
        result = invoke("sweep", "--model", "gpt2", "--cluster", small_mix(tmp_path), "--global-batch", "64",
                        "--seq-len", "1024", "--objective", objective, "-o", str(out))
        assert result.exit_code == 0, result.output
        rows[objective] = json.loads(out.read_text().splitlines()[0])
    assert rows["cost"]["usd_per_step"] <= rows["time"]["usd_per_step"]
    assert rows["cost"]["step_time_s"] >= rows["time"]["step_time_s"]


def test_frontier_with_power_caps_weighs_each_set_capped_and_uncapped(tmp_path):
    data = ok_json(invoke("frontier", "--cluster", small_mix(tmp_path), "--power-caps", "--json"))
    capped = [p for p in data["points"] if "power_caps_W" in p]
    assert capped
    for point in capped:  # its uncapped twin: the same nodes, faster, more energy
        twin = next(p for p in data["points"] if p["nodes"] == point["nodes"] and "power_caps_W" not in p
                    and "step_time_s" in p)
        assert twin["step_time_s"] <= point["step_time_s"] <= twin["step_time_s"] * 1.005 * (1 + 1e-9)
        assert point["energy_J_per_step"] < twin["energy_J_per_step"]
