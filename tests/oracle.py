"""Brute-force enumerator over the solver's search space, for tiny inputs (the oracle).

Independent of planner.search.driver: it enumerates every plan (micro-batch, schedule (1F1B, ZB-H1
where the runtime runs it (`zero_bubble`; at least p micro-batches per replica, as planner.plan asks), or
interleaved with V chunks per rank, chunks of any sizes), ordered stages on disjoint node sets, tp, context
parallelism (cp_degrees, ring: tp x cp inside a node), recompute (with "block", every count of recomputed blocks,
1F1B only), ZeRO stage and (with `offload`) ZeRO-Offload per stage, contiguous layer split, every share vector)
and prices each with planner.cost.evaluate.evaluate. `runtime`: only the plans that runtime
can run (planner.cost.runtimes.capability.violations), with its sequence parallelism; `any`: all. With `ep_degrees`,
an MoE model's stages also take each expert-parallel degree dividing its experts and the stage's cp x dp ranks
(beside context parallelism too), where the search offers it (1F1B, a stage of one GPU type whose replicas take
equal shares: the lock-step all-to-all; the largest degree inside one node).
"""

from __future__ import annotations

from itertools import combinations, product

from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import capability, violations
from planner.inputs.hardware import Cluster
from planner.inputs.model import Model
from planner.plan import Plan, Replica, Stage, Training
from planner.schedules import get_schedule


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


def layer_splits(items: int, stages: int, v: int):
    """(per-stage (first, end) bounds, pipeline rank per stage): 1F1B cuts the layers
    anywhere; interleaved cuts them into P x V chunks of at least one decoder block each,
    chunk j of rank k being stage j * P + k, the embedding in the first and the head in
    the last."""
    if v == 1:
        for cuts in combinations(range(1, items), stages - 1):
            yield list(zip((0,) + cuts, cuts + (items,))), list(range(stages))
        return
    blocks = items - 2
    chunks = stages * v
    if stages < 2 or blocks < chunks:
        return
    for sizes in compositions(blocks, chunks):
        bounds, first = [], 0
        for index, size in enumerate(sizes):
            end = first + size + (index == 0) + (index == chunks - 1)
            bounds.append((first, end))
            first = end
        yield bounds, [i % stages for i in range(chunks)]


