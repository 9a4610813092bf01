"""The driver skips a runtime's restricted searches (one tp and dp for every stage) whose lower
bound (planner.search.bounds.restriction_bound) cannot beat the best plan known: the bound never exceeds
a plan of the restriction, and skipping leaves the plan found unchanged."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest

from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.plan import Training, uniform_plan
from planner.search.bounds.restriction_bound import RestrictionBound, most_speed, restricted_floor_s
from planner.search.pricing.stage_types import Restriction, SearchContext, SolverOptions

from .conftest import solve_with_and_without_skips
from .test_trim import OPTIONS, instance


def test_the_fastest_types_fill_the_most_stages():
    types = [(384, 4.0), (192, 1.0), (320, 2.0)]  # (GPUs, block time): 1 stage of H100s, 3 more up to A100s, ...
    assert most_speed(types, 128, 16) == pytest.approx(1 / 1 + 3 / 2 + 3 / 4)
    assert most_speed(types, 128, 2) == pytest.approx(1 / 1 + 1 / 2)
    assert most_speed(types, 1024, 16) == 0.0  # no stage of 1,024 GPUs fits


def test_the_bound_never_exceeds_a_uniform_plan_of_the_restriction():
    """Uniform plans are plans of their (tp, dp, recompute, ZeRO) restriction with pp stages; on
    2 H100 + 2 A100 + 4 V100 one-GPU nodes they mix types within and across stages."""
    model, _, base = instance(80, "megatron")
    cluster = cluster_from_spec(one_gpu_nodes(2, 2, 4))
    base = replace(base, global_batch=16)
    options = SolverOptions(**{**OPTIONS, "tp_degrees": (1,)})
    checked = tighter = 0
    for pp, dp, b, recompute in product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2), ("none", "full")):
        if cluster.num_gpus != pp * dp or base.global_batch % (b * dp):
            continue
        try:
            plan = uniform_plan(model, cluster, Training(base.global_batch, base.seq_len, base.dtype, b,
                                                         runtime=base.runtime),
                                tp=1, pp=pp, dp=dp, zero=1 if dp > 1 else 0, recompute=recompute)
        except BadInput:
            continue
        restriction = Restriction(1, dp, recompute, 1 if dp > 1 else None, even_shares=True)
        assert plan.training.schedule == "1f1b"
        context = SearchContext(model, cluster, base, options)
        floor = restricted_floor_s(context, b, restriction, pp)
        filled = restricted_floor_s(context, b, restriction, pp, fill=True)
        assert 0 < floor <= filled <= evaluate(plan).step_time_s * (1 + 1e-12)
        tighter += filled > floor * (1 + 1e-9)
        checked += 1
    assert checked >= 12 and tighter > 0


def one_gpu_nodes(h100: int, a100: int, v100: int) -> dict:
    return {"name": "one-gpu-nodes", "node_groups": [
        {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 1,
         "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}
        for name, gpu, nodes, nic in (("h", "H100-SXM5-80GB", h100, 400), ("a", "A100-SXM4-80GB", a100, 200),
                                      ("v", "V100-SXM2-32GB", v100, 50))]}


@pytest.mark.parametrize("memory_gib", [80, 6])
def test_skipping_bounded_searches_finds_the_same_plan(monkeypatch, memory_gib):
    model, cluster, base = instance(memory_gib, "megatron")
    options = SolverOptions(**OPTIONS)
    pruned, full, skipped = solve_with_and_without_skips(monkeypatch, RestrictionBound, model, cluster, base, options)
    assert skipped  # the bound rules some searches out here
    assert pruned.plan == full.plan and pruned.estimate.step_time_s == full.estimate.step_time_s
