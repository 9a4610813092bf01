"""A plan's pipeline ranks priced on their replicas: per micro-batch, each chunk's time
(planner.cost.pricing) and the span of all the rank's layers, once for the replicas alike in GPU
type, TP link and cost parameters. planner.cost.evaluate assembles these into the step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce
from typing import Callable, Mapping

from .formulas import DEFAULT_PARAMS, CostParams
from .fp8 import fp8_gather_params
from .moe import AllToAllGroup
from ..inputs.hardware import GpuSpec, Link
from ..plan import Plan, Replica, Stage
from .offload import NO_ACTIVATION_OFFLOAD, ActivationOffload, activation_offload, merge_offloads
from .p2p import p2p_message_s, p2p_rank_s
from .pricing import (ChunkTime, DpLayout, SpanPrice, boundary_bytes, layers_price, rank_zero_share, span_price,
                      zero_comm, zero_rank_overlapped)
from .runtimes import p2p_mode
from ..schedules import Schedule, get_schedule
from .sharding import Sharding
from .power import capped
from .paths import boundary_link, dp_layout, alltoall_group, slowest_gpu, tp_group_link
from ..plan.tp_shares import position_layer


ParamsFor = Callable[[GpuSpec], CostParams]


def params_getter(params: CostParams | Mapping[str, CostParams] | None) -> ParamsFor:
    if params is None:
        return lambda gpu: DEFAULT_PARAMS
    if isinstance(params, CostParams):
        return lambda gpu: params
    return lambda gpu: params.get(gpu.name, params.get("*", DEFAULT_PARAMS))


# architectures on which Megatron-core's TP overlap no longer needs CUDA_DEVICE_MAX_CONNECTIONS=1
# (Megatron-LM arguments.py: "CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the
# Blackwell architecture", get_device_arch_version() >= 10)
MANY_CONNECTION_ARCHITECTURES = ("blackwell",)


def schedule_params(params_for: ParamsFor, schedule: str) -> ParamsFor:
    """`params_for` as a plan under `schedule` runs: a schedule that runs one micro-batch's forward
    beside another's backward (Schedule.overlaps_ep_comm, DualPipeV, combined 1F1B) hides each one's
    expert-parallel all-to-all under the other's compute (CostParams.moe_a2a_overlap); one whose overlap
    takes the CUDA connections the TP overlap needs (Schedule.connections_over_tp_overlap) leaves the TP
    collectives unhidden before Blackwell."""
    chosen = get_schedule(schedule)
    if not chosen.overlaps_ep_comm:
        return params_for
    return lambda gpu: schedule_cost_params(params_for(gpu), gpu, chosen)


def schedule_cost_params(params: CostParams, gpu: GpuSpec, schedule: Schedule) -> CostParams:
    """`params` of a GPU as `schedule` runs it (schedule_params; the plan search prices its problems
    with these: planner.search.pricing.stage_types.ProblemInputs)."""
    if not schedule.overlaps_ep_comm:
        return params
    updated = params.with_updates(moe_a2a_overlap=True)
    if schedule.connections_over_tp_overlap and gpu.architecture not in MANY_CONNECTION_ARCHITECTURES:
        updated = updated.with_updates(overlap_tp_comm=False)
    return updated


@dataclass(frozen=True)
class ReplicaPrice:
    """One replica of a pipeline rank, per micro-batch: each of the rank's chunks, and the
    span of all its layers (memory, backward)."""

    gpu: GpuSpec
    params: CostParams
    chunks: tuple[ChunkTime, ...]
    span: SpanPrice
    act_offload: ActivationOffload = NO_ACTIVATION_OFFLOAD  # its chunks' together (memory)
    # uneven TP shards (Stage.uneven_tp): each TP position's own price on its GPU; the replica's is the
    # slowest of them (its TP collectives wait for it); empty: every position alike
    positions: tuple["ReplicaPrice", ...] = ()

    @property
    def per_microbatch_s(self) -> float:
        return sum(c.time_s for c in self.chunks)

    @property
    def compute_s(self) -> float:
        """per_microbatch_s without what it waits for of its sends and receives."""
        return sum(c.compute_s for c in self.chunks)

    @property
    def slowest_chunk_s(self) -> float:
        return max(c.time_s for c in self.chunks)

    @property
    def forward_s(self) -> float:
        """The forward part of per_microbatch_s (ChunkTime.forward_s)."""
        return sum(c.forward_s for c in self.chunks)

    @property
    def wgrad_s(self) -> float:
        """The weight-gradient (W) part of per_microbatch_s (a split backward's)."""
        return sum(c.span.wgrad_s for c in self.chunks)


class PlanPricer:
    """Prices a plan's pipeline ranks on their replicas (planner.cost.pricing), once for the
    replicas alike in GPU type, TP link and cost parameters."""

    def __init__(self, plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None):
        self.plan, self.params_for = plan, schedule_params(params_getter(params), plan.training.schedule)
        self.stage_by_index = {st.index: st for st in plan.stages}
        self.p2p_mode = p2p_mode(plan.training.runtime, plan.training.schedule)  # (cost.p2p)
        self._links: dict[int, tuple[Link, bool]] = {}  # stage index -> boundary to its successor
        self._layouts: dict[int, DpLayout] = {}
        self._expert_layouts: dict[int, DpLayout] = {}
        self._replicas: dict[tuple, ReplicaPrice] = {}
        # replicas inside one node, without EP: (first stage index, node group, loop micro-batches) -> price
        self._in_node: dict[tuple, ReplicaPrice] = {}
        self._position_layers: dict[tuple[int, int], tuple] = {}  # (stage index, TP position) -> layers

    def sharding(self, st: Stage) -> Sharding:
        t = self.plan.training
        return Sharding(t.dtype, t.micro_batch, t.seq_len, t.attention, st.dims.within_replica, st.recompute)

    def layout(self, st: Stage) -> DpLayout:
        """The stage's data-parallel collectives: over the TP-position-0 ranks of its replicas
        (with CP, of each of their cp ranks: gradients are reduced over dp x cp)."""
        if st.index not in self._layouts:
            self._layouts[st.index] = dp_layout(self.plan.cluster, grad_reduce_ranks(st))
        return self._layouts[st.index]

    def expert_layout(self, st: Stage) -> DpLayout | None:
        """Where the stage's routed experts reduce their gradients under expert parallelism: the
        expert-data-parallel group of its first GPU (StageDims.edp_group), None without an expert grid."""
        if st.ep == 1 and not st.etp:
            return None
        if st.index not in self._expert_layouts:
            replicas = sorted(st.replicas, key=lambda rep: rep.dp_rank)
            ranks = [r for rep in replicas for r in rep.ranks]
            self._expert_layouts[st.index] = dp_layout(self.plan.cluster, [ranks[i] for i in st.dims.edp_group(0)])
        return self._expert_layouts[st.index]

    def ep_group(self, st: Stage, replica: Replica) -> AllToAllGroup | None:
        """Where `replica`'s expert-parallel all-to-all runs (paths.alltoall_group), None without EP."""
        if st.ep <= 1:
            return None
        return alltoall_group(self.plan.cluster, self.ep_ranks(st, replica))

    @staticmethod
    def ep_ranks(st: Stage, replica: Replica) -> list[int]:
        """The expert-parallel group of `replica`'s first GPU (paths.ep_group_ranks)."""
        replicas = sorted(st.replicas, key=lambda rep: rep.dp_rank)
        ranks = [r for rep in replicas for r in rep.ranks]
        position = [rep.dp_rank for rep in replicas].index(replica.dp_rank) * st.dims.group_gpus
        return [ranks[i] for i in st.dims.ep_group(position)]

    def replica(self, chunks: list[Stage], replica: Replica) -> ReplicaPrice:
        """`replica` of the pipeline rank holding `chunks` (its TP group, at its own degree, runs at its slowest GPU).
        A breadth-first schedule's ZeRO collectives run once per loop for the replica's
        micro-batches (Schedule.zero_once_per_loop, ZeroComm.per_microbatch)."""
        t = self.plan.training
        chunks = [st.for_replica(replica) for st in chunks]  # at the replica's own TP degree (Replica.tp)
        loop_microbatches = replica.batch_share // t.micro_batch if get_schedule(t.schedule).zero_once_per_loop() else 1
        if chunks[0].ep > 1:  # (its expert group spans replicas)
            return self._replica_price(chunks, replica, loop_microbatches)
        # a replica inside one node runs at its group's GPU, its TP and CP groups on the node's
        # link, its offload on the node's PCIe: its price follows from the node group alone
        node = self.plan.cluster.node_of(min(replica.ranks))  # (nodes hold consecutive ranks)
        if self.plan.cluster.node_of(max(replica.ranks)) != node:
            return self._replica_price(chunks, replica, loop_microbatches)
        in_node = (chunks[0].index, node[0], loop_microbatches, chunks[0].tp)
        if in_node not in self._in_node:
            self._in_node[in_node] = self._replica_price(chunks, replica, loop_microbatches)
        return self._in_node[in_node]

    def _replica_price(self, chunks: list[Stage], replica: Replica, loop_microbatches: int) -> ReplicaPrice:
        """_priced; with uneven TP shards, each TP position on its own GPU with its own slice (its layers:
        planner.plan.tp_shares.position_layer), the replica paced by the slowest (ties: the longer compute, then the first)."""
        if not chunks[0].uneven_tp:
            return self._priced(chunks, replica, loop_microbatches)
        positions = tuple(self._priced(chunks, replica, loop_microbatches, i) for i in range(chunks[0].tp))
        # ties in time with its sends (which an overlapped send evens out) go to the longer compute
        slowest = max(positions, key=lambda price: (price.per_microbatch_s, price.compute_s))
        return replace(slowest, positions=positions)

    def _layers_at(self, st: Stage, position: int | None) -> tuple:
        """The model's layers as TP position `position` of `st` runs them (None: the even split)."""
        if position is None:
            return self.plan.model.layers
        key = (st.index, position)
        if key not in self._position_layers:
            self._position_layers[key] = tuple(position_layer(layer, st, position) for layer in self.plan.model.layers)
        return self._position_layers[key]

    def _priced(self, chunks: list[Stage], replica: Replica, loop_microbatches: int,
                position: int | None = None) -> ReplicaPrice:
        """replica, by the GPU, links and parameters it runs at; `position`: its TP rank at that position
        alone, on that rank's GPU (uneven TP shards)."""
        cluster = self.plan.cluster
        slowest = slowest_gpu(cluster, replica.ranks if position is None else (replica.ranks[position],))
        gpu = capped(slowest, chunks[0].power_cap_W)  # a pipeline rank's chunks share it
        p = self.params_for(gpu)
        tp_link, cp_link = replica_links(cluster, replica, chunks[0])
        ep_group = self.ep_group(chunks[0], replica)
        # activation offload copies over the slowest PCIe link of the replica's GPUs (HostSpec)
        pcie = min(cluster.group_of_rank(r).host.pcie_bytes_per_s for r in replica.ranks)
        key = (chunks[0].index, chunks[0].tp, gpu.name, tp_link, cp_link, p, loop_microbatches, ep_group, pcie,
               position)
        if key in self._replicas:
            return self._replicas[key]
        times, sent, received = [], [], []
        for st in chunks:
            layers = self._layers_at(st, position)
            sh = self.sharding(st)
            span = layers_price(layers[st.layers[0]:st.layers[1]], sh, gpu, tp_link, p, cp_link, ep_group,
                                st.recompute_layers)
            sent.append(0.0 if self.boundary(st.index) is None else
                        p2p_message_s(boundary_bytes(layers[st.layers[1] - 1], sh), *self.boundary(st.index), p))
            # its input as it holds it (the search's TypeArrays.boundary_bytes: its own sharding)
            received.append(0.0 if self.boundary(st.index - 1) is None else
                            p2p_message_s(boundary_bytes(layers[st.layers[0] - 1], sh), *self.boundary(st.index - 1), p))
            fp8_gathered = sum(fp8_gather_params(layer, st.dims, sh.dtype, p.fp8_recipe, p.fp8_all_gather)
                               for layer in layers[st.layers[0]:st.layers[1]]) if p.fp8_all_gather else 0.0
            zero = zero_comm(span.weight_params, st.dims, sh.dtype, self.layout(st), p, span.expert_params,
                             self.expert_layout(st), fp8_gathered).per_microbatch(loop_microbatches)
            offloaded = activation_offload(layers[st.layers[0]:st.layers[1]], span, st.offload_activations, pcie)
            times.append(ChunkTime(span, zero, 0.0, offloaded))
        whole = span_price((part for c in times for part in c.span.parts), chunks[0].dims)  # chunks share dims
        if len(times) > 1 and zero_rank_overlapped(p):  # (one stream for the rank's reduce-scatters)
            rank_zero = reduce(lambda a, b: a.plus(b), (c.zero for c in times))
            share = rank_zero_share(rank_zero, whole.fwd_s, whole.bwd_s, len(times))
            times = [replace(c, zero_share=share) for c in times]
        times = self._with_p2p(times, sent, received)
        self._replicas[key] = ReplicaPrice(gpu, p, tuple(times), whole, merge_offloads(c.act_offload for c in times))
        return self._replicas[key]


    def boundary(self, index: int) -> tuple[Link, bool] | None:
        """The link (and whether inside a node) stage `index` sends to stage `index + 1` over, None
        where there is no such boundary between two pipeline ranks (a V turns on one rank)."""
        st, successor = self.stage_by_index.get(index), self.stage_by_index.get(index + 1)
        if st is None or successor is None or successor.pipeline_rank == st.pipeline_rank:
            return None
        if index not in self._links:
            self._links[index] = boundary_link(self.plan.cluster, [r.ranks[0] for r in st.replicas],
                                               [r.ranks[0] for r in successor.replicas])
        return self._links[index]

    def _with_p2p(self, times: list[ChunkTime], sent: list[float], received: list[float]) -> list[ChunkTime]:
        """The chunks with what they wait for of their boundaries' messages (`sent`, `received`: one
        way, each chunk's) under the runtime's schedule (p2p.p2p_rank_s): blocking, each chunk its
        own; overlapped, the rank's exposed sends shared by its chunks as their messages."""
        mode = self.p2p_mode
        if mode.blocking:
            parts = [p2p_rank_s(mode, s, r, 0.0) for s, r in zip(sent, received)]
        else:
            total = sum(sent)
            exposed = float(p2p_rank_s(mode, total, 0.0, sum(c.time_s for c in times))[0]) if total else 0.0
            parts = [(exposed * s / total if total else 0.0, 0.0) for s in sent]
        return [replace(c, send_s=s, recv_s=r) for c, (s, r) in zip(times, parts)]


def replica_links(cluster, replica: Replica, st: Stage) -> tuple[Link, Link | None]:
    """The link of a replica's TP group (its first cp rank's) and of its CP ring (the ranks of
    its first TP position), None without CP."""
    if st.cp <= 1:
        return tp_group_link(cluster, replica.ranks), None
    return tp_group_link(cluster, replica.ranks[:st.tp]), tp_group_link(cluster, replica.ranks[::st.tp])


def grad_reduce_ranks(st: Stage) -> list[int]:
    """One rank per replica and cp position at TP position 0: a weight shard's gradient is
    reduced over these (StageDims.grad_reduce_ranks)."""
    return [r.ranks[c * st.tp] for r in st.replicas for c in range(st.cp)]
