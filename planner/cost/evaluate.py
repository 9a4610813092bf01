"""Price a Plan under the cost model: step time, its breakdown, memory of every device.

The pipeline's iteration time generalises 1F1B (Narayanan et al. 2021, sec 2.2) to
heterogeneous stages with uneven data-parallel shares: each stage is busy for
B_k = max over its replicas of (micro-batches x time per micro-batch); the step takes
the busiest stage's B_k plus the fill and drain of the others, one chunk latency c_k
each: T = max_k B_k + (sum_k c_k - c_k*), with c_k a stage's slowest per-micro-batch
time, or interleaved its slowest chunk's. For uniform stages this is the familiar
(m - 1 + p) t (1F1B) and m t + (p - 1) t / V (interleaved, equal chunks of t / V); a
rank whose chunks differ (one also holding the embedding or the head) pays its slowest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .formulas import CostParams, mfu_peak_dtype
from .states import MemoryBreakdown
from ..inputs.hardware import GIB, GpuSpec
from ..plan import Plan, Replica, Stage
from .explain import (BoundaryComm, CriticalPath, Parts, breakdown as explain_breakdown, chunk_parts, latency_parts,
                      link_use)
from .flops import check_credible, layer_model_flops_per_sample
from .offload import offloaded_activation_bytes
from .pipeline_links import pipeline_links, pp_link_use
from .replica_pricer import PlanPricer, ReplicaPrice, grad_reduce_ranks, replica_links
from .stage_memory import held_microbatches, offloaded_state_bytes, replica_memory
from .stage_tail import StageTail, per_replica_tp_tail, stage_tail, uneven_tp_tail
from ..schedules import get_schedule
from .paths import route_name, slowest_gpu


@dataclass(frozen=True)
class Overflow:
    rank: int
    gpu: str
    need_bytes: float
    capacity_bytes: float

    @property
    def over_bytes(self) -> float:
        return self.need_bytes - self.capacity_bytes


@dataclass(frozen=True)
class Estimate:
    fits: bool
    step_time_s: float
    breakdown_s: Mapping[str, float]
    tokens_per_s: float
    samples_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    bubble_fraction: float
    num_gpus_used: int
    memory_by_rank: Mapping[int, MemoryBreakdown] = field(compare=False)
    capacity_by_rank: Mapping[int, float] = field(compare=False)
    gpu_by_rank: Mapping[int, str] = field(compare=False)
    overflows: tuple[Overflow, ...] = ()
    critical: CriticalPath | None = field(default=None, compare=False)  # what sets the step (planner.cost.explain)
    pipeline_links: tuple[BoundaryComm, ...] = field(default=(), compare=False)
    model_flops_per_s_by_rank: Mapping[int, float] = field(default_factory=dict, compare=False)
    # per used rank, the seconds of a step it runs kernels: its replica's micro-batches (forward, backward
    # and the tensor-parallel collectives inside them) and its optimizer step; the rest of the step it
    # waits (bubble, exposed gradient reduction) (planner.cost.energy prices the two at their power)
    active_s_by_rank: Mapping[int, float] = field(default_factory=dict, compare=False)
    peak_flops_by_rank: Mapping[int, float] = field(default_factory=dict, compare=False)
    # the measured inputs it was priced with, as given (`--profile GPU=FILE`, `--calibration FILE`):
    # a plan file records them (predicted.priced_with) so that `planner validate` can re-price it
    priced_with_profiles: tuple[str, ...] = field(default=(), compare=False)
    priced_with_calibrations: tuple[str, ...] = field(default=(), compare=False)
    measured: bool = False  # some GPU type priced from a measured profile (--profile)
    # the dtype whose peak MFU divides by (formulas.mfu_peak_dtype): "tf32" where fp32 GEMMs ran on
    # TF32; GPU types that differ, each one's in rank order joined by "+" ("tf32+fp32")
    mfu_peak_dtype: str = ""

    def check_credible(self) -> None:
        """flops.check_credible: raises NotCredible (an internal error) when the analytic
        model credits a GPU with more than its peak; measured times are taken as given."""
        if not self.measured:
            check_credible(self.mfu, self.model_flops_per_s_by_rank, self.peak_flops_by_rank, self.gpu_by_rank)

    def peak_memory_by_gpu(self) -> dict[str, float]:
        peaks: dict[str, float] = {}
        for rank, mem in self.memory_by_rank.items():
            gpu = self.gpu_by_rank[rank]
            peaks[gpu] = max(peaks.get(gpu, 0.0), mem.total_bytes)
        return dict(sorted(peaks.items()))

    def to_json(self) -> dict:
        return {
            "fits": self.fits,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "bubble_fraction": self.bubble_fraction,
            "num_gpus_used": self.num_gpus_used,
            "peak_memory_GiB": {g: b / GIB for g, b in self.peak_memory_by_gpu().items()},
            "capacity_GiB": {self.gpu_by_rank[r]: c / GIB for r, c in sorted(self.capacity_by_rank.items())},
            "breakdown_s": dict(self.breakdown_s),
            **self.explanation_json(),
            "overflows": [{"rank": o.rank, "gpu": o.gpu, "need_GiB": o.need_bytes / GIB,
                           "capacity_GiB": o.capacity_bytes / GIB, "over_GiB": o.over_bytes / GIB}
                          for o in self.overflows],
        }


    def predicted_json(self) -> dict:
        """A plan file's `predicted` (formats.md section 5)."""
        priced_with = self.priced_with_profiles or self.priced_with_calibrations
        return {"step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "bubble_fraction": self.bubble_fraction, "samples_per_s": self.samples_per_s,
                "model_tflops_per_gpu": self.model_tflops_per_gpu, "breakdown_s": dict(self.breakdown_s),
                "peak_memory_GiB_by_rank": {str(r): m.total_bytes / GIB for r, m in sorted(self.memory_by_rank.items())},
                **self.explanation_json(),
                **({"priced_with": {"profiles": list(self.priced_with_profiles),
                                    "calibrations": list(self.priced_with_calibrations)}} if priced_with else {})}

    def explanation_json(self) -> dict:
        """The keys `evaluate --json` and a plan's `predicted` add for the explanations."""
        return {"mfu_attention": "causal", "mfu_peak_dtype": self.mfu_peak_dtype,
                "critical": self.critical.to_json() if self.critical else None,
                "pp_comm_overlapped_s": sum(b.overlapped_s for b in self.pipeline_links),
                "pipeline_links": [b.to_json() for b in self.pipeline_links]}


