"""`planner replan PLAN --lose ... --gain ...`: a plan for the cluster after nodes are lost or gained,
what it costs to move there, and the plans kept ready for losses (`plan --spares K`, templates).

Candidates, each priced on the changed cluster:
- kept: the old plan on the nodes that survive (the replicas on lost nodes dropped; under a runtime
  with one data-parallel degree for every stage, every stage keeps as many replicas as the one that
  lost most; the global batch shared evenly again); no weights move but the optimizer shards that
  grow as data parallelism shrinks;
- template: the plan prepared for this very change (`plan --spares K`), when one matches;
- scratch: the fastest plan of the changed cluster (the usual search), unless a template stands in;
- alternatives: after a search, the next configurations by step time (planner.api.ranked), each the
  fastest plan of its configuration, while its step alone could still score less than the best
  candidate (a search for plans under that step: SolverOptions.upper_bound_s), at most
  MAX_ALTERNATIVES.
Each is scored by its step over the horizon plus its move: H x step + move, H the steps until the
next expected interruption of the changed cluster (planner.cost.reliability) unless `--horizon-steps`
says otherwise; `--max-move-gb` drops a candidate that moves more. Ties: kept, template, scratch,
then the alternatives by step.

The move (planner.cost.move): the weights and optimizer states each GPU lacks, from the nearest GPU
that holds them (its node, another node) or the checkpoint. A template's or a new search's nodes are
first relabelled within each group to move the least (planner.search.relabel: alike nodes, the same
step).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from ..core.errors import BadInput, NoFeasiblePlan
from ..cost.move import Move, move_of
from ..inputs.hardware import Cluster, cluster_from_spec
from ..plan import Plan, Replica, structural_problems
from ..search.relabel import relabeled
from .requests import PlanRequest

TEMPLATES_FORMAT = "planner.templates/v1"
DEFAULT_GPUS_PER_NODE = 8  # a gained group of a new GPU type: DGX-class nodes
MAX_ALTERNATIVES = 16  # configurations past the fastest that a replan weighs at most


@dataclass(frozen=True)
class Change:
    """Nodes lost (group -> old node indices) and gained (group -> (count, GPU or None))."""

    lost: Mapping[str, tuple[int, ...]]
    gained: Mapping[str, tuple[int, str | None]]


def parse_change(cluster: Cluster, lose: tuple[str, ...], gain: tuple[str, ...]) -> Change:
    """`--lose GROUP:COUNT` (its last nodes) or `GROUP/NODE[,NODE...]` (those), `--gain GROUP:COUNT[:GPU]`."""
    lost: dict[str, set[int]] = {}
    for text in lose:
        match = re.fullmatch(r"([^:/]+)(?::(\d+)|/(\d+(?:,\d+)*))", text)
        if not match:
            raise BadInput(f"expected GROUP:COUNT or GROUP/NODE[,NODE...], got {text!r}", "--lose")
        name = match.group(1)
        group = _group(cluster, name, "--lose")
        if match.group(2) is not None:
            count = int(match.group(2))
            if not 1 <= count <= group.nodes:
                raise BadInput(f"group {name!r} has {group.nodes} nodes, cannot lose {count}", "--lose")
            taken = lost.setdefault(name, set())
            survivors = [n for n in range(group.nodes) if n not in taken]
            taken.update(survivors[len(survivors) - count:])
        else:
            for node in map(int, match.group(3).split(",")):
                if node >= group.nodes:
                    raise BadInput(f"group {name!r} has nodes 0-{group.nodes - 1}, not {node}", "--lose")
                lost.setdefault(name, set()).add(node)
    gained: dict[str, tuple[int, str | None]] = {}
    for text in gain:
        match = re.fullmatch(r"([^:/]+):(\d+)(?::(.+))?", text)
        if not match or int(match.group(2)) < 1:
            raise BadInput(f"expected GROUP:COUNT[:GPU] with a count of at least 1, got {text!r}", "--gain")
        name, count, gpu = match.group(1), int(match.group(2)), match.group(3)
        existing = _file_groups(cluster).get(name)
        if existing is None and gpu is None:
            raise BadInput(f"no node group {name!r}: name its GPU (GROUP:COUNT:GPU) to add one", "--gain")
        held = sorted({g.gpu.name for g in cluster.groups if g.machine_name == name})
        if existing is not None and gpu is not None and gpu.lower() not in {h.lower() for h in held}:
            raise BadInput(f"group {name!r} holds {', '.join(held)}, not {gpu}", "--gain")
        gained[name] = (gained.get(name, (0, None))[0] + count, gpu if existing is None else None)
    if not lost and not gained:
        raise BadInput("nothing changes: give --lose or --gain", "--lose")
    return Change({k: tuple(sorted(v)) for k, v in lost.items()}, gained)


def _file_groups(cluster: Cluster) -> dict:
    """The cluster file's node groups by name, each as its first NodeGroup: a node group of two GPU
    types is one NodeGroup per type on the same nodes (NodeGroup.machine), lost and gained whole."""
    out: dict = {}
    for g in cluster.groups:
        out.setdefault(g.machine_name, g)
    return out


def _group(cluster: Cluster, name: str, flag: str):
    groups = _file_groups(cluster)
    group = groups.get(name)
    if group is None:
        raise BadInput(f"no node group {name!r} (groups: {', '.join(groups)})", flag)
    return group


def changed_cluster(cluster: Cluster, change: Change) -> tuple[Cluster, dict[tuple[str, int], tuple[str, int]]]:
    """The cluster after `change` (groups left without nodes dropped, with their links) and where each
    surviving node of the old one sits in it: (group, old node) -> (group, new node)."""
    spec = dict(cluster.spec)
    groups, survivors = [], {}
    for raw, (name, group) in zip(spec["node_groups"], _file_groups(cluster).items()):
        lost = set(change.lost.get(name, ()))
        kept = [n for n in range(group.nodes) if n not in lost]
        for part in (g for g in cluster.groups if g.machine_name == name):
            for new, old in enumerate(kept):
                survivors[(part.name, old)] = (part.name, new)
        nodes = len(kept) + change.gained.get(name, (0, None))[0]
        if nodes:
            groups.append({**raw, "nodes": nodes})
    for name, (count, gpu) in change.gained.items():
        if gpu is not None:
            groups.append({"name": name, "gpu": gpu, "nodes": count, "gpus_per_node": DEFAULT_GPUS_PER_NODE})
    if not groups:
        raise BadInput("the change leaves no node", "--lose")
    names = {g["name"] for g in groups}
    spec["node_groups"] = groups
    if "links" in spec:
        spec["links"] = [e for e in spec["links"] if set(e.get("between", ())) <= names]
    if isinstance(spec.get("topology"), dict):
        topology = dict(spec["topology"])
        switches = set(topology.get("switches", ()))
        links = [e for e in topology.get("links", ()) if set(e.get("between", ())) <= names | switches]
        used = {x for e in links for x in e.get("between", ())}
        topology["switches"] = [s for s in topology.get("switches", ()) if s in used]
        topology["links"] = links
        spec["topology"] = topology
    return cluster_from_spec(spec, f"{cluster.name} after the change"), survivors


# --- the kept plan ---------------------------------------------------------------------------------


def kept_plan(old: Plan, new_cluster: Cluster, survivors: Mapping[tuple[str, int], tuple[str, int]]) -> Plan | None:
    """The old plan on the surviving nodes (module docstring), None where a stage loses every replica,
    the batch does not split as the runtime needs, or the runtime cannot run the result. A runtime of
    uneven shares (Capability.uneven_shares) gets each pipeline rank's shares rebalanced over its
    surviving replicas (rebalanced), else the batch splits evenly."""
    from ..cost.runtimes.capability import capability, violations

    def new_rank(rank: int) -> int | None:
        device = old.cluster.device(rank)
        moved = survivors.get((device.group, device.node))
        if moved is None:
            return None
        group = new_cluster.group(moved[0])
        return group.rank_of(moved[1], device.local_rank)

    kept: list[list[Replica]] = []
    for st in old.stages:
        replicas = []
        for rep in st.replicas:
            ranks = tuple(new_rank(r) for r in rep.ranks)
            if None not in ranks:
                replicas.append(replace(rep, ranks=ranks))
        if not replicas:
            return None
        kept.append(replicas)
    if capability(old.training.runtime).per_stage_dp is False:
        dp = min(len(r) for r in kept)
        kept = [r[:dp] for r in kept]
    t = old.training
    uneven = capability(t.runtime).uneven_shares
    stages = []
    for st, replicas in zip(old.stages, kept):
        dp = len(replicas)
        microbatches = t.global_batch // t.micro_batch
        if (not uneven and t.global_batch % (dp * t.micro_batch)) or microbatches < dp:
            return None
        # even where it divides; else (uneven runtimes) the first replicas take one micro-batch more
        shares = [(microbatches // dp + (i < microbatches % dp)) * t.micro_batch for i in range(dp)]
        stages.append(replace(st, replicas=tuple(replace(r, dp_rank=i, batch_share=share)
                                                 for i, (r, share) in enumerate(zip(replicas, shares)))))
    plan = Plan(old.model, new_cluster, t, tuple(stages))
    if structural_problems(plan) or violations(plan, t.runtime):
        return None
    return rebalanced(plan) if uneven else plan


def rebalanced(plan: Plan) -> Plan:
    """`plan` with each pipeline rank's batch shares those of least busy time over its replicas' times per
    micro-batch (planner.search.pricing.shares.solve_shares_ilp, as the search splits a stage), where the
    result is valid and fits in memory; else `plan`. A pipeline rank's chunks keep one split; an interleaved
    plan keeps its split (its stages split the batch alike: planner.runner.layout)."""
    from ..cost.evaluate import evaluate
    from ..cost.replica_pricer import PlanPricer
    from ..search.pricing.shares import solve_shares_ilp

    t = plan.training
    if t.virtual_stages > 1:
        return plan
    pricer = PlanPricer(plan)
    microbatches = t.global_batch // t.micro_batch
    split: dict[int, list[int]] = {}
    for st in plan.stages:
        if st.pipeline_rank in split or st.dp == 1:
            continue
        chunks = [c for c in plan.stages if c.pipeline_rank == st.pipeline_rank]
        times = [pricer.replica(chunks, rep).per_microbatch_s for rep in st.replicas]
        split[st.pipeline_rank] = [m * t.micro_batch for m in
                                   solve_shares_ilp(microbatches, times, [microbatches] * len(times)).shares]
    stages = tuple(replace(st, replicas=tuple(replace(r, batch_share=share)
                                              for r, share in zip(st.replicas, split[st.pipeline_rank])))
                   if st.pipeline_rank in split else st for st in plan.stages)
    balanced = replace(plan, stages=stages)
    if structural_problems(balanced):
        return plan
    found = evaluate(balanced)
    return balanced if found.fits and found.step_time_s < evaluate(plan).step_time_s else plan


# --- templates --------------------------------------------------------------------------------------


def templates_path(plan_file: str) -> str:
    """Where `plan --spares K -o PLAN` writes its templates: PLAN's name with .templates.json."""
    root, _ = os.path.splitext(plan_file)
    return root + ".templates.json"


