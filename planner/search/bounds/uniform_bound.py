"""A lower bound on a plan's step time that costs a fraction of pricing it, so the uniform
configurations (planner.search.uniform) that cannot beat the best one found are not priced.

T = max_k (B_k + E_k - c_k) + sum_k c_k >= B_k for every pipeline rank k
(evaluate.pipeline_time_s: E_k >= 0, c_k >= 0), and a replica of rank k is busy
(batch share / micro-batch) x the sum of ChunkTime.time_s over the rank's chunks, each at least
its layers' compute (SpanPrice.time_s adds TP, CP and EP communication, ChunkTime the ZeRO
collectives, the send and activation offload, all >= 0). The compute of a layer depends on the
GPU the replica runs at (paths.slowest_gpu), its sharding and cost parameters, not on links, so
the bound prices each (chunk, GPU type) once and every replica by a lookup. On a cluster of
1,024 GPUs it takes about a fiftieth of `evaluate`.

Stages with expert parallelism (whose all-to-all group the bound does not build) contribute
nothing (a weaker, still valid bound).

`surely_overflows` tells, for a tenth of `evaluate`'s time at 1,024 GPUs, that a plan does not fit:
it prices one replica of each node group per pipeline rank as evaluate does (PlanPricer.replica,
stage_memory.held_microbatches, replica_memory), so an overflow it finds is one evaluate reports.
Most uniform configurations of a large model do not fit; the scan skips pricing them."""

from __future__ import annotations

from typing import Mapping, NamedTuple

from ...cost.replica_pricer import PlanPricer, replica_links
from ...cost.offload import NO_ACTIVATION_OFFLOAD, ActivationOffload
from ...cost.stage_memory import held_microbatches, replica_memory
from ...cost.formulas import CostParams
from ...cost.paths import slowest_gpu
from ...cost.pricing import SpanPrice, layers_price, span_price
from ...inputs.hardware import GpuSpec
from ...plan import Plan, Replica
from ...schedules import get_schedule

__all__ = ["busy_lower_bound_s", "screen", "surely_overflows"]


def _replica_gpu(plan: Plan, replica: Replica) -> GpuSpec:
    """The GPU a replica runs at (paths.slowest_gpu); one lookup when its ranks share a group."""
    cluster = plan.cluster
    low = cluster.group_of_rank(min(replica.ranks))
    if low is cluster.group_of_rank(max(replica.ranks)):  # groups hold consecutive rank ranges
        return low.gpu
    return slowest_gpu(cluster, tuple(replica.ranks))