def busy_of(price: ReplicaPrice, busy_s: float) -> float:
    """The micro-batches a replica that is busy `busy_s` runs."""
    return busy_s / price.per_microbatch_s if price.per_microbatch_s > 0 else 0.0


def pipeline_time_s(busy: list[float], tails: list[float], latencies: list[float]) -> tuple[float, int]:
    """Iteration time of a pipeline and its bottleneck rank.

    T = max_k (B_k + E_k - c_k) + sum_k c_k, with B_k the busy time of rank k over the step,
    E_k its exposed gradient reduction and optimizer step, c_k the latency of one micro-batch
    through it (Schedule.latency_s; interleaved: through its slowest chunk). Uniform stages give (m - 1) t + p t
    for 1F1B and m t + (p - 1) t / V interleaved (Narayanan et al. 2021, sec 2.2).
    """
    scores = [busy[k] + tails[k] - latencies[k] for k in range(len(busy))]
    k_star = max(range(len(busy)), key=lambda k: (scores[k], -k))
    return scores[k_star] + sum(latencies), k_star


@dataclass(frozen=True)
class _RankTally:
    """What pricing the pipeline ranks gathers for each GPU rank, in the order it prices them."""
    memory: dict[int, MemoryBreakdown] = field(default_factory=dict)
    capacity: dict[int, float] = field(default_factory=dict)
    gpu_by_rank: dict[int, str] = field(default_factory=dict)
    flops_by_rank: dict[int, float] = field(default_factory=dict)  # model FLOPs per step
    active_by_rank: dict[int, float] = field(default_factory=dict)  # seconds per step running kernels
    host_overflows: list[Overflow] = field(default_factory=list)


@dataclass(frozen=True)
class _RankPrice:
    """One pipeline rank priced: its busiest replica, its latency c_k and its tail E_k."""
    busy_s: float
    latency_s: float
    bottleneck: ReplicaPrice
    replica: Replica
    fill: Parts  # c_k split by kind (explain.latency_parts)
    fill_price: ReplicaPrice | None  # the replica whose latency is c_k
    tail: StageTail
    measured: bool


