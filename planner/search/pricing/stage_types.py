"""The types of the plan search: solver options, a stage configuration, a replica type's cost
arrays over block counts, a stage's cost, a merged cost curve, the share cap (planner.search.pricing.stages
prices them), and the parts of a stages.Problem: its fixed inputs, the catalogue of
configurations met, the price tables derived on demand, and the search's changing state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

import numpy as np

from ...core.clock import SearchClock
from ...cost.formulas import DEFAULT_PARAMS, CostParams
from ..decompose import Decomposition
from ...core.dims import StageDims
from ...inputs.hardware import Cluster, Link, NodeGroup
from ...inputs.model import Layer, Model
from ...plan import Training
from ...cost.pricing import DpLayout
from ...cost.replica_pricer import schedule_cost_params
from ...schedules import Schedule, get_schedule, search_schedule
from .shares import UNCAPPED, IlpOptions

INF = float("inf")


@dataclass(frozen=True)
class SolverOptions:
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    # context-parallel degrees, tried only for sequences of at least cp_min_seq_len tokens
    # (below it attention is a small share of the work and CP only adds communication)
    cp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    cp_min_seq_len: int = 16384
    # "block" (planner.search.pricing.block) after "full": where it recomputes every block it ties full and full is kept
    recompute_modes: tuple[str, ...] = ("none", "selective", "full", "block")
    zero_stages: tuple[int, ...] = (1, 2, 3)  # with dp > 1; ZeRO-0 is dominated by ZeRO-1
    # expert parallelism of an MoE model's stages (StageDims.ep): the degrees that divide its
    # experts and the stage's replicas, on stages of one GPU type whose replicas take equal shares
    ep_degrees: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    # EP groups inside one node only (tp x ep <= GPUs per node): across nodes the all-to-all runs
    # at the NIC's share, which rarely wins, and every degree multiplies the configurations priced
    ep_inside_node: bool = True
    # data-parallel degrees a stage may take and pipeline depths a plan may have (`plan --dp`,
    # `--pp`); empty: any. With per-stage DP (`any`) every stage's degree is one of them
    dp_degrees: tuple[int, ...] = ()
    pp_degrees: tuple[int, ...] = ()
    offload: bool = True  # ZeRO-Offload per stage, where memory binds (MemorySavers.offload_never_needed)
    # activation offload of one-stage uniform plans that do not fit (planner.search.uniform.fewest_offloaded)
    activation_offload: bool = True
    # clusters with at most this many nodes are searched whole (exact); None: by the runtime
    # (exact_node_limit)
    max_exact_nodes: int | None = None
    max_bundle_nodes: int = 4  # larger clusters: at most this many parts (planner.search.decompose)
    # a larger cluster with a time limit: after the search on parts (in half the limit), the whole
    # cluster node by node in the time left, bounded by the plan on parts (planner.search.orchestration.scale)
    whole_after_parts: bool = True
    # ... where the whole search's node vectors, prod(nodes + 1) over the groups, number at most this
    # (None: by the runtime, whole_search_limit); its tables grow with them: 9 + 17 + 33 nodes
    # (5,049 vectors) peak at 0.75 GiB under Megatron-LM, 31 + 47 + 50 (78,336) at 17.6 GiB
    max_whole_vectors: int | None = None
    # a runtime with one DP degree for every stage, on parts of unequal size, also searches the
    # cluster trimmed to identical bundles of at most this many nodes (planner.search.decompose.trim):
    # its searches fix the stages' replicas, so 14 parts take seconds (31+47+49 nodes, llama-3-70b: 2.4 s)
    max_trimmed_bundle_nodes: int = 16
    # the deepest pipeline: Megatron-LM's largest published one (1T parameters on 3,072 GPUs, pp 64;
    # Narayanan et al. 2021, Table 1); a stage takes whole nodes, so a cluster's nodes cap it first
    max_stages: int = 64
    # pipeline chunks per rank: 1 is plain 1F1B, V > 1 the interleaved schedule with V
    # virtual stages per rank (Narayanan et al. 2021, sec 2.2)
    virtual_stages: tuple[int, ...] = (1, 2)
    # ZB-H1 (planner.search.pricing.deferred) where the runtime runs it, P ranks fixed per DP (as interleaved),
    # and uniform ZB-V (uniform_schedules)
    zero_bubble: bool = True
    # ZB-V (with zero_bubble) and looped BFS priced as uniform configurations where the runtime
    # runs them (planner.search.orchestration.space.uniform_schedules)
    uniform_schedules: bool = True
    time_limit_s: float | None = None
    ilp: IlpOptions = field(default_factory=IlpOptions)
    params: CostParams = DEFAULT_PARAMS
    # a stage over several node groups may give each group's replicas its own TP degree (per-replica TP,
    # planner.plan.Replica.tp; Sailor, FlashFlex), where the runtime runs it (Capability.per_replica_tp)
    per_replica_tp: bool = True
    # a stage on mixed nodes may form TP groups across their GPU types with uneven heads and FFN columns
    # (planner.search.pricing.across_types; HAP), where the runtime runs them (Capability.uneven_tp_shares)
    tp_across_types: bool = True
    # ... their splits (planner.plan.tp_shares.type_splits): "ratio", one ratio per GPU for heads and FFN
    # columns alike; "apart", heads and columns each (wider, far more configurations)
    tp_splits: str = "ratio"
    gpu_params: tuple[tuple[str, CostParams], ...] = ()  # per GPU type, e.g. measured times
    # the runtime whose capability bounds the search (planner.cost.runtimes.capability);
    # None: the one the plan is priced for (Training.runtime)
    space: str | None = None
    # a step time some plan of the space is known to reach (e.g. a narrower runtime's optimum):
    # the search looks only for faster plans and raises driver.NothingFaster when there is none
    upper_bound_s: float | None = None
    # processes searching: 1 in this one; 2 runs two searches at a time in two forked processes
    # (planner.search.orchestration.parallel); the plan is the same either way (planner.search.orchestration.lanes)
    jobs: int = 1
    # the search's clock, read for the time limit and the seconds reported (tests inject a fake one)
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False, repr=False)

    def exact_node_limit(self, per_stage_dp: bool) -> int:
        """The most nodes searched whole: `max_exact_nodes`, or by default 8 where stages choose their
        own DP degree (`--runtime any`: llama-3-70b on 64 GPUs of three types is the exact search's
        benchmark row) and 16 where every stage has one (its searches fix the replicas: 3+3+4, 4+4+5
        and 16 one-node groups are proven optimal in 4-11 CPU s, `benchmarks/planning_time.py`)."""
        if self.max_exact_nodes is not None:
            return self.max_exact_nodes
        return 8 if per_stage_dp else 16

    def whole_search_limit(self, per_stage_dp: bool) -> int:
        """The most node vectors a search of the whole cluster after its parts may have
        (max_whole_vectors): by default 8,192, and 1,024 where stages choose their own DP degree
        (`--runtime any`: 8 + 24 nodes, 225 vectors, peak at 0.74 GiB, but its search prices far more
        configurations per vector)."""
        if self.max_whole_vectors is not None:
            return self.max_whole_vectors
        return 1024 if per_stage_dp else 8192

    def most_replicas(self, num_gpus: int, group_gpus: int) -> int:
        """The most data-parallel replicas a stage with a replica of `group_gpus` (tp x cp) GPUs can have on
        `num_gpus`: all of them that size, or with per-replica TP that one beside one GPU each for the rest."""
        alike = max(1, num_gpus // group_gpus)
        return max(alike, num_gpus - group_gpus + 1) if self.per_replica_tp else alike

    def allows_dp(self, dp: int) -> bool:
        return not self.dp_degrees or dp in self.dp_degrees

    def allows_pp(self, pp: int) -> bool:
        return not self.pp_degrees or pp in self.pp_degrees

    def params_for(self, gpu_name: str) -> CostParams:
        return next((p for name, p in self.gpu_params if name == gpu_name), self.params)

    def params_mapping(self) -> dict[str, CostParams]:
        """The form planner.cost.evaluate.evaluate takes: per GPU type, '*' for the rest."""
        return {"*": self.params, **dict(self.gpu_params)}


@dataclass(frozen=True)
class Restriction:
    """What one search fixes for every stage, from the runtime's capability
    (planner.cost.runtimes.capability; planner.search.orchestration.driver enumerates them): None is free."""

    tp: int | None = None
    dp: int | None = None  # data-parallel replicas of every stage
    recompute: str | None = None
    zero: int | None = None  # with dp > 1
    even_shares: bool = False  # every replica takes the same number of micro-batches
    sequence_parallel: bool = True  # with tp > 1
    blocks: int | None = None  # decoder blocks of every stage (an equal layer split)
    max_stages: int | None = None  # None: the options'
    cp: int | None = None  # context-parallel degree of every stage
    ep: int | None = None  # expert-parallel degree of every stage
    offload: bool | None = None  # ZeRO-Offload on every stage (True) or none (False)
    min_stages: int = 1  # e.g. 2: a ZeRO stage the runtime has only with pipelining

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("tp", self.tp), ("dp", self.dp), ("recompute", self.recompute),
                                           ("zero", self.zero), ("blocks", self.blocks),
                                           ("cp", self.cp), ("ep", self.ep), ("offload", self.offload),
                                           ("min_stages", self.min_stages if self.min_stages > 1 else None))
                   if v is not None]
        return ", ".join(parts) or "free"


# --- stage configurations and their cost as a function of the block count ----------------


@dataclass(frozen=True)
class StageConfig:
    nodes: tuple[int, ...]  # nodes of each node group of the cluster
    tp: int
    recompute: str
    zero: int
    cp: int = 1
    cp_kind: str = "ring"
    ep: int = 1  # expert parallelism (StageDims.ep; expert TP as tp)
    offload: bool = False  # ZeRO-Offload (planner.plan.Stage.offload)
    # per-replica TP (planner.plan.Replica.tp): the TP degree of each node group's replicas (0 where the
    # stage has none of its nodes), `tp` being the least of them; (): every replica at `tp`
    group_tps: tuple[int, ...] = ()
    # a TP group across the GPU types of mixed nodes (StageConfigs._across_type_shapes): its (query heads,
    # FFN columns) per TP position, type by type (planner.plan.Stage.tp_heads, tp_ffn); (): none
    tp_split: tuple[tuple[int, ...], tuple[int, ...]] | tuple = ()

    def groups(self) -> frozenset[int]:
        """The node groups of its replicas' first ranks, which send and receive its pipeline messages
        (cost.paths.boundary_link): every group it holds, but the first type's across GPU types."""
        held = [i for i, n in enumerate(self.nodes) if n]
        return frozenset(held[:1] if self.tp_split else held)

    @property
    def family(self) -> tuple:
        """The configurations the search merges as one (Problem.transitions): on its nodes, with TP groups
        within a GPU type or across types."""
        return (self.nodes, bool(self.tp_split))

    def group_tp(self, group: int) -> int:
        """The TP degree of the stage's replicas on node group `group`."""
        return self.group_tps[group] if self.group_tps else self.tp

    def __hash__(self) -> int:
        """The fields' hash, computed once (configurations key most price tables of the search)."""
        known = self.__dict__.get("_hash")
        if known is None:
            known = hash((self.nodes, self.tp, self.recompute, self.zero, self.cp, self.cp_kind, self.ep, self.offload,
                          self.group_tps, self.tp_split))
            object.__setattr__(self, "_hash", known)
        return known

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}  # (a string's hash is per process)


