"""The zero-bubble (ZB-H1, ZB-V) and breadth-first (looped BFS) schedules: the split backward
in the layer cost, their bubbles against a simulation of their op orders, the memory of
deferred weight gradients and of breadth-first loops, the V placement, and their exports."""

from __future__ import annotations

from itertools import product

import pytest

from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate, pipeline_time_s
from planner.cost.runtimes import capability
from planner.cost.replica_pricer import PlanPricer
from planner.cost.formulas import DEFAULT_PARAMS, layer_time
from planner.cost.pricing import saved_activation_bytes, wgrad_input_bytes
from planner.cost.sharding import Sharding
from planner.core.dims import StageDims
from planner.export.deepspeed import export_deepspeed
from planner.export.megatron import export_megatron
from planner.export.torchtitan import titan_settings
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, structural_problems, uniform_plan
from planner.report.show import RankTiming, rank_timings, simulate
from planner.schedules import get_schedule

SPEC = {"name": "eight", "node_groups": [{
    "name": "g", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 4,
    "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
    "inter_node": {"bandwidth_GBps": 25, "latency_us": 5}}]}


# one GPU per node on a slow network: data-parallel reductions cost what they cost
SLOW = {"name": "slow", "node_groups": [{
    "name": "g", "gpu": "A100-SXM4-80GB", "nodes": 8, "gpus_per_node": 1,
    "inter_node": {"bandwidth_GBps": 2, "latency_us": 20}}]}


def _plan(schedule: str, pp: int = 4, dp: int = 2, v: int = 1, batch: int = 32, zero: int = 1, model="llama-3-8b",
          spec=SPEC):
    training = Training(batch, 1024, "bf16", 1, schedule, v)
    return uniform_plan(load_model(model), cluster_from_spec(spec), training, tp=1, pp=pp, dp=dp, zero=zero)


# --- the split backward ------------------------------------------------------------------------


def test_weight_gradient_is_the_forward_gemm_time_and_no_more_than_the_input_gradient():
    model = load_model("llama-3-8b")
    gpu = load_catalog()["A100-SXM4-80GB"]
    link = cluster_from_spec(SPEC).groups[0].intra_node
    for recompute, tp in product(("none", "full"), (1, 4)):
        sh = Sharding("bf16", 2, 2048, "flash", StageDims(tp, tp > 1), recompute)
        for layer in (model.layers[1], model.layers[-1]):
            t = layer_time(layer, gpu, sh, link, DEFAULT_PARAMS)
            assert 0 < t.wgrad_s <= t.fwd_s
            assert t.bwd_s + t.recompute_s - t.wgrad_s >= t.wgrad_s  # B (with recompute) >= W
    # embedding lookups have no weight GEMM: their gradient is a scatter-add, all B
    assert layer_time(model.layers[0], gpu, sh, link, DEFAULT_PARAMS).wgrad_s == 0.0


def test_deferred_weight_gradient_keeps_its_gemm_inputs_a_part_of_the_saved_activations():
    model = load_model("llama-3-8b")
    c = model.config
    for tp, sp in ((1, False), (4, True)):
        sh = Sharding("bf16", 1, 1024, "flash", StageDims(tp, sp), "none")
        block = model.layers[1]
        w = wgrad_input_bytes(block, sh)
        assert 0 < w < saved_activation_bytes(block, sh)
        # QKV, MLP-in read the block's normed input (h), out-proj its attention output (o_dim/tp),
        # MLP-down the activated MLP (ffn/tp); 2 bytes, 1024 tokens
        expected = 1024 * 2 * (2 * c.hidden / (tp if sp else 1) + (c.o_dim + c.ffn_hidden) / tp)
        assert w == pytest.approx(expected)


