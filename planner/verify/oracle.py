"""A brute-force reference search over the solver's search space, for tiny inputs (the oracle; the
seeded instances it is run on: planner.verify.instances). The tests check the solver's optimum against it;
benchmarks/bound_tightness.py measures the lower bounds against it.

Independent of planner.search: it enumerates every plan (micro-batch, schedule (1F1B, ZB-H1
where the runtime runs it (`zero_bubble`; at least p micro-batches per replica, as planner.plan asks), or
interleaved with V chunks per rank, chunks of any sizes), ordered stages on disjoint node sets, tp, context
parallelism (cp_degrees, ring: tp x cp inside a node), recompute (with "block", every count of recomputed blocks,
1F1B only), ZeRO stage and (with `offload`) ZeRO-Offload per stage, contiguous layer split, every share vector)
and prices each with planner.cost.evaluate.evaluate. `runtime`: only the plans that runtime
can run (planner.cost.runtimes.capability.violations), with its sequence parallelism; `any`: all. With `ep_degrees`,
an MoE model's stages also take each expert-parallel degree dividing its experts and the stage's cp x dp ranks
(beside context parallelism too), where the search offers it (1F1B, a stage of one GPU type whose replicas take
equal shares: the lock-step all-to-all; the largest degree inside one node). A stage on whole nodes of a
mixed node group (all of its types on each) also takes TP groups across the types (1F1B, cp 1, no
offload, a runtime with uneven TP shares), each of every degree and every split the search tries
in the form `tp_splits` names (planner.plan.tp_shares.type_splits, the forms' definition).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product

from ..cost.evaluate import evaluate
from ..cost.runtimes.capability import capability, violations
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Plan, Replica, Stage, Training, structural_problems
from ..plan.tp_shares import across_type_degrees, splits_model, type_splits
from ..schedules import get_schedule


def compositions(total: int, parts: int):
    """Ordered ways to write `total` as `parts` positive integers."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in compositions(total - first, parts - 1):
            yield (first,) + rest


def node_assignments(num_nodes: int, stages: int):
    """Each node to a stage (0..stages-1) or idle (-1), every stage non-empty."""
    for labels in product(range(-1, stages), repeat=num_nodes):
        if all(k in labels for k in range(stages)):
            yield labels


def layer_splits(items: int, stages: int, virtual: int):
    """(per-stage (first, end) bounds, pipeline rank per stage): 1F1B cuts the layers
    anywhere; interleaved cuts them into P x V chunks of at least one decoder block each,
    chunk j of rank k being stage j * P + k, the embedding in the first and the head in
    the last."""
    if virtual == 1:
        for cuts in combinations(range(1, items), stages - 1):
            yield list(zip((0,) + cuts, cuts + (items,))), list(range(stages))
        return
    blocks = items - 2
    chunks = stages * virtual
    if stages < 2 or blocks < chunks:
        return
    for sizes in compositions(blocks, chunks):
        bounds, first = [], 0
        for index, size in enumerate(sizes):
            end = first + size + (index == 0) + (index == chunks - 1)
            bounds.append((first, end))
            first = end
        yield bounds, [i % stages for i in range(chunks)]


@dataclass(frozen=True)
class _StageSpace:
    """The per-stage choices the oracle enumerates (brute_force's arguments)."""
    tp_degrees: tuple
    cp_degrees: tuple
    recompute_modes: tuple
    zero_stages: tuple
    ep_degrees: tuple
    offload: bool
    tp_splits: str = "ratio"  # the splits of TP groups across GPU types (tp_shares.type_splits)


