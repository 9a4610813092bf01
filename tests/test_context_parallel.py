"""Context parallelism (StageDims.cp): its cost and memory, the plan JSON and checks, `evaluate
--cp`, the search against the brute-force oracle, and the long-context plan it wins."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys

import pytest

from planner.core.dims import StageDims
from planner.core.errors import NoFeasiblePlan
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Training, plan_from_json, plan_to_json, structural_problems, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.stage_types import SearchContext
from planner.verify.oracle import brute_force, on_whole_nodes


H100X2 = "profiles/clusters/dgx-h100-2node.yaml"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True)


def test_dims_cp_multiplies_the_group_and_splits_sequence_attention_and_states():
    d = StageDims(tp=2, sequence_parallel=True, dp=3, zero=1, cp=4)
    assert d.group_gpus == 8 and d.gpus == 24
    assert d.local_seq_len(131072) == 32768
    assert d.compute_share(800.0) == 100.0 and d.attention_share(8.0) == 2.0
    assert d.grad_reduce_ranks == 12 and d.state_divisors == (1, 1, 12)
    assert d.within_replica == StageDims(2, True, cp=4)


def _llama_131k(**kw):
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    t = Training(16, 131072, "bf16", 1, "1f1b", 1, "flash")
    return evaluate(uniform_plan(model, cluster, t, zero=1, recompute="full", **kw))


def test_cp_divides_activation_memory_and_ring_comm_hides_behind_long_attention():
    one = _llama_131k(tp=8, pp=1, dp=2, sequence_parallel=True)
    two = _llama_131k(tp=4, pp=1, dp=2, cp=2, sequence_parallel=True)
    act1 = one.memory_by_rank[0].activations_bytes
    act2 = two.memory_by_rank[0].activations_bytes
    # tp 8 vs tp 4 x cp 2: both split a sequence's activations 8 ways
    assert act2 == pytest.approx(act1, rel=0.02)
    ring = _llama_131k(tp=1, pp=1, dp=2, cp=8)
    assert "cp_comm" in ring.breakdown_s and "cp_comm" not in one.breakdown_s
    # KV blocks of 16k tokens over NVLink hide behind 1/8 of a 131k-token attention
    assert ring.breakdown_s["cp_comm"] == 0.0


def test_ring_comm_is_exposed_when_attention_is_short_and_the_ring_crosses_nodes():
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    t = Training(16, 8192, "bf16", 1, "1f1b", 1, "flash")
    inside = evaluate(uniform_plan(model, cluster, t, tp=1, pp=1, dp=2, cp=8, zero=1))
    across = evaluate(uniform_plan(model, cluster, t, tp=1, pp=1, dp=1, cp=16, zero=1))
    assert across.breakdown_s["cp_comm"] > 10 * max(inside.breakdown_s["cp_comm"], 1e-3)
    a2a = evaluate(uniform_plan(model, cluster, t, tp=1, pp=1, dp=2, cp=8, cp_kind="all-to-all", zero=1))
    assert a2a.breakdown_s["cp_comm"] > 0  # Ulysses' all-to-alls are not overlapped


def test_plan_json_carries_cp_and_rank_layout_is_tp_then_cp():
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    t = Training(16, 131072, "bf16", 1, "1f1b", 1, "flash")
    plan = uniform_plan(model, cluster, t, tp=2, pp=2, dp=1, cp=4)
    assert plan.stages[1].replicas[0].ranks == tuple(range(8, 16))  # pp outermost, tp x cp inside
    data = plan_to_json(plan)
    assert data["stages"][0]["cp"] == 4 and data["stages"][0]["cp_kind"] == "ring"
    again = plan_from_json(json.loads(json.dumps(data)))
    assert again.stages == plan.stages and not structural_problems(again)
    from planner.verify.plan_checks import schema_problems
    assert not schema_problems(data, "plan")
    assert "cp" not in plan_to_json(uniform_plan(model, cluster, t, tp=8, pp=2, dp=1))["stages"][0]


def test_structural_check_counts_tp_x_cp_ranks():
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    t = Training(16, 131072, "bf16", 1, "1f1b", 1, "flash")
    data = plan_to_json(uniform_plan(model, cluster, t, tp=2, pp=1, dp=2, cp=4))
    data["stages"][0]["cp"] = 2
    problems = structural_problems(plan_from_json(data))
    assert any("tp x cp = 2x2 = 4" in msg for _, msg in problems)


def test_evaluate_cli_cp_prices_and_reports_cp_comm():
    r = _cli("evaluate", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "16", "--seq-len", "131072",
             "--tp", "2", "--cp", "4", "--pp", "1", "--dp", "2", "--micro-batch", "1", "--recompute", "full",
             "--zero", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["config"]["stages"][0]["cp"] == 4 and "cp_comm" in out["breakdown_s"]
    assert any(link["role"] == "cp" for link in out["critical"]["links"])


@pytest.mark.parametrize("args, words", [
    (("--tp", "1", "--cp", "3", "--dp", "2", "--model", "llama-3-8b"), "tp x cp x pp x dp = 1x3x1x2"),
    (("--tp", "1", "--cp", "16", "--dp", "1", "--cp-kind", "all-to-all", "--model", "llama-2-13b"),
     "heads divisible by tp x cp = 16"),
    (("--tp", "1", "--cp", "8", "--dp", "2", "--runtime", "fsdp1", "--model", "llama-3-8b"),
     "fsdp1 runtime has no context parallelism"),
    (("--tp", "1", "--cp", "0", "--dp", "16", "--model", "llama-3-8b"), "--cp: must be an integer >= 1"),
])
def test_evaluate_cli_bad_cp_exits_2_with_one_line(args, words):
    r = _cli("evaluate", "--cluster", H100X2, "--global-batch", "16", "--seq-len", "16384", "--pp", "1",
             "--micro-batch", "1", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], r.stderr


def test_llama3_8b_131k_on_16_h100_plans_with_cp_and_beats_the_best_plan_without():
    # runtime: megatron (the default; it runs ring CP)
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    base = Training(16, 131072, "bf16", 1)
    with_cp = solve(model, cluster, base, SolverOptions())
    without = solve(model, cluster, base, SolverOptions(cp_degrees=(1,)))
    assert any(s.cp > 1 for s in with_cp.plan.stages)
    assert all(s.cp == 1 for s in without.plan.stages)
    assert with_cp.estimate.step_time_s < without.estimate.step_time_s
    assert with_cp.optimal
    # without CP the best plan may offload activations, a candidate outside the exact search
    assert without.optimal or any(s.offload_activations for s in without.plan.stages)


def test_search_tries_cp_only_for_long_sequences():
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    plan = solve(model, cluster, Training(64, 4096, "bf16", 1), SolverOptions()).plan
    assert all(s.cp == 1 for s in plan.stages)


CP_TINY = dict(micro_batches=(1,), tp_degrees=(1, 2), recompute_modes=("none", "full"), virtual_stages=(1,),
               cp_degrees=(1, 2), cp_min_seq_len=1, offload=False, zero_bubble=False)  # offload: tests/test_memsave.py; ZB-H1: tests/test_zero_bubble_search.py


def cp_instance(seed: int):
    """One or two node groups of 2-4 GPUs, long sequences, memory that binds."""
    rng = random.Random(500 + seed)
    blocks = rng.randint(1, 3)
    hidden = rng.choice([512, 1024])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8, "num_key_value_heads": rng.choice([2, 8]),
              "intermediate_size": hidden * 2, "vocab_size": 4096}
    model = model_from_dict(config, f"cp-{seed}")
    seq_len = rng.choice([8192, 16384])
    need = model.params * 16 + blocks * seq_len * hidden * 40
    types = rng.sample(["A100-SXM4-80GB", "H100-SXM5-80GB", "V100-SXM2-32GB"], rng.randint(1, 2))
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.15, 0.6) * need / 2**30} for g in types}
    groups = [{"name": f"g{i}", "gpu": g, "nodes": 1, "gpus_per_node": rng.choice([2, 4]),
               "intra_node": {"bandwidth_GBps": rng.choice([20, 300]), "latency_us": 5},
               "inter_node": {"bandwidth_GBps": 25, "latency_us": 10}} for i, g in enumerate(types)]
    cluster = cluster_from_spec({"name": f"cp-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 4]), seq_len, "fp16", 1)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["any", "megatron"])
@pytest.mark.parametrize("seed", range(8))
def test_solver_with_cp_equals_brute_force_optimum(seed, runtime):
    # any: per-stage cp; megatron: one (tp, cp, dp) grid for every stage (capability.violations)
    model, cluster, base = cp_instance(seed)
    base = dataclasses.replace(base, runtime=runtime)
    expected, plan, _ = brute_force(model, cluster, base, CP_TINY["micro_batches"], CP_TINY["tp_degrees"],
                                    CP_TINY["recompute_modes"], cp_degrees=CP_TINY["cp_degrees"], runtime=runtime)
    try:
        result = solve(model, cluster, base, SolverOptions(**CP_TINY))
    except NoFeasiblePlan as e:
        assert expected == float("inf"), e
        return
    assert result.optimal
    if runtime != "any" and not on_whole_nodes(result.plan):
        # the uniform seed of a constrained runtime may use parts of nodes, outside the oracle's
        # space (stages on disjoint node sets): never slower than the oracle's optimum there
        assert result.estimate.step_time_s <= expected * (1 + 1e-9)
        return
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_cp_oracle_instances_choose_cp_somewhere():
    chosen = 0
    for seed in range(8):
        model, cluster, base = cp_instance(seed)
        _, plan, _ = brute_force(model, cluster, base, CP_TINY["micro_batches"], CP_TINY["tp_degrees"],
                                 CP_TINY["recompute_modes"], cp_degrees=CP_TINY["cp_degrees"])
        chosen += plan is not None and any(s.cp > 1 for s in plan.stages)
    assert chosen >= 2, chosen


def _uniform_cp_plan(cp_kind="ring"):
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    t = Training(16, 131072, "bf16", 1, "1f1b", 1, "flash")
    return uniform_plan(model, cluster, t, tp=2, pp=1, dp=2, cp=4, cp_kind=cp_kind, zero=1, recompute="full",
                        sequence_parallel=True)


def test_exports_carry_cp_or_refuse_with_reason():
    from planner.core.errors import BadInput
    from planner.export.deepspeed import export_deepspeed
    from planner.export.megatron import export_megatron
    from planner.export.rankmap import export_rankmap
    from planner.export.torchtitan import export_torchtitan
    warnings = []
    plan = _uniform_cp_plan()
    text = export_megatron(plan, warnings.append)
    assert "--context-parallel-size 4" in text and "--cp-comm-type p2p" in text
    assert "context_parallel_degree = 4" in export_torchtitan(plan, warnings.append)
    # the uniform layout exports its CP and placement exactly
    assert not [w for w in warnings if "context" in w or "placement" in w or "differ" in w], warnings
    ranks = json.loads(export_rankmap(plan, warnings.append))["ranks"]
    r5 = next(e for e in ranks if e["rank"] == 5)  # replica 0: cp rank 2, tp rank 1
    assert r5["tp_group"] == [4, 5] and r5["cp_group"] == [1, 3, 5, 7] and r5["dp_group"] == [5, 13]
    with pytest.raises(BadInput, match="DeepSpeed's config has no setting"):
        export_deepspeed(plan, warnings.append)
    with pytest.raises(BadInput, match="ring attention"):
        export_torchtitan(_uniform_cp_plan("all-to-all"), warnings.append)
    assert "--cp-comm-type a2a" in export_megatron(_uniform_cp_plan("all-to-all"), warnings.append)


def test_llama3_8b_1m_tokens_plans_with_cp_across_nodes():
    # runtime: megatron; tp 8 inside a node, the CP ring over both
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    result = solve(model, cluster, Training(16, 1048576, "bf16", 1), SolverOptions(cp_degrees=(1, 2)))
    stage = result.plan.stages[0]
    assert stage.tp * stage.cp == 16 and stage.cp == 2
    assert result.estimate.fits and "cp_comm" in result.estimate.breakdown_s


def test_too_long_a_sequence_says_its_activations_per_gpu_and_the_cp_or_length_that_fits():
    r = _cli("plan", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "16", "--seq-len", "2097152")
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert "one 2,097,152-token sequence needs" in line and "GiB of activations per GPU at tp 8, cp 8" not in line
    assert "cp >= 4" in line and "--seq-len <= " in line


def test_cp_halves_the_head_floor_where_the_search_can_place_it():
    from planner.search.bounds.layer_floor import unplaceable_layer
    model, cluster = load_model("llama-3-8b"), load_cluster("a100-v100-mix")
    base = Training(512, 1048576, "fp16", 1)
    without = unplaceable_layer(SearchContext(model, cluster, base, SolverOptions(micro_batches=(2,), cp_degrees=(1,))))
    assert without is not None and without.layer == "head"
    # the A100 nodes (2 x 8) hold tp 8 x cp 2: the head's logits split over the sequence too
    assert unplaceable_layer(SearchContext(model, cluster, base, SolverOptions(micro_batches=(2,)))) is None


def test_planner_run_refuses_a_cp_plan_with_reason():
    from planner.core.errors import BadInput
    from planner.runner.layout import check_runnable
    with pytest.raises(BadInput, match="no context parallelism"):
        check_runnable(_uniform_cp_plan(), 1)


# --- PyTorch's ring (torchtitan) and async TP: layer-level, cheap -----------------------------

def _decoder_and_h100():
    from planner.cost.runtimes import stack_params
    model, cluster = load_model("llama-3-8b"), load_cluster(H100X2)
    group = cluster.groups[0]
    layer = next(l for l in model.layers if l.kind == "decoder")
    return layer, group, stack_params


def test_torch_ring_pays_fp32_merges_and_moves_repeated_kv_where_megatron_ring_hides_all():
    from planner.cost.context_parallel import cp_comm
    from planner.cost.sharding import Sharding
    layer, group, stack_params = _decoder_and_h100()
    sh = Sharding("bf16", 1, 131072, "flash", StageDims(1, cp=4), "full")
    megatron = cp_comm(layer, sh, group.gpu, group.intra_node, stack_params(group.gpu, "megatron"))
    titan = cp_comm(layer, sh, group.gpu, group.intra_node, stack_params(group.gpu, "torchtitan"))
    assert megatron == (0.0, 0.0)  # 32k-token blocks hide every send/recv inside a node
    assert titan[0] > 0 and titan[1] > titan[0]  # the merges, the accumulations, the last dK/dV send
    # short blocks across nodes: Megatron's kv_dim-wide send/recv per block still hides, the one
    # all-gather of q_dim-wide K and V (4x Llama 3's kv_dim) behind the first block only does not
    short = Sharding("bf16", 1, 16384, "flash", StageDims(1, cp=4), "none")
    titan_p = stack_params(group.gpu, "torchtitan")
    nic = group.inter_node.shared_by(group.gpus_per_node)  # one GPU's 400 Gb/s share
    megatron_fwd = cp_comm(layer, short, group.gpu, nic, stack_params(group.gpu, "megatron"))[0]
    across = cp_comm(layer, short, group.gpu, nic, titan_p)
    inside = cp_comm(layer, short, group.gpu, group.intra_node, titan_p)  # the merges alone
    assert across[0] - inside[0] > 10 * megatron_fwd


def test_compiled_torch_ring_exposes_its_collectives_and_fuses_its_merges():
    """Under torch.compile the ring is traced and every collective is waited on where it is issued
    (functional collectives' _maybe_wrap_tensor; Inductor's reorder_for_compute_comm_overlap off):
    the all-gathers and dK/dV permutes are exposed in full, the merges run fused."""
    from planner.cost.context_parallel import (TORCH_RING_ACCUM_COMPILED_BYTES, TORCH_RING_ACCUM_FP32_BYTES,
                                               TORCH_RING_MERGE_COMPILED_BYTES, TORCH_RING_MERGE_FP32_BYTES,
                                               _torch_ring_s, cp_comm, torch_ring_parts)
    from planner.cost.formulas import attention_s, link_efficiency
    from planner.cost.sharding import Sharding
    layer, group, stack_params = _decoder_and_h100()
    sh = Sharding("bf16", 1, 131072, "flash", StageDims(1, cp=4), "none")
    eager_p = stack_params(group.gpu, "torchtitan")
    compiled_p = eager_p.with_updates(torch_compile=True)
    link, eff = group.intra_node, link_efficiency(group.intra_node, eager_p)
    # free merges (infinite HBM bandwidth) leave the collectives alone
    fast = group.gpu.__class__(**{**group.gpu.__dict__, "hbm_bandwidth_bytes_per_s": 1e30})
    eager = cp_comm(layer, sh, fast, link, eager_p)
    compiled = cp_comm(layer, sh, fast, link, compiled_p)
    assert eager[0] < 1e-9  # eager: the all-gather hides behind the first 32k-token block
    assert compiled[1] > compiled[0] > 0  # compiled: the all-gather, and cp dK/dV sends, in full
    attn = attention_s(layer, fast, sh, compiled_p)
    assert _torch_ring_s(layer, sh, fast, link, compiled_p, *attn) == \
        _torch_ring_s(layer, sh, fast, link, compiled_p, 1e9, 1e9)  # whatever the attention time
    # the pieces the node probe times (benchmarks/cp_ring_probe.py) compose to the price: one
    # all-gather forward and one backward, a dK/dV permute per block, the fused merges
    parts = torch_ring_parts(layer, sh, group.gpu, link, compiled_p)
    ring_bytes = 2 * 2 * (131072 / 4) * layer.config.q_dim  # this rank's bf16 K and V, heads repeated
    assert parts.dkv_s == pytest.approx(link.latency_s + 2 * ring_bytes / (link.bandwidth_bytes_per_s * eff))
    assert cp_comm(layer, sh, group.gpu, link, compiled_p) == pytest.approx(
        (parts.gather_s + parts.merge_s, parts.gather_s + 4 * parts.dkv_s + parts.accum_s))
    assert TORCH_RING_MERGE_COMPILED_BYTES < TORCH_RING_MERGE_FP32_BYTES
    assert TORCH_RING_ACCUM_COMPILED_BYTES < TORCH_RING_ACCUM_FP32_BYTES


def test_async_tp_hides_forward_tp_comm_behind_its_gemms_but_not_the_backward():
    from planner.cost.formulas import layer_time
    from planner.cost.sharding import Sharding
    layer, group, stack_params = _decoder_and_h100()
    p = stack_params(group.gpu, "torchtitan")
    sh = Sharding("bf16", 1, 8192, "flash", StageDims(8, True), "none")
    sync = layer_time(layer, group.gpu, sh, group.inter_node, p)
    fused = layer_time(layer, group.gpu, sh, group.inter_node, p.with_updates(tp_async=True))
    assert 0 < fused.tp_comm_fwd_s < sync.tp_comm_fwd_s
    assert fused.tp_comm_bwd_s == sync.tp_comm_bwd_s
    # without sequence parallelism there is no all-gather/reduce-scatter pair to fuse
    plain = Sharding("bf16", 1, 8192, "flash", StageDims(8, False), "none")
    assert layer_time(layer, group.gpu, plain, group.inter_node, p.with_updates(tp_async=True)) == \
        layer_time(layer, group.gpu, plain, group.inter_node, p)
