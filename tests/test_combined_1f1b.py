"""Megatron-core's combined 1F1B (`--overlap-moe-expert-parallel-comm`, planner.schedules.combined_1f1b):
interleaved 1F1B pairing one micro-batch's forward with another's backward so that each one's
expert-parallel all-to-all runs under the other's compute, for one more warm-up forward held; what
megatron-core runs it with; the plan search's uniform candidates; the Megatron-LM export."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import product

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import violations
from planner.core.errors import BadInput
from planner.plan import structural_problems, uniform_plan
from planner.schedules import get_schedule
from planner.search.orchestration.driver import SolverOptions, solve

from .conftest import invoke
from .test_uniform_schedules import moe_instance

OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "selective", "full"))


def megatron_moe():
    """moe_instance (an 8-block MoE of 64 experts on 8 GPUs of 10 GiB joined at 50 GB/s) under Megatron-LM."""
    model, cluster, base = moe_instance()
    return model, cluster, replace(base, runtime="megatron")


def megatron_options(**changes) -> SolverOptions:
    """OPTIONS priced as Megatron-LM runs (its runtime's cost parameters, as `plan` and `validate` price)."""
    from planner.cost.runtimes import training_params

    _, cluster, base = megatron_moe()
    params = training_params(cluster.gpu_types, base)
    return SolverOptions(**OPTIONS, gpu_params=tuple(sorted(params.items())), **changes)


def moe_plan(schedule: str, ep: int = 4, recompute: str = "none", dtype: str = "bf16", model=None):
    inst_model, cluster, base = megatron_moe()
    training = replace(base, schedule=schedule, virtual_stages=2, dtype=dtype)
    return uniform_plan(model or inst_model, cluster, training, tp=1, pp=2, dp=4, zero=1, recompute=recompute, ep=ep)


def test_combined_1f1b_hides_the_expert_all_to_all_for_one_more_warm_up_forward():
    interleaved, combined = evaluate(moe_plan("interleaved")), evaluate(moe_plan("combined-1f1b"))
    assert interleaved.breakdown_s["ep_comm"] > 0
    assert combined.breakdown_s.get("ep_comm", 0.0) < interleaved.breakdown_s["ep_comm"]
    assert combined.step_time_s < interleaved.step_time_s
    assert combined.breakdown_s["compute"] == pytest.approx(interleaved.breakdown_s["compute"], rel=1e-12)
    # megatron-core schedules.py get_pp_rank_microbatches: one extra warm-up forward (a chunk, 1/v of the rank)
    for rank, pp, v, m in ((0, 2, 2, 8), (1, 2, 2, 8), (0, 4, 3, 16), (0, 2, 2, 2)):
        extra = get_schedule("combined-1f1b").in_flight_microbatches(rank, pp, v, m)
        assert extra == min(m, get_schedule("interleaved").in_flight_microbatches(rank, pp, v, m) + 1 / v)
    assert max(combined.peak_memory_by_gpu().values()) > max(interleaved.peak_memory_by_gpu().values())


@pytest.mark.parametrize("change, needle", [
    (dict(ep=1), "runs only with expert parallelism"),
    (dict(recompute="full"), "runs without full recomputation"),
    (dict(dtype="fp32"), "does not train in fp32"),
])
def test_what_megatron_core_refuses_beside_combined_1f1b_is_a_structural_problem(change, needle):
    # megatron-core 0.16.1 transformer_config.py __post_init__ asserts each of these
    problems = structural_problems(moe_plan("combined-1f1b", **change))
    assert any(needle in why for _, why in problems), problems


def test_combined_1f1b_takes_one_mtp_layer_at_most():
    model, _, _ = megatron_moe()
    with_mtp = replace(model, config=replace(model.config, mtp_layers=2))
    assert not structural_problems(moe_plan("combined-1f1b", model=model))
    problems = structural_problems(moe_plan("combined-1f1b", model=with_mtp))
    assert any("at most 1 MTP layer" in why for _, why in problems), problems


def test_evaluate_refuses_combined_1f1b_without_expert_parallelism_as_bad_input():
    result = invoke("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100-2node", "--global-batch", "256",
                    "--seq-len", "4096", "--micro-batch", "1", "--tp", "1", "--pp", "2", "--dp", "8",
                    "--virtual-stages", "2", "--schedule", "combined-1f1b")
    assert result.exit_code == 2 and "--schedule: combined-1f1b runs only with expert parallelism" in result.stderr


def one_stage_plan(schedule: str, model=None, micro_batch: int = 1):
    inst_model, cluster, base = megatron_moe()
    training = replace(base, schedule=schedule, virtual_stages=1, micro_batch=micro_batch)
    return uniform_plan(model or inst_model, cluster, training, tp=1, pp=1, dp=8, zero=1, ep=8)


def test_without_pipelining_combined_1f1b_pairs_micro_batches_and_holds_two():
    """megatron-core combined_1f1b_schedule_for_no_pipelining: each forward beside the previous backward,
    layer by layer (a layer beyond the micro-batch held, counted as a second one)."""
    one_f_one_b, combined = one_stage_plan("1f1b"), one_stage_plan("combined-1f1b")
    assert not structural_problems(combined) and not violations(combined, "megatron")
    plain, paired = evaluate(one_f_one_b), evaluate(combined)
    assert plain.breakdown_s["ep_comm"] > 0 and paired.breakdown_s.get("ep_comm", 0.0) < plain.breakdown_s["ep_comm"]
    assert paired.step_time_s < plain.step_time_s
    assert get_schedule("combined-1f1b").in_flight_microbatches(0, 1, 1, 8) == 2
    assert max(paired.peak_memory_by_gpu().values()) > max(plain.peak_memory_by_gpu().values())


def test_combined_1f1b_runs_one_chunk_alone_or_two_or_more_with_pipelining():
    schedule = get_schedule("combined-1f1b")
    assert schedule.accepts_layout(1, 1) and schedule.accepts_layout(2, 2) and schedule.accepts_layout(4, 3)
    assert not schedule.accepts_layout(2, 1) and not schedule.accepts_layout(1, 2)
    result = invoke("evaluate", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100-2node", "--global-batch", "256",
                    "--seq-len", "4096", "--micro-batch", "1", "--tp", "1", "--pp", "2", "--dp", "8", "--ep", "8",
                    "--schedule", "combined-1f1b")
    assert result.exit_code == 2 and "one pipeline rank of one chunk, or 2 or more pipeline ranks" in result.stderr


def test_combined_1f1b_runs_an_mtp_layer_only_with_pipelining():
    # megatron-core transformer_config.py: "Pipeline model parallel size must be larger than 1 when enabling
    # overlap_moe_expert_parallel_comm with MTP layer"
    model, _, _ = megatron_moe()
    with_mtp = replace(model, config=replace(model.config, mtp_layers=1))
    assert not structural_problems(moe_plan("combined-1f1b", model=with_mtp))
    problems = structural_problems(one_stage_plan("combined-1f1b", model=with_mtp))
    assert any("MTP layers only with pipelining" in why for _, why in problems), problems


def brute_force_combined(model, cluster, base, options: SolverOptions):
    """The fastest uniform combined-1F1B plan (V = 2 over pp >= 2, V = 1 without pipelining) Megatron-LM runs,
    over every tp, pp, dp, micro-batch, recompute mode, ZeRO stage and expert-parallel degree of OPTIONS
    (dividing the experts and dp, tp x ep within the node)."""
    best = None
    n, experts = cluster.num_gpus, model.config.num_experts
    for tp, b, recompute, zero in product(OPTIONS["tp_degrees"], OPTIONS["micro_batches"], OPTIONS["recompute_modes"],
                                          (0, 1)):
        for pp in range(1, n // tp + 1):
            if n % (tp * pp):
                continue
            dp = n // (tp * pp)
            for ep in (e for e in range(2, dp + 1) if experts % e == 0 and dp % e == 0 and tp * e <= n):
                training = replace(base, micro_batch=b, schedule="combined-1f1b", virtual_stages=1 if pp == 1 else 2)
                try:
                    plan = uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=dp, zero=zero if dp > 1 else 0,
                                        recompute=recompute, sequence_parallel=tp > 1, ep=ep)
                except BadInput:
                    continue
                if structural_problems(plan) or violations(plan, "megatron"):
                    continue
                estimate = evaluate(plan, options.params_mapping())
                if estimate.fits and (best is None or estimate.step_time_s < best):
                    best = estimate.step_time_s
    return best


@pytest.mark.slow
def test_megatron_plan_takes_combined_1f1b_where_the_brute_force_finds_it_fastest(tmp_path):
    model, cluster, base = megatron_moe()
    result = solve(model, cluster, base, megatron_options())
    without = solve(model, cluster, base, megatron_options(uniform_schedules=False))
    expected = brute_force_combined(model, cluster, base, megatron_options())
    assert expected is not None and expected < without.estimate.step_time_s
    # the exact search plans combined 1F1B: the plan is proven (here the uniform scan's, on parts of the node)
    assert result.plan.training.schedule == "combined-1f1b" and result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-12)
    assert not violations(result.plan, "megatron") and any(s.ep > 1 for s in result.plan.stages)
    from planner.api import plan_json

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_json(result)))
    exported = invoke("export", path, "--to", "megatron", "-o", tmp_path / "train.sh")
    assert exported.exit_code == 0, exported.stderr
    assert "--overlap-moe-expert-parallel-comm" in (tmp_path / "train.sh").read_text()
    refused = invoke("export", path, "--to", "torchtitan", "-o", tmp_path / "job.toml")
    assert refused.exit_code == 2 and "no combined-1f1b schedule" in refused.stderr


