"""The solver against a brute-force oracle, local optimality, and its contract."""

from __future__ import annotations

import random

import pytest

from planner.core.errors import NoFeasiblePlan
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from dataclasses import replace

from planner.plan import Training
from planner.cost.runtimes.capability import violations
from planner.search.orchestration.driver import SolverOptions, solve

from .oracle import brute_force

GPU_CHOICES = ["A100-SXM4-80GB", "V100-SXM2-32GB", "T4", "RTX-4090", "H100-SXM5-80GB"]
TINY_OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"),
                    virtual_stages=(1, 2), offload=False,  # offload: tests/test_memsave.py
                    zero_bubble=False)  # ZB-H1: tests/test_zero_bubble_search.py


def tiny_instance(seed: int):
    """2-3 GPU types, at most 3 nodes (<= 6 GPUs), at most 7 layers, memory that binds."""
    rng = random.Random(seed)
    blocks = rng.randint(1, 5)
    hidden = rng.choice([256, 1024, 2048])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8, "num_key_value_heads": rng.choice([2, 8]),
              "intermediate_size": hidden * rng.choice([2, 4]), "vocab_size": rng.choice([4096, 32000])}
    model = model_from_dict(config, f"tiny-{seed}")
    seq_len = rng.choice([1024, 4096])
    need = model.params * 16 + blocks * seq_len * config["hidden_size"] * 160
    types = rng.sample(GPU_CHOICES, rng.randint(2, 3))
    groups, gpus, nodes_left = [], {}, 3
    for i, gpu in enumerate(types):
        nodes = 1 if nodes_left - 1 < len(types) - i else rng.randint(1, nodes_left - (len(types) - i - 1))
        nodes = min(nodes, 2)
        nodes_left -= nodes
        # the 2 GiB reserve plus a random fraction of the whole model's needs
        gpus[gpu] = {"memory_GiB": 2.0 + rng.uniform(0.2, 1.2) * need / 2**30}
        groups.append({"name": f"g{i}", "gpu": gpu, "nodes": nodes, "gpus_per_node": rng.choice([1, 2]),
                       "inter_node": {"bandwidth_GBps": rng.choice([10, 100, 400]),
                                      "latency_us": rng.choice([5, 50])}})
    cluster = cluster_from_spec({"name": f"tiny-{seed}", "gpus": gpus, "node_groups": groups})
    # runtime: any (per-stage TP and DP, uneven shares); tests of a runtime replace it
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1, runtime="any")


