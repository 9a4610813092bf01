"""Cost model: hand-checked formulas and properties of `evaluate` on small plans."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cost import formulas as cost
from planner.cost.formulas import hierarchical_allreduce_s, ring_allgather_s, ring_allreduce_s
from planner.cost.states import model_state_bytes
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import GIB, Link, cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_from_json, plan_to_json, uniform_plan
from planner.schedules import get_schedule

from .conftest import small_cluster_spec

P = 1_000_000_000  # parameters on one device

# --- ZeRO (Rajbhandari et al. 2020, Figure 1: 2 + 2 + K with K = 12 for mixed-precision Adam) ---


@pytest.mark.parametrize("dp", [1, 2, 8, 64])
def test_zero_stage_0_keeps_16_bytes_per_param(dp):
    weights, grads, optimizer = model_state_bytes(P, "bf16", 0, dp)
    assert (weights, grads, optimizer) == (2 * P, 2 * P, 12 * P)


@pytest.mark.parametrize("dp", [1, 2, 8, 64])
def test_zero_stage_1_keeps_4_plus_12_over_dp_bytes_per_param(dp):
    assert sum(model_state_bytes(P, "bf16", 1, dp)) == pytest.approx(P * (4 + 12 / dp))


@pytest.mark.parametrize("dp", [1, 2, 8, 64])
def test_zero_stage_2_keeps_2_plus_14_over_dp_bytes_per_param(dp):
    assert sum(model_state_bytes(P, "bf16", 2, dp)) == pytest.approx(P * (2 + 14 / dp))


@pytest.mark.parametrize("dp", [1, 2, 8, 64])
def test_zero_stage_3_keeps_16_over_dp_bytes_per_param(dp):
    assert sum(model_state_bytes(P, "bf16", 3, dp)) == pytest.approx(P * 16 / dp)


def test_zero_in_fp16_matches_bf16():
    for stage in range(4):
        assert model_state_bytes(P, "fp16", stage, 8) == model_state_bytes(P, "bf16", stage, 8)


def test_fp32_training_keeps_weights_grads_and_two_adam_moments():
    assert model_state_bytes(P, "fp32", 0, 4) == (4 * P, 4 * P, 8 * P)


def test_zero_memory_shows_in_evaluate(gpt2, small_cluster):
    # one plan per stage on 4 GPUs (dp = 4): the model-state bytes are those of the formula;
    # ZeRO-3 also holds two gathered 16-bit copies of its largest layer (stage_memory.zero3_gather_bytes)
    states = []
    for stage in range(4):
        plan = uniform_plan(gpt2, small_cluster, Training(8, 512, "bf16", 1), tp=1, pp=1, dp=4, zero=stage)
        mem = evaluate(plan).memory_by_rank[0]
        states.append(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes)
    held = sum(layer.weight_params for layer in gpt2.layers)
    gathered = 2 * 2 * max(layer.weight_params for layer in gpt2.layers)
    assert states == pytest.approx([16 * held, (4 + 3) * held, (2 + 3.5) * held, 4 * held + gathered])


# --- collectives ---------------------------------------------------------------------------


LINK = Link(bandwidth_bytes_per_s=100e9, latency_s=10e-6)


def test_ring_allreduce_hand_check():
    # 1 GB over 8 ranks at 100 GB/s: 2 * 7/8 * 1e9 / 1e11 = 17.5 ms, plus 14 latencies of 10 us
    assert ring_allreduce_s(1e9, 8, LINK, 1.0) == pytest.approx(0.0175 + 14 * 10e-6, rel=1e-12)


def test_ring_allreduce_efficiency_divides_bandwidth():
    assert ring_allreduce_s(1e9, 8, Link(100e9, 0.0), 0.5) == pytest.approx(0.035, rel=1e-12)


def test_ring_allreduce_of_one_rank_or_no_bytes_is_free():
    assert ring_allreduce_s(1e9, 1, LINK, 1.0) == 0.0
    assert ring_allreduce_s(0, 8, LINK, 1.0) == 0.0


def test_ring_allgather_moves_half_an_allreduce():
    assert ring_allgather_s(1e9, 4, LINK, 1.0) == pytest.approx(0.75e9 / 100e9 + 3 * 10e-6, rel=1e-12)
    assert 2 * ring_allgather_s(1e9, 4, LINK, 1.0) == pytest.approx(ring_allreduce_s(1e9, 4, LINK, 1.0))


def test_hierarchical_allreduce_on_one_node_is_a_ring():
    params = cost.DEFAULT_PARAMS
    assert hierarchical_allreduce_s(1e9, 8, 1, LINK, LINK, params) == pytest.approx(
        ring_allreduce_s(1e9, 8, LINK, params.intra_link_efficiency))


def test_hierarchical_allreduce_hand_check():
    params = cost.DEFAULT_PARAMS.with_updates(intra_link_efficiency=1.0, inter_link_efficiency=1.0)
    intra, inter = Link(200e9, 0.0), Link(25e9, 0.0)
    # reduce-scatter + all-gather of 1 GB inside 8-GPU nodes, all-reduce of 1/8 GB over 4 nodes
    expected = 2 * (7 / 8 * 1e9 / 200e9) + 2 * 3 / 4 * (1e9 / 8) / 25e9
    assert hierarchical_allreduce_s(1e9, 8, 4, intra, inter, params) == pytest.approx(expected, rel=1e-12)


# --- pipeline schedules --------------------------------------------------------------------


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 4), (8, 32), (2, 1)])
def test_1f1b_holds_pp_minus_rank_micro_batches(pp, m):
    held = [get_schedule("1f1b").in_flight_microbatches(rank, pp, 1, m) for rank in range(pp)]
    assert held == [min(pp - rank, m) for rank in range(pp)]


@pytest.mark.parametrize("pp,m", [(4, 8), (8, 32), (2, 1)])
def test_gpipe_holds_every_micro_batch(pp, m):
    assert all(get_schedule("gpipe").in_flight_microbatches(rank, pp, 1, m) == m for rank in range(pp))


def test_interleaved_holds_megatron_warmup_chunks():
    # rank 0 of pp=4, v=2: (4-0-1)*2 + (2-1)*4 warm-up chunk forwards, plus the one in flight
    assert get_schedule("interleaved").in_flight_microbatches(0, 4, 2, 16) == pytest.approx(11 / 2)
    assert get_schedule("interleaved").in_flight_microbatches(3, 4, 2, 16) == pytest.approx(5 / 2)


# --- evaluate: hand checks on a single GPU ---------------------------------------------------------


def one_gpu():
    return cluster_from_spec(small_cluster_spec(nodes=1, gpus_per_node=1))


def test_single_gpu_memory_is_states_plus_one_micro_batch_of_activations(gpt2):
    training = Training(8, 512, "bf16", 2)
    plan = uniform_plan(gpt2, one_gpu(), training, tp=1, pp=1, dp=1)
    mem = evaluate(plan).memory_by_rank[0]
    acts = sum(layer.act_bytes_per_sample(512, "none", 1, False, "flash", 2) for layer in gpt2.layers)
    assert mem.activations_bytes == pytest.approx(2 * acts)  # 1F1B with pp=1 holds one micro-batch
    assert mem.reserved_bytes == cost.DEFAULT_PARAMS.reserved_memory_bytes


def test_overflow_reports_rank_and_bytes_over(gpt2):
    llama = load_model("llama-3-8b")
    cluster = cluster_from_spec(small_cluster_spec(nodes=1, gpus_per_node=1, gpu="RTX-4090"))
    estimate = evaluate(uniform_plan(llama, cluster, Training(1, 1024, "bf16", 1), tp=1, pp=1, dp=1))
    assert not estimate.fits
    (overflow,) = estimate.overflows
    assert overflow.rank == 0 and overflow.gpu == "RTX-4090"
    assert overflow.capacity_bytes == 24 * GIB
    assert overflow.over_bytes == pytest.approx(estimate.memory_by_rank[0].total_bytes - 24 * GIB)


def test_model_flops_per_gpu_counts_3x_forward_with_causal_attention(gpt2):
    plan = uniform_plan(gpt2, one_gpu(), Training(8, 512, "bf16", 1, ), tp=1, pp=1, dp=1)
    est = evaluate(plan)
    c = gpt2.config  # the full forward less the masked half of 4 s^2 h per block (planner.cost.flops)
    flops = 3 * (gpt2.fwd_flops_per_sample(512) - c.num_layers * 2 * 512**2 * c.hidden) * 8
    assert est.model_tflops_per_gpu == pytest.approx(flops / est.step_time_s / 1e12)
    assert est.tokens_per_s == pytest.approx(8 * 512 / est.step_time_s)


def test_plan_json_round_trip_prices_the_same(small_cluster, gpt2):
    plan = uniform_plan(gpt2, small_cluster, Training(16, 512, "bf16", 2, "interleaved", 2),
                        tp=2, pp=2, dp=1, zero=1, recompute="selective", sequence_parallel=True)
    again = plan_from_json(plan_to_json(plan))
    assert evaluate(again).step_time_s == pytest.approx(evaluate(plan).step_time_s, rel=1e-12)


# --- properties ------------------------------------------------------------------------------------

GPT2 = load_model("gpt2")  # 12 layers, 12 heads: tp in {1, 2, 4} divides the heads


def mixed_spec(with_link: bool) -> dict:
    """8 GPUs: two 2-GPU A100 nodes and one 4-GPU V100 node (fp16), optionally a slow link."""
    spec = {"name": "mixed", "node_groups": [
        {"name": "a100", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 2,
         "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
         "inter_node": {"bandwidth_GBps": 100, "latency_us": 5}},
        {"name": "v100", "gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 4,
         "intra_node": {"bandwidth_GBps": 150, "latency_us": 3},
         "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}]}
    if with_link:
        spec["links"] = [{"between": ["a100", "v100"], "bandwidth_GBps": 2.5, "latency_us": 500}]
    return spec


def scaled(spec: dict, factor: float) -> dict:
    out = copy.deepcopy(spec)
    for group in out["node_groups"]:
        for key in ("intra_node", "inter_node"):
            group[key]["bandwidth_GBps"] *= factor
    for link in out.get("links", []):
        link["bandwidth_GBps"] *= factor
    return out


@st.composite
def layouts(draw, num_gpus: int = 8, max_b: int = 4):
    """A valid uniform configuration of GPT2 on `num_gpus` GPUs (as keyword arguments)."""
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if num_gpus % t == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8) if (num_gpus // tp) % p == 0]))
    dp = num_gpus // (tp * pp)
    schedules = ["1f1b", "gpipe"] + (["interleaved"] if 2 <= pp <= 4 else [])
    schedule = draw(st.sampled_from(schedules))
    v = 2 if schedule == "interleaved" else 1
    micro_batch = draw(st.sampled_from([b for b in (1, 2, 4) if b <= max_b]))
    microbatches = draw(st.integers(1, 6))
    return dict(tp=tp, pp=pp, dp=dp, zero=draw(st.integers(0, 3)),
                recompute=draw(st.sampled_from(["none", "selective", "full"])),
                sequence_parallel=tp > 1 and draw(st.booleans()),
                schedule=schedule, virtual_stages=v, micro_batch=micro_batch,
                global_batch=dp * micro_batch * microbatches,
                attention=draw(st.sampled_from(["flash", "standard"])),
                seq_len=draw(st.sampled_from([128, 512])))


def build(model, cluster, dtype: str, layout: dict, **overrides):
    lay = layout | overrides
    training = Training(lay["global_batch"], lay["seq_len"], dtype, lay["micro_batch"], lay["schedule"],
                        lay["virtual_stages"], lay["attention"])
    return uniform_plan(model, cluster, training, tp=lay["tp"], pp=lay["pp"], dp=lay["dp"], zero=lay["zero"],
                        recompute=lay["recompute"], sequence_parallel=lay["sequence_parallel"])


HOMOGENEOUS = cluster_from_spec(small_cluster_spec(nodes=2, gpus_per_node=4))


@settings(max_examples=25, deadline=None)
@given(layout=layouts(), bigger=st.sampled_from([2, 4, 8]))
def test_peak_memory_never_shrinks_when_the_micro_batch_grows(layout, bigger):
    # same global batch; the larger micro-batch must divide each replica's share
    share = layout["global_batch"] // layout["dp"]
    small_b = layout["micro_batch"]
    big_b = small_b * bigger
    global_batch = layout["dp"] * big_b * max(1, share // big_b)
    small = evaluate(build(GPT2, HOMOGENEOUS, "bf16", layout, global_batch=global_batch))
    large = evaluate(build(GPT2, HOMOGENEOUS, "bf16", layout, global_batch=global_batch, micro_batch=big_b))
    for rank, mem in small.memory_by_rank.items():
        assert large.memory_by_rank[rank].total_bytes >= mem.total_bytes * (1 - 1e-12)
        assert large.memory_by_rank[rank].activations_bytes >= mem.activations_bytes * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["gpt2", "llama-3-8b", "mixtral-8x7b"]), layout=layouts(num_gpus=1))
def test_one_gpu_means_zero_communication(name, layout):
    model = GPT2 if name == "gpt2" else load_model(name)
    if layout["schedule"] == "interleaved":
        layout = layout | {"schedule": "1f1b", "virtual_stages": 1}
    est = evaluate(build(model, one_gpu(), "bf16", layout))
    assert est.breakdown_s["tp_comm"] == 0.0
    assert est.breakdown_s["pp_comm"] == 0.0
    assert est.breakdown_s["dp_comm"] == 0.0
    assert abs(est.breakdown_s["bubble"]) <= 1e-12 * est.step_time_s  # float residue only


@settings(max_examples=25, deadline=None)
@given(layout=layouts(), factor=st.floats(1.0, 1000.0), with_link=st.booleans())
def test_more_bandwidth_never_makes_a_step_slower(layout, factor, with_link):
    spec = mixed_spec(with_link)
    base = evaluate(build(GPT2, cluster_from_spec(spec), "fp16", layout))
    fast = evaluate(build(GPT2, cluster_from_spec(scaled(spec, factor)), "fp16", layout))
    assert fast.step_time_s <= base.step_time_s * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(layout=layouts(), with_link=st.booleans())
def test_step_time_is_positive_and_its_parts_sum_to_it(layout, with_link):
    est = evaluate(build(GPT2, cluster_from_spec(mixed_spec(with_link)), "fp16", layout))
    assert est.step_time_s > 0 and math.isfinite(est.step_time_s)
    assert set(est.breakdown_s) == {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"}
    assert all(part >= -1e-12 * est.step_time_s for part in est.breakdown_s.values()), est.breakdown_s
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-9)
    assert 0 < est.mfu < 1


def test_tensor_parallel_group_across_nodes_pays_the_inter_node_link():
    model = load_model("llama-3-8b")
    training = Training(8, 4096, "bf16", 1)
    inside = cluster_from_spec(small_cluster_spec(nodes=1, gpus_per_node=8))
    spec = small_cluster_spec(nodes=2, gpus_per_node=4)
    spec["node_groups"][0]["inter_node"]["bandwidth_GBps"] = 1  # 1 GB/s between nodes
    across = cluster_from_spec(spec)
    one_node = evaluate(uniform_plan(model, inside, training, tp=8, pp=1, dp=1))
    two_nodes = evaluate(uniform_plan(model, across, training, tp=8, pp=1, dp=1))
    assert two_nodes.breakdown_s["tp_comm"] > 10 * one_node.breakdown_s["tp_comm"]