def test_the_search_takes_combined_1f1b_without_pipelining_where_the_brute_force_finds_it_fastest():
    # priced without Megatron-LM's fp32 gradient buffers, the one-stage combined plan fits and wins
    model, cluster, base = megatron_moe()
    options = SolverOptions(**OPTIONS)
    result = solve(model, cluster, base, options)
    assert result.plan.training.schedule == "combined-1f1b" and result.plan.pp == 1 and result.optimal
    assert result.estimate.step_time_s == pytest.approx(brute_force_combined(model, cluster, base, options),
                                                        rel=1e-12)


@pytest.mark.parametrize("gpu, hidden", [("H100-SXM5-80GB", True), ("B200", False)])
def test_below_blackwell_combined_1f1b_gives_up_the_tp_overlap_for_its_all_to_all_stream(gpu, hidden):
    """Megatron-LM arguments.py: the TP overlap needs CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell, the EP
    overlap more; combined 1F1B's plans there pay their backward TP collectives, and launch with 32."""
    from planner.export.launch import device_connections
    from planner.inputs.hardware import cluster_from_spec

    model, _, base = megatron_moe()
    cluster = cluster_from_spec({"name": "one", "node_groups": [{"name": "g", "gpu": gpu, "nodes": 1,
                                                                 "gpus_per_node": 8}]})

    def priced(schedule):
        training = replace(base, schedule=schedule, virtual_stages=2)
        plan = uniform_plan(model, cluster, training, tp=2, pp=2, dp=2, zero=1, ep=2, sequence_parallel=True)
        return plan, evaluate(plan, SolverOptions().params_mapping())

    (plain, interleaved), (paired, combined) = priced("interleaved"), priced("combined-1f1b")
    assert combined.breakdown_s["compute"] == pytest.approx(interleaved.breakdown_s["compute"], rel=1e-12)
    assert (combined.breakdown_s["tp_comm"] > interleaved.breakdown_s["tp_comm"] * (1 + 1e-9)) == hidden
    assert device_connections(paired) == 32 and device_connections(plain) == 1


