"""planner.cost.pricing: one definition of a stage replica's cost, scalar (evaluate, show) and
vectorised over the block count (the search), and the two agreeing."""

from __future__ import annotations

import numpy as np
import pytest

from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.states import gradient_bytes, model_state_bytes
from planner.core.dims import StageDims
from planner.cost.evaluate import evaluate
from planner.cost.replica_pricer import PlanPricer
from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Training, uniform_plan
from planner.cost.pricing import DpLayout, Sharding, layer_price, layers_price, span_price, zero_comm
from planner.cost.stage_memory import replica_memory
from planner.cost.stage_tail import stage_tail
from planner.search.orchestration.driver import SolverOptions, solve
from planner.report.show import rank_timings
from planner.verify.oracle import brute_force


MODEL = load_model("gpt2-medium")
CLUSTER = load_cluster("a100-v100-mix")
GPU = CLUSTER.groups[0].gpu
LINK = CLUSTER.groups[0].intra_node


def test_gradient_bytes_are_fp32_in_fp32_training_else_the_dtype():
    assert gradient_bytes("fp32") == 4
    assert gradient_bytes("bf16") == gradient_bytes("fp16") == 2
    assert model_state_bytes(10, "fp32", 0, 1)[1] == 10 * gradient_bytes("fp32")


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_vectorised_span_equals_the_span_of_its_layers(recompute, zero):
    """The search's arrays over block counts are the plan's scalars at every count."""
    sh = Sharding("fp16", 2, 1024, "flash", StageDims(2, True), recompute)
    dims = StageDims(2, True, 4, zero)
    emb, dec, head = (layer_price(layer, sh, GPU, LINK, DEFAULT_PARAMS)
                      for layer in (MODEL.layers[0], MODEL.layers[1], MODEL.layers[-1]))
    blocks = MODEL.num_layers - 2
    n = np.arange(blocks + 1, dtype=float)
    layout = DpLayout(4, 2, 2, LINK, CLUSTER.group_link("a100", "v100"))
    vector = span_price(((n, dec), (1.0, head), (1.0, emb)), sh.dims)
    vector_zero = zero_comm(vector.weight_params, dims, "fp16", layout, DEFAULT_PARAMS)
    vector_memory = replica_memory(vector, 3.0, "fp16", dims, DEFAULT_PARAMS)
    vector_tail = stage_tail(vector.weight_params, dims, "fp16", layout, DEFAULT_PARAMS, vector.bwd_s,
                             [(GPU, DEFAULT_PARAMS)])
    for k in range(blocks + 1):
        span = layers_price(MODEL.layers[:k + 1] + MODEL.layers[-1:], sh, GPU, LINK, DEFAULT_PARAMS)
        assert vector.time_s[k] == pytest.approx(span.time_s, rel=1e-12)
        assert vector.bwd_s[k] == pytest.approx(span.bwd_s, rel=1e-12)
        assert vector.weight_params[k] == span.weight_params
        assert np.broadcast_to(vector.transient_bytes, n.shape)[k] == span.transient_bytes
        scalar_zero = zero_comm(span.weight_params, dims, "fp16", layout, DEFAULT_PARAMS)
        assert np.broadcast_to(vector_zero.total_s, n.shape)[k] == pytest.approx(scalar_zero.total_s, rel=1e-12)
        memory = replica_memory(span, 3.0, "fp16", dims, DEFAULT_PARAMS)
        assert vector_memory.total_bytes[k] == pytest.approx(memory.total_bytes, rel=1e-12)
        tail = stage_tail(span.weight_params, dims, "fp16", layout, DEFAULT_PARAMS, span.bwd_s, [(GPU, DEFAULT_PARAMS)])
        assert vector_tail.total_s[k] == pytest.approx(tail.total_s, rel=1e-12)
    if recompute == "full":
        assert vector.transient_bytes[0] == 0 and vector.transient_bytes[1] > 0


def test_optimizer_step_is_sharded_over_dp_only_from_zero_1():
    layout = DpLayout(8, 8, 1, LINK, LINK)
    steps = {zero: stage_tail(1e9, StageDims(dp=8, zero=zero), "fp16", layout, DEFAULT_PARAMS, 0.0, [(GPU, DEFAULT_PARAMS)]).optimizer_s
             for zero in (0, 1, 2, 3)}
    assert steps[0] == pytest.approx(8 * steps[1])
    assert steps[1] == steps[2] == steps[3]


@pytest.mark.slow
def test_search_prices_a_zero_0_replicated_stage_as_evaluate_does():
    """ZeRO-0 at dp > 1: every replica steps its full optimizer copy, in the search too (it
    divided the step by dp, and the re-price check failed)."""
    config = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 32000}
    model = model_from_dict(config, "zero0")
    cluster = cluster_from_spec({"name": "one-node", "node_groups": [
        {"name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 2}]})
    base = Training(2, 1024, "fp16", 1)
    options = dict(micro_batches=(1,), tp_degrees=(1,), recompute_modes=("none",), virtual_stages=(1,),
                   zero_bubble=False)
    result = solve(model, cluster, base, SolverOptions(zero_stages=(0,), **options))
    assert [st.dp for st in result.plan.stages] == [2] and result.plan.stages[0].zero == 0
    expected, _, _ = brute_force(model, cluster, base, (1,), (1,), ("none",), zero_stages=(0,))
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)
    assert result.estimate.breakdown_s["optimizer"] == pytest.approx(
        stage_tail(model.params, StageDims(dp=2), "fp16", DpLayout(2, 2, 1, LINK, LINK), DEFAULT_PARAMS, 0.0,
                   [(cluster.groups[0].gpu, DEFAULT_PARAMS)]).optimizer_s, rel=1e-9)


@pytest.mark.parametrize("schedule,v,zero", [("1f1b", 1, 3), ("interleaved", 2, 2), ("1f1b", 1, 0)])
def test_show_boxes_and_evaluate_share_one_replica_price(schedule, v, zero):
    plan = uniform_plan(MODEL, CLUSTER, Training(96, 1024, "fp16", 1, schedule, v), tp=2, pp=3, dp=8, zero=zero,
                        sequence_parallel=True)
    pricer = PlanPricer(plan)
    chunks = [[st for st in plan.stages if st.pipeline_rank == k] for k in range(plan.pp)]
    for timing in rank_timings(plan):
        price = pricer.replica(chunks[timing.pipeline_rank], chunks[timing.pipeline_rank][0].replicas[timing.dp_rank])
        assert timing.per_microbatch_s == pytest.approx(price.per_microbatch_s, rel=1e-12)
        assert price.chunks[0].zero.total_s > 0 if zero >= 2 else price.chunks[0].zero.total_s == 0
    assert evaluate(plan).breakdown_s["dp_comm"] > 0