# --- ZB-H1: its op order simulates to the paper's bubble, which evaluate prices ------------------


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_zb_h1_order_runs_in_the_papers_time_and_evaluates_formula_agrees(pp):
    """Qi et al. 2023, sec 3.1: (p - 1)(T_F + T_B - T_W) of bubble, with p or more micro-batches."""
    zb, one_f = get_schedule("zb-h1"), get_schedule("1f1b")
    for m, (f, b, w) in product((pp, pp + 1, 2 * pp + 3), ((1.0, 1.0, 1.0), (1.0, 1.3, 0.7), (1.2, 2.1, 0.9))):
        timings = [RankTiming(k, (k,), "g", 0, m, f, b + w, w) for k in range(pp)]
        end = max(op.end_s for op in simulate(timings, "zb-h1"))
        assert end == pytest.approx(m * (f + b + w) + (pp - 1) * (f + b - w))
        latencies = [zb.latency_s(f + b + w, f + b + w, 1, w)] * pp
        assert pipeline_time_s([m * (f + b + w)] * pp, [0.0] * pp, latencies)[0] == pytest.approx(end)
        one_f_end = max(op.end_s for op in simulate(timings, "1f1b"))
        assert one_f_end == pytest.approx((m + pp - 1) * (f + b + w))
        assert pipeline_time_s([m * (f + b + w)] * pp, [0.0] * pp,
                               [one_f.latency_s(f + b + w, f + b + w, 1, w)] * pp)[0] == pytest.approx(one_f_end)


def test_zb_h1_on_a_real_plan_is_priced_at_most_one_percent_above_its_simulated_order():
    """Stages differ (the embedding and head): the priced fill is a bound that the order meets."""
    plan = _plan("zb-h1")
    est = evaluate(plan)
    end = max(op.end_s for op in simulate(rank_timings(plan), "zb-h1"))
    priced = est.step_time_s - est.breakdown_s["optimizer"] - est.breakdown_s["dp_comm"]
    assert end <= priced * (1 + 1e-12) and end >= priced * 0.99
    one_f = evaluate(_plan("1f1b"))
    assert est.step_time_s < one_f.step_time_s and est.bubble_fraction < one_f.bubble_fraction / 2


def test_zb_h1_rank_k_holds_p_minus_k_micro_batches_and_the_weight_inputs_of_k_more():
    zb, one_f = _plan("zb-h1", pp=4), _plan("1f1b", pp=4)
    est_zb, est_1f = evaluate(zb), evaluate(one_f)
    pricer = PlanPricer(zb)
    by_rank = {s.pipeline_rank: s for s in zb.stages}
    for k in range(4):
        span = pricer.replica([by_rank[k]], by_rank[k].replicas[0]).span
        rank = by_rank[k].replicas[0].ranks[0]
        extra = est_zb.memory_by_rank[rank].activations_bytes - est_1f.memory_by_rank[rank].activations_bytes
        assert extra == pytest.approx(k * span.wgrad_act_bytes)
    # the peak stays 1F1B's: the first rank's
    assert est_zb.peak_memory_by_gpu() == est_1f.peak_memory_by_gpu()


def test_zero_bubble_needs_as_many_micro_batches_as_pipeline_ranks():
    assert any("needs at least pp = 4 micro-batches" in text for _, text in
               structural_problems(_plan("zb-h1", pp=4, dp=2, batch=6)))
    assert not structural_problems(_plan("zb-h1", pp=4, dp=2, batch=8))


def test_svg_draws_the_weight_gradient_as_its_own_boxes(tmp_path):
    pytest.importorskip("matplotlib")
    from planner.report.show import write_timeline_svg
    plan = _plan("zb-h1", batch=16)
    drawn = write_timeline_svg(plan, evaluate(plan), rank_timings(plan), str(tmp_path / "zb.svg"))
    assert drawn == 4 * 8 * 3  # 4 ranks x 8 micro-batches x (F, B, W)
    assert "weight gradient (W)" in (tmp_path / "zb.svg").read_text()


# --- ZB-V --------------------------------------------------------------------------------------


def test_zbv_places_its_chunks_as_a_v_and_turns_on_the_last_rank_without_a_send():
    plan = _plan("zbv", pp=4, v=2)
    assert [s.pipeline_rank for s in plan.stages] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert not structural_problems(plan)
    est = evaluate(plan)
    assert 3 not in {b.stage for b in est.pipeline_links}  # stage 3 -> 4 stays on rank 3
    interleaved = evaluate(_plan("interleaved", pp=4, v=2))
    assert est.bubble_fraction < interleaved.bubble_fraction / 2
    import dataclasses
    cycled = dataclasses.replace(plan, stages=tuple(dataclasses.replace(s, pipeline_rank=s.index % 4)
                                                    for s in plan.stages))
    assert any("zbv" in text for _, text in structural_problems(cycled))