def brute_force(model: Model, cluster: Cluster, base: Training, micro_batches, tp_degrees,
                recompute_modes, zero_stages=(1, 2, 3), virtual_stages=(1,),
                cp_degrees=(1,), runtime: str = "any", ep_degrees=(1,), offload=False,
                zero_bubble=False, objective=None, tp_splits: str = "ratio",
                combined: bool = False) -> tuple[float, Plan | None, int]:
    """The least step time over every plan of the space (module docstring), its plan and how many
    plans were priced; `objective(plan, estimate)`: the least of that figure instead (dollars or
    joules per step: tests/test_objective.py). `combined`: also Megatron-core's combined 1F1B where
    the runtime runs it (one stage of one chunk, or 2 or more ranks of V chunks)."""
    space = _StageSpace(tuple(tp_degrees), tuple(cp_degrees), tuple(recompute_modes), tuple(zero_stages),
                        tuple(ep_degrees), offload, tp_splits)
    # the one-chunk schedules: 1F1B, and ZB-H1 (2+ stages) where the runtime runs it
    runs = capability(runtime).schedules
    one_chunk = ("1f1b",) + (("zb-h1",) if zero_bubble and "zb-h1" in runs else ())
    chunked = ("interleaved",)
    if combined and "combined-1f1b" in runs:
        one_chunk, chunked = one_chunk + ("combined-1f1b",), chunked + ("combined-1f1b",)
    best, best_plan, count = float("inf"), None, 0
    for micro, v, schedule in ((micro, v, s) for micro, v in product(micro_batches, virtual_stages)
                               for s in (one_chunk if v == 1 else chunked)):
        if base.global_batch % micro:
            continue
        training = Training(base.global_batch, base.seq_len, base.dtype, micro, schedule,
                            v, base.attention, runtime, base.optimizer)
        for plan in _plans_of(model, cluster, training, space):
            if violations(plan, runtime) or (schedule == "combined-1f1b" and structural_problems(plan)):
                continue
            est = evaluate(plan)
            count += 1
            if not est.fits:
                continue
            value = est.step_time_s if objective is None else objective(plan, est)
            if value < best:
                best, best_plan = value, plan
    return best, best_plan, count


def _plans_of(model: Model, cluster: Cluster, training: Training, space: _StageSpace):
    """Every plan of one micro-batch size and schedule, in the oracle's enumeration order."""
    sp = capability(training.runtime).sequence_parallel
    nodes = [(g, n) for g in cluster.groups for n in range(g.nodes)]
    items = model.num_layers
    v = training.virtual_stages
    m_total = training.global_batch // training.micro_batch
    split = get_schedule(training.schedule).split_backward
    for stages in range(2 if split else 1, min(len(nodes), items) + 1):
        for labels in node_assignments(len(nodes), stages):
            members = [[nodes[i] for i, lab in enumerate(labels) if lab == k] for k in range(stages)]
            options = [_stage_options(model, training, mem, space) for mem in members]
            for choice in product(*options):
                replica_ranks = [_replica_ranks(mem, tp, cp) for mem, (tp, cp, *_) in zip(members, choice)]
                if any(len(r) > m_total for r in replica_ranks):
                    continue
                for bounds, prank in layer_splits(items, stages, v):
                    if (v > 1 or split) and any(choice[prank[i]][2] == "block" for i in range(len(bounds))):
                        continue
                    yield from _split_plans(model, cluster, training, bounds, prank, choice, replica_ranks, sp)


