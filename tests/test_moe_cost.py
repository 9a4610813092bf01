"""What an MoE layer costs: grouped expert GEMMs at the per-expert shape (tokens per expert,
bounded by their memory traffic), the token permutations, the all-to-all dispatch and combine
(alltoall and deduplicating flex dispatchers) and the runtime's host time per MoE layer."""

from __future__ import annotations

import pytest

from planner.core.dims import StageDims
from planner.cost.elementwise import elementwise_bytes, moe_copy_accesses
from planner.cost.formulas import CostParams, _gemm_times, expert_gemm_traffic_s, layer_time, matmul_peak
from planner.cost.moe import AllToAllGroup, group_alltoall_s, moe_alltoall_s, node_copies
from planner.cost.runtimes import get_runtime
from planner.cost.sharding import Sharding
from planner.inputs.hardware import Link, cluster_from_spec
from planner.inputs.model import load_model

from .conftest import H100

QWEN = "qwen3-30b-a3b"


@pytest.fixture(scope="module")
def qwen_layer():
    return next(layer for layer in load_model(QWEN).layers if layer.kind == "decoder")


@pytest.fixture(scope="module")
def gpu():
    return cluster_from_spec(H100, "test").groups[0].gpu


def _expert_gemm_s(layer, gpu, seq_len: int, dims: StageDims, dtype: str = "bf16", params=None) -> float:
    """Forward seconds of the layer's routed-expert GEMMs on one GPU for one sequence."""
    params = params or CostParams()
    sh = Sharding(dtype, 1, seq_len, "flash", dims, "none")
    times, _, _, _ = _gemm_times(layer, gpu, sh, params, seq_len, matmul_peak(gpu, dtype, params))
    return sum(t for g, t in zip(layer.gemms(seq_len, dims.tp, dims.ep, dims.etp), times) if g.expert)


def _expert_flops(layer, seq_len: int, dims: StageDims) -> float:
    return sum(g.flops_per_sample(seq_len) for g in layer.gemms(seq_len, dims.tp, dims.ep, dims.etp) if g.expert)


# --- grouped expert GEMMs ----------------------------------------------------------------------


def test_grouped_gemm_rate_rises_with_the_tokens_each_expert_receives(qwen_layer, gpu):
    # 128 experts, top-8: 512 tokens give each expert 32 rows, 16384 tokens 1024 rows
    dims = StageDims(1)
    rates = [_expert_flops(qwen_layer, s, dims) / _expert_gemm_s(qwen_layer, gpu, s, dims) for s in (512, 4096, 16384)]
    assert rates[0] < rates[1] < rates[2]


def test_an_expert_gemm_with_few_rows_is_bound_by_its_weight_reads(qwen_layer, gpu):
    dims, params = StageDims(1), CostParams()
    hbm = gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency
    up = next(g for g in qwen_layer.gemms(512, 1) if g.expert)  # 32 rows per expert
    assert up.rows == 32
    sh = Sharding("bf16", 1, 512, "flash", dims, "none")
    times, _, _, _ = _gemm_times(qwen_layer, gpu, sh, params, 512, matmul_peak(gpu, "bf16", params))
    index = next(i for i, g in enumerate(qwen_layer.gemms(512, 1)) if g.expert)
    assert times[index] == pytest.approx(expert_gemm_traffic_s(up.rows, up.n, up.k, up.count, 2, 2, hbm))
    # the weights (k x n per expert) are most of the traffic
    assert up.k * up.n > 4 * (up.rows * up.k + up.rows * up.n)


def test_expert_gemm_traffic_counts_input_weight_and_output_once():
    assert expert_gemm_traffic_s(10, 20, 30, 2, 1, 2, 1.0) == 2 * ((10 * 30 + 30 * 20) * 1 + 10 * 20 * 2)


def test_ep_keeps_narrow_experts_whole_and_beats_tp_on_one_node(qwen_layer, gpu):
    # four GPUs on one node: TP 4 splits every 768-wide expert into 192-wide slices; EP 4 holds
    # 32 whole experts each with four times the rows. Same FLOPs per GPU, faster under EP.
    tp, ep = StageDims(4, True), StageDims(1, ep=4)
    tp_flops = _expert_flops(qwen_layer, 4096, tp)
    # EP's GPU sees its own sequence (1/4 of the replica's tokens per TP rank's share): per token the same
    assert tp_flops == pytest.approx(_expert_flops(qwen_layer, 4096, ep) / 4)
    tp_rate = tp_flops / _expert_gemm_s(qwen_layer, gpu, 4096, tp)
    ep_rate = _expert_flops(qwen_layer, 4096, ep) / _expert_gemm_s(qwen_layer, gpu, 4096, ep,
                                                                    params=CostParams(moe_imbalance=1.0))
    assert ep_rate > 1.5 * tp_rate


