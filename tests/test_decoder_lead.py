"""Leading decoder blocks of another shape (DeepSeek-V3's dense blocks before its MoE ones,
Model.decoder_lead): the search prices every block as it is, places the lead blocks on whichever
front stages are fastest, and proves its plans against the brute-force oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.core.errors import NoFeasiblePlan
from planner.cost.collectives import ring_allgather_s, ring_allreduce_s
from planner.inputs.hardware import Link, cluster_from_spec
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Training
from planner.search.orchestration.driver import solve
from planner.search.pricing.stages import SolverOptions
from planner.verify.instances import lead_instance
from planner.verify.oracle import brute_force

OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1,), recompute_modes=("none", "full"), zero_stages=(1, 3),
               virtual_stages=(1,))


def test_deepseek_v3s_dense_blocks_are_its_lead_and_its_moe_block_is_searched():
    model = load_model("deepseek-v3")
    lead, count = model.decoder_lead()
    assert count == 3 and lead.config.num_experts == 1
    searched = model.searched_decoder()
    assert searched.config.num_experts == 256 and not searched.blend


@pytest.mark.parametrize("name", ["gemma-2-9b", "gpt-oss-120b", "llama-3-8b"])
def test_decoders_that_alternate_or_agree_have_no_lead(name):
    model = load_model(name)
    assert model.decoder_lead() is None
    assert model.searched_decoder() == model.decoder_stand_in()


def test_no_collective_runs_on_an_empty_buffer_of_an_array():
    """The search prices collectives over arrays of block counts, evaluate over a plan's scalars: a
    stage of no expert blocks reduces no expert gradients either way (no latency)."""
    link = Link(50e9, 5e-6)
    for collective in (ring_allreduce_s, ring_allgather_s):
        priced = collective(np.array([0.0, 1e6]), 4, link, 1.0)
        assert priced[0] == 0.0 == collective(0.0, 4, link, 1.0)
        assert priced[1] == pytest.approx(collective(1e6, 4, link, 1.0))


def _solve(seed: int, runtime: str = "any", zero_bubble: bool = False):
    model, cluster, base = lead_instance(seed)
    base = dataclasses.replace(base, runtime=runtime)
    options = SolverOptions(**OPTIONS, offload=False, zero_bubble=zero_bubble, ep_degrees=(1,))
    return model, cluster, base, options


def test_a_lead_block_shares_a_stage_with_moe_blocks_but_not_the_embedding():
    model, cluster, base, options = _solve(11)
    assert model.decoder_lead()[1] == 2
    result = solve(model, cluster, base, options)
    # embedding and one dense block; the other dense block with the MoE ones and the head
    assert [stage.layers for stage in result.plan.stages] == [(0, 2), (2, 5)] and result.optimal


@pytest.mark.slow
@pytest.mark.parametrize("runtime, zero_bubble", [("any", False), ("megatron", False), ("deepspeed", False),
                                                  ("any", True)])
def test_solver_with_lead_blocks_equals_brute_force_optimum(runtime, zero_bubble):
    for seed in range(12):
        model, cluster, base, options = _solve(seed, runtime, zero_bubble)
        try:
            expected = brute_force(model, cluster, base, OPTIONS["micro_batches"], OPTIONS["tp_degrees"],
                                   OPTIONS["recompute_modes"], OPTIONS["zero_stages"], (1,), runtime=runtime,
                                   zero_bubble=zero_bubble)[0]
        except NoFeasiblePlan:
            expected = float("inf")
        try:
            result = solve(model, cluster, base, options)
        except NoFeasiblePlan:
            assert expected == float("inf"), seed
            continue
        assert result.optimal, seed
        assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9), seed


def test_an_interleaved_plan_keeps_the_lead_blocks_in_the_embeddings_chunk():
    """Interleaved searches hold the lead blocks in the embedding's chunk (Megatron-core's DeepSeek-V3
    layout), which may take no other block; the plan re-prices to the search's own step (driver)."""
    config = {"model_type": "deepseek_v3", "hidden_size": 1024, "num_hidden_layers": 8, "first_k_dense_replace": 2,
              "intermediate_size": 4096, "moe_intermediate_size": 512, "n_routed_experts": 16,
              "num_experts_per_tok": 4, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
              "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": 384, "kv_lora_rank": 256,
              "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 32000,
              "num_nextn_predict_layers": 0}
    model = model_from_dict(config, "lead-interleaved")
    cluster = cluster_from_spec({"name": "h100x3", "node_groups": [
        {"name": "h100", "gpu": "H100-SXM5-80GB", "nodes": 3, "gpus_per_node": 8}]})
    options = SolverOptions(micro_batches=(1,), virtual_stages=(2,), pp_degrees=(3,), ep_degrees=(1,),
                            offload=False)
    result = solve(model, cluster, Training(96, 4096, "bf16", 1, runtime="megatron"), options)
    assert result.plan.training.virtual_stages == 2
    first = min(result.plan.stages, key=lambda stage: stage.layers[0])
    assert first.layers[1] >= 3  # the embedding and both dense blocks
