"""The solver against a brute-force oracle, local optimality, and its contract."""

from __future__ import annotations

import random

import pytest

from planner.errors import NoFeasiblePlan
from planner.hardware import cluster_from_spec
from planner.model import model_from_dict
from planner.plan import Training
from planner.search import SolverOptions, solve

from .oracle import brute_force

GPU_CHOICES = ["A100-SXM4-80GB", "V100-SXM2-32GB", "T4", "RTX-4090", "H100-SXM5-80GB"]
TINY_OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"))


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
    return model, cluster, Training(rng.choice([2, 3, 4]), seq_len, "fp16", 1)


@pytest.mark.parametrize("seed", range(50))
def test_solver_equals_brute_force_optimum(seed):
    model, cluster, base = tiny_instance(seed)
    assert cluster.num_gpus <= 8 and model.num_layers <= 10
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"])
    try:
        result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    except NoFeasiblePlan:
        assert expected == float("inf")
        return
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


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
