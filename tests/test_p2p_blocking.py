"""Pipeline sends, blocking or overlapped by runtime and schedule (planner.cost.p2p): what they add
to the step, how the breakdown and the `critical:` line show them, and the search pricing them
as evaluate does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.runtimes import RUNTIMES, p2p_mode
from planner.cost.runtimes.spec import RuntimeSpec
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training
from planner.report.views import critical_lines
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.uniform import uniform_plan
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, tiny_instance

from .conftest import assert_solves_to_the_optimum, runtime_base

LLAMA = load_model("llama-3-8b")
SEQ, BATCH, TP = 4096, 64, 8
LATENCY_S = 50e-6


def spec(link_GBps: float, first: str = "H100-SXM5-80GB", second: str = "V100-SXM2-32GB") -> dict:
    """One node of 8 `first` GPUs and one of 8 `second`, joined by a `link_GBps` link."""
    group = lambda name, gpu: {"name": name, "gpu": gpu, "nodes": 1, "gpus_per_node": 8,  # noqa: E731
                               "intra_node": {"bandwidth_GBps": 150, "latency_us": 3},
                               "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}
    return {"name": "two", "node_groups": [group("first", first), group("second", second)],
            "links": [{"between": ["first", "second"], "bandwidth_GBps": link_GBps, "latency_us": LATENCY_S * 1e6}]}


def message_s(link_GBps: float) -> float:
    """One activation (or gradient) message by hand: fp16 s x h over tp 8, over one GPU's share
    (an eighth) of the link at NCCL's inter-node efficiency."""
    nbytes = 2 * SEQ * LLAMA.config.hidden / TP
    return LATENCY_S + nbytes / (link_GBps * 1e9 / 8 * DEFAULT_PARAMS.inter_link_efficiency)


def two_stage(link_GBps: float, runtime: str = "megatron", schedule: str = "1f1b", v: int = 1, **gpus):
    training = Training(BATCH, SEQ, "fp16", 1, schedule, v, runtime=runtime)
    return uniform_plan(LLAMA, cluster_from_spec(spec(link_GBps, **gpus)), training, tp=TP, pp=2, dp=1)


@pytest.mark.parametrize("runtime,messages", [("megatron", 1), ("megatron-2021", 1), ("deepspeed", 2)])
def test_blocking_1f1b_sends_lengthen_the_step_by_what_the_critical_receiver_waits(runtime, messages):
    # the V100 receiver sets the step: it waits for `messages` messages per micro-batch (Megatron's
    # batch_isend_irecv exchange: one, both ways at once; DeepSpeed's send then recv: two), and
    # the H100 sender's wait lengthens the fill by one micro-batch's: (m + 1) waits in all
    slow, fast = evaluate(two_stage(1.25, runtime)), evaluate(two_stage(1000.0, runtime))
    assert slow.critical.gpu == fast.critical.gpu == "V100-SXM2-32GB"
    expected = (BATCH + 1) * messages * (message_s(1.25) - message_s(1000.0))
    assert slow.step_time_s - fast.step_time_s == pytest.approx(expected, rel=1e-6)
    assert slow.breakdown_s["pp_comm"] == pytest.approx((BATCH + 1) * messages * message_s(1.25), rel=1e-9)
    assert slow.critical.pp_comm_s == pytest.approx(BATCH * messages * message_s(1.25), rel=1e-9)
    assert slow.critical.link.role == "pp"


def test_megatron_interleaved_hides_its_sends_behind_the_compute():
    # --overlap-p2p-communication: 12.5 GB/s costs the interleaved step nothing, the sends taking
    # less than the compute they overlap, and is shown as overlapped (1F1B waits for it)
    assert evaluate(two_stage(12.5)).breakdown_s["pp_comm"] > 0
    est = evaluate(two_stage(12.5, schedule="interleaved", v=2))
    assert est.breakdown_s["pp_comm"] == 0.0 and est.critical.pp_comm_s == 0.0
    assert est.pipeline_links and all(b.p2p == "overlapped" and not b.blocking and b.exposed_s == 0.0
                                      and b.overlapped_s == pytest.approx(b.micro_batches * b.per_microbatch_s)
                                      for b in est.pipeline_links)


