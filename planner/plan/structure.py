"""A plan's invariants (structural_problems): every rank used once, layers covered once in
order, batch shares summing to the global batch, parallel degrees that divide."""

from __future__ import annotations

from .. import schedules
from . import tp_shares
from .types import Plan, SCHEDULES, Stage, context_parallel_problem


def _expert_problems(plan: Plan, stage: Stage, path: str) -> list[tuple[str, str]]:
    """Expert parallelism: its degrees fit the model and the stage (StageDims.expert_problem),
    and the replicas of one EP group take equal batch shares (their all-to-alls run in lock-step)."""
    if stage.ep == 1 and not stage.etp:
        return []
    c = plan.model.config
    problem = stage.dims.expert_problem(c.num_experts if c is not None else 1)
    if problem:
        return [(f"{path}.ep", problem)]
    dims = stage.dims
    size = dims.group_gpus  # a replica: cp groups of tp ranks
    if len({len(r.ranks) for r in stage.replicas}) != 1 or len(stage.replicas[0].ranks) != size:
        return []  # reported with the ranks
    replicas = sorted(stage.replicas, key=lambda r: r.dp_rank)
    for j in range(len(replicas)):
        shares = {replicas[q // size].batch_share for q in dims.ep_group(j * size)}
        if len(shares) > 1:
            return [(f"{path}.replicas", f"the replicas of one expert-parallel group (ep={stage.ep}) take "
                                         f"different batch shares {sorted(shares)}; their all-to-alls run in lock-step")]
    return []


def _mixed_tp_problems(stage: Stage, path: str) -> list[tuple[str, str]]:
    """Per-replica TP: each replica is its own model-parallel group, so no dimension may span
    replicas' TP ranks (context parallelism's ring, the expert grid's folding over tp x dp)."""
    if not stage.mixed_tp:
        return []
    if stage.cp > 1:
        return [(f"{path}.cp", f"replicas of different TP degrees ({stage.tp_label()}) need cp 1")]
    if stage.ep > 1 or stage.etp:
        return [(f"{path}.ep", f"replicas of different TP degrees ({stage.tp_label()}) need ep 1")]
    return []


def structural_problems(plan: Plan) -> list[tuple[str, str]]:
    """Every invariant a plan must hold, except memory (the cost model checks that).

    Returns (json_path, message) pairs; empty when the plan is valid.
    """
    problems: list[tuple[str, str]] = []
    t = plan.training
    expected_first = 0
    seen_by_prank: dict[int, set[int]] = {}
    first_stage: dict[int, int] = {}  # pipeline rank -> its first stage
    owner: dict[int, int] = {}
    for i, s in enumerate(plan.stages):
        path = f"stages[{i}]"
        first, end = s.layers
        if first != expected_first:
            problems.append((f"{path}.layers", f"starts at layer {first}, expected {expected_first}"))
        if end <= first:
            problems.append((f"{path}.layers", f"empty or reversed range [{first}, {end})"))
        expected_first = end
        if s.index != i:
            problems.append((f"{path}.index", f"is {s.index}, expected {i} (stages in layer order)"))
        replica_problems, total, ranks_here = _replica_problems(plan, s, path)
        problems += replica_problems
        cp_problem = context_parallel_problem(plan.model, t, s.tp, s.cp, s.cp_kind)
        if cp_problem:
            problems.append((f"{path}.cp", cp_problem))
        if total != t.global_batch:
            problems.append((f"{path}.replicas", f"batch shares sum to {total}, not the global batch {t.global_batch}"))
        problems += _expert_problems(plan, s, path)
        problems += _mixed_tp_problems(s, path)
        problems += tp_shares.structural_problems(s, path)
        problems += _pipeline_rank_problems(plan, i, s, ranks_here, seen_by_prank, first_stage, owner)
    if expected_first != plan.model.num_layers:
        problems.append(("stages", f"layers end at {expected_first}, the model has {plan.model.num_layers}"))
    marked = plan.model.config.bf16_layers if plan.model.config is not None else (0, 0)
    if marked != t.bf16_layers:  # (inputs.model.with_bf16_layers marks them where a plan is made or read)
        problems.append(("training.bf16_layers", f"is {list(t.bf16_layers)}, the plan's model keeps {list(marked)} "
                                                 "decoder layers in bf16"))
    pranks = sorted(seen_by_prank)
    if pranks != list(range(len(pranks))):
        problems.append(("stages", f"pipeline ranks {pranks} are not 0..{len(pranks) - 1}"))
    return problems + _schedule_problems(plan, pranks)


def _replica_problems(plan: Plan, stage: Stage, path: str) -> tuple[list[tuple[str, str]], int, set[int]]:
    """A stage's replicas: their dp ranks, rank counts, batch shares and ranks; also the shares'
    total and the set of ranks the stage uses."""
    problems: list[tuple[str, str]] = []
    t = plan.training
    n_gpus = plan.cluster.num_gpus
    total = 0
    ranks_here: set[int] = set()
    dp_ranks: set[int] = set()
    for j, r in enumerate(stage.replicas):
        rpath = f"{path}.replicas[{j}]"
        if r.dp_rank in dp_ranks:
            problems.append((f"{rpath}.dp_rank", f"dp_rank {r.dp_rank} appears twice in one stage"))
        elif r.dp_rank >= stage.dp:
            problems.append((f"{rpath}.dp_rank", f"is {r.dp_rank}, outside 0..{stage.dp - 1} "
                                                 f"(the stage has {stage.dp} replicas)"))
        dp_ranks.add(r.dp_rank)
        tp = stage.replica_tp(r)
        if len(r.ranks) != tp * stage.cp:
            problems.append((f"{rpath}.ranks", f"has {len(r.ranks)} ranks but tp={tp}" if stage.cp == 1 else
                             f"has {len(r.ranks)} ranks but tp x cp = {tp}x{stage.cp} = {tp * stage.cp}"))
        if r.batch_share % t.micro_batch:
            problems.append((f"{rpath}.batch_share",
                             f"{r.batch_share} is not a whole number of micro-batches of {t.micro_batch}"))
        total += r.batch_share
        for rank in r.ranks:
            if not 0 <= rank < n_gpus:
                problems.append((f"{rpath}.ranks", f"rank {rank} is outside 0..{n_gpus - 1}"))
            if rank in ranks_here:
                problems.append((f"{rpath}.ranks", f"rank {rank} used twice in one stage"))
            ranks_here.add(rank)
    return problems, total, ranks_here


def _pipeline_rank_problems(plan: Plan, index: int, stage: Stage, ranks_here: set[int],
                            seen_by_prank: dict[int, set[int]], first_stage: dict[int, int],
                            owner: dict[int, int]) -> list[tuple[str, str]]:
    """Stage `index`'s pipeline rank and devices against the stages before it; records them in
    seen_by_prank, first_stage and owner."""
    problems: list[tuple[str, str]] = []
    path = f"stages[{index}]"
    t = plan.training
    # without interleaving, stage i is pipeline rank i (trainers place stages by position)
    if t.virtual_stages == 1 and stage.pipeline_rank in seen_by_prank:
        problems.append((f"{path}.pipeline_rank", f"pipeline rank {stage.pipeline_rank} already runs stage "
                                                  f"{first_stage[stage.pipeline_rank]}; stages share a pipeline "
                                                  "rank only when interleaved (virtual_stages > 1)"))
        return problems
    if t.virtual_stages == 1 and stage.pipeline_rank != index:
        problems.append((f"{path}.pipeline_rank", f"is {stage.pipeline_rank}, expected {index}: without "
                                                  "interleaving, stage i runs on pipeline rank i"))
    # stages of one pipeline rank (virtual stages) share devices; different ranks may not
    if stage.pipeline_rank in seen_by_prank:
        if seen_by_prank[stage.pipeline_rank] != ranks_here:
            problems.append((f"{path}.replicas", "virtual stages of one pipeline rank must use the same devices"))
        elif (stage.tp_heads, stage.tp_ffn) != (plan.stages[first_stage[stage.pipeline_rank]].tp_heads,
                                                plan.stages[first_stage[stage.pipeline_rank]].tp_ffn):
            problems.append((f"{path}.tp_shares", "virtual stages of one pipeline rank must split TP alike"))
        elif _replica_tps(stage) != _replica_tps(plan.stages[first_stage[stage.pipeline_rank]]):
            problems.append((f"{path}.replicas", "virtual stages of one pipeline rank must give each replica "
                                                 "the same TP degree"))
    else:
        seen_by_prank[stage.pipeline_rank] = ranks_here
        first_stage[stage.pipeline_rank] = index
        for rank in ranks_here:
            if rank in owner:
                problems.append((f"{path}.replicas",
                                 f"rank {rank} is already used by pipeline rank {owner[rank]}"))
            owner[rank] = stage.pipeline_rank
    return problems


def _replica_tps(stage: Stage) -> list[tuple[tuple[int, ...], int]]:
    """Each replica's ranks with its TP degree, in rank order."""
    return sorted((r.ranks, stage.replica_tp(r)) for r in stage.replicas)


def _schedule_problems(plan: Plan, pranks: list[int]) -> list[tuple[str, str]]:
    """The stage count, placement and micro-batches the plan's schedule needs."""
    problems: list[tuple[str, str]] = []
    t = plan.training
    v = t.virtual_stages
    if v > 1 and len(plan.stages) != len(pranks) * v:
        problems.append(("stages", f"{len(plan.stages)} stages, expected pp x v = {len(pranks)} x {v}"))
    schedule = SCHEDULES.get(t.schedule)
    chunk_rank = schedule.chunk_rank if schedule is not None else (lambda c, pp, v: c % pp)
    if v > 1 and any(s.pipeline_rank != chunk_rank(s.index, len(pranks), v) for s in plan.stages):
        problems.append(("stages", f"the {t.schedule} schedule's stages must follow its placement over the "
                                   "pipeline ranks (interleaved: cycle in order; zbv: down, then back up)"))
    if schedule is None:  # an unknown name: reported where the schedule name is checked
        return problems
    if pranks and schedule.fewest_microbatches(len(pranks), v) > 1:
        fewest = min(r.batch_share // t.micro_batch for s in plan.stages for r in s.replicas)
        needed = schedule.fewest_microbatches(len(pranks), v)  # (Schedule.fewest_microbatches)
        if fewest < needed:
            what = f"pp = {needed}" if needed == len(pranks) else f"{needed} (its stages)"
            problems.append(("training.schedule", f"{t.schedule} needs at least {what} micro-batches "
                             f"on every replica; one has {fewest}"))
    if v > 1 and not schedule.accepts_virtual_stages(v):
        problems.append(("training.virtual_stages", f"{v} virtual stages need the {schedules.search_schedule(v).name} "
                         "schedule"))
    if schedule.overlaps_ep_comm and not schedule.accepts_layout(len(pranks), v):
        # its pricing hides the all-to-all by pairing one micro-batch's forward with another's backward
        # in the layout it runs (CostParams.moe_a2a_overlap)
        problems.append(("training.schedule", f"{t.schedule} needs {schedule.layout_rule()} (the plan has "
                         f"{len(pranks)} and {v})"))
    if schedule.needs_ep and not any(s.ep > 1 for s in plan.stages):
        problems.append(("training.schedule", f"{t.schedule} runs only with expert parallelism (every stage has ep 1)"))
    mtp = plan.model.config.mtp_layers if plan.model.config is not None else 0
    return problems + schedule.refusals({s.recompute for s in plan.stages}, t.dtype, mtp, len(pranks))


def rank_ranges(ranks: list[int]) -> str:
    """Sorted ranks as ranges for people: [0, 1, 2, 3, 8, 9] -> '0-3,8-9'."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(f"{start}-{r}" if r != start else str(start))
            start = None
    return ",".join(parts)
