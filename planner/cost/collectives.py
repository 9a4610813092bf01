"""The ring collectives over one link, in seconds (NCCL's bus-bandwidth model), shared by every
collective the cost model prices; planner.cost.formulas re-exports them with the link
efficiencies and the hierarchical all-reduce built on them."""

from __future__ import annotations

import numpy as np

from ..inputs.hardware import Link
from ..inputs.linkcurve import collective_s


def ring_allreduce_s(nbytes: float, ranks: int, link: Link, efficiency: float) -> float:
    """Ring all-reduce: 2(n-1)/n of the bytes over the link, 2(n-1) latencies
    (Patarasuk and Yuan 2009; NCCL's bus-bandwidth model). A measured link prices it by its
    size curve instead (planner.inputs.linkcurve)."""
    if ranks <= 1 or (np.ndim(nbytes) == 0 and nbytes <= 0):
        return 0.0
    if link.curves:
        return _none_where_empty(nbytes, collective_s("all_reduce", nbytes, ranks, link.curves,
                                                      link.bandwidth_bytes_per_s, link.latency_s))
    bw = link.bandwidth_bytes_per_s * efficiency
    return _none_where_empty(nbytes, 2 * (ranks - 1) / ranks * nbytes / bw + 2 * (ranks - 1) * link.latency_s)


def _none_where_empty(nbytes, seconds):
    """`seconds`, 0 where an array's `nbytes` is 0: no collective runs on an empty buffer, as a
    scalar's (above) says (the search prices arrays over block counts, evaluate a plan's scalars)."""
    if isinstance(nbytes, (int, float)):
        return seconds
    return np.where(np.asarray(nbytes) > 0, seconds, 0.0) if np.ndim(nbytes) else seconds


def ring_allgather_s(nbytes: float, ranks: int, link: Link, efficiency: float, op: str = "all_gather") -> float:
    """Ring all-gather or reduce-scatter (`op`) of a `nbytes` buffer: (n-1)/n of it, n-1
    latencies; a measured link prices it by its size curve for `op` (planner.inputs.linkcurve)."""
    if ranks <= 1 or (np.ndim(nbytes) == 0 and nbytes <= 0):
        return 0.0
    if link.curves:
        return _none_where_empty(nbytes, collective_s(op, nbytes, ranks, link.curves, link.bandwidth_bytes_per_s,
                                                      link.latency_s))
    bw = link.bandwidth_bytes_per_s * efficiency
    return _none_where_empty(nbytes, (ranks - 1) / ranks * nbytes / bw + (ranks - 1) * link.latency_s)