def two_node_moe(seed: int):
    """An 8-expert MoE of 4 or 6 blocks on two nodes of 2 or 4 GPUs of one type, memory that binds for the
    experts, under Megatron-LM: instances where the optimum pipelines with expert parallelism."""
    import random

    from planner.inputs.hardware import GIB, cluster_from_spec
    from planner.plan import Training

    from .test_ep import tiny_moe

    rng = random.Random(900 + seed)
    model = tiny_moe(experts=8, layers=rng.choice([4, 6]), hidden=rng.choice([512, 1024]))
    gpu = rng.choice(["A100-SXM4-80GB", "H100-SXM5-80GB"])
    memory = 2.0 + rng.uniform(0.12, 0.45) * model.params * 16 / GIB
    cluster = cluster_from_spec({"name": f"moe-{seed}", "gpus": {gpu: {"memory_GiB": memory}}, "node_groups": [
        {"name": "g", "gpu": gpu, "nodes": 2, "gpus_per_node": rng.choice([2, 4]),
         "inter_node": {"bandwidth_GBps": rng.choice([25, 400]), "latency_us": 5}}]})
    return model, cluster, Training(rng.choice([4, 8]), rng.choice([512, 2048]), "bf16", 1, runtime="megatron")


# the optimum: 1 combined 1F1B without pipelining, EP 8 across the two nodes; 7, 10, 19 combined 1F1B of
# V = 2 over two ranks; 9 interleaved 1F1B with EP 2
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 7, 9, 10, 19])
def test_the_search_plans_interleaved_and_combined_1f1b_with_expert_parallelism_to_the_brute_force_optimum(seed):
    from planner.verify.oracle import brute_force

    model, cluster, base = two_node_moe(seed)
    options = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"), zero_stages=(1, 3),
                   virtual_stages=(1, 2), zero_bubble=False)
    expected, best, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], options["zero_stages"], options["virtual_stages"],
                                    ep_degrees=(1, 2, 4, 8), runtime="megatron", combined=True)
    assert any(stage.ep > 1 for stage in best.stages) and (best.pp > 1 or best.training.schedule == "combined-1f1b")
    result = solve(model, cluster, base, SolverOptions(**options, ep_degrees=(1, 2, 4, 8), offload=False,
                                                       uniform_schedules=False))
    assert result.optimal and result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)
    assert result.plan.training.schedule == best.training.schedule
