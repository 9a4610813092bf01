"""Llama 3 405B as Meta ran it (Dubey et al. 2024, arXiv 2407.21783, sec 3.3 and Table 4):
H100-80GB servers of 8 on NVLink, 400 Gb/s RoCE per GPU; bf16, TP 8, PP 16, CP 1 at 8k tokens,
16M tokens per step, no activation checkpointing at 8k; the first and the last stage one
Transformer layer short (the first chunk only the embedding, the last only the head); FSDP
sharding the gradients and optimizer states, the parameters not resharded after forward
(ZeRO-2's memory, `--runtime any --zero 2`)."""

import pytest

from planner.api import evaluate, plan_from_flags
from planner.api.requests import EvaluateRequest
from planner.inputs.hardware import cluster_from_spec
from planner.plan.types import end_layer_split

GIB = 2 ** 30


def meta_cluster(nodes: int):
    return cluster_from_spec({"name": f"meta-{nodes * 8}", "node_groups": [{
        "name": "h100", "gpu": "H100-SXM5-80GB", "nodes": nodes, "gpus_per_node": 8,
        "inter_node": {"bandwidth_GBps": 400, "latency_us": 5}}]})


def meta_request(gpus: int, **overrides) -> EvaluateRequest:
    """Table 4's 8k-token layout on `gpus` GPUs: DP = gpus / 128, 2048 sequences per step."""
    fields = dict(model="llama-3.1-405b", cluster=meta_cluster(gpus // 8), global_batch=2048, seq_len=8192,
                  tp=8, pp=16, dp=gpus // 128, micro_batch=1, sequence_parallel=True, virtual_stages=8,
                  runtime="any", zero=2)
    fields.update(overrides)
    return EvaluateRequest(**fields)


def decoder_blocks_per_rank(plan) -> list[int]:
    blocks = [0] * plan.pp
    for stage in plan.stages:
        blocks[stage.pipeline_rank] += sum(1 for layer in plan.model.layers[stage.layers[0]:stage.layers[1]]
                                           if layer.kind == "decoder")
    return blocks


def test_one_chunk_per_layer_gives_the_first_chunk_only_the_embedding_and_the_last_only_the_head():
    plan = plan_from_flags(meta_request(16384))
    kinds = [[layer.kind for layer in plan.model.layers[s.layers[0]:s.layers[1]]] for s in plan.stages]
    assert len(plan.stages) == 128
    assert "decoder" not in kinds[0] and "decoder" not in kinds[-1]
    assert all(k == ["decoder"] for k in kinds[1:-1])
    assert decoder_blocks_per_rank(plan) == [7] + [8] * 14 + [7]


@pytest.mark.parametrize("virtual_stages", [1, 2, 4])
def test_the_first_and_last_ranks_carry_one_decoder_layer_fewer_at_fewer_chunks(virtual_stages):
    plan = plan_from_flags(meta_request(16384, virtual_stages=virtual_stages))
    assert decoder_blocks_per_rank(plan) == [7] + [8] * 14 + [7]


def test_end_layer_split_counts_the_embedding_and_head_as_layers():
    assert end_layer_split(126, 128) == [0] + [1] * 126 + [0]
    assert end_layer_split(5, 6) == [0, 2, 1, 1, 1, 0]
    assert sum(end_layer_split(126, 127)) == 126


@pytest.mark.parametrize("gpus", [8192, 16384])
def test_meta_8k_token_layout_fits_with_sharded_gradients(gpus):
    est = evaluate(meta_request(gpus)).estimate
    assert est.fits
    assert max(m.total_bytes for m in est.memory_by_rank.values()) < 80 * GIB


def test_meta_layout_with_megatron_fp32_gradient_buffers_does_not_fit():
    """Megatron's distributed optimizer (ZeRO-1) keeps the unsharded fp32 gradient buffer: about 12 GiB
    more per GPU, over the 80 GB; sharding the gradients is what lets Meta's layout fit."""
    est = evaluate(meta_request(16384, zero=1)).estimate
    assert not est.fits
    sharded = evaluate(meta_request(16384)).estimate
    grads = max(m.gradients_bytes for m in est.memory_by_rank.values())
    assert grads - max(m.gradients_bytes for m in sharded.memory_by_rank.values()) > 10 * GIB


def titan_405b_fp8(recipe: str = "torchao-tensorwise"):
    """torchtitan's Aug 2024 405B row: 128 H100, TP 8, FSDP 16 (ZeRO-3), local batch 2, full AC, float8."""
    from planner.inputs.hardware import cluster_from_spec
    cluster = cluster_from_spec({"name": "titan-128", "node_groups": [{
        "name": "h100", "gpu": "H100-SXM5-80GB", "nodes": 16, "gpus_per_node": 8}]})
    return plan_from_flags(EvaluateRequest(model="llama-3.1-405b", cluster=cluster, global_batch=32, seq_len=8192,
                                           dtype="fp8", fp8_recipe=recipe, tp=8, pp=1, dp=16, micro_batch=2,
                                           sequence_parallel=True, recompute="full", zero=3, runtime="torchtitan"))


def dp_comm_s(plan, **settings) -> float:
    from planner.cost.evaluate import evaluate as price
    from planner.cost.runtimes import training_params
    params = {g: p.with_updates(**settings) for g, p in
              training_params(plan.cluster.gpu_types, plan.training, plan.training.runtime).items()}
    return price(plan, params).breakdown_s["dp_comm"]


def test_fsdp_fp8_all_gather_moves_the_decoder_weights_at_one_byte():
    plan = titan_405b_fp8()
    bf16_gather, fp8_gather = dp_comm_s(plan), dp_comm_s(plan, fp8_all_gather=True)
    assert fp8_gather < bf16_gather


def test_rowwise_scaling_gathers_its_weights_in_bf16():
    plan = titan_405b_fp8("torchao-rowwise")
    assert dp_comm_s(plan, fp8_all_gather=True) == dp_comm_s(plan)


def test_zero_comm_gathers_the_fp8_weights_at_half_the_bf16_bytes():
    from planner.core.dims import StageDims
    from planner.cost.dp_comm import DpLayout, zero_comm
    from planner.cost.formulas import DEFAULT_PARAMS
    from planner.inputs.hardware import Link
    link = Link(50e9, 5e-6)
    layout = DpLayout(16, 1, 16, link, link)
    dims = StageDims(8, dp=16, zero=3)
    whole = zero_comm(1e9, dims, "fp8", layout, DEFAULT_PARAMS)
    all_fp8 = zero_comm(1e9, dims, "fp8", layout, DEFAULT_PARAMS, fp8_gather_params=1e9)
    half_bytes = zero_comm(0.5e9, dims, "fp8", layout, DEFAULT_PARAMS)
    assert all_fp8.gather_s == pytest.approx(half_bytes.gather_s)
    assert all_fp8.reduce_scatter_s == whole.reduce_scatter_s


def test_interleaved_ranks_hold_every_micro_batch_when_the_step_has_as_many_as_stages():
    """16 micro-batches on PP 16, V 8: Megatron's warm-up (pp - k - 1) * 2 + 7 * 16 chunk forwards
    reaches all 128 on ranks 0-7; rank 8 holds 127 of them; the last rank 7 * 16 + 1."""
    from planner.cost.stage_memory import held_microbatches
    from planner.schedules import get_schedule
    interleaved = get_schedule("interleaved")
    held = [held_microbatches(interleaved, k, 16, 8, 16, None, 1.0)[0] for k in range(16)]
    assert held[:8] == [16.0] * 8
    assert held[8] == pytest.approx(127 / 8)
    assert held[15] == pytest.approx(113 / 8)