def busy_lower_bound_s(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None,
                       memo: dict | None = None) -> float:
    """max over pipeline ranks and their replicas of (micro-batches) x (the rank's layers'
    compute per micro-batch at the replica's GPU): at most `evaluate(plan, params).step_time_s`
    (module docstring). `memo`: a chunk's compute by (layers, sharding, GPU, link, parameters,
    recomputed blocks), for a caller bounding many plans of one model (uniform candidates share
    their chunks across ZeRO stages and schedules)."""
    pricer = PlanPricer(plan, params)
    layers, b = plan.model.layers, plan.training.micro_batch
    chunks: dict[int, list] = {}
    for st in plan.stages:
        chunks.setdefault(st.pipeline_rank, []).append(st)
    best = 0.0
    for rank_chunks in chunks.values():
        if any(st.ep > 1 for st in rank_chunks):
            continue
        per_gpu: dict[str, float] = {}  # compute per micro-batch of the rank's chunks, per GPU type
        replicas = rank_chunks[0].replicas
        low = plan.cluster.group_of_rank(min(min(r.ranks) for r in replicas))
        if low is plan.cluster.group_of_rank(max(max(r.ranks) for r in replicas)):
            # every replica in one group (groups hold consecutive ranks): the busiest takes the most
            replicas = (max(replicas, key=lambda r: r.batch_share),)
        for replica in replicas:
            gpu = _replica_gpu(plan, replica)
            compute = per_gpu.get(gpu.name)
            if compute is None:
                p = pricer.params_for(gpu)
                link = plan.cluster.group_of_rank(replica.ranks[0]).intra_node  # compute does not depend on it
                compute = per_gpu[gpu.name] = sum(_chunk_compute_s(layers, st, pricer.sharding(st), gpu, link, p, memo)
                                                  for st in rank_chunks)
            best = max(best, replica.batch_share // b * compute)
    return best


def _chunk_compute_s(layers, chunk, sharding, gpu, link, params, memo: dict | None) -> float:
    """The compute of one micro-batch through `chunk` (SpanPrice.compute_s), memoised in `memo`."""
    key = (chunk.layers, sharding, gpu.name, link, params, chunk.recompute_layers)
    value = None if memo is None else memo.get(key)
    if value is None:
        value = layers_price(layers[chunk.layers[0]:chunk.layers[1]], sharding, gpu, link, params,
                             recompute_layers=chunk.recompute_layers).compute_s
        if memo is not None:
            memo[key] = value
    return value


class _Spans(NamedTuple):
    """A replica's chunks priced as PlanPricer.replica prices them but for what follows the
    layers (ZeRO collectives, sends): the same spans and memory, times no larger (ChunkTime.time_s
    and forward_s add those, >= 0; the W part is the spans' in both)."""

    params: CostParams
    chunk_spans: tuple
    span: SpanPrice
    act_offload: ActivationOffload = NO_ACTIVATION_OFFLOAD

    @property
    def chunks(self):
        return tuple(_Chunk(c) for c in self.chunk_spans)

    per_microbatch_s = property(lambda self: sum(c.time_s for c in self.chunk_spans))
    slowest_chunk_s = property(lambda self: max(c.time_s for c in self.chunk_spans))
    wgrad_s = property(lambda self: sum(c.wgrad_s for c in self.chunk_spans))
    forward_s = property(lambda self: sum(c.fwd_s for c in self.chunk_spans))


class _Chunk(NamedTuple):
    span: SpanPrice


def _spans_only(pricer: PlanPricer, rank_chunks: list, replica: Replica, memo: dict) -> _Spans:
    """The replica's _Spans: each chunk's layers_price with the replica's GPU, links and expert
    group as PlanPricer.replica takes them, one per distinct (GPU, links, expert group) in `memo`."""
    plan = pricer.plan
    gpu = slowest_gpu(plan.cluster, replica.ranks)
    tp_link, cp_link = replica_links(plan.cluster, replica, rank_chunks[0])
    ep_group = pricer.ep_group(rank_chunks[0], replica)
    key = (rank_chunks[0].index, gpu.name, tp_link, cp_link, ep_group)
    if key not in memo:
        p = pricer.params_for(gpu)
        spans = tuple(layers_price(plan.model.layers[st.layers[0]:st.layers[1]], pricer.sharding(st), gpu, tp_link, p,
                                   cp_link, ep_group, st.recompute_layers) for st in rank_chunks)
        memo[key] = _Spans(p, spans, span_price((part for c in spans for part in c.parts), rank_chunks[0].dims))
    return memo[key]


def _priced_replicas(plan: Plan, params, every_replica: bool):
    """Per pipeline rank k: (k, its chunks, [(price, micro-batches, capacity)]) of the first
    replica of each node group (every replica with `every_replica`), priced as evaluate prices
    them (PlanPricer.replica, cached per replica alike; without `every_replica` and activation
    offload as _Spans: its memory evaluate's, its times no larger), each distinct one once;
    capacity: the least GPU memory among the replica's ranks (its first rank's without
    `every_replica`)."""
    pricer = PlanPricer(plan, params)
    cluster, b = plan.cluster, plan.training.micro_batch
    chunks: dict[int, list] = {}
    for st in plan.stages:
        chunks.setdefault(st.pipeline_rank, []).append(st)
    spans: dict = {}
    for k in range(plan.pp):
        rank_chunks = chunks[k]
        seen: set = set()
        out = []
        for replica in rank_chunks[0].replicas:
            if every_replica:
                capacity = min(cluster.group_of_rank(r).gpu.memory_bytes for r in replica.ranks)
            else:
                group = cluster.group_of_rank(replica.ranks[0])
                if group.name in seen:
                    continue
                seen.add(group.name)
                capacity = group.gpu.memory_bytes
            if every_replica or any(st.offload_activations for st in rank_chunks):
                price = pricer.replica(rank_chunks, replica)
            else:
                price = _spans_only(pricer, rank_chunks, replica, spans)
            key = (id(price), replica.batch_share // b, capacity)
            if key not in seen:
                seen.add(key)
                out.append((price, replica.batch_share // b, capacity))
        yield k, rank_chunks, out


def surely_overflows(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None,
                     every_replica: bool = False) -> bool:
    """Whether some GPU of `plan` holds more than its memory, as `evaluate(plan, params)` prices
    it (so then its `fits` is False): the first replica of each node group in every pipeline rank,
    its memory as evaluate's (module docstring). False says nothing, but with `every_replica`,
    which checks them all: then it is False exactly when evaluate finds no GPU over its memory."""
    return any(_overflows(plan, k, rank_chunks[0], price, n_micro, capacity)
               for k, rank_chunks, priced in _priced_replicas(plan, params, every_replica)
               for price, n_micro, capacity in priced)


def _overflows(plan: Plan, rank: int, head, price, n_micro: int, capacity: float) -> bool:
    """Whether a replica of pipeline rank `rank` holds more than `capacity`, its memory as evaluate's."""
    t = plan.training
    schedule = get_schedule(t.schedule)
    in_flight, deferred = held_microbatches(schedule, rank, plan.pp, schedule.chunks_per_rank(t.virtual_stages), n_micro,
                                            [c.span.act_bytes for c in price.chunks], price.span.act_bytes)
    memory = replica_memory(price.span, in_flight, t.dtype, head.dims, price.params, deferred, t.optimizer,
                            head.offload, price.act_offload)
    return memory.total_bytes > capacity  # evaluate: memory[rank] > capacity[rank]


def screen(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None) -> tuple[float, bool]:
    """(a lower bound on `evaluate(plan, params).step_time_s`, surely_overflows) from one pricing
    of the first replica of each node group per pipeline rank. T = max_k (B_k + E_k - c_k) + sum_j c_j
    >= B_k + sum_(j != k) c_j for every rank k (evaluate.pipeline_time_s, E_k >= 0), B_k the
    busiest replica's micro-batches x per-micro-batch time and c_j the largest replica latency
    (Schedule.latency_s), so the replicas priced bound them from below: the busy bound plus the
    pipeline's fill. (1 - 1e-9: never above T by rounding.)"""
    t = plan.training
    schedule = get_schedule(t.schedule)
    v = schedule.chunks_per_rank(t.virtual_stages)
    busy, latency, over = [], [], False
    for k, rank_chunks, priced in _priced_replicas(plan, params, False):
        busy.append(max(n_micro * price.per_microbatch_s for price, n_micro, _ in priced))
        latency.append(max(schedule.latency_s(price.per_microbatch_s, price.slowest_chunk_s, v, price.wgrad_s,
                                              price.forward_s) for price, _, _ in priced))
        over = over or any(_overflows(plan, k, rank_chunks[0], price, n_micro, capacity)
                           for price, n_micro, capacity in priced)
    fill = sum(latency)
    return max(b + fill - c for b, c in zip(busy, latency)) * (1 - 1e-9), over
