"""planner.schedules: the registry of pipeline schedules, each one module, and what evaluate,
show, the plan loader and the search ask of it."""

from __future__ import annotations

import dataclasses
import json
from itertools import product
from pathlib import Path

import pytest

from planner import plan as plan_module
from planner.cost.evaluate import evaluate
from planner.cost.runtimes import capability
from planner.export.torchtitan import TITAN_SCHEDULES
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.schedules import SCHEDULES, get_schedule, search_schedule
from planner.schedules.gpipe import GPipe
from planner.report.show import rank_timings, simulate

DATA = Path(__file__).resolve().parent.parent / "planner" / "data"
SPEC = {"name": "four", "node_groups": [{
    "name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 4,
    "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
    "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}
GRID = [(k, pp, v, m) for pp, v, m in product((1, 2, 4, 8), (1, 2, 3, 4), (1, 2, 3, 8, 32)) for k in range(pp)]


def replaced_in_flight(schedule: str, k: int, pp: int, v: int, m: int) -> float:
    """cost.in_flight_microbatches as it was before the registry (the formulas it replaces)."""
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved" and v > 1:
        # megatron-core's groups of N micro-batches per virtual stage: pp, or the least N that its
        # schedules.py accepts where pp does not divide m (M % N = 0 or M % N >= pp)
        group = next(n for n in range(pp, max(m, pp) + 1) if m < pp or m % n == 0 or m % n >= pp)
        return min(m * v, (pp - k - 1) * 2 + (v - 1) * group + 1) / v
    return float(min(pp - k, m))


@pytest.mark.parametrize("name", ["1f1b", "interleaved", "gpipe"])
def test_in_flight_count_matches_the_formulas_it_replaces(name):
    schedule = get_schedule(name)
    for k, pp, v, m in GRID:
        assert schedule.in_flight_microbatches(k, pp, v, m) == pytest.approx(replaced_in_flight(name, k, pp, v, m),
                                                                             rel=1e-15), (k, pp, v, m)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_op_order_runs_every_forward_once_before_its_backward(name):
    schedule = get_schedule(name)
    for pp, n in product((1, 2, 3, 4, 8), (1, 2, 5, 16)):
        for k in range(pp):
            order = schedule.order(k, pp, n)
            passes = ("F", "B", "W") if schedule.split_backward else ("F", "B")
            assert sorted(order) == sorted((kind, j) for kind in passes for j in range(n))
            assert all(order.index(("F", j)) < order.index(("B", j)) for j in range(n))
            if schedule.split_backward:  # a weight gradient after its own input gradient
                assert all(order.index(("B", j)) < order.index(("W", j)) for j in range(n))


def test_gpipe_order_is_all_forwards_then_all_backwards_and_1f1b_warms_up_pp_minus_rank_minus_one():
    assert get_schedule("gpipe").order(0, 4, 3) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]
    assert get_schedule("1f1b").order(1, 4, 4) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                                    ("B", 2), ("B", 3)]


def test_registry_names_are_the_plan_files_and_the_schemas_schedules():
    schema = json.loads((DATA / "plan.schema.json").read_text())
    enum = schema["properties"]["training"]["properties"]["schedule"]["enum"]
    assert list(SCHEDULES) == list(plan_module.SCHEDULES) == enum == ["1f1b", "interleaved", "gpipe", "zb-h1", "zbv",
                                                                       "looped-bfs", "dualpipev", "combined-1f1b"]
    assert all(name == schedule.name for name, schedule in SCHEDULES.items())


def test_search_plans_1f1b_interleaved_zb_h1_and_combined_1f1b_only():
    # gpipe, zbv, looped-bfs and dualpipev are priced by evaluate, not searched (yet)
    assert {name for name, s in SCHEDULES.items() if s.searched} == {"1f1b", "interleaved", "zb-h1", "combined-1f1b"}
    assert search_schedule(1).name == "1f1b"
    assert [search_schedule(v).name for v in (2, 3, 8)] == ["interleaved"] * 3


def test_chunks_per_rank_and_the_torchtitan_schedule_names():
    assert [get_schedule(n).chunks_per_rank(3) for n in ("1f1b", "interleaved", "gpipe", "zb-h1", "looped-bfs")] == [
        1, 3, 1, 1, 3]
    # torch.distributed.pipelining.get_schedule_class's names (torchtitan's pipeline_parallel_schedule),
    # one for each schedule torchtitan runs
    assert TITAN_SCHEDULES == {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                               "zbv": "ZBVZeroBubble", "looped-bfs": "LoopedBFS", "dualpipev": "DualPipeV"}
    assert tuple(TITAN_SCHEDULES) == capability("torchtitan").schedules
    assert "interleaved" not in capability("deepspeed").schedules


def test_interleaved_latency_is_its_slowest_chunk():
    assert get_schedule("interleaved").latency_s(4.0, 1.5, 3) == 1.5
    assert get_schedule("1f1b").latency_s(4.0, 1.5, 1) == 4.0


# --- adding a schedule is one module: a toy registered here reaches evaluate and show ------


@pytest.fixture
def toy(monkeypatch):
    """A copy of GPipe under another name, registered the way a new module registers."""
    schedule = dataclasses.replace(SCHEDULES["gpipe"], name="toy-gpipe")
    assert isinstance(schedule, GPipe)
    monkeypatch.setitem(SCHEDULES, schedule.name, schedule)
    return schedule


def _plan(schedule: str):
    training = Training(32, 512, "bf16", 2, schedule, 1)
    return uniform_plan(load_model("gpt2"), cluster_from_spec(SPEC), training, tp=1, pp=2, dp=2)


def test_a_registered_toy_schedule_is_priced_by_evaluate_as_its_rules_say(toy):
    copy, gpipe, one_f = evaluate(_plan(toy.name)), evaluate(_plan("gpipe")), evaluate(_plan("1f1b"))
    assert copy.step_time_s == gpipe.step_time_s
    assert copy.memory_by_rank == gpipe.memory_by_rank != one_f.memory_by_rank  # it holds every micro-batch


def test_a_registered_toy_schedule_is_drawn_by_show_and_loads_from_a_plan_file(toy):
    plan = _plan(toy.name)
    assert simulate(rank_timings(plan), toy.name) == simulate(rank_timings(plan), "gpipe")
    assert plan_from_json(plan_to_json(plan)).training.schedule == toy.name


def test_a_registered_toy_schedule_is_drawn_in_an_svg(toy, tmp_path):
    pytest.importorskip("matplotlib")
    from planner.report.show import write_timeline_svg
    plan = _plan(toy.name)
    path = tmp_path / "toy.svg"
    assert write_timeline_svg(plan, evaluate(plan), rank_timings(plan), str(path)) == 2 * 8 * 2  # 2 ranks x 8 micro-batches x (F, B)


def test_api_refuses_an_unregistered_schedule_as_bad_input_and_accepts_a_registered_toy(toy):
    from planner import api
    from planner.core.errors import BadInput
    flags = dict(model="gpt2", cluster=cluster_from_spec(SPEC), global_batch=32, seq_len=512, tp=1, pp=2, dp=2,
                 micro_batch=2)
    with pytest.raises(BadInput, match="unknown schedule 'nope'"):
        api.plan_from_flags(api.EvaluateRequest(schedule="nope", **flags))
    assert api.plan_from_flags(api.EvaluateRequest(schedule=toy.name, **flags)).training.schedule == toy.name
    with pytest.raises(BadInput, match="--virtual-stages 2 needs --schedule interleaved"):
        api.plan_from_flags(api.EvaluateRequest(schedule=toy.name, virtual_stages=2, **flags))