def evaluate(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None) -> Estimate:
    """Price `plan`; never raises for a plan that does not fit (see `fits`, `overflows`)."""
    pricer = PlanPricer(plan, params)
    t = plan.training
    schedule = get_schedule(t.schedule)
    v = schedule.chunks_per_rank(t.virtual_stages)
    pp = plan.pp
    chunks: dict[int, list[Stage]] = {}
    for st in plan.stages:
        chunks.setdefault(st.pipeline_rank, []).append(st)

    tally = _RankTally()
    layer_flops = [layer_model_flops_per_sample(layer, t.seq_len) for layer in plan.model.layers]  # per sample
    ranks = [_price_rank(pricer, k, chunks[k], layer_flops, schedule, v, tally) for k in range(pp)]
    busy = [r.busy_s for r in ranks]
    latencies = [r.latency_s for r in ranks]
    bottlenecks = [r.bottleneck for r in ranks]
    fills = [r.fill for r in ranks]

    step_s, k_star = pipeline_time_s(busy, [r.tail.total_s for r in ranks], latencies)
    btl, tail = bottlenecks[k_star], ranks[k_star].tail
    per_mb = btl.per_microbatch_s
    n_btl = busy[k_star] / per_mb if per_mb > 0 else 0.0
    own = Parts()
    for chunk in btl.chunks:
        own = own.plus(chunk_parts(chunk))
    fill = Parts()
    for k in range(pp):
        if k != k_star:
            fill = fill.plus(fills[k])
    breakdown = explain_breakdown(own.times(n_btl), fill, tail.grad_reduce_s, tail.optimizer_s,
                                  any(st.cp > 1 for st in plan.stages))

    memory, capacity, gpu_by_rank = tally.memory, tally.capacity, tally.gpu_by_rank
    used = plan.used_ranks()
    peak_dtype_of, peak_by_rank = _mfu_peaks(pricer, gpu_by_rank, used)
    overflows = tuple(Overflow(r, gpu_by_rank[r], memory[r].total_bytes, capacity[r])
                      for r in sorted(memory) if memory[r].total_bytes > capacity[r]) + tuple(tally.host_overflows)
    flops_per_s = {r: f / step_s for r, f in tally.flops_by_rank.items()}
    links = pipeline_links(pricer, chunks, k_star, busy, bottlenecks, [r.fill_price for r in ranks], schedule, v)
    critical = _critical_path(pricer, chunks, k_star, ranks[k_star].replica, btl, n_btl, own, links,
                              tail, breakdown, flops_per_s, peak_by_rank)
    model_flops = sum(layer_flops) * t.global_batch  # flops.model_flops_per_sample, from the per-layer list
    return Estimate(
        fits=not overflows, step_time_s=step_s, breakdown_s=breakdown,
        bubble_fraction=breakdown["bubble"] / step_s,
        **_throughput(plan, model_flops, step_s, len(used), sum(peak_by_rank.values())),
        num_gpus_used=len(used), memory_by_rank=memory, capacity_by_rank=capacity,
        gpu_by_rank=gpu_by_rank, overflows=overflows, critical=critical, pipeline_links=links,
        model_flops_per_s_by_rank=flops_per_s, peak_flops_by_rank=peak_by_rank,
        active_s_by_rank={r: min(a, step_s) for r, a in sorted(tally.active_by_rank.items())},
        measured=any(r.measured for r in ranks),
        mfu_peak_dtype="+".join(dict.fromkeys(peak_dtype_of[gpu_by_rank[r]] for r in used)))


def _throughput(plan: Plan, model_flops: float, step_s: float, n_used: int, peak_sum: float) -> dict[str, float]:
    """Estimate's rates: tokens, samples, model and hardware TFLOP/s per GPU, MFU."""
    t = plan.training
    tokens = t.global_batch * t.seq_len
    recompute_full = all(st.recompute == "full" for st in plan.stages)
    hardware_flops = model_flops * (4 / 3 if recompute_full else 1)
    return {"tokens_per_s": tokens / step_s, "samples_per_s": t.global_batch / step_s,
            "model_tflops_per_gpu": model_flops / step_s / n_used / 1e12,
            "hardware_tflops_per_gpu": hardware_flops / step_s / n_used / 1e12,
            "mfu": model_flops / step_s / peak_sum}


def _mfu_peaks(pricer: PlanPricer, gpu_by_rank: Mapping[int, str],
               used) -> tuple[dict[str, str], dict[int, float]]:
    """The peak dtype of each GPU type in use and the peak FLOP/s of each used rank: MFU's peak is
    the one the GEMMs were priced at, TF32's where fp32 GEMMs run on TF32 (mfu_peak_dtype)."""
    cluster, dtype = pricer.plan.cluster, pricer.plan.training.dtype
    in_use = set(gpu_by_rank.values())
    peak_dtype_of = {gpu.name: mfu_peak_dtype(gpu, dtype, pricer.params_for(gpu))
                     for gpu in cluster.gpu_types if gpu.name in in_use}
    peak_of = {gpu.name: gpu.peak(peak_dtype_of[gpu.name]) for gpu in cluster.gpu_types if gpu.name in in_use}
    return peak_dtype_of, {r: peak_of[gpu_by_rank[r]] for r in used}