def test_zbv_bubble_is_the_papers_floored_at_the_last_ranks_idle_start():
    zbv = get_schedule("zbv")
    assert zbv.latency_s(3.6, 1.8, 2, 1.0, 0.4) == pytest.approx(0.3)  # (T_F + T_B - 2 T_W) / 2 chunks
    # equal times: the paper's zero, floored at the last rank's idle start, a chunk forward per rank
    assert zbv.latency_s(3.0, 1.5, 2, 1.0, 1.0) == 0.5
    assert zbv.chunk_in_flight(0, 4, 2, 32) == (8.0, 1.0)  # the embedding's chunk 2p, the head's one


# --- looped BFS --------------------------------------------------------------------------------


def test_looped_bfs_holds_every_micro_batch_and_overlaps_the_gradient_reduction_with_its_loops():
    bfs, inter = _plan("looped-bfs", v=2, batch=16, spec=SLOW), _plan("interleaved", v=2, batch=16, spec=SLOW)
    est_bfs, est_inter = evaluate(bfs), evaluate(inter)
    rank = bfs.stages[1].replicas[0].ranks[0]
    span = PlanPricer(bfs).replica([s for s in bfs.stages if s.pipeline_rank == 1],
                                   bfs.stages[1].replicas[0]).span
    assert est_bfs.memory_by_rank[rank].activations_bytes == pytest.approx(8 * span.act_bytes)  # 16 / dp 2
    assert est_bfs.breakdown_s["dp_comm"] < est_inter.breakdown_s["dp_comm"]


def test_looped_bfs_runs_the_zero3_collectives_once_per_loop():
    bfs, inter = (_plan("looped-bfs", v=2, batch=16, zero=3, spec=SLOW),
                  _plan("interleaved", v=2, batch=16, zero=3, spec=SLOW))
    chunks = [s for s in bfs.stages if s.pipeline_rank == 0]
    per_loop = PlanPricer(bfs).replica(chunks, chunks[0].replicas[0]).chunks[0].zero
    per_mb = PlanPricer(inter).replica([s for s in inter.stages if s.pipeline_rank == 0],
                                       chunks[0].replicas[0]).chunks[0].zero
    assert per_loop.gather_s == pytest.approx(per_mb.gather_s / 8) and per_mb.gather_s > 0
    assert evaluate(bfs).step_time_s < evaluate(inter).step_time_s


# --- runtimes ----------------------------------------------------------------------------------


def test_torchtitan_exports_the_torch_schedule_class_names():
    for schedule, v, name in (("zbv", 2, "ZBVZeroBubble"), ("looped-bfs", 2, "LoopedBFS")):
        sections, _ = titan_settings(_plan(schedule, v=v), lambda text: None)
        assert sections["parallelism"]["pipeline_parallel_schedule"] == name


@pytest.mark.parametrize("schedule,v", [("zb-h1", 1), ("zbv", 2), ("looped-bfs", 2)])
def test_megatron_and_deepspeed_refuse_the_schedules_they_lack_with_the_reason(schedule, v):
    plan = _plan(schedule, v=v)
    for export, runtime in ((export_megatron, "megatron"), (export_deepspeed, "deepspeed")):
        with pytest.raises(BadInput, match=f"{runtime} has no {schedule} schedule \\(.*(1F1B|TrainSchedule)"):
            export(plan, lambda text: None)
    assert schedule not in capability(runtime).schedules and schedule in capability("any").schedules
    if schedule == "zb-h1":
        with pytest.raises(BadInput, match="at least 2 stages per rank"):
            titan_settings(plan, lambda text: None)


# --- the search ---------------------------------------------------------------------------------