def test_overlapped_sends_that_outlast_the_compute_expose_only_the_excess():
    # 100 MB/s: the rank's sends take longer than its compute; it waits for the difference
    est = evaluate(two_stage(0.1, schedule="interleaved", v=2))
    plan = two_stage(0.1, schedule="interleaved", v=2)
    assert est.breakdown_s["pp_comm"] > 0
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    # the critical rank's busy time per micro-batch is its sends', not compute plus sends
    c = est.critical
    sends = sum(b.per_microbatch_s / 2 for b in est.pipeline_links
                if plan.stages[b.stage].pipeline_rank == c.pipeline_rank)
    assert c.per_microbatch_s == pytest.approx(sends, rel=1e-9)


def test_breakdown_and_critical_line_name_blocking_sends():
    plan = two_stage(1.25)
    est = evaluate(plan)
    lines = "\n".join(critical_lines(plan, est, {}))
    assert f"waits {est.critical.pp_comm_s:.3f} s on pipeline sends, blocking (both ends wait)" in lines
    assert "pipeline 0->1 over first<->second" in lines and "off the critical path" in lines
    (boundary,) = est.to_json()["pipeline_links"]
    assert boundary["p2p"] == "exchange" and est.to_json()["critical"]["p2p"] == "exchange"
    overlapped = two_stage(12.5, schedule="interleaved", v=2)
    lines = "\n".join(critical_lines(overlapped, evaluate(overlapped), {}))
    assert "overlapped with compute" in lines and "waits" not in lines


def test_every_runtime_names_how_each_of_its_pipeline_schedules_sends():
    for name, runtime_spec in RUNTIMES.items():
        if runtime_spec.capability.pipeline:
            assert set(runtime_spec.capability.schedules) <= set(dict(runtime_spec.pricing.pipeline_p2p)), name
    assert p2p_mode("megatron", "1f1b").blocking and not p2p_mode("megatron", "interleaved").blocking
    assert p2p_mode("deepspeed", "1f1b").messages == 2


def test_a_runtime_may_not_declare_blocking_sends_for_the_interleaved_search():
    megatron = RUNTIMES["megatron"]
    blocking = replace(megatron.pricing, pipeline_p2p=(("1f1b", "exchange"), ("interleaved", "exchange")))
    with pytest.raises(ValueError, match="blocking sends"):
        RuntimeSpec(blocking, megatron.capability)
    with pytest.raises(ValueError, match="names no pipeline send mode"):
        RuntimeSpec(replace(megatron.pricing, pipeline_p2p=(("1f1b", "exchange"),)), megatron.capability)


def test_the_search_prices_blocking_receives_as_evaluate_does():
    # the H100 / V100 pair over 10 GbE under Megatron's blocking 1F1B: the plan the search returns
    # is re-priced by evaluate (driver asserts the two agree) and the receiver's wait is in it
    training = Training(BATCH, SEQ, "fp16", 1, runtime="megatron")
    result = solve(LLAMA, cluster_from_spec(spec(1.25)), training,
                   SolverOptions(micro_batches=(1,), tp_degrees=(8,), virtual_stages=(1,), zero_bubble=False))
    assert result.estimate.step_time_s == pytest.approx(evaluate(result.plan).step_time_s, rel=1e-12)
    if result.plan.pp > 1:
        assert result.estimate.critical.pp_comm_s > 0


@pytest.mark.parametrize("runtime,seed", [(r, s) for r in ("megatron", "deepspeed") for s in (1, 3, 5, 7)])
def test_the_search_equals_brute_force_with_blocking_sends_over_unequal_links(runtime, seed):
    # tiny_instance: groups whose links differ (10-400 GB/s, 5-50 us): a stage's receive link
    # depends on where its predecessor sits (dp.State.receive)
    model, cluster, base = tiny_instance(seed)
    base = runtime_base(cluster, base, runtime)
    options = dict(TINY_OPTIONS, virtual_stages=(1,))
    expected, _, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                 options["recompute_modes"], zero_stages=(0, 1, 2, 3), virtual_stages=(1,),
                                 runtime=runtime)
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**options))
