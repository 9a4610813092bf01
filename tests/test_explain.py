"""Explanations users can check (issue 11, item 5): what sets the step time, exposed
pipeline communication over a slow link, and MFU's numerator."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.evaluate import evaluate
from planner.cost.flops import NotCredible, model_flops_per_sample, model_flops_per_token
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Training
from planner.report.views import print_estimate
from planner.search.uniform import uniform_plan

from .conftest import invoke

TEN_GBE_BPS = 1.25e9  # 10 Gb/s Ethernet, one direction
LINK_LATENCY_S = 50e-6


def two_group_spec(first: str = "H100-SXM5-80GB", second: str = "V100-SXM2-32GB") -> dict:
    """One node of 8 `first` GPUs and one of 8 `second`, joined only by 10 GbE."""
    group = lambda name, gpu: {"name": name, "gpu": gpu, "nodes": 1, "gpus_per_node": 8,  # noqa: E731
                               "intra_node": {"bandwidth_GBps": 150, "latency_us": 3},
                               "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}
    return {"name": "two-10gbe", "node_groups": [group("first", first), group("second", second)],
            "links": [{"between": ["first", "second"], "bandwidth_GBps": TEN_GBE_BPS / 1e9,
                       "latency_us": LINK_LATENCY_S * 1e6}]}


LLAMA = load_model("llama-3-8b")
SEQ, MICRO, BATCH = 4096, 1, 64


def two_stage(spec: dict, schedule: str = "1f1b", v: int = 1):
    training = Training(BATCH, SEQ, "fp16", MICRO, schedule, v)
    return uniform_plan(LLAMA, cluster_from_spec(spec), training, tp=8, pp=2, dp=1)


def hand_send_s() -> float:
    """pricing.p2p_s by hand: activation forward and gradient back, each latency + bytes over
    one GPU's share of the link (8 GPUs share the node's 10 GbE): fp16 s x h over tp=8."""
    nbytes = 2 * SEQ * LLAMA.config.hidden * MICRO / 8
    return 2 * (LINK_LATENCY_S + nbytes / (TEN_GBE_BPS / 8 * DEFAULT_PARAMS.inter_link_efficiency))


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("gpipe", 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_breakdown_parts_sum_to_the_step_time_on_a_mixed_pipeline(schedule, v, reverse):
    spec = two_group_spec(*(("V100-SXM2-32GB", "H100-SXM5-80GB") if reverse else ()))
    est = evaluate(two_stage(spec, schedule, v))
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    assert all(part >= 0 for part in est.breakdown_s.values())


def test_breakdown_parts_sum_to_the_step_time_interleaved():
    spec = two_group_spec()
    training = Training(BATCH, SEQ, "fp16", MICRO, "interleaved", 2)
    est = evaluate(uniform_plan(LLAMA, cluster_from_spec(spec), training, tp=8, pp=2, dp=1))
    assert sum(est.breakdown_s.values()) == pytest.approx(est.step_time_s, rel=1e-12)
    assert est.breakdown_s["pp_comm"] > 0


def test_critical_stage_replica_and_link_are_named_on_a_two_stage_mixed_cluster():
    # H100 stage 0 sends over 10 GbE to the V100 stage 1; the V100s (125 vs 989 TFLOP/s
    # fp16 peak) set the step
    est = evaluate(two_stage(two_group_spec()))
    c = est.critical
    assert (c.pipeline_rank, c.stages, c.gpu, c.ranks) == (1, (1,), "V100-SXM2-32GB", tuple(range(8, 16)))
    assert c.micro_batches == BATCH // MICRO
    assert c.bound_by == "compute"
    roles = {link.role: link for link in c.links}
    assert set(roles) == {"tp", "pp"}  # dp = 1: no reduction link
    assert roles["tp"].name == "intra-node second" and roles["tp"].bandwidth_bytes_per_s == 150e9
    assert roles["pp"].name == "first<->second"
    assert roles["pp"].bandwidth_bytes_per_s == pytest.approx(TEN_GBE_BPS / 8)
    assert c.model_flops_per_s < c.peak_flops_per_s


def test_megatron_1f1b_sends_over_10gbe_hold_up_the_critical_receiver():
    # Megatron's 1F1B exchanges each boundary's activation and gradient in one blocking
    # batch_isend_irecv (cost.p2p "exchange"): the critical V100 receiver waits one message per
    # micro-batch, the H100 sender's wait adds to the fill
    est = evaluate(two_stage(two_group_spec()))
    send = hand_send_s()
    assert est.breakdown_s["pp_comm"] == pytest.approx((BATCH + 1) * send / 2, rel=1e-9)
    (boundary,) = est.pipeline_links
    assert boundary.p2p == "exchange" and boundary.blocking
    assert boundary.per_microbatch_s == pytest.approx(send, rel=1e-9)
    assert boundary.exposed_s == pytest.approx((BATCH + 1) * send / 2, rel=1e-9)
    assert boundary.overlapped_s == pytest.approx((BATCH - 1) * send / 2, rel=1e-9)
    assert boundary.bytes_per_microbatch == 2 * SEQ * LLAMA.config.hidden / 8
    assert est.critical.pp_comm_s == pytest.approx(BATCH * send / 2, rel=1e-9)


def test_megatron_1f1b_sends_over_10gbe_hold_up_the_critical_sender():
    est = evaluate(two_stage(two_group_spec("V100-SXM2-32GB", "H100-SXM5-80GB")))
    assert est.critical.pipeline_rank == 0 and est.critical.gpu == "V100-SXM2-32GB"
    assert est.breakdown_s["pp_comm"] == pytest.approx((BATCH + 1) * hand_send_s() / 2, rel=1e-9)
    assert est.critical.link.role == "pp"  # 64 x 34 ms over 10 GbE outweighs the NVLink TP
    assert est.pipeline_links[0].overlapped_s == pytest.approx((BATCH - 1) * hand_send_s() / 2, rel=1e-9)


def tiny_gpt() -> tuple:
    h, layers, vocab, heads = 64, 2, 100, 4
    model = model_from_dict({"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": heads,
                             "vocab_size": vocab, "n_positions": 256}, "tiny")
    return model, h, layers, vocab


def test_mfu_numerator_counts_causal_attention_as_half_on_a_tiny_model():
    model, h, layers, vocab = tiny_gpt()
    s = 128
    # per block forward: QKV 6sh^2 + out 2sh^2 + MLP 16sh^2, causal scores 2 s^2 h (half of 4);
    # LM head 2 s V h; forward + backward = 3x forward
    forward = layers * (24 * s * h**2 + 2 * s**2 * h) + 2 * s * vocab * h
    assert model_flops_per_sample(model, s) == pytest.approx(3 * forward, rel=1e-12)
    assert model_flops_per_token(model, s) == pytest.approx(3 * forward / s, rel=1e-12)


def test_mfu_of_evaluate_uses_the_one_numerator():
    est = evaluate(two_stage(two_group_spec()))
    peak = sum(est.peak_flops_by_rank.values())
    assert est.mfu == pytest.approx(model_flops_per_sample(LLAMA, SEQ) * BATCH / est.step_time_s / peak, rel=1e-12)


def test_a_gpu_credited_above_its_peak_is_an_internal_error():
    est = evaluate(two_stage(two_group_spec()))
    est.check_credible()
    rank = 8
    inflated = dataclasses.replace(est, model_flops_per_s_by_rank={**est.model_flops_per_s_by_rank,
                                                                   rank: est.peak_flops_by_rank[rank] * 1.01})
    with pytest.raises(NotCredible, match="rank 8"):
        print_estimate(two_stage(two_group_spec()), inflated)
    with pytest.raises(NotCredible, match="MFU"):
        dataclasses.replace(est, mfu=1.2).check_credible()
    dataclasses.replace(inflated, measured=True).check_credible()  # measured times are taken as given


def test_evaluate_json_and_human_view_explain_the_step(tmp_path):
    path = tmp_path / "two.json"
    path.write_text(json.dumps(two_group_spec()))
    args = ["evaluate", "--model", "llama-3-8b", "--cluster", str(path), "--global-batch", "64", "--seq-len", "4096",
            "--tp", "8", "--pp", "2", "--dp", "1", "--micro-batch", "1"]
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mfu_attention"] == "causal"
    assert {"pipeline_rank", "stages", "gpu", "ranks", "micro_batches", "per_microbatch_s", "model_tflops_per_gpu",
            "peak_tflops_per_gpu", "bound_by", "link", "links"} <= set(report["critical"])
    # the V100 receiver waits for Megatron's blocking 1F1B exchange over 10 GbE: more than its TP
    assert report["critical"]["gpu"] == "V100-SXM2-32GB" and report["critical"]["link"] == "pp"
    assert report["critical"]["p2p"] == "exchange" and report["critical"]["pp_comm_s"] > 0
    (boundary,) = report["pipeline_links"]
    assert boundary["link"] == "first<->second" and boundary["bandwidth_GBps"] == pytest.approx(1.25 / 8)
    assert boundary["p2p"] == "exchange"
    assert report["pp_comm_overlapped_s"] == pytest.approx(boundary["overlapped_s"])
    assert report["breakdown_s"]["pp_comm"] > 0
    human = invoke(*args).stdout
    assert "critical: pipeline rank 1" in human and "first<->second" in human
    assert "waits" in human and "on pipeline sends, blocking (both ends wait)" in human


def test_plan_json_predicted_carries_the_explanation(tmp_path):
    path = tmp_path / "two.json"
    path.write_text(json.dumps(two_group_spec()))
    result = invoke("plan", "--model", "gpt2", "--cluster", str(path), "--global-batch", "16", "--seq-len", "1024",
                    "--json")
    assert result.exit_code == 0, result.output
    predicted = json.loads(result.stdout)["predicted"]
    assert {"critical", "pipeline_links", "pp_comm_overlapped_s", "mfu_attention"} <= set(predicted)
    assert sum(predicted["breakdown_s"].values()) == pytest.approx(predicted["step_time_s"], rel=1e-9)