def _price_rank(pricer: PlanPricer, k: int, rank_chunks: list[Stage], layer_flops: list[float], schedule,
                v: int, tally: _RankTally) -> _RankPrice:
    """Price pipeline rank k's replicas: its busiest one, its slowest latency, its tail; records each
    GPU rank's memory, capacity, GPU type and model FLOPs, and host-memory overflows, in `tally`."""
    cluster, t = pricer.plan.cluster, pricer.plan.training
    pp = pricer.plan.pp
    head = rank_chunks[0]
    stage_busy, stage_tau, stage_btl, stage_fill, stage_replica = -1.0, 0.0, None, Parts(), None
    stage_tau_price = None
    min_bwd = float("inf")
    measured = False
    # per TP degree of its replicas (one unless per-replica TP): a replica's price, and the GPU types stepping
    by_tp: dict[int, tuple[ReplicaPrice, dict[tuple, tuple[GpuSpec, CostParams]]]] = {}
    offload_hosts: dict[tuple, None] = {}  # (HostSpec, GPUs per node) of an offloaded stage's nodes
    rank_flops = sum(sum(layer_flops[st.layers[0]:st.layers[1]]) for st in rank_chunks)
    held_by_price: dict[tuple[int, int], tuple] = {}  # (id(price), micro-batches) -> (in flight, memory)
    position_steppers: dict[int, dict[tuple, tuple[GpuSpec, CostParams]]] = {}
    for replica in head.replicas:
        price = pricer.replica(rank_chunks, replica)
        view = head.for_replica(replica)
        dims = view.dims
        measured = measured or price.params.measured is not None
        n_micro = replica.batch_share // t.micro_batch
        replica_busy = n_micro * price.per_microbatch_s
        if replica_busy > stage_busy:
            stage_busy, stage_btl, stage_replica = replica_busy, price, replica
        tau = schedule.latency_s(price.per_microbatch_s, price.slowest_chunk_s, v, price.wgrad_s, price.forward_s)
        if tau > stage_tau:
            stage_tau, stage_fill, stage_tau_price = tau, latency_parts(price.chunks, schedule, v), price
        min_bwd = min(min_bwd, price.span.bwd_s)
        by_tp.setdefault(view.tp, (price, {}))[1][(price.gpu.name, price.params)] = (price.gpu, price.params)
        for i, pos in enumerate(price.positions):  # uneven TP shards: each position's GPU types stepping
            position_steppers.setdefault(i, {})[(pos.gpu.name, pos.params)] = (pos.gpu, pos.params)
        held = held_by_price.get((id(price), n_micro))  # replicas alike share their price object
        if held is None:
            held = held_by_price[(id(price), n_micro)] = _held(price, schedule, k, pp, v, n_micro, t, dims, head)
        in_flight, mems = held
        if head.offload or price.act_offload.host_bytes:
            _host_memory(pricer, view, replica, price, in_flight, offload_hosts, tally.host_overflows)
        rank_compute = dims.compute_share(rank_flops * replica.batch_share)
        for i, rank in enumerate(replica.ranks):
            gpu = cluster.group_of_rank(rank).gpu
            mem = mems[i % len(mems)]  # (uneven TP shards: its position's)
            tally.memory[rank], tally.capacity[rank], tally.gpu_by_rank[rank] = mem, gpu.memory_bytes, gpu.name
            tally.flops_by_rank[rank] = rank_compute
            tally.active_by_rank[rank] = replica_busy
    # the gradient reduction runs at the parameters of the replicas' slowest GPU
    reduce_params = pricer.params_for(slowest_gpu(cluster, tuple(rep.ranks[0] for rep in head.replicas)))
    # breadth-first: a loop's backward is the bottleneck replica's micro-batches through one chunk
    loops = schedule.gradient_loops(v)
    loop_bwd = (busy_of(stage_btl, stage_busy) * stage_btl.span.bwd_s / loops) if loops > 1 else 0.0
    def tail_of(span, tp: int, steppers) -> StageTail:
        return stage_tail(span.weight_params, head.at_tp(tp).dims, t.dtype, pricer.layout(head), reduce_params,
                          min_bwd, steppers, loops, loop_bwd, expert_params=span.expert_params, optimizer=t.optimizer,
                          offload_hosts=tuple(offload_hosts), expert_layout=pricer.expert_layout(head),
                          ns_flops=span.ns_flops, ns_expert_flops=span.ns_expert_flops)

    if head.uneven_tp:  # each TP position reduces and steps its own slice (its largest: stage_tail.uneven_tp_tail)
        tails = {head.tp: uneven_tp_tail([tail_of(pos.span, head.tp, position_steppers[i].values())
                                          for i, pos in enumerate(by_tp[head.tp][0].positions)])}
    else:
        tails = {tp: tail_of(price.span, tp, steppers.values()) for tp, (price, steppers) in sorted(by_tp.items())}
    tail = per_replica_tp_tail(tails)
    for replica in head.replicas:  # every replica steps its optimizer shard after its micro-batches
        for rank in replica.ranks:
            tally.active_by_rank[rank] += tails[head.replica_tp(replica)].optimizer_s
    return _RankPrice(stage_busy, stage_tau, stage_btl, stage_replica, stage_fill, stage_tau_price, tail, measured)