def brute_force(model: Model, cluster: Cluster, base: Training, micro_batches, tp_degrees,
                recompute_modes, zero_stages=(1, 2, 3), virtual_stages=(1,),
                cp_degrees=(1,), runtime: str = "any", ep_degrees=(1,), offload=False,
                zero_bubble=False) -> tuple[float, Plan | None, int]:
    sp = capability(runtime).sequence_parallel
    # the one-chunk schedules: 1F1B, and ZB-H1 (2+ stages) where the runtime runs it
    one_chunk = ("1f1b",) + (("zb-h1",) if zero_bubble and "zb-h1" in capability(runtime).schedules
                             and get_schedule("zb-h1").supported_by(runtime) else ())
    nodes = [(g, n) for g in cluster.groups for n in range(g.nodes)]
    items = model.num_layers
    heads = model.config.num_heads
    experts = model.config.num_experts
    best, best_plan, count = float("inf"), None, 0
    for b, v, schedule in ((b, v, s) for b, v in product(micro_batches, virtual_stages)
                           for s in (one_chunk if v == 1 else ("interleaved",))):
        if base.global_batch % b:
            continue
        m_total = base.global_batch // b
        training = Training(base.global_batch, base.seq_len, base.dtype, b, schedule,
                            v, base.attention, runtime, base.optimizer)
        split = get_schedule(schedule).split_backward
        for stages in range(2 if split else 1, min(len(nodes), items) + 1):
            for labels in node_assignments(len(nodes), stages):
                members = [[nodes[i] for i, lab in enumerate(labels) if lab == k] for k in range(stages)]
                options = []
                for mem in members:
                    gpn = {g.gpus_per_node for g, _ in mem}
                    gpus = sum(g.gpus_per_node for g, _ in mem)
                    tps = [(tp, cp) for tp in tp_degrees for cp in cp_degrees
                           if all(x % (tp * cp) == 0 for x in gpn) and heads % tp == 0
                           and base.seq_len % (2 * cp) == 0]
                    one_type = len({g.name for g, _ in mem}) == 1
                    # the search's EP degree: the largest inside one node (SolverOptions.ep_inside_node),
                    # carved from the cp x dp ranks of expert TP = tp (StageDims.expert_problem), the
                    # replicas taking equal shares
                    def ep_fits(tp, cp, ep, gpus=gpus, one_type=one_type, gpn=gpn):
                        return (v == 1 and one_type and experts % ep == 0 and tp * ep <= min(gpn)
                                and (gpus // tp) % ep == 0 and m_total % (gpus // (tp * cp)) == 0)
                    largest = {(tp, cp): max([1] + [e for e in ep_degrees if ep_fits(tp, cp, e)]) for tp, cp in tps}
                    options.append([(tp, cp, rc, zero, ep, off) for tp, cp in tps for rc in recompute_modes
                                    for zero in (zero_stages if gpus // (tp * cp) > 1 else (0,))
                                    for ep in ep_degrees
                                    if ep == 1 or ep == largest[(tp, cp)]
                                    for off in ((False, True) if offload else (False,))])
                for choice in product(*options):
                    replica_ranks = []
                    for mem, (tp, cp, *_) in zip(members, choice):
                        ranks = []
                        for g, n in mem:
                            for slot in range(g.gpus_per_node // (tp * cp)):
                                base_rank = g.first_rank + n * g.gpus_per_node + slot * tp * cp
                                ranks.append(tuple(range(base_rank, base_rank + tp * cp)))
                        replica_ranks.append(ranks)
                    if any(len(r) > m_total for r in replica_ranks):
                        continue
                    for bounds, prank in layer_splits(items, stages, v):
                        # replicas of one node group in one stage cost the same wherever they
                        # sit, so only share vectors non-increasing within each group are priced
                        share_options = [[sh for sh in compositions(m_total, len(r))
                                          if all(sh[i] >= sh[i + 1] for i in range(len(r) - 1)
                                                 if cluster.group_of_rank(r[i][0]).name
                                                 == cluster.group_of_rank(r[i + 1][0]).name)
                                          and (c[4] == 1 or len(set(sh)) == 1)
                                          and (not split or min(sh) >= stages)]
                                         for r, c in zip(replica_ranks, choice)]
                        # recompute "block": every count of recomputed decoder blocks (1F1B only,
                        # as the search)
                        block_counts = [range(sum(1 for layer in model.layers[first:end] if layer.kind == "decoder")
                                              + 1) if choice[prank[index]][2] == "block" else (0,)
                                        for index, (first, end) in enumerate(bounds)]
                        if (v > 1 or split) and any(choice[prank[i]][2] == "block" for i in range(len(bounds))):
                            continue
                        for shares, recomputed in product(product(*share_options), product(*block_counts)):
                            plan_stages = []
                            for index, (first, end) in enumerate(bounds):
                                k = prank[index]
                                (tp, cp, rc, zero, ep, off), ranks, sh = choice[k], replica_ranks[k], shares[k]
                                replicas = tuple(Replica(d, n * b, rk) for d, (n, rk) in enumerate(zip(sh, ranks)))
                                plan_stages.append(Stage(index, (first, end), tp, zero, rc, replicas, k,
                                                         sp and tp > 1, cp, "ring", ep=ep,
                                                         recompute_layers=recomputed[index], offload=off))
                            plan = Plan(model, cluster, training, tuple(plan_stages))
                            if violations(plan, runtime):
                                continue
                            est = evaluate(plan)
                            count += 1
                            if est.fits and est.step_time_s < best:
                                best, best_plan = est.step_time_s, plan
    return best, best_plan, count


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


def solve_with_and_without_skips(monkeypatch, bound: type, model: Model, cluster: Cluster, base: Training,
                                 options) -> tuple:
    """driver.solve as it is, then with the skip test of `bound` (RestrictionBound, AnyRuntimeBound:
    the bounds planner.search.orchestration.lanes skips searches by) never skipping: (pruned
    result, full result, whether it skipped a search)."""
    import planner.search.orchestration.driver as driver

    skipped = []
    real = bound.cannot_beat

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        skipped.append(out)
        return out
    monkeypatch.setattr(bound, "cannot_beat", counted)
    pruned = driver.solve(model, cluster, base, options)
    monkeypatch.setattr(bound, "cannot_beat", lambda *args, **kwargs: False)
    return pruned, driver.solve(model, cluster, base, options), any(skipped)
