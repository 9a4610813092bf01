"""DualPipeV (DeepSeek-V3's DualPipe in its V form, torchtitan's DualPipeV): ZB-V's placement and
memory, the DualPipe README's bubble, the expert-parallel all-to-all under the partner pass's
compute, and where torchtitan runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import capability, violations
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, structural_problems, uniform_plan
from planner.schedules import get_schedule

from .conftest import H100


def test_the_bubble_per_rank_is_the_dualpipe_readmes_over_two_chunks():
    # per chunk: forward F, input gradient B_in, weight gradient W; the README's B is the whole
    # backward B_in + W and F&B the forward and backward chunks back to back
    f, b_in, w = 1.0, 1.5, 0.5
    whole_b = b_in + w
    readme = (f + whole_b) + whole_b - 3 * w  # F&B + B - 3W
    dualpipev = get_schedule("dualpipev")
    rank_s, forward_s, wgrad_s = 2 * (f + b_in + w), 2 * f, 2 * w  # the rank's two chunks
    assert dualpipev.latency_s(rank_s, rank_s / 2, 2, wgrad_s, forward_s) == pytest.approx(readme)
    # ZB-V's (F + B_in - 2W) per chunk is smaller by one whole backward chunk
    zbv = get_schedule("zbv").latency_s(rank_s, rank_s / 2, 2, wgrad_s, forward_s)
    assert zbv == pytest.approx(f + b_in - 2 * w) and readme - zbv == pytest.approx(whole_b)


def test_placement_and_memory_are_zbvs():
    dualpipev, zbv = get_schedule("dualpipev"), get_schedule("zbv")
    assert [dualpipev.chunk_rank(c, 4, 2) for c in range(8)] == [zbv.chunk_rank(c, 4, 2) for c in range(8)] \
        == [0, 1, 2, 3, 3, 2, 1, 0]
    # the README's PP + 1 chunk micro-batches per device: 2p + 1 over a rank's two chunks
    assert all(sum(dualpipev.chunk_in_flight(k, 4, 2, 16)) == 9 for k in range(4))


def _moe_plan(schedule: str, global_batch: int = 64, runtime: str = "torchtitan", recompute: str = "none"):
    # Llama 4 Scout: an MoE model torchtitan pipelines (its qwen3 package has no pipelining_fn)
    training = Training(global_batch, 4096, "bf16", 1, schedule, 2, runtime=runtime)
    return uniform_plan(load_model("llama-4-scout"), cluster_from_spec(H100, "test"), training, tp=1, pp=2, dp=8,
                        zero=1, ep=8, recompute=recompute)


def test_the_expert_parallel_all_to_all_runs_under_the_partner_passs_compute():
    zbv, dualpipev = evaluate(_moe_plan("zbv")), evaluate(_moe_plan("dualpipev"))
    assert zbv.breakdown_s["ep_comm"] > 0
    assert dualpipev.breakdown_s.get("ep_comm", 0.0) < zbv.breakdown_s["ep_comm"]
    # a dense model has no all-to-all to hide: only the larger bubble remains
    dense = Training(64, 4096, "bf16", 1, "zbv", 2, runtime="torchtitan")
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(H100, "test")
    plain = evaluate(uniform_plan(model, cluster, dense, tp=1, pp=2, dp=8, zero=1))
    dual = evaluate(uniform_plan(model, cluster, replace(dense, schedule="dualpipev"), tp=1, pp=2, dp=8, zero=1))
    assert dual.step_time_s > plain.step_time_s


def test_it_needs_a_micro_batch_for_every_stage_of_the_v():
    # pp 2: four stages; dp 8 replicas of 4 samples at micro-batch 1 have four micro-batches each
    assert not structural_problems(_moe_plan("dualpipev", global_batch=32))
    problems = structural_problems(_moe_plan("dualpipev", global_batch=24))
    assert any("dualpipev needs at least 4 (its stages) micro-batches" in message for _, message in problems)
    assert not structural_problems(_moe_plan("zbv", global_batch=24))  # ZB-V: p = 2 are enough


def test_torchtitan_runs_it_without_recompute_beside_expert_parallelism_and_uncompiled():
    assert "dualpipev" in capability("torchtitan").schedules and "dualpipev" in capability("any").schedules
    assert not violations(_moe_plan("dualpipev"), "torchtitan")
    recomputing = violations(_moe_plan("dualpipev", recompute="full"), "torchtitan")
    assert any("expert parallelism under dualpipev only without recomputation" in v for v in recomputing)
    assert not violations(_moe_plan("zbv", recompute="full"), "torchtitan")
    compiled = _moe_plan("dualpipev")
    compiled = replace(compiled, training=replace(compiled.training, compile=True))
    assert any("no dualpipev schedule under torch.compile" in v for v in violations(compiled, "torchtitan"))
    assert any("has no dualpipev schedule" in v for v in violations(_moe_plan("dualpipev", runtime="megatron"),
                                                                     "megatron"))


def test_the_torchtitan_export_runs_dualpipev_with_the_expert_parallel_overlap(tmp_path):
    from planner.export import export_plan

    from .test_titan_deepseek import H100_128, _deepseek

    model = _deepseek(tmp_path)  # torchtitan's deepseek_v3 671B flavour (its MTP module left out)

    def exported(schedule: str) -> str:
        training = Training(256, 4096, "bf16", 1, schedule, 2, runtime="torchtitan")
        plan = uniform_plan(model, H100_128, training, tp=8, pp=8, dp=2, ep=2, zero=1, sequence_parallel=True)
        assert not violations(plan, "torchtitan")
        return export_plan(plan, "torchtitan", lambda message: None)

    text = exported("dualpipev")
    assert 'pipeline_parallel_schedule = "DualPipeV"' in text
    assert "pipeline_parallel_expert_parallel_overlap = true" in text
    config_manager = pytest.importorskip("torchtitan.config").ConfigManager
    job = tmp_path / "job.toml"
    job.write_text(text)
    parallelism = config_manager().parse_args(["--job.config_file", str(job)]).parallelism
    assert parallelism.pipeline_parallel_schedule == "DualPipeV" and parallelism.pipeline_parallel_expert_parallel_overlap
    text = exported("zbv")
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in text and "expert_parallel_overlap" not in text


def test_without_expert_parallelism_zbv_is_never_slower_so_the_scan_leaves_dualpipev_out():
    from planner.search.orchestration.space import uniform_space, within
    from planner.search.pricing.stage_types import SearchContext, SolverOptions
    from planner.search.uniform import uniform_candidates

    assert get_schedule("dualpipev").without_ep_as == "zbv"
    # the dominance the scan relies on, on a dense model: the same plan under ZB-V prices no slower
    dense = Training(64, 4096, "bf16", 1, "zbv", 2, runtime="torchtitan")
    model, cluster = load_model("llama-3-8b"), cluster_from_spec(H100, "test")
    for tp, pp, dp in ((1, 2, 8), (2, 4, 2), (1, 4, 4)):
        zbv = evaluate(uniform_plan(model, cluster, dense, tp=tp, pp=pp, dp=dp, zero=1))
        dual = evaluate(uniform_plan(model, cluster, replace(dense, schedule="dualpipev"), tp=tp, pp=pp, dp=dp, zero=1))
        assert zbv.step_time_s <= dual.step_time_s and zbv.memory_by_rank == dual.memory_by_rank
    cap = capability("torchtitan")
    options = within(SolverOptions(micro_batches=(1,), tp_degrees=(1,), recompute_modes=("none",)), cap)
    space = uniform_space(options, cap, whole_nodes=False)
    dense_plans = list(uniform_candidates(SearchContext(model, cluster, dense, options), space))
    assert {p.training.schedule for p in dense_plans} >= {"zbv"} and "dualpipev" not in {
        p.training.schedule for p in dense_plans}
    moe = load_model("qwen3-30b-a3b")
    moe_plans = list(uniform_candidates(SearchContext(moe, cluster, replace(dense, runtime="any"), options), space))
    assert {p.stages[0].ep for p in moe_plans if p.training.schedule == "dualpipev"} == {2, 4, 8}
