"""What sets the step time, in terms a user can check: the critical pipeline rank, its
critical replica (GPU type, ranks), the links on its path with the time each exposes, and
the step time split into parts that sum to it (planner.cost.evaluate builds these). The terms of
the split and which pipeline sends are exposed: docs/cost-model.md, "What sets the step time".
"""

from __future__ import annotations

from dataclasses import dataclass

from ..inputs.hardware import Link
from .p2p import P2P_MODES
from .pricing import ChunkTime

GBPS = 1e9


@dataclass(frozen=True)
class Parts:
    """A span of time split by kind (seconds)."""

    compute_s: float = 0.0
    tp_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    zero_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    offload_s: float = 0.0  # activation offload's exposed PCIe copies (pricing.ActivationOffload)

    @property
    def total_s(self) -> float:
        return sum(getattr(self, f) for f in PART_FIELDS)

    def times(self, n: float) -> "Parts":
        return Parts(*(n * getattr(self, f) for f in PART_FIELDS))

    def plus(self, other: "Parts") -> "Parts":
        return Parts(*(getattr(self, f) + getattr(other, f) for f in PART_FIELDS))


PART_FIELDS = ("compute_s", "tp_comm_s", "pp_comm_s", "zero_comm_s", "cp_comm_s", "ep_comm_s", "offload_s")


def chunk_parts(chunk: ChunkTime) -> Parts:
    """One micro-batch through one chunk: ChunkTime.time_s split (they sum to it)."""
    return Parts(chunk.span.compute_s, chunk.span.tp_comm_s, chunk.p2p_s, chunk.zero_s, chunk.span.cp_comm_s,
                 chunk.span.ep_comm_s, chunk.act_offload.exposed_s)


def latency_shares(chunks: tuple[ChunkTime, ...], schedule, v: int) -> list[Parts]:
    """Each chunk's share of c_k (Schedule.latency_s), split by kind. latency_s is linear in
    the rank's whole pass and its slowest chunk (1F1B: the pass; interleaved: the slowest
    chunk), so chunk i's share is latency_s of its parts, as the slowest chunk when it is."""
    slow = max(range(len(chunks)), key=lambda i: (chunks[i].time_s, -i))
    shares = []
    for i, c in enumerate(chunks):
        p = chunk_parts(c)
        # a split backward's W work is compute (Schedule.latency_s takes it with the compute part)
        shares.append(Parts(*(schedule.latency_s(getattr(p, f), getattr(p, f) if i == slow else 0.0, v,
                                                 c.span.wgrad_s if f == "compute_s" else 0.0,
                                                 c.span.fwd_s if f == "compute_s" else 0.0)
                              for f in PART_FIELDS)))
    return shares


def latency_parts(chunks: tuple[ChunkTime, ...], schedule, v: int) -> Parts:
    """c_k split by kind: the sum of the chunks' shares (latency_shares)."""
    total = Parts()
    for share in latency_shares(chunks, schedule, v):
        total = total.plus(share)
    return total


@dataclass(frozen=True)
class LinkUse:
    """A link on the critical replica's path: `role` tp (its TP group), pp (its pipeline
    boundary: the one it sends over, or for the last rank the one it receives over) or dp
    (its data-parallel reduction); one GPU's share of the bandwidth; the seconds of the step
    spent on it on the critical path."""

    role: str
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    exposed_s: float

    def to_json(self) -> dict:
        return {"role": self.role, "name": self.name, "bandwidth_GBps": self.bandwidth_bytes_per_s / GBPS,
                "latency_us": self.latency_s * 1e6, "exposed_s": self.exposed_s}


def link_use(role: str, name: str, link: Link, exposed_s: float) -> LinkUse:
    return LinkUse(role, name, link.bandwidth_bytes_per_s, link.latency_s, exposed_s)