@dataclass
class TypeArrays:
    """Per replica type of a config: arrays over the decoder-block count 0..L."""

    count: int  # replicas of this type
    group: NodeGroup
    time: dict[tuple[bool, bool, int], np.ndarray]  # flags (ProblemInputs.flag_sets) -> per-micro-batch time, no p2p
    bwd: dict[tuple[bool, bool, int], np.ndarray]
    params: dict[tuple[bool, bool, int], np.ndarray]  # weight parameters per GPU
    experts: dict[tuple[bool, bool, int], np.ndarray]  # of them, the routed experts' (StageDims.weight_share)
    room: dict[tuple[bool, bool, int], np.ndarray]  # micro-batches its memory holds (fractional)
    boundary_bytes: float
    cost_params: CostParams
    # interleaved: per-micro-batch time of one chunk by its block count, no p2p: a plain
    # chunk, the chunk with the embedding, the chunk with the head
    chunk: dict[str, np.ndarray] = field(default_factory=dict)
    cp_link: Link | None = None  # a CP ring spanning nodes: its per-GPU inter-node link (None: inside a node)
    # a split backward (zero bubble, planner.search.pricing.deferred): the weight-gradient time W per
    # micro-batch, and a deferred W's kept inputs per micro-batch as a share of its activations
    wgrad: dict[tuple[bool, bool, int], np.ndarray] = field(default_factory=dict)
    wgrad_share: dict[tuple[bool, bool, int], np.ndarray] = field(default_factory=dict)
    # interleaved, where the rank's chunks hide their ZeRO collectives as one (interleave.interleaved_type_arrays):
    # each chunk's share of what the rank exposes of them, by the rank's block count (chunk excludes it)
    zero_share: dict[tuple[bool, bool, int], np.ndarray] = field(default_factory=dict)
    # Muon's Newton-Schulz FLOPs of the whole matrices the replica holds (dense, routed experts'), by
    # block count (SpanPrice.ns_flops, ns_expert_flops): the tail's optimizer step (cost.stage_tail.optimizer_s)
    ns: dict[tuple[bool, bool, int], tuple] = field(default_factory=dict)


