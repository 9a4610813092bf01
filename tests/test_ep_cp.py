"""MoE expert parallelism beside context parallelism: the expert grid folded over tp x cp x dp
(StageDims.edp, ep_group, edp_group), the all-to-all of each cp rank's tokens, the experts'
gradient reduction over their expert-data-parallel group, `evaluate --cp --ep`, the rank map, the
Megatron export, the runtimes' capabilities, the search against the brute-force oracle, and the
issue's model at a long sequence."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.core.dims import StageDims
from planner.cost.formulas import CostParams
from planner.cost.moe import AllToAllGroup, moe_alltoall_s
from planner.inputs.hardware import GIB, Link, cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, uniform_plan
from planner.search.orchestration.driver import SolverOptions
from planner.verify.oracle import brute_force

from .conftest import H100, assert_solves_to_the_optimum
from .test_ep import QWEN, _ep_plan, tiny_moe


# --- beside context parallelism --------------------------------------------------------------


def test_expert_grid_folds_over_tp_cp_dp_as_megatron_core_builds_it():
    # megatron-core 0.16.1 initialize_model_parallel: expert RankGenerator(tp=etp, ep, dp=edp, cp=1,
    # order "tp-cp-ep-dp-pp") over the world / pp GPUs; the dense one orders tp-cp-dp
    dims = StageDims(2, dp=2, cp=4, ep=4)
    assert dims.expert_problem(128) == "" and dims.edp == 2  # 16 GPUs over etp x ep = 2 x 4
    assert dims.ep_group(0) == [0, 2, 4, 6]  # the 4 cp ranks of replica 0, TP position 0
    assert StageDims(1, dp=4, cp=2, ep=4).ep_group(5) == [4, 5, 6, 7]  # replicas 2 and 3, each cp rank
    assert StageDims(1, dp=4, cp=2, ep=4).edp_group(5) == [1, 5]  # same experts: etp x ep = 4 apart
    assert "tp x cp x dp = 1x2x3" in StageDims(1, dp=3, cp=2, ep=4).expert_problem(8)


def test_the_alltoall_carries_each_cp_ranks_local_tokens():
    layer = load_model(QWEN).layers[1]
    link = Link(100e9, 0.0, "nvlink")
    group, params = AllToAllGroup(8, 8, link, link), CostParams()
    whole = moe_alltoall_s(layer, 1, 32768, StageDims(1, dp=8, ep=8), 2, group, params)
    split = moe_alltoall_s(layer, 1, 32768, StageDims(1, dp=4, cp=2, ep=8), 2, group, params)
    assert split[0] == pytest.approx(whole[0] / 2) and split[1] == pytest.approx(whole[1] / 2)


def test_expert_gradients_and_fsdp_collectives_run_over_their_edp_group_on_the_nic():
    # tp 1 x ep 8 in each node of 2: an expert's edp group is one GPU per node, so the experts'
    # gradients cross the NIC whole while the dense ones reduce inside the node first
    from planner.cost.pricing import DpLayout
    from planner.cost.stage_tail import grad_reduce_s
    nvl, ib = Link(400e9, 0.0, "nvlink"), Link(50e9, 0.0, "ib")
    dims, p = StageDims(1, dp=8, cp=2, ep=8, zero=1), CostParams()
    dense, edp = DpLayout(16, 8, 2, nvl, ib), DpLayout(2, 1, 2, nvl, ib)
    assert dims.edp == 2
    apart = grad_reduce_s(10e9, dims, "bf16", dense, p, 0.0, expert_params=8e9, expert_layout=edp)
    assert apart == pytest.approx(grad_reduce_s(2e9, dims, "bf16", dense, p, 0.0)
                                  + grad_reduce_s(8e9, dims, "bf16", edp, p, 0.0))
    assert apart > grad_reduce_s(10e9, dims, "bf16", dense, p, 0.0) * 2
    # ZeRO-3 (torchtitan's FSDP): the experts' gathers and reduce-scatters over their efsdp group too
    from planner.cost.pricing import zero_comm
    fsdp = dataclasses.replace(dims, zero=3)
    split = zero_comm(10e9, fsdp, "bf16", dense, p, 8e9, edp)
    assert split.total_s == pytest.approx(zero_comm(2e9, fsdp, "bf16", dense, p).total_s
                                          + zero_comm(8e9, fsdp, "bf16", edp, p).total_s)


def test_evaluate_cp_with_ep_prices_both_and_the_megatron_export_carries_both(h100):
    cmd = ["evaluate", "--model", QWEN, "--cluster", "h100.yaml", "--global-batch", "16", "--seq-len", "32768",
           "--micro-batch", "1", "--tp", "1", "--pp", "1", "--dp", "4", "--cp", "4", "--ep", "8", "--zero", "1",
           "--recompute", "full", "--json"]
    result = CliRunner().invoke(main, cmd)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["breakdown_s"]["ep_comm"] > 0 and "cp_comm" in data["breakdown_s"]
    st = data["config"]["stages"][0]
    assert (st["cp"], st["ep"]) == (4, 8)
    plan = uniform_plan(load_model(QWEN), cluster_from_spec(H100), Training(16, 32768, "bf16", 1, runtime="megatron"),
                        tp=1, pp=1, dp=4, cp=4, ep=8, zero=1, recompute="full")
    from planner.cost.runtimes.capability import violations
    from planner.export.megatron import export_megatron
    assert violations(plan, "megatron") == ()
    assert any("beside context parallelism" in reason for reason in violations(plan, "deepspeed"))
    warned = []
    text = export_megatron(plan, warned.append)
    assert "--context-parallel-size 4" in text and "--expert-model-parallel-size 8" in text, warned
    assert not any("expert" in message for message in warned)
    from planner.export.rankmap import export_rankmap
    ranks = {e["rank"]: e for e in json.loads(export_rankmap(plan, warned.append))["ranks"]}
    # tp 1 x cp 4 replicas of 4 ranks: EP takes replicas 2 and 3's cp ranks; the experts' DP pairs 8 apart
    assert ranks[9]["cp_group"] == [8, 9, 10, 11] and ranks[9]["ep_group"] == list(range(8, 16))
    assert ranks[9]["edp_group"] == [1, 9] and "ep_group" not in json.loads(export_rankmap(_ep_plan(ep=1), warned.append))["ranks"][0]


def test_the_checks_accept_a_cp_ep_plan_and_report_an_ep_that_does_not_divide_cp_x_dp():
    from planner.plan import plan_to_json, structural_problems
    from planner.verify.plan_checks import validate_plan_data
    plan = uniform_plan(load_model(QWEN), cluster_from_spec(H100), Training(16, 32768, "bf16", 1),
                        tp=1, pp=1, dp=4, cp=4, ep=8, zero=1, recompute="full")
    data = json.loads(json.dumps(plan_to_json(plan)))
    assert validate_plan_data(data) == []
    data["stages"][0]["ep"] = 32
    assert any("tp x cp x dp = 1x4x4" in message for _, message in structural_problems(plan_from_json(data)))


def test_the_runtimes_say_whether_they_run_ep_beside_cp():
    from planner.cost.runtimes.capability import capability
    assert capability("megatron").expert_parallel_with_cp and capability("torchtitan").expert_parallel_with_cp
    assert not capability("deepspeed").expert_parallel_with_cp




# --- the search against the oracle -----------------------------------------------------------


EP_CP = dict(micro_batches=(1,), tp_degrees=(1, 2), recompute_modes=("none", "full"), zero_stages=(1,),
             virtual_stages=(1,), cp_degrees=(1, 2), cp_min_seq_len=1, ep_degrees=(1, 2, 4), offload=False,
             zero_bubble=False)


def moe_cp_instance(seed: int):
    """Nodes of 4 GPUs, a tiny MoE model, long sequences, memory that binds for activations and experts."""
    import random
    rng = random.Random(700 + seed)
    model = tiny_moe(experts=rng.choice([4, 8]), layers=rng.choice([1, 2]), hidden=rng.choice([512, 1024]))
    seq_len = rng.choice([8192, 16384])
    need = model.params * 16 + model.config.num_layers * seq_len * model.config.hidden * 60
    gpu = "H100-SXM5-80GB"
    cluster = cluster_from_spec({"name": f"moe-cp-{seed}", "gpus": {gpu: {"memory_GiB": 2.0 + rng.uniform(0.05, 0.3) * need / GIB}},
                                 "node_groups": [{"name": "g", "gpu": gpu, "nodes": rng.choice([1, 2]), "gpus_per_node": 4,
                                                  "inter_node": {"bandwidth_GBps": 25, "latency_us": 5}}]})
    return model, cluster, Training(rng.choice([2, 4]), seq_len, "bf16", 1)


@functools.lru_cache(maxsize=None)  # the won-somewhere test reuses the solver tests' oracle runs
def _ep_cp_oracle(seed, runtime="any"):
    model, cluster, base = moe_cp_instance(seed)
    base = dataclasses.replace(base, runtime=runtime)
    o = EP_CP
    return (model, cluster, base) + brute_force(model, cluster, base, o["micro_batches"], o["tp_degrees"],
                                                o["recompute_modes"], o["zero_stages"], o["virtual_stages"],
                                                cp_degrees=o["cp_degrees"], ep_degrees=o["ep_degrees"], runtime=runtime,
                                                combined=True)[:2]


# EP beside CP: the expert grid folds over tp x cp x dp (StageDims.edp); any: per-stage degrees,
# megatron: one (tp, cp, ep, dp) grid (capability.violations)
@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["any", "megatron"])
@pytest.mark.parametrize("seed", range(5))
def test_solver_with_ep_beside_cp_equals_brute_force_optimum(seed, runtime):
    model, cluster, base, expected, _ = _ep_cp_oracle(seed, runtime)
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**EP_CP), proven=False)


@pytest.mark.slow
def test_some_oracle_instances_are_won_by_ep_beside_cp():
    """The oracle's EP x CP cases are not vacuous: some optima use cp > 1 and ep > 1 in one stage,
    with the EP group inside one replica's cp ranks and across replicas."""
    won = []
    for seed in range(5):
        best = _ep_cp_oracle(seed, "any")[4]
        won += [(st.cp, st.ep, st.dp) for st in (best.stages if best else ()) if st.cp > 1 and st.ep > 1]
    assert any(ep <= cp for cp, ep, _ in won) and any(ep > cp for cp, ep, _ in won), won