def template_changes(cluster: Cluster, spares: int) -> list[Change]:
    """The losses `plan --spares K` prepares for: 1..K of the last nodes of each group, as long as a
    node is left in the cluster."""
    groups = _file_groups(cluster)
    total = sum(g.nodes for g in groups.values())
    return [Change({name: tuple(range(g.nodes - k, g.nodes))}, {}) for name, g in groups.items()
            for k in range(1, min(spares, g.nodes) + 1) if total - k > 0]


def shape_key(cluster: Cluster) -> tuple:
    """What a template is matched by: each group's name, GPU, nodes and GPUs per node."""
    return tuple((g.name, g.gpu.name, g.nodes, g.gpus_per_node) for g in cluster.groups)


def request_of(plan: Plan, base: PlanRequest, cluster: Cluster) -> PlanRequest:
    """The plan request that plans `plan`'s training on `cluster` (base: the search options)."""
    t = plan.training
    return replace(base, model=plan.model, cluster=cluster, global_batch=t.global_batch, seq_len=t.seq_len,
                   dtype=t.dtype, runtime=t.runtime, optimizer=t.optimizer, attention=t.attention,
                   fp8_recipe=t.fp8_recipe, compile=t.compile, tf32=t.tf32_matmul,
                   moe_dispatcher=t.moe_dispatcher if plan.model.config is not None
                   and plan.model.config.num_experts > 1 else None, fp8_all_gather=t.fp8_all_gather,
                   bf16_layers=t.bf16_layers if t.bf16_layers != (0, 0) else None,
                   top=1, compare_any=False, power_caps=False)