@dataclass(frozen=True)
class BoundaryComm:
    """The sends across one pipeline boundary (stage `stage` -> `stage + 1`) over the step,
    on the sending stage's busiest replica: its micro-batches x p2p_s per micro-batch, the
    link's time, split into the part on the critical path (exposed: what the critical rank
    waits for of them, and their share of the other ranks' fill and drain) and the rest
    (overlapped: behind compute, or waited for off the critical path). `p2p` how the runtime's
    schedule runs them (cost.p2p.P2P_MODES)."""

    stage: int
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    bytes_per_microbatch: float  # one direction, one GPU
    per_microbatch_s: float  # activation forward and gradient back (pricing.p2p_s)
    micro_batches: int
    exposed_s: float
    overlapped_s: float
    p2p: str = "exchange"

    @property
    def blocking(self) -> bool:
        return P2P_MODES[self.p2p].blocking

    def to_json(self) -> dict:
        return {"from_stage": self.stage, "to_stage": self.stage + 1, "link": self.name, "p2p": self.p2p,
                "bandwidth_GBps": self.bandwidth_bytes_per_s / GBPS, "latency_us": self.latency_s * 1e6,
                "MiB_per_microbatch": self.bytes_per_microbatch / 2**20, "per_microbatch_s": self.per_microbatch_s,
                "micro_batches": self.micro_batches, "exposed_s": self.exposed_s, "overlapped_s": self.overlapped_s}


@dataclass(frozen=True)
class CriticalPath:
    """The pipeline rank whose busy time sets the step, its busiest replica, and the part
    of the step (breakdown key) and the link that weigh most on it."""

    pipeline_rank: int
    stages: tuple[int, ...]
    gpu: str
    ranks: tuple[int, ...]
    micro_batches: int
    per_microbatch_s: float
    model_flops_per_s: float  # per GPU of the critical replica (flops.model_flops_per_sample)
    peak_flops_per_s: float
    links: tuple[LinkUse, ...]
    bound_by: str  # the largest part of breakdown_s
    # what it waits for of its pipeline sends and receives over the step (its micro-batches x
    # ChunkTime.p2p_s) and how its runtime's schedule runs them (cost.p2p.P2P_MODES)
    pp_comm_s: float = 0.0
    p2p: str = "exchange"

    @property
    def link(self) -> LinkUse | None:
        """The link exposing the most time on the critical path (None: no communication)."""
        used = [l for l in self.links if l.exposed_s > 0]
        return max(used, key=lambda l: (l.exposed_s, l.role)) if used else None

    def to_json(self) -> dict:
        link = self.link
        return {"pipeline_rank": self.pipeline_rank, "stages": list(self.stages), "gpu": self.gpu,
                "ranks": list(self.ranks), "micro_batches": self.micro_batches,
                "per_microbatch_s": self.per_microbatch_s, "model_tflops_per_gpu": self.model_flops_per_s / 1e12,
                "peak_tflops_per_gpu": self.peak_flops_per_s / 1e12, "bound_by": self.bound_by,
                "pp_comm_s": self.pp_comm_s, "p2p": self.p2p,
                "link": link.role if link else None, "links": [l.to_json() for l in self.links]}


def breakdown(critical: Parts, fill: Parts, grad_reduce_s: float, optimizer_s: float,
              context_parallel: bool = False) -> dict[str, float]:
    """breakdown_s from the critical replica's busy time, the other ranks' fill and drain,
    and the critical rank's tail (docs/cost-model.md); the parts sum to the step. The key
    cp_comm is there when the plan uses context parallelism (`context_parallel`), ep_comm when it
    uses expert parallelism, offload when activation offload exposes copies (additive keys,
    absent otherwise)."""
    out = {"compute": critical.compute_s, "tp_comm": critical.tp_comm_s + fill.tp_comm_s}
    if context_parallel:
        out["cp_comm"] = critical.cp_comm_s + fill.cp_comm_s
    out.update({"pp_comm": critical.pp_comm_s + fill.pp_comm_s,
                "dp_comm": grad_reduce_s + critical.zero_comm_s + fill.zero_comm_s,
                "bubble": fill.compute_s, "optimizer": optimizer_s})
    ep_comm = critical.ep_comm_s + fill.ep_comm_s
    if ep_comm:
        out["ep_comm"] = ep_comm
    offload = critical.offload_s + fill.offload_s
    if offload:  # activation offload's exposed copies (additive key, absent without them)
        out["offload"] = offload
    return out
