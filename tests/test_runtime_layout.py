"""What each rank of a plan does in `planner run` (planner.runner.layout; no torch needed):
the documented sample -> replica mapping, the peers of each message, the groups, the orders."""

from __future__ import annotations

import pytest

from planner.core.errors import BadInput
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Plan, Replica, Stage, Training
from planner.runner.layout import Layout
from planner.schedules.interleaved import interleaved_order, microbatch_group

from .conftest import small_cluster_spec

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "num_hidden_layers": 4, "vocab_size": 64, "max_position_embeddings": 64}
CLUSTER = cluster_from_spec(small_cluster_spec(gpus_per_node=8))
BIG_CLUSTER = cluster_from_spec(small_cluster_spec(gpus_per_node=24))


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
    # 3 micro-batches at pp 2 leave a last group of 1 < pp, which megatron-core refuses: one group of 3
    # (microbatch_group); rank 0 warms up with 2 + 3 chunk forwards
    assert interleaved_order(0, 2, 2, 3)[:7] == [("F", 0, 0), ("F", 0, 1), ("F", 0, 2), ("F", 1, 0), ("F", 1, 1),
                                                  ("F", 1, 2), ("B", 1, 0)]
    assert len(interleaved_order(0, 2, 2, 3)) == 12


def test_microbatch_groups_are_the_least_megatron_core_accepts():
    """megatron-core 0.16.1 schedules.py: N in [pp, M] with M % N = 0 or M % N >= pp; pp where it divides M."""
    for pp in range(2, 10):
        for m in range(pp, 80):
            n = microbatch_group(pp, m)
            assert pp <= n <= m and (m % n == 0 or m % n >= pp)
            assert not any(m % k == 0 or m % k >= pp for k in range(pp, n))
            assert (n == pp) == (m % pp == 0)


def test_interleaving_stages_that_split_the_batch_differently_is_bad_input():
    """Megatron's interleaved order over different runs of micro-batches per rank can deadlock."""
    shares_a, shares_b = [(6, [0]), (6, [1])], [(8, [2]), (4, [3])]
    stages = tuple(Stage(c, (0 if c == 0 else c + 1, c + 2 if c < 3 else 6), 1, 0, "none",
                         tuple(Replica(d, s, tuple(r)) for d, (s, r) in enumerate(shares_a if c % 2 == 0 else shares_b)),
                         c % 2) for c in range(4))
    plan = Plan(model_from_dict(LLAMA, "tiny"), CLUSTER, Training(12, 16, "fp32", 2, "interleaved", 2), stages)
    with pytest.raises(BadInput, match="split the batch alike"):
        Layout(plan)


def test_interleaving_fewer_microbatches_than_pp_is_bad_input():
    stages = tuple(Stage(c, (0 if c == 0 else c + 1, c + 2 if c < 3 else 6), 1, 0, "none",
                         (Replica(0, 2, (c % 2,)),), c % 2) for c in range(4))
    plan = Plan(model_from_dict(LLAMA, "tiny"), CLUSTER, Training(2, 16, "fp32", 2, "interleaved", 2), stages)
    with pytest.raises(BadInput, match="at least pp=2 micro-batches"):
        Layout(plan)


@pytest.mark.parametrize("pp, v", [(2, 2), (3, 2), (2, 3), (4, 2)])
def test_interleaving_any_microbatch_count_from_pp_finishes_in_groups_megatron_core_accepts(pp, v):
    """Micro-batch counts that pp does not divide run in groups of microbatch_group(pp, M): every rank ends."""
    chunks = pp * v
    config = {**LLAMA, "num_hidden_layers": chunks}
    for m in range(pp, 3 * pp + 3):
        stages = tuple(Stage(c, (0 if c == 0 else c + 1, c + 2 if c < chunks - 1 else chunks + 2), 1, 0, "none",
                             (Replica(0, m, (c % pp,)),), c % pp) for c in range(chunks))
        plan = Plan(model_from_dict(config, "tiny"), CLUSTER, Training(m, 16, "fp32", 1, "interleaved", v), stages)
        assert finishes(Layout(plan)), (pp, v, m)


@pytest.mark.parametrize("change, needle", [
    ({"model_type": "gpt_neox"}, "builds gpt2, llama"),
    ({"num_key_value_heads": 1}, "does not split"),
])
def test_what_the_runtime_cannot_build_is_bad_input(change, needle):
    with pytest.raises(BadInput, match=needle):
        Layout(plan_of(stage(0, (0, 6), [(8, [0, 1])], tp=2), config={**LLAMA, **change}))


# --- every plan's ranks finish their orders (a simulation of the engine's messages) ------------