# --- the search on the model ---------------------------------------------------------


@pytest.mark.slow
def test_qwen3_30b_a3b_at_64k_tokens_on_16_h100_plans_cp_with_ep_and_beats_either_alone():
    """The issue's MoE model at a long sequence: the search folds EP over the CP ranks (tp 1 x cp 8 x
    ep 8 on dgx-h100-2node), faster than the best plan without EP and the best without CP; the
    Megatron export carries both. (At 4,096 tokens on 32 H100 the plan without EP wins since the
    experts' gradients reduce over their expert-data-parallel group, one GPU per node, on the NIC.)"""
    args = ["plan", "--model", QWEN, "--cluster", "dgx-h100-2node", "--global-batch", "16", "--seq-len", "65536",
            "--json"]
    runs = [CliRunner().invoke(main, args + extra) for extra in ([], ["--ep", "1"], ["--cp", "1"])]
    assert all(r.exit_code == 0 for r in runs), [r.output[-300:] for r in runs]
    both, no_ep, no_cp = (json.loads(r.stdout) for r in runs)
    assert any(st.get("cp", 1) > 1 and st.get("ep", 1) > 1 for st in both["stages"])
    assert all("ep" not in st for st in no_ep["stages"]) and all(st.get("cp", 1) == 1 for st in no_cp["stages"])
    step = {name: d["predicted"]["step_time_s"] for name, d in (("both", both), ("no_ep", no_ep), ("no_cp", no_cp))}
    assert step["both"] < min(step["no_ep"], step["no_cp"]), step
    from planner.export.megatron import export_megatron
    text = export_megatron(plan_from_json(both), lambda message: None)
    assert "--context-parallel-size" in text and "--expert-model-parallel-size" in text