@pytest.mark.parametrize("seed", range(50))
def test_solver_equals_brute_force_optimum(seed):
    model, cluster, base = tiny_instance(seed)
    assert cluster.num_gpus <= 8 and model.num_layers <= 10
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    try:
        result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    except NoFeasiblePlan:
        assert expected == float("inf")
        return
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def pipeline_instance(seed: int):
    """Two GPU types, 2-3 one-GPU nodes with fast links, memory for about half the model and
    few micro-batches: pipelines are forced and the interleaved schedule's smaller bubble
    competes with 1F1B's fewer sends."""
    rng = random.Random(1000 + seed)
    blocks = rng.choice([4, 6])
    hidden = rng.choice([1024, 2048])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": hidden * 4,
              "vocab_size": 4096}
    model = model_from_dict(config, f"pipe-{seed}")
    seq_len = rng.choice([1024, 2048])
    need = model.params * 16 + blocks * seq_len * hidden * 160
    types = rng.sample(GPU_CHOICES, 2)
    gpus = {g: {"memory_GiB": 2.0 + rng.uniform(0.45, 0.7) * need / 2**30} for g in types}
    nodes = rng.choice([(1, 1), (2, 1), (1, 2)])
    groups = [{"name": f"g{i}", "gpu": g, "nodes": n, "gpus_per_node": 1,
               "inter_node": {"bandwidth_GBps": 400, "latency_us": 5}} for i, (g, n) in enumerate(zip(types, nodes))]
    cluster = cluster_from_spec({"name": f"pipe-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1, runtime="any")


@pytest.mark.parametrize("seed", range(12))
def test_solver_equals_brute_force_on_forced_pipelines_with_interleaving(seed):
    model, cluster, base = pipeline_instance(seed)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def runtime_base(cluster, base, runtime):
    """`base` under `runtime`, in a dtype it has (fp16 instances: bf16 or fp32 for torchtitan,
    as `planner plan --runtime torchtitan` picks; planner.api.load.resolve_dtype)."""
    from planner.cost.runtimes.capability import capability
    from planner.api.load import resolve_dtype

    dtype = base.dtype if base.dtype in capability(runtime).dtypes else resolve_dtype(cluster, None, runtime)
    return replace(base, runtime=runtime, dtype=dtype)


RUNTIME_CASES = [(runtime, seed) for runtime in ("megatron", "torchtitan", "deepspeed", "megatron-2021", "fsdp1")
                 for seed in range(12)]


@pytest.mark.parametrize("runtime,seed", RUNTIME_CASES)
def test_solver_equals_brute_force_within_each_runtime(runtime, seed):
    """The search under --runtime R is exact within what R can run: the brute force over
    every plan, keeping those capability.violations allows, finds the same optimum."""
    model, cluster, base = tiny_instance(seed) if seed % 2 else pipeline_instance(seed)
    base = runtime_base(cluster, base, runtime)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], zero_stages=(0, 1, 2, 3),
                                 virtual_stages=TINY_OPTIONS["virtual_stages"], runtime=runtime)
    try:
        result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    except NoFeasiblePlan:
        assert expected == float("inf")
        return
    assert not violations(result.plan, runtime)
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def test_runtime_oracle_instances_cover_constrained_and_free_differences():
    """Megatron's space is narrower on the oracle instances: some plan of `any` is faster."""
    faster = 0
    for seed in range(0, 12):
        model, cluster, base = tiny_instance(seed) if seed % 2 else pipeline_instance(seed)
        free = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).estimate.step_time_s
        try:
            mega = solve(model, cluster, replace(base, runtime="megatron"), SolverOptions(**TINY_OPTIONS))
        except NoFeasiblePlan:
            continue
        assert mega.estimate.step_time_s >= free * (1 - 1e-9)
        faster += mega.estimate.step_time_s > free * (1 + 1e-6)
    assert faster >= 2, faster


def test_interleaved_schedule_is_chosen_where_its_smaller_bubble_wins():
    results = [solve(*pipeline_instance(seed), SolverOptions(**TINY_OPTIONS)) for seed in range(12)]
    interleaved = [r for r in results if r.plan.training.schedule == "interleaved"]
    assert len(interleaved) >= 3
    for result in interleaved:
        plan = result.plan
        assert plan.training.virtual_stages == 2 and len(plan.stages) == 2 * plan.pp
        # every chunk holds at least one decoder block
        for stage in plan.stages:
            assert any(plan.model.layers[i].kind == "decoder" for i in range(*stage.layers))
    # 1F1B alone is strictly slower exactly where the interleaved plan was chosen
    for seed, result in enumerate(results):
        plain = solve(*pipeline_instance(seed), SolverOptions(**{**TINY_OPTIONS, "virtual_stages": (1,)}))
        assert plain.plan.training.schedule == "1f1b"
        if result.plan.training.schedule == "interleaved":
            assert plain.estimate.step_time_s > result.estimate.step_time_s
        else:
            assert plain.estimate.step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-12)


def test_oracle_instances_cover_pipelines_uneven_shares_and_mixed_stages():
    """The 50 oracle instances must exercise what the solver claims to search."""
    multi = uneven = mixed = 0
    for seed in range(50):
        model, cluster, base = tiny_instance(seed)
        plan = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).plan
        multi += len(plan.stages) > 1
        uneven += any(len({r.batch_share for r in s.replicas}) > 1 for s in plan.stages)
        mixed += any(len({cluster.group_of_rank(r.ranks[0]).gpu.name for r in s.replicas}) > 1
                     for s in plan.stages)
    assert multi >= 10 and uneven >= 5 and mixed >= 3, (multi, uneven, mixed)