def finishes(layout: Layout) -> bool:
    """Run every rank's order as the engine does: sends never block, a forward waits for its
    input and a backward for its gradient, and a TP group moves in lockstep (its collectives).
    True when every rank reaches its end and every message sent is received once."""
    orders = {w: layout.order(w) for w in range(layout.world_size)}
    seats = {w: {seat.stage.index: seat for seat in layout.seats(w)} for w in orders}
    pos = dict.fromkeys(orders, 0)
    last = len(layout.plan.stages) - 1
    sent, received = set(), set()

    def message_in(w: int, op: str, s: int, g: int):
        i = seats[w][s].tp_rank
        if op == "F":
            return None if s == 0 else (layout.forward_source(s, g, i), w, layout.tag(s - 1, False, g))
        return None if s == last else (layout.backward_source(s, g, i), w, layout.tag(s, True, g))

    def messages_out(w: int, op: str, s: int, g: int):
        i = seats[w][s].tp_rank
        if op == "F":
            return [] if s == last else [(w, d, layout.tag(s, False, g)) for d in layout.forward_targets(s, g, i)]
        return [] if s == 0 else [(w, d, layout.tag(s - 1, True, g)) for d in layout.backward_targets(s, g, i)]

    def step(w: int) -> bool:
        """Run rank w's next pass (with its TP group) if it can."""
        if pos[w] == len(orders[w]):
            return False
        op, s, g = orders[w][pos[w]]
        group = layout.tp_group(seats[w][s])
        if any(pos[p] == len(orders[p]) or orders[p][pos[p]] != (op, s, g) for p in group):
            return False
        needed = [message_in(p, op, s, g) for p in group]
        if any(m is not None and m not in sent for m in needed):
            return False
        for p, m in zip(group, needed):
            if m is not None:
                assert m not in received, f"received twice: {m}"
                received.add(m)
            for out in messages_out(p, op, s, g):
                assert out not in sent, f"sent twice: {out}"
                sent.add(out)
            pos[p] += 1
        return True

    moved = True
    while moved:
        moved = False
        for w in orders:
            while step(w):
                moved = True
    return all(pos[w] == len(orders[w]) for w in orders) and sent == received


def random_plan(rng, pp: int, v: int) -> Plan:
    """pp pipeline ranks, each with its own TP (1-2), DP (1-3) and shares of 12 samples (micro-batch 1
    or 2); with v > 1, each rank's v chunks share its replicas, and every rank has the first's shares."""
    b = rng.choice([1, 2]) if v == 1 or 6 % pp == 0 else 1
    per_rank, next_rank = [], 0
    for p in range(pp):
        tp, dp = rng.choice([1, 2]), rng.choice([1, 2, 3])
        if v == 1:
            cuts = sorted(rng.sample(range(1, 12 // b), dp - 1))
        elif p == 0:  # interleaved: every stage splits the batch alike, in multiples of pp micro-batches
            cuts = sorted(rng.sample(range(pp, 12 // b, pp), min(dp - 1, len(range(pp, 12 // b, pp)))))
        shares = [(hi - lo) * b for lo, hi in zip([0] + cuts, cuts + [12 // b])]
        replicas = []
        for d, share in enumerate(shares):
            replicas.append(Replica(d, share, tuple(range(next_rank, next_rank + tp))))
            next_rank += tp
        per_rank.append((tp, tuple(replicas)))
    chunks = pp * v
    config = {**LLAMA, "num_hidden_layers": chunks}
    stages = tuple(Stage(c, (0 if c == 0 else c + 1, c + 2 if c < chunks - 1 else chunks + 2), per_rank[c % pp][0], 0,
                         "none", per_rank[c % pp][1], c % pp) for c in range(chunks))
    schedule = "interleaved" if v > 1 else rng.choice(["1f1b", "gpipe"])
    training = Training(12, 16, "fp32", b, schedule=schedule, virtual_stages=v)
    return Plan(model_from_dict(config, "tiny"), BIG_CLUSTER, training, stages)


def test_every_rank_of_random_heterogeneous_plans_finishes_its_step():
    import random

    rng = random.Random(16)
    for trial in range(150):
        pp = rng.choice([1, 2, 3, 4])
        v = rng.choice([1, 2, 3]) if pp > 1 else 1
        plan = random_plan(rng, pp, v)
        assert finishes(Layout(plan)), (trial, plan.training, [(s.tp, s.replicas) for s in plan.stages])


def test_the_simulation_sees_a_deadlock():
    """A rank that runs its backwards first waits for a gradient that needs its own forward."""
    layout = Layout(HETERO)
    real = layout.order
    layout.order = lambda w: sorted(real(w), key=lambda op: op[0] != "B") if w in (1, 2) else real(w)
    assert not finishes(layout)


def test_run_without_torch_is_bad_input_with_the_install_hint(tmp_path, monkeypatch):
    import json
    import sys

    from planner.plan import plan_to_json

    from .conftest import assert_bad_input, invoke

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan_of(stage(0, (0, 6), [(8, [0])])))))
    monkeypatch.setitem(sys.modules, "torch", None)
    assert_bad_input(invoke("run", path), "planner run", "needs PyTorch")