# --- permutations ------------------------------------------------------------------------------


def test_the_alltoall_dispatcher_sorts_received_chunks_only_with_several_local_experts():
    assert moe_copy_accesses(128, 1) == 2  # permute writes, unpermute reads
    assert moe_copy_accesses(128, 8) == 6  # and sort_chunks_by_idxs there and back
    assert moe_copy_accesses(8, 8) == 2  # one expert per rank: nothing to sort


def test_expert_parallelism_adds_the_chunk_sorts_to_the_layers_traffic(qwen_layer):
    c = qwen_layer.config
    base, _ = elementwise_bytes(qwen_layer, 4096, 1, False, "flash", 2)
    with_ep, _ = elementwise_bytes(qwen_layer, 4096, 1, False, "flash", 2, ep=8)
    assert with_ep - base == pytest.approx(c.experts_top_k * 4 * 2 * 4096 * c.hidden)


# --- all-to-all --------------------------------------------------------------------------------


def test_alltoall_volume_is_tokens_times_top_k_times_hidden(qwen_layer):
    c = qwen_layer.config
    link = Link(100e9, 0.0, "nvlink")
    params = CostParams()
    fwd, bwd = moe_alltoall_s(qwen_layer, 2, 4096, StageDims(2, True, ep=4), 2, AllToAllGroup(4, 4, link, link), params)
    nbytes = 2 * 4096 / 2 * c.experts_top_k * c.hidden * 2  # the GPU's SP share of two sequences
    one = 3 / 4 * nbytes / (100e9 * params.intra_link_efficiency)
    assert fwd == bwd == pytest.approx(2 * one)  # dispatch + combine each way


def test_node_copies_count_the_other_nodes_holding_any_of_a_tokens_experts():
    assert node_copies(128, 1, 2) == pytest.approx(0.5)
    assert node_copies(128, 8, 1) == 0.0
    # top-8 of 128 experts on two nodes: the other node almost always holds one
    assert node_copies(128, 8, 2) == pytest.approx(1 - 0.0035, abs=1e-3)
    assert node_copies(8, 8, 4) == pytest.approx(3.0)


def test_the_flex_dispatcher_sends_a_token_once_per_other_node(qwen_layer):
    fast, slow = Link(900e9, 0.0, "nvlink"), Link(50e9, 0.0, "ib")
    group, dims = AllToAllGroup(16, 8, fast, slow), StageDims(1, ep=16)
    alltoall = CostParams()
    flex = CostParams(moe_dispatcher="flex")
    a, _ = moe_alltoall_s(qwen_layer, 1, 4096, dims, 2, group, alltoall)
    f, _ = moe_alltoall_s(qwen_layer, 1, 4096, dims, 2, group, flex)
    h = qwen_layer.config.hidden
    # alltoall: 4 of a token's 8 copies go to the other node; flex: one
    assert a == pytest.approx(2 * 4096 * 4 * h * 2 / (50e9 * alltoall.inter_link_efficiency))
    assert f == pytest.approx(2 * 4096 * node_copies(128, 8, 2) * h * 2 / (50e9 * flex.inter_link_efficiency))
    # inside one node the two dispatchers move the same
    one_node = AllToAllGroup(8, 8, fast, slow)
    assert group_alltoall_s(1e9, one_node, alltoall) == group_alltoall_s(1e9, one_node, flex)


# --- host time ---------------------------------------------------------------------------------


def test_megatron_waits_for_the_host_once_per_moe_layer_and_micro_batch(qwen_layer, gpu):
    params = get_runtime("megatron").params(CostParams())
    assert params.moe_layer_host_s > 0
    link = Link(450e9, 3e-6, "nvlink")
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(1, ep=8), "none")
    with_host = layer_time(qwen_layer, gpu, sh, link, params)
    without = layer_time(qwen_layer, gpu, sh, link, params.with_updates(moe_layer_host_s=0.0))
    assert with_host.fwd_s + with_host.bwd_s - without.fwd_s - without.bwd_s == pytest.approx(params.moe_layer_host_s)
    dense = next(layer for layer in load_model("llama-3-8b").layers if layer.kind == "decoder")
    dense_sh = Sharding("bf16", 1, 4096, "flash", StageDims(1), "none")
    assert layer_time(dense, gpu, dense_sh, link, params) == layer_time(dense, gpu, dense_sh, link,
                                                                         params.with_updates(moe_layer_host_s=0.0))


