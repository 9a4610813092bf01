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
from typing import Callable, Mapping

from .cost import (DEFAULT_PARAMS, CostParams, LayerTime, MemoryBreakdown, hierarchical_allreduce_s,
                   in_flight_microbatches, layer_time, model_state_bytes, optimizer_step_s)
from .hardware import GIB, Cluster, GpuSpec, Link
from .model import DTYPE_BYTES
from .plan import Plan, Stage


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


def params_getter(params: CostParams | Mapping[str, CostParams] | None) -> ParamsFor:
    if params is None:
        return lambda gpu: DEFAULT_PARAMS
    if isinstance(params, CostParams):
        return lambda gpu: params
    return lambda gpu: params.get(gpu.name, params.get("*", DEFAULT_PARAMS))


def slowest_gpu(cluster: Cluster, ranks: tuple[int, ...]) -> GpuSpec:
    """The GPU a TP group runs at: the slowest type among its ranks."""
    gpus = {cluster.group_of_rank(r).gpu.name: cluster.group_of_rank(r).gpu for r in ranks}
    return min(gpus.values(), key=lambda g: (min(f for _, f in g.peak_flops), g.name))


def pair_link(cluster: Cluster, group_a: str, group_b: str) -> Link:
    """One GPU's share of the path between nodes of two groups (or two nodes of one group):
    the node's NIC (or the group link) divided among its GPUs, since in training every GPU
    of a node communicates at once."""
    ga, gb = cluster.group(group_a), cluster.group(group_b)
    link = cluster.group_link(group_a, group_b)
    sharers = max(ga.gpus_per_node, gb.gpus_per_node)
    return Link(link.bandwidth_bytes_per_s / sharers, link.latency_s, link.kind)


def slowest(links: list[Link]) -> Link:
    """The bottleneck of a path: lowest bandwidth, highest latency."""
    worst = min(links, key=lambda l: (l.bandwidth_bytes_per_s, -l.latency_s, l.kind))
    return Link(worst.bandwidth_bytes_per_s, max(l.latency_s for l in links), worst.kind)


def collective_links(cluster: Cluster, nodes_per_group: Mapping[str, int]) -> tuple[Link, Link]:
    """(intra-node link, per-GPU inter-node link) of a collective spanning these nodes:
    the slowest intra link of its groups, and the slowest share among its node pairs."""
    groups = sorted(g for g, n in nodes_per_group.items() if n > 0)
    intra = slowest([cluster.group(g).intra_node for g in groups])
    candidates = [pair_link(cluster, g, g) for g in groups if nodes_per_group[g] >= 2]
    candidates += [pair_link(cluster, a, b) for i, a in enumerate(groups) for b in groups[i + 1:]]
    return intra, (slowest(candidates) if candidates else intra)


