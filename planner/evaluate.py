"""Price a Plan under the cost model: step time, its breakdown, memory of every device.

The pipeline's iteration time generalises 1F1B (Narayanan et al. 2021, sec 2.2) to
heterogeneous stages with uneven data-parallel shares: each stage is busy for
B_k = max over its replicas of (micro-batches x time per micro-batch); the step takes
the busiest stage's B_k plus the fill and drain of the others, divided by V when
interleaved: T = max_k B_k + (sum_k tau_k - tau_k*) / V, with tau_k a stage's slowest
per-micro-batch time. For uniform stages this is the familiar (m - 1 + p) t (1F1B) and
m t + (p - 1) t / V (interleaved).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from .cost import (DEFAULT_PARAMS, CostParams, LayerTime, MemoryBreakdown, hierarchical_allreduce_s,
                   in_flight_microbatches, layer_time, model_state_bytes, optimizer_step_s,
                   ring_allgather_s)
from .hardware import GIB, Cluster, GpuSpec, Link
from .model import DTYPE_BYTES
from .plan import Plan, Replica, Stage


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
            "overflows": [{"rank": o.rank, "gpu": o.gpu, "need_GiB": o.need_bytes / GIB,
                           "capacity_GiB": o.capacity_bytes / GIB, "over_GiB": o.over_bytes / GIB}
                          for o in self.overflows],
        }


ParamsFor = Callable[[GpuSpec], CostParams]


def _params_getter(params: CostParams | Mapping[str, CostParams] | None) -> ParamsFor:
    if params is None:
        return lambda gpu: DEFAULT_PARAMS
    if isinstance(params, CostParams):
        return lambda gpu: params
    return lambda gpu: params.get(gpu.name, params.get("*", DEFAULT_PARAMS))


def _gpu_of(cluster: Cluster, ranks: tuple[int, ...]) -> GpuSpec:
    """The GPU a TP group runs at: the slowest type among its ranks."""
    gpus = {cluster.group_of_rank(r).gpu.name: cluster.group_of_rank(r).gpu for r in ranks}
    return min(gpus.values(), key=lambda g: (min(f for _, f in g.peak_flops), g.name))


def per_gpu_link(cluster: Cluster, rank_a: int, rank_b: int) -> Link:
    """One GPU's share of the path between two ranks: the whole intra-node link inside a
    node; across nodes, the node's NIC (or the group link) divided among its GPUs, since
    in training every GPU of a node communicates at once."""
    ga, gb = cluster.group_of_rank(rank_a), cluster.group_of_rank(rank_b)
    if ga.name == gb.name and (rank_a - ga.first_rank) // ga.gpus_per_node == (rank_b - gb.first_rank) // gb.gpus_per_node:
        return ga.intra_node
    link = cluster.link(rank_a, rank_b)
    sharers = max(ga.gpus_per_node, gb.gpus_per_node)
    return Link(link.bandwidth_bytes_per_s / sharers, link.latency_s, link.kind)


def _nodes_of(cluster: Cluster, ranks: tuple[int, ...] | list[int]) -> dict[tuple[str, int], list[int]]:
    nodes: dict[tuple[str, int], list[int]] = {}
    for r in ranks:
        g = cluster.group_of_rank(r)
        nodes.setdefault((g.name, (r - g.first_rank) // g.gpus_per_node), []).append(r)
    return nodes


def ring_link(cluster: Cluster, ranks: list[int] | tuple[int, ...]) -> tuple[Link, Link, int, int]:
    """(intra link, per-GPU inter link, ranks per node, nodes) of a collective's group:
    the slowest of each kind among the nodes and groups it spans."""
    nodes = _nodes_of(cluster, ranks)
    groups = sorted({key[0] for key in nodes})
    intra = min((cluster.group(g).intra_node for g in groups), key=lambda l: l.bandwidth_bytes_per_s)
    firsts = [members[0] for _, members in sorted(nodes.items())]
    inter = intra
    if len(firsts) > 1:
        candidates = []
        reps = {}
        for key, members in sorted(nodes.items()):
            reps.setdefault(key[0], members[0])
            if len(reps) and key[0] in reps and reps[key[0]] != members[0]:
                candidates.append(per_gpu_link(cluster, reps[key[0]], members[0]))
        rep_list = list(reps.values())
        for i, a in enumerate(rep_list):
            for b in rep_list[i + 1:]:
                candidates.append(per_gpu_link(cluster, a, b))
        inter = min(candidates, key=lambda l: (l.bandwidth_bytes_per_s, -l.latency_s))
        inter = Link(inter.bandwidth_bytes_per_s, max(c.latency_s for c in candidates), inter.kind)
    per_node = max(len(m) for m in nodes.values())
    return intra, inter, per_node, len(nodes)


@dataclass
class _ReplicaCost:
    compute_s: float = 0.0
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    tp_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    zero3_s: float = 0.0

    @property
    def per_microbatch_s(self) -> float:
        return self.compute_s + self.tp_comm_s + self.pp_comm_s + self.zero3_s


def evaluate(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None) -> Estimate:
    """Price `plan`; never raises for a plan that does not fit (see `fits`, `overflows`)."""
    params_for = _params_getter(params)
    model, cluster, t = plan.model, plan.cluster, plan.training
    b, s = t.micro_batch, t.seq_len
    nb = DTYPE_BYTES[t.dtype]
    v = t.virtual_stages if t.schedule == "interleaved" else 1
    pp = plan.pp
    chunks: dict[int, list[Stage]] = {}
    for st in plan.stages:
        chunks.setdefault(st.pipeline_rank, []).append(st)
    stage_by_index = {st.index: st for st in plan.stages}
    layers = model.layers

    busy: list[float] = []
    slowest: list[_ReplicaCost] = []
    bottleneck_costs: list[_ReplicaCost] = []
    dp_times: list[float] = []
    overlap: list[float] = []
    memory: dict[int, MemoryBreakdown] = {}
    capacity: dict[int, float] = {}
    gpu_by_rank: dict[int, str] = {}
    optimizer_s = 0.0
    grad_bytes = 4 if t.dtype == "fp32" else nb

    for k in range(pp):
        rank_chunks = chunks[k]
        head = rank_chunks[0]
        stage_busy, stage_tau, stage_btl = 0.0, None, None
        replica_costs = []
        for r_index, replica in enumerate(head.replicas):
            gpu = _gpu_of(cluster, replica.ranks)
            p = params_for(gpu)
            intra, inter, _, tp_nodes = ring_link(cluster, replica.ranks)
            tp_link = intra if tp_nodes == 1 else inter
            cost = _ReplicaCost()
            weight_params = 0.0
            acts_per_mb = 0.0
            transient = 0.0
            for st in rank_chunks:
                rep = st.replicas[r_index] if r_index < len(st.replicas) else replica
                for layer in layers[st.layers[0]:st.layers[1]]:
                    lt: LayerTime = layer_time(layer, gpu, t.dtype, b, s, st.tp, st.sequence_parallel,
                                               t.attention, st.recompute, tp_link, p)
                    cost.compute_s += lt.compute_s
                    cost.fwd_s += lt.fwd_s
                    cost.bwd_s += lt.bwd_s + lt.recompute_s
                    cost.tp_comm_s += lt.tp_comm_s
                    weight_params += layer.weight_params / st.tp
                    acts_per_mb += layer.act_bytes_per_sample(s, st.recompute, st.tp, st.sequence_parallel,
                                                              t.attention, nb) * b
                    if st.recompute == "full" and layer.kind == "decoder":
                        transient = max(transient, layer.act_bytes_per_sample(
                            s, "none", st.tp, st.sequence_parallel, t.attention, nb) * b)
                # pipeline point-to-point (Narayanan et al. 2021, sec 4.1, scatter/gather):
                # each TP rank sends 1/tp of the boundary activation forward, and of its
                # gradient backward, to the neighbouring stage's replica
                boundary = layers[st.layers[1] - 1].out_bytes_per_sample(s, nb) * b / st.tp
                for neighbour_index in (st.index + 1, st.index - 1):
                    neighbour = stage_by_index.get(neighbour_index)
                    if neighbour is None:
                        continue
                    nbytes = boundary if neighbour_index > st.index else \
                        layers[st.layers[0] - 1].out_bytes_per_sample(s, nb) * b / st.tp
                    peer = neighbour.replicas[r_index % neighbour.dp].ranks[0]
                    link = per_gpu_link(cluster, rep.ranks[0], peer)
                    eff = p.intra_link_efficiency if link is intra else p.inter_link_efficiency
                    cost.pp_comm_s += link.latency_s + nbytes / (link.bandwidth_bytes_per_s * eff)
                if st.zero >= 3 and st.dp > 1:
                    # ZeRO-3 gathers the stage's weights before forward and again before
                    # backward of every micro-batch (Rajbhandari et al. 2020, sec 7.2.2)
                    dp_ranks = [rr.ranks[0] for rr in st.replicas]
                    d_intra, d_inter, per_node, nodes = ring_link(cluster, dp_ranks)
                    shard = sum(l.weight_params for l in layers[st.layers[0]:st.layers[1]]) / st.tp * nb
                    link = d_intra if nodes == 1 else d_inter
                    eff = p.intra_link_efficiency if nodes == 1 else p.inter_link_efficiency
                    cost.zero3_s += 2 * ring_allgather_s(shard, st.dp, link, eff)
            n_micro = replica.batch_share // b
            replica_busy = n_micro * cost.per_microbatch_s
            replica_costs.append(cost)
            if replica_busy > stage_busy or stage_btl is None:
                stage_busy, stage_btl = replica_busy, cost
            if stage_tau is None or cost.per_microbatch_s > stage_tau.per_microbatch_s:
                stage_tau = cost

            # memory of every rank of this replica
            zero, dp = head.zero, head.dp
            weights, grads, opt = model_state_bytes(weight_params, t.dtype, zero, dp)
            in_flight = in_flight_microbatches(t.schedule, k, pp, v, n_micro)
            mem = MemoryBreakdown(weights, grads, opt, acts_per_mb * in_flight + transient,
                                  p.reserved_memory_bytes)
            for rank in replica.ranks:
                memory[rank] = mem
                capacity[rank] = cluster.group_of_rank(rank).gpu.memory_bytes
                gpu_by_rank[rank] = cluster.group_of_rank(rank).gpu.name
            on_device = weight_params / (dp if zero >= 1 else 1)
            optimizer_s = max(optimizer_s, optimizer_step_s(on_device, gpu, p))
        busy.append(stage_busy)
        slowest.append(stage_tau)
        bottleneck_costs.append(stage_btl)

        # data-parallel gradient reduction of this pipeline rank, over the TP-position-0
        # ranks of its replicas (every TP position reduces its own shard at the same time)
        if head.dp > 1:
            dp_ranks = [rep.ranks[0] for rep in head.replicas]
            d_intra, d_inter, per_node, nodes = ring_link(cluster, dp_ranks)
            grad_total = sum(layers[i].weight_params / st.tp for st in rank_chunks
                             for i in range(*st.layers)) * grad_bytes
            p = params_for(_gpu_of(cluster, tuple(dp_ranks)))
            # ZeRO 1-2 reduce-scatter gradients and all-gather weights: the same volume as an
            # all-reduce; ZeRO-3's extra gathers are charged per micro-batch above
            dp_times.append(hierarchical_allreduce_s(grad_total, per_node, nodes, d_intra, d_inter, p))
            overlap.append(min(c.bwd_s for c in replica_costs) if p.overlap_grad_reduce else 0.0)
        else:
            dp_times.append(0.0)
            overlap.append(0.0)

    k_star = max(range(pp), key=lambda k: (busy[k], -k))
    taus = [c.per_microbatch_s for c in slowest]
    pipe_s = busy[k_star] + (sum(taus) - taus[k_star]) / v
    # The last backward of pipeline rank k finishes before the step's end by the backward
    # of the ranks before it; its gradient reduction hides in that drain.
    dp_exposed = 0.0
    drain = 0.0
    for k in range(pp):
        dp_exposed = max(dp_exposed, dp_times[k] - overlap[k] - (drain if v == 1 else 0.0))
        drain += slowest[k].bwd_s
    step_s = pipe_s + dp_exposed + optimizer_s
    btl = bottleneck_costs[k_star]
    n_btl = busy[k_star] / btl.per_microbatch_s if btl.per_microbatch_s > 0 else 0.0
    breakdown = {"compute": n_btl * btl.compute_s, "tp_comm": n_btl * btl.tp_comm_s,
                 "pp_comm": n_btl * btl.pp_comm_s, "dp_comm": dp_exposed + n_btl * btl.zero3_s,
                 "bubble": pipe_s - busy[k_star], "optimizer": optimizer_s}

    used = plan.used_ranks()
    tokens = t.global_batch * s
    model_flops = 3 * model.fwd_flops_per_sample(s) * t.global_batch  # fwd + 2x bwd
    recompute_full = all(st.recompute == "full" for st in plan.stages)
    hardware_flops = model_flops * (4 / 3 if recompute_full else 1)
    peak_sum = sum(cluster.group_of_rank(r).gpu.peak(t.dtype) for r in used)
    overflows = tuple(Overflow(r, gpu_by_rank[r], memory[r].total_bytes, capacity[r])
                      for r in sorted(memory) if memory[r].total_bytes > capacity[r])
    return Estimate(
        fits=not overflows, step_time_s=step_s, breakdown_s=breakdown,
        tokens_per_s=tokens / step_s, samples_per_s=t.global_batch / step_s,
        model_tflops_per_gpu=model_flops / step_s / len(used) / 1e12,
        hardware_tflops_per_gpu=hardware_flops / step_s / len(used) / 1e12,
        mfu=model_flops / step_s / peak_sum, bubble_fraction=breakdown["bubble"] / step_s,
        num_gpus_used=len(used), memory_by_rank=memory, capacity_by_rank=capacity,
        gpu_by_rank=gpu_by_rank, overflows=overflows)