def _held(price: ReplicaPrice, schedule, k: int, pp: int, v: int, n_micro: int, t, dims, head: Stage) -> tuple:
    """(micro-batches in flight, memory of each TP position: one figure unless uneven TP shards) of a
    replica running `n_micro` micro-batches at `price`."""
    in_flight, deferred = held_microbatches(schedule, k, pp, v, n_micro, [c.span.act_bytes for c in price.chunks],
                                            price.span.act_bytes)
    mems = tuple(replica_memory(pos.span, in_flight, t.dtype, dims, pos.params, deferred, t.optimizer, head.offload,
                                pos.act_offload) for pos in (price.positions or (price,)))
    return in_flight, mems


def _host_memory(pricer: PlanPricer, head: Stage, replica: Replica, price: ReplicaPrice, in_flight,
                 offload_hosts: dict[tuple, None], host_overflows: list[Overflow]) -> None:
    """ZeRO-Offload's states and offloaded activations: each GPU's take its share of its node's host
    memory; records the offloaded stage's nodes in `offload_hosts` and each GPU over its share."""
    cluster, t, dims = pricer.plan.cluster, pricer.plan.training, head.dims
    hosted = offloaded_activation_bytes(price.act_offload, in_flight)
    if head.offload:
        hosted += offloaded_state_bytes(price.span.weight_params, dims, t.dtype, t.optimizer)
    for rank in replica.ranks:
        group = cluster.group_of_rank(rank)
        if head.offload:
            offload_hosts[(group.host, group.gpus_in_node)] = None
        share = group.host.memory_bytes / group.gpus_in_node
        if hosted > share:
            host_overflows.append(Overflow(rank, f"host memory of a {group.name} node", hosted, share))


def _critical_path(pricer: PlanPricer, chunks: dict[int, list[Stage]], k_star: int, replica: Replica,
                   price: ReplicaPrice, n_busy: float, own: Parts, pipeline: tuple[BoundaryComm, ...], tail,
                   breakdown: dict, flops_per_s: Mapping[int, float],
                   peak_by_rank: Mapping[int, float]) -> CriticalPath:
    """explain.CriticalPath of rank k_star: its busiest replica and the links on its path."""
    cluster = pricer.plan.cluster
    n_micro = round(n_busy)
    rank_chunks = chunks[k_star]
    head = rank_chunks[0]
    links = []
    head = head.for_replica(replica)
    tp_link, cp_link = replica_links(cluster, replica, head)
    if head.tp > 1:
        links.append(link_use("tp", route_name(cluster, replica.ranks[:head.tp]), tp_link, n_micro * own.tp_comm_s))
    if cp_link is not None:
        links.append(link_use("cp", route_name(cluster, replica.ranks[::head.tp]), cp_link, n_micro * own.cp_comm_s))
    if head.ep > 1:
        group = pricer.ep_group(head, replica)
        links.append(link_use("ep", route_name(cluster, pricer.ep_ranks(head, replica)),
                              group.inter if group.nodes > 1 else group.intra,
                              n_micro * own.ep_comm_s))
    pp = pp_link_use(pricer, rank_chunks, pipeline)
    if pp is not None:
        links.append(pp)
    if head.dp * head.cp > 1:
        layout = pricer.layout(head)
        links.append(link_use("dp", route_name(cluster, grad_reduce_ranks(head)),
                              layout.inter if layout.nodes > 1 else layout.intra,
                              tail.grad_reduce_s + n_micro * own.zero_comm_s))
    bound_by = max(breakdown, key=lambda key: (breakdown[key], key))
    rank = replica.ranks[0]
    return CriticalPath(k_star, tuple(st.index for st in rank_chunks), price.gpu.name, tuple(replica.ranks), n_micro,
                        price.per_microbatch_s, min(flops_per_s[r] for r in replica.ranks), peak_by_rank[rank],
                        tuple(links), bound_by, n_busy * own.pp_comm_s, pricer.p2p_mode.name)
