"""What each pipeline boundary's sends cost the step (planner.cost.explain.BoundaryComm): the
link's time over the step, and the part of it on the critical path, which depends on how the
runtime's schedule runs them (planner.cost.p2p): blocking sends hold up both ends, so a boundary
exposes what its sending rank waits for and what its receiving rank waits for, each in full on
the critical rank and as its share of the fill and drain on the others (explain.latency_shares);
overlapped ones expose only what outlasts the sender's compute."""

from __future__ import annotations

from .explain import BoundaryComm, LinkUse, latency_shares, link_use
from .p2p import p2p_s
from .paths import route_name
from .pricing import boundary_bytes
from .replica_pricer import PlanPricer, ReplicaPrice


def pipeline_links(pricer: PlanPricer, chunks: dict, k_star: int, busy: list[float],
                   bottlenecks: list[ReplicaPrice], fill_prices: list[ReplicaPrice], schedule,
                   v: int) -> tuple[BoundaryComm, ...]:
    """BoundaryComm of every boundary between two pipeline ranks, on the sender's busiest replica."""
    plan = pricer.plan

    def waited(rank: int, position: int, part: str) -> float:
        """What rank `rank`'s chunk at `position` waits for of its sends or receives (`part`) on the
        critical path: over its busiest replica's micro-batches on the critical rank, else within
        its share of the rank's latency (the part's share of the chunk's p2p there)."""
        if rank == k_star:
            btl = bottlenecks[rank]
            n = busy[rank] / btl.per_microbatch_s if btl.per_microbatch_s > 0 else 0.0
            return n * getattr(btl.chunks[position], part)
        chunk = fill_prices[rank].chunks[position]
        if not chunk.p2p_s:
            return 0.0
        share = latency_shares(fill_prices[rank].chunks, schedule, v)[position].pp_comm_s
        return share * getattr(chunk, part) / chunk.p2p_s

    out = []
    for st in plan.stages:
        boundary = pricer.boundary(st.index)
        if boundary is None:
            continue
        link, intra = boundary
        successor = pricer.stage_by_index[st.index + 1]
        k, r = st.pipeline_rank, successor.pipeline_rank
        btl = bottlenecks[k]
        n = round(busy[k] / btl.per_microbatch_s) if btl.per_microbatch_s > 0 else 0
        sent = boundary_bytes(plan.model.layers[st.layers[1] - 1], pricer.sharding(st))
        per_microbatch = p2p_s(sent, link, intra, btl.params)
        exposed = (waited(k, [c.index for c in chunks[k]].index(st.index), "send_s")
                   + waited(r, [c.index for c in chunks[r]].index(successor.index), "recv_s"))
        out.append(BoundaryComm(
            st.index, route_name(plan.cluster, [rep.ranks[0] for rep in st.replicas],
                                 [rep.ranks[0] for rep in successor.replicas]),
            link.bandwidth_bytes_per_s, link.latency_s, sent, per_microbatch, n,
            exposed, max(0.0, n * per_microbatch - exposed), pricer.p2p_mode.name))
    return tuple(out)


def pp_link_use(pricer: PlanPricer, rank_chunks: list, links: tuple[BoundaryComm, ...]) -> LinkUse | None:
    """The pipeline boundary of the critical rank (holding `rank_chunks`) that exposes the most, as
    explain.LinkUse (None without one): one it sends over or receives over."""
    indices = {st.index for st in rank_chunks}
    mine = [b for b in links if b.stage in indices or b.stage + 1 in indices]
    if not mine:
        return None
    b = max(mine, key=lambda x: (x.exposed_s, -x.stage))
    return link_use("pp", b.name, pricer.boundary(b.stage)[0], b.exposed_s)