def _stage_options(model: Model, training: Training, mem: list, space: _StageSpace) -> list[tuple]:
    """(tp, cp, recompute, zero, ep, offload) choices of a stage on the nodes `mem`."""
    heads = model.config.tp_heads
    experts = model.config.num_experts
    m_total = training.global_batch // training.micro_batch
    gpn = {g.gpus_per_node for g, _ in mem}
    gpus = sum(g.gpus_per_node for g, _ in mem)
    tps = [(tp, cp) for tp in space.tp_degrees for cp in space.cp_degrees
           if all(per_node % (tp * cp) == 0 for per_node in gpn) and heads % tp == 0
           and training.seq_len % (2 * cp) == 0]
    one_type = len({g.name for g, _ in mem}) == 1

    # the search's EP degrees: the largest inside one node (SolverOptions.ep_inside_node), and under a
    # schedule that hides the all-to-all (Schedule.overlaps_ep_comm) every one across nodes too, carved
    # from the cp x dp ranks of expert TP = tp (StageDims.expert_problem), the replicas taking equal
    # shares; none at ep 1 under a schedule that needs EP (Schedule.needs_ep)
    schedule = get_schedule(training.schedule)

    def ep_fits(tp, cp, ep):
        return (one_type and experts % ep == 0 and (gpus // tp) % ep == 0 and m_total % (gpus // (tp * cp)) == 0
                and (tp * ep <= min(gpn) or schedule.overlaps_ep_comm))
    largest = {(tp, cp): max([1] + [e for e in space.ep_degrees if ep_fits(tp, cp, e) and tp * e <= min(gpn)])
               for tp, cp in tps}

    def ep_taken(tp, cp, ep):
        if ep == 1:
            return not schedule.needs_ep
        return ep == largest[(tp, cp)] or (ep_fits(tp, cp, ep) and tp * ep > min(gpn))
    uniform = [(tp, cp, rc, zero, ep, off) for tp, cp in tps for rc in space.recompute_modes
               for zero in (space.zero_stages if gpus // (tp * cp) > 1 else (0,))
               for ep in space.ep_degrees if ep_taken(tp, cp, ep)
               for off in ((False, True) if space.offload else (False,))]
    return uniform + _per_replica_tp_options(model, training, mem, space) + _across_options(model, training, mem, space)


@dataclass(frozen=True)
class _Across:
    """A stage's TP groups across the types of its mixed nodes: degree, heads and FFN columns per position."""
    tp: int
    heads: tuple
    ffn: tuple


def _across_options(model: Model, training: Training, mem: list, space: _StageSpace) -> list[tuple]:
    """TP groups across GPU types where the stage is whole nodes of one mixed node group, every one of its
    types on each of them: every degree and split, recompute (but "block") and ZeRO stage."""
    machines = {g.machine for g, _ in mem}
    machine = next(iter(machines))
    if len(machines) != 1 or not machine or training.virtual_stages > 1 or training.schedule != "1f1b" \
            or not capability(training.runtime).uneven_tp_shares or not splits_model(model.config):
        return []
    types = [g for g in _cluster_groups(mem) if g.machine == machine]
    nodes = {n for _, n in mem}
    if sorted((g.name, n) for g, n in mem) != sorted((g.name, n) for g in types for n in nodes):
        return []
    counts = tuple(g.gpus_per_node for g in types)
    if sum(counts) != types[0].gpus_in_node:
        return []
    out = []
    for tp in across_type_degrees(counts, space.tp_degrees):
        per_node = sum(counts) // tp
        replicas = len(nodes) * per_node
        for heads, ffn in type_splits(model.config, tuple(c // per_node for c in counts), space.tp_splits):
            out += [(_Across(tp, heads, ffn), 1, rc, zero, 1, False) for rc in space.recompute_modes if rc != "block"
                    for zero in (space.zero_stages if replicas > 1 else (0,))]
    return out


def _cluster_groups(mem: list) -> list:
    """The node groups of `mem`, in rank order."""
    return sorted({g.name: g for g, _ in mem}.values(), key=lambda g: g.first_rank)


def _per_replica_tp_options(model: Model, training: Training, mem: list, space: _StageSpace) -> list[tuple]:
    """Per-replica TP (Replica.tp) where the runtime runs it: a stage on two or more node groups gives
    each group's replicas a TP degree of its own (not all alike), cp and ep 1, as the search does (no
    interleaving, no recompute "block"). Its tp is ((group name, tp), ...) in group order."""
    names = list(dict.fromkeys(g.name for g, _ in mem))
    if len(names) < 2 or training.virtual_stages > 1 or not capability(training.runtime).per_replica_tp:
        return []
    per_node = {g.name: g.gpus_per_node for g, _ in mem}
    heads = model.config.tp_heads
    choices = [[tp for tp in space.tp_degrees if per_node[name] % tp == 0 and heads % tp == 0] for name in names]
    out = []
    for picked in product(*choices):
        if len(set(picked)) == 1:
            continue
        tp = tuple(zip(names, picked))
        replicas = sum(per_node[name] // t * sum(1 for g, _ in mem if g.name == name) for name, t in tp)
        out += [(tp, 1, rc, zero, 1, off) for rc in space.recompute_modes if rc != "block"
                for zero in (space.zero_stages if replicas > 1 else (0,))
                for off in ((False, True) if space.offload else (False,))]
    return out


def _replica_ranks(mem: list, tp, cp: int) -> list[tuple[int, ...]]:
    """The ranks of each replica (tp x cp consecutive GPUs; per-replica TP: its group's tp) on the nodes `mem`;
    across GPU types, on each node its TP groups' parts of every type in rank order."""
    if isinstance(tp, _Across):
        types = _cluster_groups(mem)
        per_node = sum(g.gpus_per_node for g in types) // tp.tp
        out = []
        for node in sorted({n for _, n in mem}):
            for r in range(per_node):
                out.append(tuple(g.first_rank + node * g.gpus_per_node + r * (g.gpus_per_node // per_node) + j
                                 for g in types for j in range(g.gpus_per_node // per_node)))
        return out
    ranks = []
    for g, n in mem:
        size = (dict(tp)[g.name] if isinstance(tp, tuple) else tp) * cp
        for slot in range(g.gpus_per_node // size):
            base_rank = g.first_rank + n * g.gpus_per_node + slot * size
            ranks.append(tuple(range(base_rank, base_rank + size)))
    return ranks


def _split_plans(model: Model, cluster: Cluster, training: Training, bounds, prank, choice, replica_ranks,
                 sp: bool):
    """The plans of one layer split: every share vector and count of recomputed blocks."""
    micro = training.micro_batch
    m_total = training.global_batch // micro
    stages = len(set(prank))
    split = get_schedule(training.schedule).split_backward
    # replicas of one node group in one stage cost the same wherever they
    # sit, so only share vectors non-increasing within each group are priced
    share_options = [[sh for sh in compositions(m_total, len(r))
                      if all(sh[i] >= sh[i + 1] for i in range(len(r) - 1)
                             if cluster.group_of_rank(r[i][0]).name
                             == cluster.group_of_rank(r[i + 1][0]).name)
                      and (c[4] == 1 or len(set(sh)) == 1)
                      and (not split or min(sh) >= stages)]
                     for r, c in zip(replica_ranks, choice)]
    # recompute "block": every count of recomputed decoder blocks (1F1B only, as the search)
    block_counts = [range(sum(1 for layer in model.layers[first:end] if layer.kind == "decoder")
                          + 1) if choice[prank[index]][2] == "block" else (0,)
                    for index, (first, end) in enumerate(bounds)]
    for shares, recomputed in product(product(*share_options), product(*block_counts)):
        plan_stages = []
        for index, (first, end) in enumerate(bounds):
            k = prank[index]
            (tp, cp, rc, zero, ep, off), ranks, sh = choice[k], replica_ranks[k], shares[k]
            across = tp if isinstance(tp, _Across) else None
            own = dict(tp) if isinstance(tp, tuple) else {}  # per-replica TP: each group's degree
            stage_tp = min(own.values()) if own else (across.tp if across else tp)
            replicas = tuple(Replica(d, n * micro, rk, _own_tp(cluster, own, rk, stage_tp))
                             for d, (n, rk) in enumerate(zip(sh, ranks)))
            plan_stages.append(Stage(index, (first, end), stage_tp, zero, rc, replicas, k,
                                     sp and max(own.values() or (stage_tp,)) > 1, cp, "ring", ep=ep,
                                     recompute_layers=recomputed[index], offload=off,
                                     tp_heads=across.heads if across else (), tp_ffn=across.ffn if across else ()))
        yield Plan(model, cluster, training, tuple(plan_stages))


def _own_tp(cluster: Cluster, own: dict, ranks: tuple[int, ...], stage_tp: int) -> int:
    """A replica's Replica.tp: its group's degree where that is not the stage's, else 0."""
    tp = own.get(cluster.group_of_rank(ranks[0]).name, stage_tp)
    return 0 if tp == stage_tp else tp


def on_whole_nodes(plan) -> bool:
    """Whether every node the plan uses is whole and serves one pipeline rank (the oracle's space)."""
    nodes = {}
    for s in plan.stages:
        for r in s.replicas:
            for rank in r.ranks:
                dev = plan.cluster.device(rank)
                nodes.setdefault((dev.group, dev.node), set()).add(s.pipeline_rank)
    return all(len(v) == 1 for v in nodes.values()) and \
        sum(len(r.ranks) for s in plan.stages for r in s.replicas) == sum(
            plan.cluster.group(g).gpus_per_node for g, _ in nodes)