class StageCost(NamedTuple):
    """A configuration's cost at one pipeline position, arrays over block counts
    (Problem.stage_cost; a NamedTuple: built in the hot loop)."""

    tau: np.ndarray  # latency of one micro-batch through the rank
    x: np.ndarray  # B + E - tau (INF where the rank cannot hold that many blocks)
    slope: float | None  # of tau, when tau is affine in the block count (1F1B, one replica type)
    x_min: float
    split: np.ndarray | None  # interleaved: the blocks of the embedding's or head's chunk


@dataclass(frozen=True)
class Variant:
    """One merged cost curve of a family: per block count, tau, X and the config chosen."""

    tau: np.ndarray
    x: np.ndarray
    member: np.ndarray  # config id per block count, -1 where none
    x_min: float
    runs: tuple  # (config id, where the variant uses it, slope of its tau or None), by config id


def pareto_front(taus: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column (block count) of m configs' (tau, X) rows, those no other dominates, by tau:
    (order, count), order[:count[c], c] the kept rows of column c by rising tau. b dominates a
    where b is feasible (X finite), no worse in both and better in one, or equal and earlier.
    In (tau, X, row) order a row is dominated exactly when some row before it has X no larger,
    so the kept rows are those whose X is below every X before them (O(m log m) a column;
    rows with tau infinite must have X infinite). Their taus rise strictly, so that order is by tau."""
    lex = np.lexsort((xs.T, taus.T), axis=-1).T  # rows in (tau, X, row) order per column (a stable sort)
    x_sorted = np.take_along_axis(xs, lex, axis=0)
    before = np.minimum.accumulate(np.concatenate([np.full((1, xs.shape[1]), INF), x_sorted[:-1]]), axis=0)
    kept = np.isfinite(x_sorted) & (x_sorted < before)
    # the kept rows first, in that order (a stable sort of the flags keeps it)
    return np.take_along_axis(lex, np.argsort(~kept, axis=0, kind="stable"), axis=0), kept.sum(axis=0)


def share_cap(room: np.ndarray, in_flight: float) -> np.ndarray:
    """The most micro-batches a replica may take: unbounded when its memory holds the
    in-flight ones, else those that fit (a replica with n micro-batches holds min(n, in-flight))."""
    return np.where(room >= in_flight, UNCAPPED, np.maximum(np.floor(room), 0)).astype(np.int64)


def deferred_share_cap(room: np.ndarray, wgrad_share: np.ndarray, in_flight: float, deferred: float) -> np.ndarray:
    """share_cap under a split backward whose rank holds back up to `deferred` W passes
    (Schedule.deferred_w_microbatches): a replica with n micro-batches holds min(n, in-flight)
    whole and the W inputs (`wgrad_share` of a whole one each) of min(deferred, n - in-flight)
    more (planner.cost.stage_memory.replica_memory), so past the in-flight ones each further
    micro-batch needs `wgrad_share` of room, up to `deferred` of them."""
    cap = share_cap(room, in_flight)
    if not deferred:
        return cap
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = np.where(wgrad_share > 0, np.floor((room - in_flight) / np.where(wgrad_share > 0, wgrad_share, 1.0)),
                         UNCAPPED)
    whole = room >= in_flight + deferred * wgrad_share
    return np.where(room < in_flight, cap, np.where(whole, UNCAPPED, in_flight + extra)).astype(np.int64)


# --- the parts of a stages.Problem ---------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ProblemInputs:
    """What one (micro-batch, decomposition, V) search fixes: the inputs and what follows from them."""

    model: Model
    cluster: Cluster
    options: SolverOptions
    micro_batch: int
    parts: Decomposition  # how the search sees the nodes: lanes of parts (planner.search.decompose)
    virtual_stages: int  # per rank
    schedule: Schedule
    chunked: bool  # ranks run several chunks each (planner.search.pricing.interleave prices them)
    training: Training  # the training of the plans searched (the caller's at this micro-batch and schedule)
    groups: tuple[NodeGroup, ...]
    bundle_nodes: tuple[int, ...]  # the DP's state limits: parts per lane (Decomposition.counts)
    emb: Layer
    dec: Layer
    head: Layer
    num_blocks: int
    microbatches: int  # per step, all replicas of a stage together
    blocks: np.ndarray  # 0..num_blocks, the block counts every cost array runs over
    blocks_index: np.ndarray  # the same as integers
    restriction: Restriction = Restriction()
    least_share: int = 1  # micro-batches every replica takes at least (zero bubble: p, planner.search.pricing.deferred)
    # the leading decoder blocks of another shape (Model.decoder_lead: DeepSeek-V3's dense ones), as
    # (layer, count), None: none; the front stages hold them besides their `dec` blocks (docs/solver.md)
    lead: tuple[Layer, int] | None = None

    @property
    def lead_blocks(self) -> int:
        """The model's lead blocks (0: none)."""
        return 0 if self.lead is None else self.lead[1]

    @property
    def spread_lead(self) -> int:
        """The lead blocks the DP places as items of their own, on whichever front stages (one-chunk
        searches); an interleaved search keeps them in the embedding's chunk (0 here)."""
        return 0 if self.chunked else self.lead_blocks

    @property
    def items(self) -> int:
        """The DP's items: embedding, the spread lead blocks, the counted blocks and head."""
        return self.num_blocks + self.spread_lead + 2

    @property
    def flag_sets(self) -> tuple[tuple[bool, bool, int], ...]:
        """Every stage's flags: (holds the head, holds the embedding, lead blocks held besides its
        searched blocks); type arrays are priced for each."""
        return tuple((head, emb, lead) for head in (False, True) for emb in (False, True)
                     for lead in range(self.lead_blocks + 1))

    @classmethod
    def of(cls, context: "SearchContext", micro_batch: int, parts: Decomposition, virtual_stages: int,
           restriction: Restriction = Restriction(), schedule_name: str | None = None,
           least_share: int = 1) -> "ProblemInputs":
        model, cluster, training = context.model, context.cluster, context.training
        schedule = search_schedule(virtual_stages) if schedule_name is None else get_schedule(schedule_name)
        options = schedule_options(context.options, cluster, schedule)
        searched = replace(training, micro_batch=micro_batch, schedule=schedule.name, virtual_stages=virtual_stages)
        groups = tuple(cluster.groups)
        lead = model.decoder_lead()
        num_blocks = model.num_layers - 2 - (0 if lead is None else lead[1])
        return cls(model, cluster, options, micro_batch, parts, virtual_stages, schedule,
                   schedule.chunks_per_rank(virtual_stages) > 1, searched, groups,
                   parts.counts, model.layers[0], model.searched_decoder(), model.layers[-1],
                   num_blocks, training.global_batch // micro_batch, np.arange(num_blocks + 1, dtype=float),
                   np.arange(num_blocks + 1), restriction, least_share, lead)


def schedule_options(options: SolverOptions, cluster: Cluster, schedule: Schedule) -> SolverOptions:
    """`options` with each GPU type's cost parameters as `schedule` runs them (cost.replica_pricer.
    schedule_cost_params: a schedule that hides the expert all-to-all under another micro-batch's
    compute prices it hidden), so that a search prices its stages as evaluate prices its plans."""
    if not schedule.overlaps_ep_comm:
        return options
    gpus = {g.gpu.name: g.gpu for g in cluster.groups}
    return replace(options, gpu_params=tuple(
        (name, schedule_cost_params(options.params_for(name), gpu, schedule)) for name, gpu in sorted(gpus.items())))


@dataclass(frozen=True)
class Catalog:
    """The configurations, families (every config on one node vector) and successor
    signatures met so far, each numbered in the order met (ids index the lists)."""

    configs: list[StageConfig] = field(default_factory=list)
    config_ids: dict[StageConfig, int] = field(default_factory=dict)
    config_objects: dict[int, tuple[StageConfig, int]] = field(default_factory=dict)  # id(config) -> (it, its id)
    fitting: dict[tuple[int, ...], list[tuple[int, tuple[int, ...], int]]] = field(default_factory=dict)
    families: list[tuple[int, ...]] = field(default_factory=list)
    family_ids: dict[tuple, int] = field(default_factory=dict)  # by StageConfig.family
    signatures: list[tuple[Link, ...]] = field(default_factory=list)
    signature_ids: dict[tuple, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PriceTables:
    """Prices derived from the inputs, each computed once on first use (by config, position,
    successor link, memory caps)."""

    types: dict[StageConfig, list[TypeArrays] | None] = field(default_factory=dict)
    types_by_id: dict[int, list[TypeArrays]] = field(default_factory=dict)
    dims: dict[StageConfig, StageDims] = field(default_factory=dict)
    dp_layouts: dict[StageConfig, DpLayout] = field(default_factory=dict)
    tails: dict[tuple, np.ndarray] = field(default_factory=dict)
    caps: dict[tuple, object] = field(default_factory=dict)  # per config id and position: caps, offload's test
    links: dict[tuple, Link] = field(default_factory=dict)
    stage_levels: dict[tuple, tuple] = field(default_factory=dict)  # (config, flags, link): costs by capping level
    # (config ids, flags, position) -> what CappingLevels.stage_costs does with each config there
    members: dict[tuple, tuple] = field(default_factory=dict)
    stage_by_caps: dict[tuple, StageCost] = field(default_factory=dict)
    family: dict[tuple, tuple] = field(default_factory=dict)
    family_by_costs: dict[tuple, tuple] = field(default_factory=dict)
    recipes: dict[tuple, tuple] = field(default_factory=dict)  # planner.search.dp: by variant and bound's cut
    block_prices: dict[StageConfig, list] = field(default_factory=dict)  # recompute "block": block.BlockPrices
    # (cid, flags, in flight) -> (types, k); (cid, flags) -> block.block_memory; (cid, flags, k bytes) -> types
    block_types: dict[tuple, object] = field(default_factory=dict)
    least_room: dict[tuple, tuple] = field(default_factory=dict)  # (offloaded config, flags): MemorySavers
    # planner.search.bounds.completion: kappa per group, and per nodes used the least time a block left adds
    kappas: dict[int, float] = field(default_factory=dict)
    per_block_left: dict[tuple[int, ...], float] = field(default_factory=dict)
    no_shares: dict[int, bool] = field(default_factory=dict)  # config id -> CappingLevels._no_shares
    # one-chunk problems: (config, flags, link) -> makespans by capping level with at least one
    # micro-batch per replica (CappingLevels._price_levels), shared by the problems of one micro-batch
    level_busy: dict[tuple, np.ndarray] = field(default_factory=dict)
    # (node group, dims, recompute, ...) -> one replica type's arrays (StageConfigs._replica_arrays)
    replica_arrays: dict[tuple, tuple] = field(default_factory=dict)
    # (nodes used, chunked, split backward) -> StageConfigs.configs (stages.Problem.transitions)
    config_lists: dict[tuple, list] = field(default_factory=dict)
    # boundary link -> its number in the price tables' keys (StageLinks.link_key): a Link hashes slowly
    link_ids: dict[Link, int] = field(default_factory=dict)

    def position_free(self) -> "PriceTables":
        """New tables sharing the prices keyed by configuration alone (type arrays, dimensions,
        layouts, tails, least rooms, makespans by level with at least one micro-batch each), which
        one-chunk problems of the same micro-batch and restriction have in common whatever their
        schedule and depth (the zero-bubble ones)."""
        return PriceTables(types=self.types, dims=self.dims, dp_layouts=self.dp_layouts, tails=self.tails,
                           block_prices=self.block_prices, least_room=self.least_room, level_busy=self.level_busy,
                           replica_arrays=self.replica_arrays, config_lists=self.config_lists,
                           link_ids=self.link_ids)


@dataclass
class SearchState:
    """What changes while the search runs: its clock (checked while enumerating
    configurations), the configurations priced, and the smallest memory overflow met
    (what a "does not fit" message reports)."""

    clock: SearchClock | None = None
    evaluations: int = 0
    smallest_overflow: tuple[float, str] | None = None


@dataclass(frozen=True)
class SearchContext:
    """What every search of one solve fixes: the model, the cluster, the training (global batch,
    sequence, dtype, runtime) and the solver's options."""
    model: Model
    cluster: Cluster
    training: Training
    options: SolverOptions


class ProblemPart:
    """One part of a stages.Problem's pricing, held by the problem: it reads the problem's
    inputs and shares its catalog, tables and state, and reaches the other parts through it."""

    def __init__(self, problem):
        self.problem = problem
        self.inputs: ProblemInputs = problem.inputs
        self.catalog: Catalog = problem.catalog
        self.tables: PriceTables = problem.tables
        self.state: SearchState = problem.state