def make_templates(plan: Plan, base: PlanRequest, spares: int, time_limit_s: float | None) -> dict:
    """The templates file of `plan` for up to `spares` lost nodes of each group, every search within
    `time_limit_s` together: each loss's plan from scratch, or why it has none."""
    from . import plan as search_plan, plan_json

    started = time.perf_counter()
    entries = []
    for change in template_changes(plan.cluster, spares):
        left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - started)
        lost = {name: len(nodes) for name, nodes in change.lost.items()}
        if left is not None and left <= 0:
            entries.append({"lose": lost, "reason": "not planned: the time limit was reached"})
            continue
        cluster, _ = changed_cluster(plan.cluster, change)
        try:
            found = search_plan(replace(request_of(plan, base, cluster), time_limit_s=left))
        except NoFeasiblePlan as exc:
            entries.append({"lose": lost, "reason": exc.message})
            continue
        entries.append({"lose": lost, "plan": plan_json(found)})
    return {"format": TEMPLATES_FORMAT, "model": plan.model.name, "cluster": plan.cluster.name, "spares": spares,
            "templates": entries}


def matching_template(templates: Mapping[str, Any] | None, cluster: Cluster, where: str) -> Plan | None:
    """The template plan made for a cluster of `cluster`'s shape, None when none matches."""
    from ..verify.plan_checks import check_plan_data

    if not templates:
        return None
    if templates.get("format") != TEMPLATES_FORMAT:
        raise BadInput(f"not a templates file (format must be {TEMPLATES_FORMAT!r})", where, "format")
    for i, entry in enumerate(templates.get("templates", ())):
        data = entry.get("plan") if isinstance(entry, dict) else None
        if data is None:
            continue
        plan, problems = check_plan_data(data, f"{where}: templates[{i}].plan")
        if problems or plan is None:
            continue
        if shape_key(plan.cluster) == shape_key(cluster):
            return replace(plan, cluster=cluster)
    return None


