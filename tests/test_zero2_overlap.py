"""ZeRO-2's per-micro-batch gradient reduce-scatter (planner.cost.dp_comm.reduce_scatter_overlap):
a runtime that overlaps its DP gradient reduction with the backward (Megatron-LM's physics, which
`--runtime any` prices) hides it behind up to all of that micro-batch's backward; one that does not
(DeepSpeed's engine) leaves it exposed; the FSDP runtimes keep their own share. The search prices
it as evaluate does."""

from __future__ import annotations

import pytest

from planner.api import evaluate
from planner.core.dims import StageDims
from planner.cost.dp_comm import DpLayout, ZeroComm, reduce_scatter_overlap, zero_comm
from planner.cost.evaluate import evaluate as price
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.runtimes import get_runtime, training_params
from planner.inputs.hardware import Link
from planner.search.orchestration.driver import SolverOptions
from planner.verify.oracle import brute_force
from planner.verify.instances import pipeline_instance, tiny_instance

from .conftest import assert_solves_to_the_optimum
from .test_llama405b_meta import meta_request

ANY = get_runtime("any").params(DEFAULT_PARAMS)


def _reduce_scatter(params) -> ZeroComm:
    link = Link(50e9, 5e-6)
    return zero_comm(1e9, StageDims(8, dp=16, zero=2), "bf16", DpLayout(16, 1, 16, link, link), params)


def test_a_comm_bound_reduce_scatter_hides_behind_all_of_the_backward():
    comm = _reduce_scatter(ANY)
    backward = comm.reduce_scatter_s / 4
    assert comm.backward_exposed_s(backward) == pytest.approx(comm.reduce_scatter_s - backward)


def test_a_reduce_scatter_shorter_than_the_backward_is_hidden_whole():
    comm = _reduce_scatter(ANY)
    assert comm.backward_exposed_s(2 * comm.reduce_scatter_s) == 0.0
    assert comm.forward_exposed_s(0.0) == 0.0  # ZeRO-2 gathers nothing before the forward


def test_a_runtime_that_reduces_after_the_schedule_leaves_the_reduce_scatter_exposed():
    deepspeed = get_runtime("deepspeed").params(DEFAULT_PARAMS)
    assert reduce_scatter_overlap(deepspeed) == 0.0
    comm = _reduce_scatter(deepspeed)
    assert comm.backward_exposed_s(10 * comm.reduce_scatter_s) == comm.reduce_scatter_s


def test_fsdp_runtimes_hide_their_own_share_of_the_reduce_scatter():
    titan = get_runtime("torchtitan").params(DEFAULT_PARAMS)
    comm = _reduce_scatter(titan)
    share = titan.overlap_zero_comm
    assert 0 < share < 1
    assert comm.backward_exposed_s(10 * comm.reduce_scatter_s) == pytest.approx((1 - share) * comm.reduce_scatter_s)


def test_zero3_under_megatron_physics_hides_the_reduce_scatter_but_not_the_gather():
    link = Link(50e9, 5e-6)
    comm = zero_comm(1e9, StageDims(8, dp=16, zero=3), "bf16", DpLayout(16, 1, 16, link, link), ANY)
    assert comm.backward_exposed_s(10 * comm.total_s) == pytest.approx(comm.gather_s)


def test_meta_405b_layout_hides_its_reduce_scatters_behind_the_backward():
    """Llama 3 405B as Meta ran it (TP 8, PP 16, V 8, DP 128, ZeRO-2; Dubey et al. 2024, Table 4:
    38-43 % MFU): each chunk's backward outlasts its reduce-scatter."""
    plan = evaluate(meta_request(16384)).plan
    params = training_params(plan.cluster.gpu_types, plan.training, plan.training.runtime)
    hidden = price(plan, params)
    exposed = price(plan, {g: p.with_updates(overlap_grad_reduce=False) for g, p in params.items()})
    assert hidden.breakdown_s["dp_comm"] < 0.05 * exposed.breakdown_s["dp_comm"]
    assert 0.38 <= hidden.mfu <= 0.43


@pytest.mark.parametrize("seed", [1, 4, 5, 6])
def test_the_search_prices_overlapped_zero2_as_evaluate_does(seed):
    """The brute force prices every plan with evaluate; the search finds its optimum, a ZeRO-2 one."""
    model, cluster, base = (tiny_instance if seed == 4 else pipeline_instance)(seed)
    options = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none",), virtual_stages=(1,))
    expected, best, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], zero_stages=(2,), virtual_stages=(1,))
    assert any(stage.zero == 2 for stage in best.stages)
    result = assert_solves_to_the_optimum(expected, model, cluster, base,
                                          SolverOptions(**options, zero_stages=(2,), offload=False))
    assert any(stage.zero == 2 for stage in result.plan.stages)


@pytest.mark.parametrize("maker, seed", [(pipeline_instance, 0), (pipeline_instance, 2), (pipeline_instance, 9),
                                         (tiny_instance, 0), (tiny_instance, 9)])
def test_the_interleaved_search_prices_a_ranks_overlapped_zero2_as_evaluate_does(maker, seed):
    """With V chunks a rank hides its chunks' reduce-scatters behind its whole backward, each chunk
    an equal share (dp_comm.rank_zero_share): the search finds the brute force's interleaved ZeRO-2 optimum."""
    model, cluster, base = maker(seed)
    options = dict(micro_batches=(1, 2), tp_degrees=(1,), recompute_modes=("none",), virtual_stages=(2,))
    expected, best, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], zero_stages=(2,), virtual_stages=(2,))
    assert best.training.schedule == "interleaved" and any(st.zero == 2 and st.dp > 1 for st in best.stages)
    result = assert_solves_to_the_optimum(expected, model, cluster, base,
                                          SolverOptions(**options, zero_stages=(2,), offload=False))
    assert any(stage.zero == 2 for stage in result.plan.stages)


def test_a_ranks_chunks_share_its_exposed_reduce_scatter_equally():
    """A rank of V chunks exposes what its whole backward does not hide of its chunks' reduce-scatters
    together (dp_comm.rank_zero_share), each chunk an equal share, where chunk by chunk they would
    expose different amounts (the brute force's interleaved ZeRO-2 optimum of tiny_instance(9))."""
    from planner.cost.replica_pricer import PlanPricer

    model, cluster, base = tiny_instance(9)
    _, plan, _ = brute_force(model, cluster, base, (1, 2), (1,), ("none",), zero_stages=(2,), virtual_stages=(2,))
    params = training_params(plan.cluster.gpu_types, plan.training, plan.training.runtime)
    chunks = [st for st in plan.stages if st.pipeline_rank == 1]
    assert len(chunks) == 2 and chunks[0].zero == 2 and chunks[0].dp > 1
    priced = PlanPricer(plan, params).replica(chunks, chunks[0].replicas[0]).chunks
    own = [c.zero.exposed_s(c.span) for c in priced]
    assert own[0] != pytest.approx(own[1])  # (chunk by chunk: unequal)
    rank = priced[0].zero.plus(priced[1].zero)
    backward = priced[0].span.bwd_s + priced[1].span.bwd_s
    exposed = rank.reduce_scatter_s - min(rank.reduce_scatter_s, backward)
    assert 0 < exposed
    assert [c.zero_s for c in priced] == pytest.approx([exposed / 2, exposed / 2], rel=1e-12)
