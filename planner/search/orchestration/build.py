"""A search's plan from its traced stage choices: ranks on whole nodes, batch shares by the
integer program (planner.search.pricing.shares.solve_shares_ilp), interleaved chunks cycled over the ranks.
In two steps: draft_plan needs the search's Problem, finish_plan (the ILPs) does not, so a lane
process drafts and its parent finishes (a forked process must not run the solver's threads)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...inputs.hardware import Cluster
from ...inputs.model import Model
from ...plan import Plan, Replica, Stage, Training
from ..dp import StageChoice
from ..pricing.shares import IlpOptions, solve_shares_ilp
from ..pricing.stages import Problem

__all__ = ["PlanDraft", "chunk_sizes", "draft_plan", "finish_plan"]


@dataclass(frozen=True)
class RankDraft:
    """One pipeline rank's replicas (their ranks), each replica's time per micro-batch and its
    memory cap in micro-batches at the rank's block count, as in stage_cost."""
    replica_ranks: tuple[tuple[int, ...], ...]
    times_s: tuple[float, ...]
    caps: tuple[int, ...]
    replica_tps: tuple[int, ...] = ()  # per-replica TP: each replica's own degree where not the stage's (0)


@dataclass(frozen=True)
class PlanDraft:
    """A traced plan without its batch shares, free of the Problem that priced it (a lane process
    sends it to the parent, which solves the share ILPs: planner.search.orchestration.parallel)."""
    training: Training
    microbatches: int
    least_share: int
    even_shares: bool
    ilp: IlpOptions
    ranks: tuple[RankDraft, ...]
    stages: tuple[Stage, ...]  # replicas empty: filled from ranks[stage.pipeline_rank]


def draft_plan(problem: Problem, choices: list[StageChoice]) -> PlanDraft:
    """The traced choices as a PlanDraft: ranks on whole nodes; an interleaved plan cycles V chunks
    over the pipeline ranks, each rank taking the same blocks per chunk."""
    v = problem.virtual_stages
    next_node = [0 for _ in problem.groups]  # stages take each group's nodes in order (planner.search.decompose)
    ranks = []
    recompute_layers = []
    for c in choices:
        flags = (c.has_head, c.has_emb, c.lead)
        position = problem.deferred.position(c.from_end, c.ranks)
        types, k = problem.memory_savers.priced_types(c.cid, flags, position[0])
        recompute_layers.append(0 if k is None else int(k[c.blocks]))
        replicas_ranks: list[tuple[int, ...]] = []
        replica_type: list[int] = []
        replica_tps: list[int] = []
        type_index = 0
        if c.config.tp_split:  # TP groups across the types of mixed nodes: one replica type
            members = [i for i, n in enumerate(c.config.nodes) if n]
            replicas_ranks = problem.stage_configs.across.replica_ranks(c.config, next_node[members[0]])
            replica_type = [0] * len(replicas_ranks)
            replica_tps = [0] * len(replicas_ranks)
            for i in members:
                next_node[i] += c.config.nodes[i]
        for i, nodes in enumerate(() if c.config.tp_split else c.config.nodes):
            if not nodes:
                continue
            group = problem.groups[i]
            # replicas of tp x cp consecutive ranks (cp groups of tp, TP innermost) over the nodes
            # taken, node by node; a CP ring across nodes takes whole nodes (stages._places)
            tp = c.config.group_tp(i)
            size = tp * c.config.cp
            first = group.first_rank + next_node[i] * group.gpus_per_node
            for base in range(first, first + nodes * group.gpus_per_node, size):
                replicas_ranks.append(tuple(range(base, base + size)))
                replica_type.append(type_index)
                replica_tps.append(0 if tp == c.config.tp else tp)
            next_node[i] += nodes
            type_index += 1
        # per-replica time and memory cap at this rank's block count, as in stage_cost
        link = problem.links.boundaries(problem.links.link(c.cid, c.successor), c.receive)
        times = [float(tm[c.blocks]) for tm in problem.replica_times(types, flags, link)]
        caps = [int(cap[c.blocks]) for cap in problem.deferred.share_caps(types, flags, position)]
        ranks.append(RankDraft(tuple(replicas_ranks), tuple(times[t] for t in replica_type),
                               tuple(caps[t] for t in replica_type), tuple(replica_tps) if any(replica_tps) else ()))
    stages = []
    first = 0
    pp = len(choices)
    sizes = [chunk_sizes(problem, c) for c in choices]
    for chunk in range(v):
        for k, c in enumerate(choices):
            # a stage's (interleaved: its first chunk's) lead blocks come before its counted ones
            front = int(c.has_emb) + c.lead if chunk == 0 else 0
            end = first + sizes[k][chunk] + front + int(c.has_head and chunk == v - 1)
            stages.append(Stage(chunk * pp + k, (first, end), c.config.tp, c.config.zero, c.config.recompute,
                                (), k, problem.restriction.sequence_parallel and max(c.config.group_tps or (c.config.tp,)) > 1,
                                c.config.cp, c.config.cp_kind, ep=c.config.ep, recompute_layers=recompute_layers[k],
                                offload=c.config.offload, tp_heads=c.config.tp_split[0] if c.config.tp_split else (),
                                tp_ffn=c.config.tp_split[1] if c.config.tp_split else ()))
            first = end
    return PlanDraft(problem.training, problem.microbatches, problem.inputs.least_share,
                     problem.restriction.even_shares,
                     problem.options.ilp, tuple(ranks), tuple(stages))


def finish_plan(draft: PlanDraft, model: Model, cluster: Cluster) -> Plan:
    """The Plan of a draft: each rank's batch shares, in whole micro-batches, by the ILP (or even)."""
    rank_replicas = []
    b = draft.training.micro_batch
    for rank in draft.ranks:
        if draft.even_shares:
            load = draft.microbatches // len(rank.replica_ranks)  # shares.even_makespan
            assert load * len(rank.replica_ranks) == draft.microbatches and all(cap >= load for cap in rank.caps)
            assert load >= draft.least_share
            shares = [load] * len(rank.replica_ranks)
        else:
            solution = solve_shares_ilp(draft.microbatches, list(rank.times_s), list(rank.caps), draft.ilp,
                                        draft.least_share)
            if not solution.optimal:
                raise RuntimeError("the share ILP did not prove optimality")
            shares = solution.shares
        tps = rank.replica_tps or (0,) * len(rank.replica_ranks)
        rank_replicas.append(tuple(Replica(d, n * b, ranks, tp)
                                   for d, (n, ranks, tp) in enumerate(zip(shares, rank.replica_ranks, tps))))
    stages = tuple(replace(stage, replicas=rank_replicas[stage.pipeline_rank]) for stage in draft.stages)
    return Plan(model, cluster, draft.training, stages)


def chunk_sizes(problem: Problem, choice: StageChoice) -> list[int]:
    """Blocks of each of a rank's V chunks: the embedding's (first) or head's (last) chunk takes
    the count the stage cost chose, the others share the rest as evenly as possible, the
    earlier ones taking the larger parts (interleave.chunk_latency)."""
    v, n = problem.virtual_stages, choice.blocks
    if not problem.chunked:
        return [n]
    split = problem.stage_cost(choice.cid, choice.from_end, choice.has_emb, choice.successor, choice.ranks,
                               choice.receive, choice.lead).split
    special = None if split is None else int(split[n])
    rest, others = (n, v) if special is None else (n - special, v - 1)
    even = [rest // others + (1 if i < rest % others else 0) for i in range(others)]
    if special is None:
        return even
    return even + [special] if choice.has_head else [special] + even