# --- replan -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    name: str  # kept, template, scratch
    plan: Plan
    estimate: Any
    move: Move
    result: Any = None  # the search's SearchResult (scratch)

    def score_s(self, horizon_steps: float) -> float:
        """The candidate's horizon: its steps over it and its move."""
        return horizon_steps * self.estimate.step_time_s + self.move.seconds

    def to_json(self, horizon_steps: float) -> dict:
        from .ranked import configuration_text

        return {"name": self.name, "configuration": configuration_text(self.plan),
                "step_time_s": self.estimate.step_time_s, "move": self.move.to_json(),
                "score_s": self.score_s(horizon_steps)}


@dataclass(frozen=True)
class Replanned:
    old: Plan
    cluster: Cluster
    candidates: tuple[Candidate, ...]
    chosen: Candidate
    horizon_steps: float
    dropped: tuple[str, ...]  # candidates left out, with why
    seconds: float
    old_step_s: float  # the old plan's step on the old cluster
    alternatives_weighed: int = 0  # configurations past the fastest priced with their move

    def to_json(self) -> dict:
        """`solver.replan` of the new plan file."""
        scratch = next((c for c in self.candidates if c.name in ("scratch", "template")), None)
        return {"chosen": self.chosen.name, "horizon_steps": self.horizon_steps, "seconds": self.seconds,
                "old_step_time_s": self.old_step_s, "nodes": {g.name: g.nodes for g in self.cluster.groups},
                "from_scratch_step_time_s": None if scratch is None else scratch.estimate.step_time_s,
                "candidates": [c.to_json(self.horizon_steps) for c in self.candidates],
                "alternatives_weighed": self.alternatives_weighed,
                "left_out": list(self.dropped)}


