"""MoE expert parallelism: the expert grid of StageDims, expert weights apart from dense ones in
memory, the dispatch/combine all-to-all, the plan keys, `evaluate --ep`, the search against the
brute-force oracle, and the exports."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.core.dims import StageDims
from planner.core.errors import BadInput, NoFeasiblePlan
from planner.cost.evaluate import evaluate
from planner.cost.formulas import CostParams
from planner.cost.moe import AllToAllGroup, alltoall_s, group_alltoall_s, moe_alltoall_s
from planner.inputs.hardware import GIB, Link, cluster_from_spec
from planner.inputs.linkcurve import LinkCurve
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Replica, Training, plan_from_json, plan_to_json, structural_problems, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.verify.oracle import brute_force, on_whole_nodes

from .conftest import H100

QWEN = "qwen3-30b-a3b"


def tiny_moe(experts: int = 4, layers: int = 2, hidden: int = 512):
    return model_from_dict({"model_type": "mixtral", "hidden_size": hidden, "num_hidden_layers": layers,
                            "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2 * hidden,
                            "vocab_size": 4096, "num_local_experts": experts, "num_experts_per_tok": 2},
                           f"tiny-moe-{experts}")


# --- the expert grid -------------------------------------------------------------------------


def test_expert_weights_split_over_etp_times_ep_and_dense_ones_over_tp():
    dims = StageDims(2, dp=8, ep=4)  # etp defaults to tp (Megatron)
    assert dims.expert_tp == 2 and dims.edp == 2
    assert dims.weight_share(100.0, 80.0) == pytest.approx(20.0 / 2 + 80.0 / 8)
    assert StageDims(2, dp=8).weight_share(100.0, 80.0) == 50.0  # no EP: all by tp
    assert StageDims(2, dp=8, ep=4, etp=1).edp == 4


def test_ep_group_is_ep_positions_etp_apart_in_tp_then_dp_order():
    assert StageDims(2, dp=4, ep=2).ep_group(5) == [5, 7]  # tp 2: replicas 2 and 3, TP position 1
    assert StageDims(2, dp=4, ep=4, etp=1).ep_group(5) == [4, 5, 6, 7]


@pytest.mark.parametrize("dims,experts,message", [
    (StageDims(1, dp=8, ep=3), 6, "does not divide"),
    (StageDims(1, dp=4, ep=8), 8, "does not divide the stage"),
    (StageDims(1, dp=4, ep=2), 1, "needs an MoE model"),
    (StageDims(1, dp=4, ep=4), 8, ""),
])
def test_expert_problem_names_what_does_not_divide(dims, experts, message):
    problem = dims.expert_problem(experts)
    assert (message in problem) if message else problem == ""


def test_expert_gemm_flops_do_not_depend_on_ep():
    layer = load_model(QWEN).layers[1]
    base = sum(g.flops_per_sample(4096) for g in layer.gemms(4096, 1))
    for ep in (2, 8, 128):
        assert sum(g.flops_per_sample(4096) for g in layer.gemms(4096, 1, ep)) == pytest.approx(base, rel=1e-12)


def test_layers_know_their_routed_expert_parameters():
    model = load_model(QWEN)
    c = model.config
    assert sum(layer.expert_params for layer in model.layers) == c.num_layers * c.num_experts * 3 * c.hidden * c.ffn_hidden
    assert all(layer.expert_params == 0 for layer in load_model("llama-3-8b").layers)


# --- the all-to-all --------------------------------------------------------------------------


def test_moe_alltoall_moves_the_routed_copies_of_a_gpus_tokens():
    layer = load_model(QWEN).layers[1]
    c = layer.config
    link = Link(100e9, 0.0, "nvlink")
    group = AllToAllGroup(8, 8, link, link)
    params = CostParams()
    fwd, bwd = moe_alltoall_s(layer, 1, 4096, StageDims(1, dp=8, ep=8), 2, group, params)
    nbytes = 4096 * c.experts_top_k * c.hidden * 2
    assert fwd == bwd == pytest.approx(2 * 7 / 8 * nbytes / (100e9 * params.intra_link_efficiency))
    assert moe_alltoall_s(layer, 1, 4096, StageDims(1, dp=8), 2, group, params) == (0.0, 0.0)


def test_moe_module_recompute_dispatches_and_combines_again_in_the_backward():
    from planner.cost.formulas import LayerTime
    from planner.cost.moe import with_moe_alltoall
    from planner.cost.sharding import Sharding

    layer = load_model(QWEN).layers[1]
    link = Link(100e9, 0.0, "nvlink")
    group, dims = AllToAllGroup(8, 8, link, link), StageDims(1, dp=8, ep=8)
    fwd, bwd = moe_alltoall_s(layer, 1, 4096, dims, 2, group, CostParams())
    t = LayerTime(1.0, 2.0, 0.0, 0.0, 0.0)
    for modules, extra in (("attention", 0.0), ("moe", fwd), ("layernorm+moe_act", 0.0)):
        sh = Sharding("bf16", 1, 4096, "flash", dims, "selective")
        priced = with_moe_alltoall(t, layer, sh, group, CostParams(selective_recompute=modules))
        assert priced.ep_comm_bwd_s == pytest.approx(bwd + extra), modules


def test_alltoall_across_nodes_sends_only_the_other_nodes_share_over_the_nic():
    fast, slow = Link(400e9, 0.0, "nvlink"), Link(50e9, 0.0, "ib")
    p = CostParams()
    one_node = group_alltoall_s(1e9, AllToAllGroup(8, 8, fast, slow), p)
    two_nodes = group_alltoall_s(1e9, AllToAllGroup(16, 8, fast, slow), p)
    assert one_node == pytest.approx(alltoall_s(1e9, 8, fast, p.intra_link_efficiency))
    # 8 of 16 peers are on the other node: half the buffer over the NIC
    assert two_nodes == pytest.approx(0.5e9 / (50e9 * p.inter_link_efficiency))


def test_a_measured_link_prices_the_alltoall_by_its_curve():
    from planner.inputs.linkcurve import bus_factor
    curve = LinkCurve("all_to_all", 8, (1e6, 1e9), (20e9, 20e9), 20e9, 1e-6)
    link = Link(100e9, 1e-6, "nvlink", (curve,))  # the curve, not the 100 GB/s figure
    assert alltoall_s(1e9, 8, link, 0.8) == pytest.approx(bus_factor("all_to_all", 8) * 1e9 / 20e9, rel=1e-9)


# --- evaluate --------------------------------------------------------------------------------


def _evaluate(args, ep=None):
    cmd = ["evaluate", "--model", QWEN, "--cluster", "h100.yaml", "--global-batch", "64", "--seq-len", "4096",
           "--micro-batch", "1", "--json", *args] + (["--ep", str(ep)] if ep else [])
    return CliRunner().invoke(main, cmd)


def test_evaluate_with_ep_holds_an_eighth_of_the_experts_and_pays_the_alltoall(h100):
    args = ["--tp", "1", "--pp", "1", "--dp", "16", "--zero", "1"]
    one, eight = _evaluate(args), _evaluate(args, 8)
    assert eight.exit_code == 0, eight.output
    a, b = json.loads(one.stdout), json.loads(eight.stdout)
    assert "ep_comm" not in a["breakdown_s"] and b["breakdown_s"]["ep_comm"] > 0
    assert b["peak_memory_GiB"]["H100-SXM5-80GB"] < a["peak_memory_GiB"]["H100-SXM5-80GB"] - 50
    assert b["config"]["stages"][0]["ep"] == 8


def test_ep_weights_memory_is_the_dense_share_plus_an_ep_th_of_the_experts(h100):
    model = load_model(QWEN)
    cluster = cluster_from_spec(H100)
    t = Training(64, 4096, "bf16", 1)
    experts = sum(layer.expert_params for layer in model.layers)
    one = evaluate(uniform_plan(model, cluster, t, tp=1, pp=1, dp=16, zero=1)).memory_by_rank[0]
    eight = evaluate(uniform_plan(model, cluster, t, tp=1, pp=1, dp=16, zero=1, ep=8)).memory_by_rank[0]
    assert one.weights_bytes - eight.weights_bytes == pytest.approx(2 * experts * 7 / 8)
    # ZeRO-1 shards the experts' optimizer states over edp = 16 / 8 = 2, the dense ones over 16
    dense = model.params - experts - 0  # (no tied matrix)
    assert eight.optimizer_bytes == pytest.approx(12 * (dense / 16 + experts / 8 / 2), rel=1e-3)


@pytest.mark.parametrize("args,ep,says", [
    (["--tp", "1", "--pp", "1", "--dp", "16"], 3, "does not divide the 128 experts"),
    (["--tp", "1", "--pp", "2", "--dp", "8"], 16, "does not divide the stage's tp x dp"),
    (["--tp", "1", "--pp", "1", "--dp", "16"], 0, "must be a positive integer"),
])
def test_bad_ep_exits_2_with_one_line(h100, args, ep, says):
    result = _evaluate(args, ep if ep else None) if ep else CliRunner().invoke(
        main, ["evaluate", "--model", QWEN, "--cluster", "h100.yaml", "--global-batch", "64", "--seq-len", "4096",
               "--micro-batch", "1", "--ep", "0", *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.output


def test_ep_on_a_dense_model_exits_2(h100):
    result = CliRunner().invoke(main, ["evaluate", "--model", "llama-3-8b", "--cluster", "h100.yaml",
                                       "--global-batch", "64", "--seq-len", "4096", "--micro-batch", "1",
                                       "--tp", "1", "--pp", "1", "--dp", "16", "--ep", "2"])
    assert result.exit_code == 2 and "needs an MoE model" in result.output


# --- the plan file ---------------------------------------------------------------------------


def _ep_plan(ep=8, dp=16, pp=1):
    return uniform_plan(load_model(QWEN), cluster_from_spec(H100), Training(64, 4096, "bf16", 1),
                        tp=1, pp=pp, dp=dp, zero=1, ep=ep)


def test_plan_json_carries_ep_and_etp_and_reads_them_back():
    data = plan_to_json(_ep_plan())
    assert data["stages"][0]["ep"] == 8 and data["stages"][0]["etp"] == 1
    assert "ep" not in plan_to_json(_ep_plan(ep=1))["stages"][0]
    again = plan_from_json(json.loads(json.dumps(data)))
    assert again.stages[0].ep == 8 and again.stages[0].dims.expert_tp == 1


def test_the_schema_and_the_checks_accept_an_ep_plan():
    from planner.verify.plan_checks import validate_plan_data
    assert validate_plan_data(json.loads(json.dumps(plan_to_json(_ep_plan())))) == []


def test_an_ep_group_with_uneven_batch_shares_is_a_structural_problem():
    plan = _ep_plan(ep=2, dp=16)
    st = plan.stages[0]
    replicas = list(st.replicas)
    replicas[0] = Replica(0, 8, replicas[0].ranks)
    replicas[2] = Replica(2, 0, replicas[2].ranks)
    from dataclasses import replace
    bad = replace(plan, stages=(replace(st, replicas=tuple(replicas)),))
    problems = structural_problems(bad)
    assert any("expert-parallel group" in message for _, message in problems)


def test_ep_not_dividing_the_experts_in_a_plan_file_is_reported():
    data = plan_to_json(_ep_plan())
    data["stages"][0]["ep"] = 3
    problems = structural_problems(plan_from_json(data))
    assert any("does not divide the 128 experts" in message for _, message in problems)


# --- exports ---------------------------------------------------------------------------------


def test_megatron_export_carries_expert_parallelism(tmp_path):
    from planner.export.megatron import export_megatron
    text = export_megatron(_ep_plan(), lambda message: None)
    assert "--expert-model-parallel-size 8" in text and "--expert-tensor-parallel-size 1" in text
    assert "--moe-token-dispatcher-type alltoall" in text


def test_deepspeed_export_refuses_expert_parallelism():
    from planner.export.deepspeed import export_deepspeed
    with pytest.raises(BadInput, match="expert parallelism"):
        export_deepspeed(_ep_plan(), lambda message: None)


# --- the search against the oracle -----------------------------------------------------------


def moe_instance(seed: int):
    """One GPU type, 1-2 nodes of 2-4 GPUs, a tiny MoE model, memory that binds for the experts."""
    import random
    rng = random.Random(500 + seed)
    model = tiny_moe(experts=rng.choice([4, 8]), layers=rng.choice([1, 2, 3]), hidden=rng.choice([512, 1024]))
    seq_len = rng.choice([512, 2048])
    need = model.params * 16
    gpu = rng.choice(["A100-SXM4-80GB", "H100-SXM5-80GB"])
    cluster = cluster_from_spec({"name": f"moe-{seed}",
                                 "gpus": {gpu: {"memory_GiB": 2.0 + rng.uniform(0.15, 0.6) * need / GIB}},
                                 "node_groups": [{"name": "g", "gpu": gpu, "nodes": rng.choice([1, 2]),
                                                  "gpus_per_node": rng.choice([2, 4]),
                                                  "inter_node": {"bandwidth_GBps": rng.choice([25, 400]),
                                                                 "latency_us": 5}}]})
    return model, cluster, Training(rng.choice([4, 8]), seq_len, "bf16", 1)


# any: per-stage freedom; megatron: one (tp, ep, dp) grid for every stage (capability.violations)
@pytest.mark.slow
# seed 5 under `any`: its brute force takes 10 s or more on 2 cores (`make test-exhaustive`)
@pytest.mark.parametrize("seed, runtime", [pytest.param(seed, runtime, marks=pytest.mark.exhaustive)
                                           if (seed, runtime) == (5, "any") else (seed, runtime)
                                           for seed in range(8) for runtime in ("any", "megatron")])
def test_solver_with_ep_equals_brute_force_optimum(seed, runtime):
    model, cluster, base = moe_instance(seed)
    base = dataclasses.replace(base, runtime=runtime)
    options = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"),
                   zero_stages=(1, 3), virtual_stages=(1,), zero_bubble=False)
    expected, best, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], options["zero_stages"], (1,), ep_degrees=(1, 2, 4, 8),
                                    runtime=runtime, combined=True)
    try:
        # the oracle's space: the searched schedules, combined 1F1B's one stage of one chunk among them
        result = solve(model, cluster, base, SolverOptions(**options, ep_degrees=(1, 2, 4, 8), offload=False,
                                                           uniform_schedules=False))
    except NoFeasiblePlan:
        assert expected == float("inf")
        return
    if runtime != "any" and not on_whole_nodes(result.plan):
        # a constrained runtime's uniform seed may use parts of nodes, outside the oracle's space
        assert result.estimate.step_time_s <= expected * (1 + 1e-9)
        return
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_some_oracle_instance_is_won_by_expert_parallelism():
    """The oracle's EP cases are not vacuous: on some instance the optimum uses ep > 1."""
    def won(seed: int) -> bool:
        model, cluster, base = moe_instance(seed)
        _, best, _ = brute_force(model, cluster, base, (1, 2), (1, 2), ("none", "full"), (1, 3), (1,),
                                 ep_degrees=(1, 2, 4, 8))
        return best is not None and any(st.ep > 1 for st in best.stages)
    assert any(won(seed) for seed in range(8))  # stops at the first instance won
