"""What FSDP's prefetching hides of its ZeRO-3 collectives (planner.cost.dp_comm.zero_exposed_s):
the share Runtime.overlap_zero_comm of each collective, behind up to all of the pass's compute;
one GPU runs no collective at all."""

from __future__ import annotations

import pytest

from planner.cost.dp_comm import zero_exposed_s
from planner.cost.evaluate import evaluate
from planner.cost.runtimes import get_runtime, training_params
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

FSDP2 = get_runtime("torchtitan").overlap_zero_comm


def test_collectives_shorter_than_the_compute_keep_their_unhidden_share_exposed():
    assert zero_exposed_s(1.0, 10.0, FSDP2) == pytest.approx((1 - FSDP2) * 1.0)


def test_collectives_longer_than_the_compute_hide_behind_all_of_it():
    # comm-bound (FSDP over many nodes): the next layer's all-gather runs on its own stream
    # through the whole of each layer's compute, not through half of it
    comm, compute = 10.0, 3.0
    assert FSDP2 * comm > compute
    assert zero_exposed_s(comm, compute, FSDP2) == pytest.approx(comm - compute)


def test_exposed_collectives_never_fall_below_their_unhidden_share():
    # the search's lower bound (planner.search.bounds.rank_costs: (1 - overlap) x the collectives)
    for comm, compute in ((1.0, 10.0), (10.0, 3.0), (4.0, 4.0), (0.0, 1.0)):
        assert zero_exposed_s(comm, compute, FSDP2) >= (1 - FSDP2) * comm - 1e-12


def _fsdp2_step(gpus: int, nodes: int, zero: int):
    cluster = cluster_from_spec({"name": "c", "node_groups": [{"name": "g", "gpu": "H100-SXM5-80GB", "nodes": nodes,
                                                               "gpus_per_node": gpus}]}, "test")
    training = Training(gpus * nodes, 2048, "bf16", 1, runtime="torchtitan")
    plan = uniform_plan(load_model("gpt2-xl"), cluster, training, tp=1, pp=1, dp=gpus * nodes, zero=zero,
                        recompute="full")
    return evaluate(plan, training_params(cluster.gpu_types, training))


def test_one_gpu_under_fsdp2_prices_no_collective_and_no_gathered_copy():
    sharded, plain = _fsdp2_step(1, 1, zero=3), _fsdp2_step(1, 1, zero=0)
    assert sharded.breakdown_s["dp_comm"] == 0.0
    assert sharded.step_time_s == pytest.approx(plain.step_time_s)
    # nothing all-gathered beside the (unsharded) weights at dp 1
    assert sharded.memory_by_rank[0].weights_bytes == pytest.approx(plain.memory_by_rank[0].weights_bytes)