def test_a_step_captured_as_one_cuda_graph_spends_no_host_time(qwen_layer, gpu):
    params = get_runtime("megatron").params(CostParams())
    link = Link(450e9, 3e-6, "nvlink")
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(1, ep=8), "none")
    graphed = layer_time(qwen_layer, gpu, sh, link, params.with_updates(full_iteration_cuda_graph=True))
    assert graphed == layer_time(qwen_layer, gpu, sh, link, params.with_updates(moe_layer_host_s=0.0))
    assert graphed.fwd_s < layer_time(qwen_layer, gpu, sh, link, params).fwd_s


# --- the all-to-all under another micro-batch's compute ----------------------------------------


def _with_alltoall(layer, gpu, link_GBps: float, params: CostParams, micro_batch: int = 1):
    from planner.cost.moe import with_moe_alltoall

    link = Link(link_GBps * 1e9, 3e-6, "nvlink")
    sh = Sharding("bf16", micro_batch, 4096, "flash", StageDims(1, dp=8, ep=8), "none")
    return with_moe_alltoall(layer_time(layer, gpu, sh, link, params), layer, sh, AllToAllGroup(8, 8, link, link),
                             params)


def test_the_ep_overlap_exposes_only_the_all_to_all_beyond_the_other_passs_compute(qwen_layer, gpu):
    plain = _with_alltoall(qwen_layer, gpu, 1.0, CostParams())  # a slow link: the all-to-all outlasts compute
    overlapped = _with_alltoall(qwen_layer, gpu, 1.0, CostParams(moe_a2a_overlap=True))
    assert plain.ep_comm_fwd_s > plain.bwd_s and plain.ep_comm_bwd_s > plain.fwd_s
    # a forward's all-to-all runs under a backward's compute, a backward's under a forward's
    assert overlapped.ep_comm_fwd_s == pytest.approx(plain.ep_comm_fwd_s - plain.bwd_s)
    assert overlapped.ep_comm_bwd_s == pytest.approx(plain.ep_comm_bwd_s - plain.fwd_s)
    assert (overlapped.fwd_s, overlapped.bwd_s) == (plain.fwd_s, plain.bwd_s)


def test_the_ep_overlap_hides_an_all_to_all_shorter_than_the_compute(qwen_layer, gpu):
    plain = _with_alltoall(qwen_layer, gpu, 900.0, CostParams())
    assert 0 < plain.ep_comm_s < min(plain.fwd_s, plain.bwd_s)
    assert _with_alltoall(qwen_layer, gpu, 900.0, CostParams(moe_a2a_overlap=True)).ep_comm_s == 0.0


# --- load imbalance ----------------------------------------------------------------------------


def test_a_rank_of_many_experts_is_less_imbalanced_than_one_expert():
    from planner.cost.formulas import ep_rank_imbalance
    assert ep_rank_imbalance(1.25, 128, 1) == 1.0  # no EP: every GPU runs every expert
    assert ep_rank_imbalance(1.25, 128, 128) == 1.25  # one expert per rank
    assert ep_rank_imbalance(1.25, 128, 8) == pytest.approx(1 + 0.25 / 4)  # 16 experts per rank
    assert ep_rank_imbalance(1.0, 128, 8) == 1.0  # force-balanced routing


def test_the_busiest_rank_slows_only_the_expert_gemms(qwen_layer, gpu):
    dims = StageDims(1, ep=8)
    balanced = _expert_gemm_s(qwen_layer, gpu, 4096, dims, params=CostParams(moe_imbalance=1.0))
    assert _expert_gemm_s(qwen_layer, gpu, 4096, dims) == pytest.approx(balanced * (1 + 0.25 / 4))


# --- the plan ----------------------------------------------------------------------------------


def test_qwen3_30b_a3b_fp8_on_two_dgx_h100_is_planned_with_expert_parallelism():
    # the published H100 recipes (Megatron-Bridge) run it with EP and tp 1: the 768-wide experts stay
    # whole; the priced margin over the best plan without EP is about 6 %
    import json

    from click.testing import CliRunner

    from planner.cli import main
    from .conftest import CLUSTERS_DIR

    result = CliRunner().invoke(main, ["plan", "--model", QWEN, "--cluster", str(CLUSTERS_DIR / "dgx-h100-2node.yaml"),
                                       "--global-batch", "512", "--seq-len", "8192", "--runtime", "megatron",
                                       "--dtype", "fp8", "--json"])
    assert result.exit_code == 0, result.output
    stages = json.loads(result.stdout)["stages"]
    assert all(s["ep"] > 1 and s["tp"] == 1 for s in stages)
