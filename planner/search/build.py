"""A search's plan from its traced stage choices: ranks on whole nodes, batch shares by the
integer program (planner.search.shares.solve_shares_ilp), interleaved chunks cycled over the ranks."""

from __future__ import annotations

from ..plan import Plan, Replica, Stage
from .dp import StageChoice
from .shares import solve_shares_ilp
from .stages import Problem

__all__ = ["build_plan", "chunk_sizes"]


def build_plan(problem: Problem, choices: list[StageChoice]) -> Plan:
    """The Plan of traced choices: ranks on whole nodes, shares by the ILP; an interleaved
    plan cycles V chunks over the pipeline ranks, each rank taking the same blocks per chunk."""
    cluster, b, v = problem.cluster, problem.b, problem.v
    next_node = [0 for _ in problem.groups]  # stages take each group's nodes in order (planner.search.decompose)
    rank_replicas = []
    recompute_layers = []
    for c in choices:
        flags = (c.has_head, c.has_emb)
        position = problem.position(c.from_end, c.ranks)
        types, k = problem.priced_types(c.cid, flags, position[0])
        recompute_layers.append(0 if k is None else int(k[c.blocks]))
        replicas_ranks: list[tuple[int, ...]] = []
        replica_type: list[int] = []
        type_index = 0
        for i, nodes in enumerate(c.config.nodes):
            if not nodes:
                continue
            group = problem.groups[i]
            # replicas of tp x cp consecutive ranks (cp groups of tp, TP innermost) over the nodes
            # taken, node by node; a CP ring across nodes takes whole nodes (stages._places)
            size = c.config.tp * c.config.cp
            first = group.first_rank + next_node[i] * group.gpus_per_node
            for base in range(first, first + nodes * group.gpus_per_node, size):
                replicas_ranks.append(tuple(range(base, base + size)))
                replica_type.append(type_index)
            next_node[i] += nodes
            type_index += 1
        # per-replica time and memory cap at this rank's block count, as in stage_cost
        times = [float(tm[c.blocks]) for tm in problem.replica_times(types, flags, problem.link(c.cid, c.successor))]
        caps = [int(cap[c.blocks]) for cap in problem.share_caps(types, flags, position)]
        if problem.restriction.even_shares:
            load = problem.microbatches // len(replicas_ranks)  # shares.even_makespan
            assert load * len(replicas_ranks) == problem.microbatches and all(caps[t] >= load for t in replica_type)
            assert load >= problem.inputs.least_share
            shares = [load] * len(replicas_ranks)
        else:
            solution = solve_shares_ilp(problem.microbatches, [times[t] for t in replica_type],
                                        [caps[t] for t in replica_type], problem.options.ilp,
                                        problem.inputs.least_share)
            if not solution.optimal:
                raise RuntimeError("the share ILP did not prove optimality")
            shares = solution.shares
        rank_replicas.append(tuple(Replica(d, n * b, ranks)
                                   for d, (n, ranks) in enumerate(zip(shares, replicas_ranks))))
    stages = []
    first = 0
    pp = len(choices)
    sizes = [chunk_sizes(problem, c) for c in choices]
    for chunk in range(v):
        for k, c in enumerate(choices):
            end = first + sizes[k][chunk] + int(c.has_emb and chunk == 0) + int(c.has_head and chunk == v - 1)
            stages.append(Stage(chunk * pp + k, (first, end), c.config.tp, c.config.zero, c.config.recompute,
                                rank_replicas[k], k, problem.restriction.sequence_parallel and c.config.tp > 1,
                                c.config.cp, c.config.cp_kind, ep=c.config.ep, recompute_layers=recompute_layers[k],
                                offload=c.config.offload))
            first = end
    return Plan(problem.model, cluster, problem.t, tuple(stages))


def chunk_sizes(problem: Problem, choice: StageChoice) -> list[int]:
    """Blocks of each of a rank's V chunks: the embedding's (first) or head's (last) chunk takes
    the count the stage cost chose, the others share the rest as evenly as possible, the
    earlier ones taking the larger parts (interleave.chunk_latency)."""
    v, n = problem.v, choice.blocks
    if not problem.chunked:
        return [n]
    split = problem.stage_cost(choice.cid, choice.from_end, choice.has_emb, choice.successor, choice.ranks).split
    special = None if split is None else int(split[n])
    rest, others = (n, v) if special is None else (n - special, v - 1)
    even = [rest // others + (1 if i < rest % others else 0) for i in range(others)]
    if special is None:
        return even
    return even + [special] if choice.has_head else [special] + even
