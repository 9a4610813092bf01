"""What each rank of a plan does in `planner run` (planner.runtime.layout; no torch needed):
the documented sample -> replica mapping, the peers of each message, the groups, the orders."""

from __future__ import annotations

import pytest

from planner.errors import BadInput
from planner.hardware import cluster_from_spec
from planner.model import model_from_dict
from planner.plan import Plan, Replica, Stage, Training
from planner.runtime.layout import Layout
from planner.schedules.interleaved import interleaved_order

from .conftest import small_cluster_spec

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "num_hidden_layers": 4, "vocab_size": 64, "max_position_embeddings": 64}
CLUSTER = cluster_from_spec(small_cluster_spec(gpus_per_node=8))


def plan_of(*stages: Stage, config: dict = LLAMA) -> Plan:
    return Plan(model_from_dict(config, "tiny"), CLUSTER, Training(8, 16, "fp32", 2), stages)


def stage(index, layers, shares, tp=1):
    return Stage(index, layers, tp, 0, "none", tuple(Replica(d, s, tuple(r)) for d, (s, r) in enumerate(shares)), index)


# stage 0: TP 2 x DP 2 with shares 6:2 on ranks 4-7 (used ranks 4..7 and 1: world ranks 1..4 and 0)
HETERO = plan_of(stage(0, (0, 3), [(6, [4, 5]), (2, [6, 7])], tp=2), stage(1, (3, 6), [(8, [1])]))


def test_replicas_take_consecutive_microbatches_in_dp_rank_order():
    layout = Layout(HETERO)
    first, second = layout.replicas(0)
    assert list(layout.microbatches(0, first)) == [0, 1, 2]
    assert list(layout.microbatches(0, second)) == [3]
    assert [layout.owner(0, g).dp_rank for g in range(4)] == [0, 0, 0, 1]
    assert [layout.owner(1, g).dp_rank for g in range(4)] == [0, 0, 0, 0]


def test_world_ranks_follow_the_plans_used_ranks_in_order():
    layout = Layout(HETERO)
    assert layout.plan_ranks == [1, 4, 5, 6, 7]
    assert [s.stage.index for s in layout.seats(0)] == [1]
    assert [(s.stage.index, s.replica.dp_rank, s.tp_rank) for s in layout.seats(4)] == [(0, 1, 1)]


def test_messages_cross_between_the_owners_of_each_microbatch():
    layout = Layout(HETERO)
    # micro-batch 3 is dp_rank 1's (world ranks 3, 4): the one receiver TP rank (0) takes it from
    # sender TP rank 0 only
    assert layout.forward_targets(0, 3, tp_rank=0) == [0]
    assert layout.forward_targets(0, 3, tp_rank=1) == []
    assert layout.forward_source(1, 3, tp_rank=0) == 3
    # the gradient goes back to both TP ranks of the owner
    assert layout.backward_targets(1, 3, tp_rank=0) == [3, 4]
    assert layout.backward_source(0, 3, tp_rank=1) == 0
    assert layout.backward_targets(1, 0, tp_rank=0) == [1, 2]
    assert layout.tag(0, False, 3) != layout.tag(0, True, 3)


def test_groups_are_the_tp_groups_and_the_dp_groups_per_tp_rank():
    assert Layout(HETERO).groups == [(1, 2), (1, 3), (2, 4), (3, 4)]


def test_each_rank_runs_1f1b_over_its_own_microbatches():
    layout = Layout(HETERO)
    assert layout.order(3) == [("F", 0, 3), ("B", 0, 3)]
    assert layout.order(1) == [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("F", 0, 2), ("B", 0, 1), ("B", 0, 2)]
    assert [op for op, _, _ in layout.order(0)] == ["F", "B"] * 4


def test_interleaved_order_is_megatrons_with_groups_of_pp_microbatches():
    # pp 2, V 2, 4 micro-batches, rank 1: warm-up (2 - 1 - 1) * 2 + (2 - 1) * 2 = 2 chunk forwards
    order = interleaved_order(1, 2, 2, 4)
    assert order[:6] == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("B", 1, 0), ("F", 1, 1), ("B", 1, 1)]
    assert sorted(order) == sorted([(op, c, j) for op in "FB" for c in range(2) for j in range(4)])
    # rank 0 warms up with 4; a short last group (3 micro-batches, pp 2) keeps every pass once
    assert interleaved_order(0, 2, 2, 3)[:4] == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1)]
    assert len(interleaved_order(0, 2, 2, 3)) == 12


@pytest.mark.parametrize("change, needle", [
    ({"model_type": "gpt_neox"}, "builds gpt2, llama"),
    ({"num_key_value_heads": 1}, "does not split"),
])
def test_what_the_runtime_cannot_build_is_bad_input(change, needle):
    with pytest.raises(BadInput, match=needle):
        Layout(plan_of(stage(0, (0, 6), [(8, [0, 1])], tp=2), config={**LLAMA, **change}))