def replan(old: Plan, change: Change, base: PlanRequest, templates: Mapping[str, Any] | None = None,
           horizon_steps: float | None = None, max_move_gb: float | None = None, where: str = "--templates",
           clock=time.perf_counter, search: Callable[[Cluster], Any] | None = None,
           rank: Callable[..., None] | None = None, price: Callable[[Plan], Any] | None = None) -> Replanned:
    """The plan after `change` (module docstring); NoFeasiblePlan where no candidate fits. `search`
    (the fastest plan of a cluster, a SearchResult), `rank(cluster, first, limit, accept)` (the
    configurations after `first` by step, each faster than `limit()` seconds, offered to `accept`
    until it returns False) and `price` (a plan's Estimate) default to `plan`, rank_configurations
    and `evaluate` as the CLI runs them on `base`'s options."""
    from . import plan as search_plan, reprice_plan
    from ..cost.energy import rented_nodes
    from ..cost.reliability import reliability

    search = search or (lambda cluster: search_plan(request_of(old, base, cluster)))
    rank = rank or (lambda cluster, first, limit, accept: rank_configurations(
        request_of(old, base, cluster), first, limit, accept))
    price = price or reprice_plan
    started = clock()
    cluster, survivors = changed_cluster(old.cluster, change)
    candidates, dropped = [], []
    kept = kept_plan(old, cluster, survivors)
    if kept is None:
        dropped.append("kept: a stage lost every replica, or the batch no longer splits evenly")
    else:
        estimate = price(kept)
        if estimate.fits:
            candidates.append(Candidate("kept", kept, estimate, move_of(old, kept, survivors)))
        else:
            dropped.append("kept: does not fit in memory on the nodes left")
    template, scratch = matching_template(templates, cluster, where), None
    if template is not None:
        template = relabeled(old, template, survivors)
        candidates.append(Candidate("template", template, price(template), move_of(old, template, survivors)))
    else:
        try:
            scratch = search(cluster)
            candidates.append(_relabeled_candidate("scratch", old, scratch, survivors, price))
        except NoFeasiblePlan as exc:
            dropped.append(f"scratch: {exc.message}")
    if not candidates:
        raise NoFeasiblePlan("no plan for the changed cluster: " + "; ".join(dropped))
    if horizon_steps is None:  # the steps until the changed cluster's next expected interruption
        fastest = min(candidates, key=lambda c: c.estimate.step_time_s)
        failures = reliability(fastest.plan, fastest.estimate, rented_nodes(fastest.plan))
        horizon_steps = failures.mtbf_s / fastest.estimate.step_time_s

    def within(candidate: Candidate) -> bool:
        return max_move_gb is None or candidate.move.total_bytes / 1e9 <= max_move_gb

    dropped += [f"{c.name}: moves {c.move.total_bytes / 1e9:.1f} GB, over --max-move-gb"
                for c in candidates if not within(c)]
    candidates = [c for c in candidates if within(c)]
    weighed = [0]
    if scratch is not None:  # the next configurations, while their step alone could still score less
        best = [min((c.score_s(horizon_steps) for c in candidates), default=float("inf"))]

        def accept(result) -> bool:
            if horizon_steps * result.estimate.step_time_s >= best[0]:
                return False
            candidate = _relabeled_candidate("alternative", old, result, survivors, price)
            weighed[0] += 1
            if within(candidate):
                candidates.append(candidate)
                best[0] = min(best[0], candidate.score_s(horizon_steps))
            return True

        rank(cluster, scratch, lambda: best[0] / horizon_steps, accept)
    if not candidates:
        raise NoFeasiblePlan("no plan for the changed cluster: " + "; ".join(dropped))
    chosen = min(candidates, key=lambda c: c.score_s(horizon_steps))  # ties: the first, kept first
    return Replanned(old, cluster, tuple(candidates), chosen, horizon_steps, tuple(dropped), clock() - started,
                     price(old).step_time_s, weighed[0])


def _relabeled_candidate(name: str, old: Plan, found, survivors, price) -> Candidate:
    """A search's plan as a candidate, its nodes relabelled to move the least (planner.search.relabel)."""
    moved = relabeled(old, found.plan, survivors)
    if moved is not found.plan:
        found = replace(found, plan=moved, estimate=price(moved))
    return Candidate(name, found.plan, found.estimate, move_of(old, found.plan, survivors), found)


def rank_configurations(request: PlanRequest, first, limit: Callable[[], float],
                        accept: Callable[[Any], bool]) -> None:
    """The configurations of `request` after `first` (its fastest plan) by step time, each a search
    for plans faster than `limit()` seconds (SolverOptions.upper_bound_s), offered to `accept`
    (planner.api.ranked); at most MAX_ALTERNATIVES, within the request's time limit."""
    from ..search.orchestration.driver import solve
    from . import search_inputs
    from .ranked import domains, ranked

    model, cluster, training, options = search_inputs(request)
    experts = model.config is not None and model.config.num_experts > 1
    long_sequence = training.seq_len >= options.cp_min_seq_len
    started = time.perf_counter()

    def solve_one(sub, left):
        return solve(model, cluster, training, replace(sub, time_limit_s=left, upper_bound_s=limit()))

    ranked(solve_one, options, first, MAX_ALTERNATIVES + 1,
           lambda o: domains(o, cluster.num_gpus, training.global_batch, experts, long_sequence),
           request.time_limit_s, lambda: time.perf_counter() - started, accept)
