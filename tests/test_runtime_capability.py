"""Runtime capability models: what each runtime can run (violations), the verify step that
rejects a plan its runtime cannot run, and the guarantee that a runtime's plan is never slower
than the best uniform configuration that runtime can run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes import RUNTIMES
from planner.cost.runtimes.capability import capability, violations
from planner.core.errors import BadInput, NoFeasiblePlan
from planner.plan import Plan, Replica, Stage, plan_to_json, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.stage_types import SearchContext
from planner.search.uniform import UniformSpace, improving_uniform
from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance
from planner.verify.plan_checks import check_plan_data

from .conftest import runtime_base


def test_every_runtime_has_a_capability_and_any_is_a_runtime():
    assert all(spec.capability is capability(name) for name, spec in RUNTIMES.items()) and "any" in RUNTIMES
    assert capability("any").per_stage_tp and capability("any").uneven_shares
    with pytest.raises(BadInput):
        capability("colossalai")


def per_stage_plan(runtime: str) -> Plan:
    """Two stages with tp 2 and 1 and uneven shares on the first: what only `any` can run."""
    model, cluster, base = pipeline_instance(0)
    cluster_ranks = cluster.num_gpus
    assert cluster_ranks >= 2
    training = replace(base, global_batch=3, runtime=runtime)
    items = model.num_layers
    stages = (Stage(0, (0, items // 2), 1, 0, "none", (Replica(0, 3, (0,)),), 0, False),
              Stage(1, (items // 2, items), 1, 0, "full", (Replica(0, 3, (1,)),), 1, False))
    return Plan(model, cluster, training, stages)


def test_violations_name_what_the_runtime_cannot_express():
    plan = per_stage_plan("megatron")
    assert violations(plan, "any") == ()
    reasons = violations(plan, "megatron")
    assert any("recomputes alike" in r for r in reasons), reasons
    assert any("no pipeline" in r for r in violations(plan, "fsdp1"))


def test_uniform_plans_are_runnable_by_megatron_and_torchtitan():
    model, cluster, base = tiny_instance(3)
    plan = uniform_plan(model, cluster, replace(base, global_batch=cluster.num_gpus * 2, runtime="megatron"),
                        tp=1, pp=1, dp=cluster.num_gpus, zero=1)
    assert violations(plan, "megatron") == ()
    assert any("ZeRO-1" in r for r in violations(plan, "torchtitan"))


def test_verify_rejects_a_plan_its_runtime_cannot_run():
    plan = per_stage_plan("megatron")
    data = plan_to_json(plan, None, None)
    _, problems = check_plan_data(data, memory=False)
    assert problems and problems[0][0] == "training.runtime" and "--runtime any" in problems[0][1]
    data_any = plan_to_json(replace(plan, training=replace(plan.training, runtime="any")), None, None)
    assert check_plan_data(data_any, memory=False)[1] == []


def best_runnable_uniform(model, cluster, base, runtime):
    """The fastest uniform configuration (plan_quality's wide space: any node boundaries, ZeRO-0
    and 1, interleaving) that `runtime` can run."""
    space = UniformSpace(tp_degrees=(1, 2), micro_batches=(1, 2), recompute_modes=("none", "full"),
                         zero_stages=(0, 1, 2, 3), virtual_stages=(1, 2),
                         sequence_parallel=capability(runtime).sequence_parallel)
    best = None
    for best in improving_uniform(SearchContext(model, cluster, replace(base, runtime=runtime), SolverOptions()), space,
                                  accept=lambda p: not violations(p, runtime)):
        pass
    return best


@pytest.mark.parametrize("runtime", ["megatron", "torchtitan", "deepspeed", "any"])
@pytest.mark.parametrize("seed", range(8))
def test_plan_is_never_slower_than_the_best_uniform_configuration_of_its_runtime(runtime, seed):
    model, cluster, base = tiny_instance(seed) if seed % 2 else pipeline_instance(seed)
    base = runtime_base(cluster, base, runtime)
    uniform = best_runnable_uniform(model, cluster, base, runtime)
    try:
        result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    except NoFeasiblePlan:
        assert uniform is None
        return
    assert not violations(result.plan, runtime)
    if uniform is not None:
        assert result.estimate.step_time_s <= uniform[1].step_time_s * (1 + 1e-9)
    assert evaluate(result.plan).step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-9)


def test_plan_reports_what_any_would_gain_and_skips_it_without_time():
    from planner import api
    from planner.verify.plan_checks import check_plan_data as check

    model, cluster, base = pipeline_instance(3)
    request = api.PlanRequest(model=model, cluster=cluster, global_batch=base.global_batch, seq_len=base.seq_len,
                              dtype="fp16", micro_batches=(1, 2), virtual_stages=(1, 2), time_limit_s=None,
                              runtime="megatron", compare_any=True)
    result = api.plan(request)
    # without --compare-any the comparison is not searched, and the plan file says so
    plain = api.plan(replace(request, compare_any=False))
    assert plain.any_runtime_step_s is None and "--compare-any" in plain.any_runtime_note
    assert api.plan_json(plain)["solver"]["any_runtime_step_s"] is None
    assert plain.estimate.step_time_s == result.estimate.step_time_s
    # the same physics (any is priced as megatron); the comparison keeps the upstream schedules (no ZB-H1)
    free = api.plan(replace(request, runtime="any", zero_bubble=False))
    assert "any_runtime_step_s" not in api.plan_json(free)["solver"]
    assert result.any_runtime_step_s == pytest.approx(free.estimate.step_time_s, rel=1e-9)
    assert result.any_runtime_step_s <= result.estimate.step_time_s
    data = api.plan_json(result)
    assert data["solver"]["any_runtime_step_s"] == result.any_runtime_step_s
    assert check(data, memory=False)[1] == []  # the schema takes the new keys
    # a limit the search itself uses up leaves no time for the comparison: said, not guessed
    skipped = api.with_any_runtime(replace(result, seconds=10.0), model, cluster, base,
                                    SolverOptions(time_limit_s=10.0))
    assert skipped.any_runtime_step_s is None and "time limit" in skipped.any_runtime_note


def test_torchtitan_capability_is_what_its_fsdp_ddp_and_amp_run():
    """torchtitan 0.2.2: DDP only alone, FSDP "always" (ZeRO-3) without PP, FSDP under PP syncs once
    per step (ZeRO-1), bf16 with TP or PP only through FSDP, TP always sequence-parallel, no fp16."""
    from planner.inputs.hardware import load_cluster
    from planner.inputs.model import load_model
    from planner.api.load import resolve_dtype
    from planner.plan import Training

    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")

    def titan(dtype="bf16", **layout):
        return violations(uniform_plan(model, cluster, Training(256, 4096, dtype, 1, runtime="torchtitan"),
                                       **layout), "torchtitan")

    assert titan(tp=1, pp=1, dp=32, zero=0) == ()  # DDP
    assert any("(ZeRO-0) only when" in r for r in titan(tp=2, pp=1, dp=16, zero=0, sequence_parallel=True))
    assert titan(tp=2, pp=1, dp=16, zero=3, sequence_parallel=True) == ()
    assert any("ZeRO-1" in r for r in titan(tp=2, pp=1, dp=16, zero=1, sequence_parallel=True))
    assert titan(tp=2, pp=2, dp=8, zero=1, sequence_parallel=True) == ()
    assert any("ZeRO-3 with pipeline" in r for r in titan(tp=2, pp=2, dp=8, zero=3, sequence_parallel=True))
    assert any("FSDP shards" in r for r in titan(tp=8, pp=4, dp=1, sequence_parallel=True))
    assert titan("fp32", tp=8, pp=4, dp=1, sequence_parallel=True) == ()
    assert any("no fp16" in r for r in titan("fp16", tp=1, pp=1, dp=32, zero=3))
    assert any("always shards the sequence" in r for r in titan(tp=2, pp=1, dp=16, zero=3))
    # the default dtype is one the runtime has: fp32 where a GPU lacks bf16 (V100), never fp16
    mixed = load_cluster("a100-v100-mix")
    assert (resolve_dtype(mixed, None, "torchtitan"), resolve_dtype(mixed, None, "megatron")) == ("fp32", "fp16")
    with pytest.raises(BadInput, match="no fp16 training"):
        resolve_dtype(mixed, "fp16", "torchtitan")


def test_torchtitan_search_keeps_zero1_pipelined():
    """ZeRO-1 is torchtitan's only sharding under PP and none without: the search's ZeRO-1 plans have
    at least two stages (Restriction.min_stages), its one-stage plans ZeRO-0 alone or ZeRO-3."""
    from planner.search.orchestration.space import restrictions, within
    from planner.search.pricing.stage_types import SolverOptions as Options

    model, cluster, base = pipeline_instance(0)
    base = runtime_base(cluster, base, "torchtitan")
    cap = capability("torchtitan")
    found = restrictions(SearchContext(model, cluster, base, within(Options(), cap)), cap, 1)
    assert any(r.zero == 1 for r in found) and any(r.zero == 0 for r in found)
    for r in found:
        if r.zero == 1:
            assert r.min_stages == 2
        if r.zero in (0, 3):
            assert r.max_stages == 1 and r.min_stages == 1
        if r.zero == 0:
            assert r.tp == 1


def test_torchtitan_plan_with_its_any_runtime_comparison_reprices_exactly():
    # the `--runtime any` comparison prices under torchtitan's physics, which hide part of the ZeRO
    # collectives; interleaved ZeRO-2/3 is left out there (its closed-form rank time assumes no such
    # overlap), so the search's step and evaluate's agree (driver.solve asserts it) and plan returns
    from planner.api import PlanRequest, plan

    result = plan(PlanRequest(model="llama-3-70b", cluster="dgx-a100", global_batch=64, seq_len=4096,
                              runtime="torchtitan", compare_any=True))
    assert result.plan.training.runtime == "torchtitan"
    assert result.any_runtime_step_s is None or result.any_runtime_step_s > 0