def nodes_of(cluster: Cluster, ranks) -> dict[tuple[str, int], int]:
    """Ranks per (group, node index) for a set of ranks."""
    nodes: dict[tuple[str, int], int] = {}
    for r in ranks:
        g = cluster.group_of_rank(r)
        key = (g.name, (r - g.first_rank) // g.gpus_per_node)
        nodes[key] = nodes.get(key, 0) + 1
    return nodes


def tp_group_link(cluster: Cluster, ranks) -> Link:
    """The link a tensor-parallel group's ring runs over: its node's intra-node link, or the
    slowest per-GPU inter-node share when the group spans nodes."""
    nodes = nodes_of(cluster, ranks)
    if len(nodes) == 1:
        return cluster.group(next(iter(nodes))[0]).intra_node
    per_group: dict[str, int] = {}
    for g, _ in nodes:
        per_group[g] = per_group.get(g, 0) + 1
    return collective_links(cluster, per_group)[1]


def group_collective_s(cluster: Cluster, ranks, nbytes: float, params: CostParams) -> float:
    """Hierarchical all-reduce of `nbytes` over `ranks` (one rank per TP position)."""
    nodes = nodes_of(cluster, ranks)
    per_group: dict[str, int] = {}
    for g, _ in nodes:
        per_group[g] = per_group.get(g, 0) + 1
    intra, inter = collective_links(cluster, per_group)
    return hierarchical_allreduce_s(nbytes, max(nodes.values()), len(nodes), intra, inter, params)


def boundary_link(cluster: Cluster, ranks_a, ranks_b) -> tuple[Link, bool]:
    """Link across a pipeline boundary: the intra-node link when both stages sit in one
    node, else the slowest per-GPU share between any group of one and any of the other."""
    nodes = nodes_of(cluster, list(ranks_a) + list(ranks_b))
    if len(nodes) == 1:
        (group, _), = nodes
        return cluster.group(group).intra_node, True
    groups_a = sorted({cluster.group_of_rank(r).name for r in ranks_a})
    groups_b = sorted({cluster.group_of_rank(r).name for r in ranks_b})
    return slowest([pair_link(cluster, a, b) for a in groups_a for b in groups_b]), False


def p2p_s(nbytes: float, link: Link, intra: bool, params: CostParams) -> float:
    """Pipeline point-to-point across one boundary for one micro-batch: the activation
    forward and its gradient backward (Narayanan et al. 2021, sec 4.1: with scatter/gather
    each TP rank sends 1/tp of it). Charged to the sending-forward stage."""
    eff = params.intra_link_efficiency if intra else params.inter_link_efficiency
    return 2 * (link.latency_s + nbytes / (link.bandwidth_bytes_per_s * eff))


@dataclass
class _ReplicaCost:
    compute_s: float = 0.0
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    tp_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    zero_comm_s: float = 0.0

    @property
    def per_microbatch_s(self) -> float:
        return self.compute_s + self.tp_comm_s + self.pp_comm_s + self.zero_comm_s


def pipeline_time_s(busy: list[float], tails: list[float], latencies: list[float]) -> tuple[float, int]:
    """Iteration time of a pipeline and its bottleneck rank.

    T = max_k (B_k + E_k - c_k) + sum_k c_k, with B_k the busy time of rank k over the step,
    E_k its exposed gradient reduction and optimizer step, c_k the latency of one micro-batch
    through it (interleaved: through its slowest chunk). Uniform stages give (m - 1) t + p t
    for 1F1B and m t + (p - 1) t / V interleaved (Narayanan et al. 2021, sec 2.2).
    """
    scores = [busy[k] + tails[k] - latencies[k] for k in range(len(busy))]
    k_star = max(range(len(busy)), key=lambda k: (scores[k], -k))
    return scores[k_star] + sum(latencies), k_star


def evaluate(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None) -> Estimate:
    """Price `plan`; never raises for a plan that does not fit (see `fits`, `overflows`)."""
    params_for = params_getter(params)
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
    grad_bytes = 4 if t.dtype == "fp32" else nb

    busy, tails, latencies, bottleneck_costs, exposed_dp, optimizer = [], [], [], [], [], []
    memory: dict[int, MemoryBreakdown] = {}
    capacity: dict[int, float] = {}
    gpu_by_rank: dict[int, str] = {}
    boundaries: dict[int, tuple] = {}  # stage index -> (link, intra-node) to its successor
    zero_comm: dict[tuple, tuple] = {}  # (stage index, params) -> ZeRO-2/3 seconds per micro-batch (RS, AG)

    for k in range(pp):
        rank_chunks = chunks[k]
        head = rank_chunks[0]
        zero, dp = head.zero, head.dp
        stage_busy, stage_tau, stage_btl, stage_opt = -1.0, 0.0, None, 0.0
        min_bwd = float("inf")
        replica_costs: dict[tuple, tuple] = {}
        for r_index, replica in enumerate(head.replicas):
            gpu = slowest_gpu(cluster, replica.ranks)
            p = params_for(gpu)
            tp_link = tp_group_link(cluster, replica.ranks)
            replica_key = (gpu.name, tp_link, p)  # replicas alike in these cost the same
            if replica_key not in replica_costs:
                cost = _ReplicaCost()
                weight_params = acts_per_mb = transient = 0.0
                slowest_chunk = 0.0
                for st in rank_chunks:
                    before = cost.per_microbatch_s
                    stage_layers = layers[st.layers[0]:st.layers[1]]
                    for layer in stage_layers:
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
                    successor = stage_by_index.get(st.index + 1)
                    if successor is not None:
                        nbytes = layers[st.layers[1] - 1].out_bytes_per_sample(s, nb) * b / st.tp
                        if st.index not in boundaries:  # the same for every replica of the stage
                            boundaries[st.index] = boundary_link(cluster, [rr.ranks[0] for rr in st.replicas],
                                                                 [rr.ranks[0] for rr in successor.replicas])
                        link, intra = boundaries[st.index]
                        cost.pp_comm_s += p2p_s(nbytes, link, intra, p)
                    if st.zero >= 2 and st.dp > 1:
                        # ZeRO-2/3 reduce-scatter gradients after every micro-batch's backward;
                        # ZeRO-3 also gathers the weights before its forward and its backward
                        # (Rajbhandari et al. 2020, sec 5.2 and 7.2)
                        if (st.index, p) not in zero_comm:  # the same for every replica of one GPU type
                            shard = sum(l.weight_params for l in stage_layers) / st.tp
                            dp_ranks = [rr.ranks[0] for rr in st.replicas]
                            half = group_collective_s(cluster, dp_ranks, shard * grad_bytes, p) / 2
                            gather = 2 * group_collective_s(cluster, dp_ranks, shard * nb, p) / 2 if st.zero >= 3 else 0.0
                            zero_comm[(st.index, p)] = (half, gather)
                        half, gather = zero_comm[(st.index, p)]
                        cost.zero_comm_s += half
                        if st.zero >= 3:
                            cost.zero_comm_s += gather
                    slowest_chunk = max(slowest_chunk, cost.per_microbatch_s - before)
                replica_costs[replica_key] = (cost, weight_params, acts_per_mb, transient, slowest_chunk)
            cost, weight_params, acts_per_mb, transient, slowest_chunk = replica_costs[replica_key]
            n_micro = replica.batch_share // b
            replica_busy = n_micro * cost.per_microbatch_s
            if replica_busy > stage_busy:
                stage_busy, stage_btl = replica_busy, cost
            stage_tau = max(stage_tau, slowest_chunk if v > 1 else cost.per_microbatch_s)
            min_bwd = min(min_bwd, cost.bwd_s)

            weights, grads, opt = model_state_bytes(weight_params, t.dtype, zero, dp)
            in_flight = in_flight_microbatches(t.schedule, k, pp, v, n_micro)
            mem = MemoryBreakdown(weights, grads, opt, acts_per_mb * in_flight + transient,
                                  p.reserved_memory_bytes)
            for rank in replica.ranks:
                memory[rank] = mem
                capacity[rank] = cluster.group_of_rank(rank).gpu.memory_bytes
                gpu_by_rank[rank] = cluster.group_of_rank(rank).gpu.name
            stage_opt = max(stage_opt, optimizer_step_s(weight_params / (dp if zero >= 1 else 1), gpu, p))

        # data-parallel gradient reduction after the last backward, over the TP-position-0
        # ranks of the replicas (each TP position reduces its own shard at the same time);
        # ZeRO-1 reduce-scatters gradients and all-gathers weights, the volume of an
        # all-reduce; ZeRO-2 only all-gathers weights here (its reduce-scatters ran per
        # micro-batch); ZeRO-3 needs nothing more
        dp_s = 0.0
        if dp > 1 and zero <= 2:
            dp_ranks = [rep.ranks[0] for rep in head.replicas]
            p = params_for(slowest_gpu(cluster, tuple(dp_ranks)))
            stage_params = sum(layers[i].weight_params / st.tp for st in rank_chunks for i in range(*st.layers))
            dp_s = group_collective_s(cluster, dp_ranks, stage_params * grad_bytes, p)
            if zero == 2:
                dp_s /= 2
            if p.overlap_grad_reduce:
                dp_s = max(0.0, dp_s - min_bwd)  # hides behind the last micro-batch's backward
        busy.append(stage_busy)
        latencies.append(stage_tau)
        bottleneck_costs.append(stage_btl)
        exposed_dp.append(dp_s)
        optimizer.append(stage_opt)
        tails.append(dp_s + stage_opt)

    step_s, k_star = pipeline_time_s(busy, tails, latencies)
    btl = bottleneck_costs[k_star]
    n_btl = busy[k_star] / btl.per_microbatch_s if btl.per_microbatch_s > 0 else 0.0
    breakdown = {"compute": n_btl * btl.compute_s, "tp_comm": n_btl * btl.tp_comm_s,
                 "pp_comm": n_btl * btl.pp_comm_s, "dp_comm": exposed_dp[k_star] + n_btl * btl.zero_comm_s,
                 "bubble": sum(latencies) - latencies[k_star], "optimizer": optimizer[k_star]}

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