def test_the_search_tries_zb_h1_under_any_only():
    # (combined 1F1B, for MoE models, where the runtime runs it: tests/test_combined_1f1b.py)
    from planner.schedules import searched_schedules
    assert [s.name for s in searched_schedules(1, capability("any").schedules)] == ["1f1b", "zb-h1", "combined-1f1b"]
    for runtime in ("deepspeed", "torchtitan", "megatron-2021", "fsdp1"):
        assert [s.name for s in searched_schedules(1, capability(runtime).schedules)] == ["1f1b"]
    assert [s.name for s in searched_schedules(1, capability("megatron").schedules)] == ["1f1b", "combined-1f1b"]
    for runtime in ("deepspeed", "torchtitan", "megatron-2021", "fsdp1"):
        assert [s.name for s in searched_schedules(2, capability(runtime).schedules)] == ["interleaved"]
    for runtime in ("any", "megatron"):
        assert [s.name for s in searched_schedules(2, capability(runtime).schedules)] == ["interleaved", "combined-1f1b"]


def test_evaluate_flags_refuse_zero_bubble_with_fewer_micro_batches_than_ranks_and_zbv_with_three_chunks():
    from planner import api
    flags = dict(model="gpt2", cluster=cluster_from_spec(SPEC), seq_len=512, tp=1, pp=4, dp=2, micro_batch=1)
    with pytest.raises(BadInput, match="zb-h1 schedule needs at least --pp 4 micro-batches per replica"):
        api.plan_from_flags(api.EvaluateRequest(schedule="zb-h1", global_batch=6, **flags))
    assert api.plan_from_flags(api.EvaluateRequest(schedule="zb-h1", global_batch=8, **flags)).training.schedule == "zb-h1"
    with pytest.raises(BadInput, match="zbv schedule takes --virtual-stages 2"):
        api.plan_from_flags(api.EvaluateRequest(schedule="zbv", global_batch=8, virtual_stages=3, **flags))


@pytest.mark.parametrize("schedule,v", [("zb-h1", 1), ("zbv", 2), ("looped-bfs", 2)])
def test_planner_run_refuses_the_schedules_it_does_not_execute(schedule, v):
    from planner.runner.layout import check_runnable
    with pytest.raises(BadInput, match=f"does not run the {schedule} schedule"):
        check_runnable(_plan(schedule, v=v, model="gpt2"), v)


def _greedy_v_makespan(p: int, m: int, f: float, b: float, w: float) -> float:
    """A list schedule of the V's 2p chunk stages (rank k: chunks k and 2p - 1 - k): each rank
    runs the ready pass that can start first, B before F before W, at most 2p chunk forwards
    whose W has not run (1F1B's memory); no sends."""
    stages = 2 * p
    rank = [c if c < p else stages - 1 - c for c in range(stages)]
    deps = {"F": lambda c, j: [("F", c - 1, j)] if c else [],
            "B": lambda c, j: [("F", c, j)] + ([("B", c + 1, j)] if c < stages - 1 else []),
            "W": lambda c, j: [("B", c, j)]}
    pending = [{(op, c, j) for c in range(stages) if rank[c] == k for j in range(m) for op in "FBW"} for k in range(p)]
    done: dict = {}
    free, held = [0.0] * p, [0] * p
    while any(pending):
        best = None
        for k in range(p):
            for op, c, j in pending[k]:
                need = deps[op](c, j)
                if any(d not in done for d in need) or (op == "F" and held[k] >= stages):
                    continue
                start = max([free[k]] + [done[d] for d in need])
                key = (start, "BFW".index(op), j, -c if op == "B" else c, k)
                if best is None or key < best[0]:
                    best = (key, k, (op, c, j))
        (start, *_), k, (op, c, j) = best
        done[(op, c, j)] = free[k] = start + {"F": f, "B": b, "W": w}[op]
        pending[k].discard((op, c, j))
        held[k] += {"F": 1, "B": 0, "W": -1}[op]
    return max(free)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
def test_zbv_price_is_met_by_a_v_schedule_when_the_passes_take_the_same_time(p, m):
    """With T_F = T_B = T_W the priced ZB-V step, m (T_F + T_B + T_W) + (p - 1) T_F / 2, is what a
    simple list schedule of the V reaches (the paper's tuned schedule is no slower)."""
    zbv = get_schedule("zbv")
    priced = pipeline_time_s([m * 3.0] * p, [0.0] * p, [zbv.latency_s(3.0, 1.5, 2, 1.0, 1.0)] * p)[0]
    assert _greedy_v_makespan(p, m, 0.5, 0.5, 0.5) == pytest.approx(priced)
