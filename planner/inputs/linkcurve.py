"""A link's measured size curve (planner profile-links): the bus bandwidth one collective
reached at each message size, and the latency + size/bandwidth line fitted to it.

Bandwidths follow the NCCL bus-bandwidth convention (nccl-tests, doc/PERFORMANCE.md): for a
collective of S bytes on n ranks taking t seconds, algbw = S/t and busbw = algbw x factor,
factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
send/recv. S is the whole buffer: all-reduce's buffer, all-gather's output, reduce-scatter's
input, what one rank sends in an all-to-all or a send/recv.

A collective of S bytes over a link with a curve for its kind takes factor x S / busbw(S),
busbw interpolated linearly in log S between the measured sizes (the measured time includes
its latency); beyond the ends, the fitted line: factor x S / bandwidth + hops x latency, hops
being the ring's sequential steps (2(n-1) all-reduce, n-1 all-gather and reduce-scatter and
all-to-all, 1 send/recv). The fit is least squares of t = alpha + factor S / B on the
relative error (each point weighted 1/t, so the small sizes set alpha and the large ones B),
alpha >= 0 (refitted through the origin when the free fit is negative); latency = alpha / hops
(written within the ranges of bandwidth_GBps and latency_us, planner.core.ranges).
Measured figures are achieved bandwidths: the cost model's link efficiency does not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..core import ranges
from ..core.errors import BadInput
from ..core.io import check_keys

GB = 1e9
US = 1e-6
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
CURVE_KEYS = ("ranks", "bandwidth_GBps", "latency_us", "size_bytes", "busbw_GBps", "time_us", "algbw_GBps")


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw of nccl-tests (doc/PERFORMANCE.md) for `op` on `ranks` ranks."""
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op == "sendrecv":
        return 1.0
    return (ranks - 1) / ranks


def latency_hops(op: str, ranks: int) -> int:
    """Sequential latencies of the ring algorithm (cost.ring_allreduce_s, ring_allgather_s)."""
    if op == "all_reduce":
        return 2 * (ranks - 1)
    if op == "sendrecv":
        return 1
    return ranks - 1


@dataclass(frozen=True)
class LinkCurve:
    """One collective's measured curve on a link (SI units), and its fitted line."""

    op: str
    ranks: int
    sizes_bytes: tuple[float, ...]  # strictly increasing, at least 2
    bus_bandwidths_bytes_per_s: tuple[float, ...]  # busbw at each size
    bandwidth_bytes_per_s: float  # fitted bus bandwidth
    latency_s: float  # fitted, per ring step
    _log_sizes: tuple[float, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_log_sizes", tuple(float(x) for x in np.log(self.sizes_bytes)))

    def bandwidth_at(self, nbytes):
        """busbw at `nbytes` (a number or an array), interpolated in log size, clamped at the ends."""
        n = np.maximum(np.asarray(nbytes, dtype=float), self.sizes_bytes[0])
        return np.interp(np.log(n), self._log_sizes, self.bus_bandwidths_bytes_per_s)

    def time_s(self, nbytes, ranks: int):
        """Seconds of this collective on `ranks` ranks for `nbytes` (a number or an array)."""
        factor, hops = bus_factor(self.op, ranks), latency_hops(self.op, ranks)
        n = np.asarray(nbytes, dtype=float)
        inside = (n >= self.sizes_bytes[0]) & (n <= self.sizes_bytes[-1])
        t = np.where(inside, factor * n / self.bandwidth_at(n),
                     factor * n / self.bandwidth_bytes_per_s + hops * self.latency_s)
        return float(t) if t.ndim == 0 else t

    def scaled(self, share: float) -> "LinkCurve":
        """The curve with every bandwidth times `share` (one GPU's share of a node's link)."""
        return LinkCurve(self.op, self.ranks, self.sizes_bytes,
                         tuple(b * share for b in self.bus_bandwidths_bytes_per_s),
                         self.bandwidth_bytes_per_s * share, self.latency_s)


def collective_s(op: str, nbytes, ranks: int, curves: Sequence[LinkCurve], bandwidth_bytes_per_s: float,
                 latency_s: float):
    """A collective over a measured link: its curve for `op`, else the link's own fitted line
    (factor S / bandwidth + hops latency, no efficiency: the figures are measured)."""
    for curve in curves:
        if curve.op == op:
            return curve.time_s(nbytes, ranks)
    factor, hops = bus_factor(op, ranks), latency_hops(op, ranks)
    return factor * nbytes / bandwidth_bytes_per_s + hops * latency_s


# --- fitting (planner profile-links) ------------------------------------------------------------


def fit_line(op: str, ranks: int, sizes_bytes: Sequence[float], times_s: Sequence[float]) -> tuple[float, float]:
    """(bus bandwidth B in bytes/s, latency per ring step in s) of t = alpha + factor S / B,
    least squares on the relative error, alpha >= 0; B is the largest measured busbw when
    the times do not grow with the size (noise at tiny sizes only)."""
    s = np.asarray(sizes_bytes, dtype=float) * bus_factor(op, ranks)
    t = np.asarray(times_s, dtype=float)
    a = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha = 0.0
        beta = float(np.sum(s / t) / np.sum((s / t) ** 2))
    if beta <= 0:
        return float(np.max(s / t)), float(np.min(t)) / latency_hops(op, ranks)
    return float(1 / beta), float(alpha) / latency_hops(op, ranks)


def curve_json(op: str, ranks: int, sizes_bytes: Sequence[int], times_s: Sequence[float], share: float = 1.0) -> dict:
    """One collective's entry of a link's `curve` (formats.md section 6): the fitted line, and
    time, algbw and busbw at each size; bandwidths times `share` (the ranks that measured at
    once when the link is a node's: inter_node and links are per node)."""
    bandwidth, latency = fit_line(op, ranks, sizes_bytes, times_s)
    factor = bus_factor(op, ranks)
    algbw = [s / t / GB for s, t in zip(sizes_bytes, times_s)]
    low, high = ranges.RANGES["bandwidth_GBps"].low, ranges.RANGES["latency_us"].high
    return {"ranks": ranks, "bandwidth_GBps": max(low, _round(bandwidth * share / GB)),
            "latency_us": min(high, _round(latency / US)),
            "size_bytes": [int(s) for s in sizes_bytes],
            "busbw_GBps": [_round(a * factor * share) for a in algbw],
            "time_us": [_round(t / US) for t in times_s],
            "algbw_GBps": [_round(a * share) for a in algbw]}


def _round(value: float) -> float:
    return float(f"{value:.6g}")


# --- reading --------------------------------------------------------------------------------


def _numbers(entry: dict, key: str, figure: str, where: str, prefix: str, length: int | None) -> list:
    values = entry.get(key)
    if not isinstance(values, list) or (length is None and len(values) < 2):
        raise BadInput("must be a list of at least 2 numbers" if length is None else
                       f"must be a list of {length} numbers (one per size_bytes)", where, f"{prefix}.{key}")
    if length is not None and len(values) != length:
        raise BadInput(f"has {len(values)} values for {length} sizes in size_bytes", where, f"{prefix}.{key}")
    return [ranges.check(v, figure, where, f"{prefix}.{key}[{i}]") for i, v in enumerate(values)]


def read_curves(data: Any, where: str, field_name: str, bandwidth_bytes_per_s: float,
                latency_s: float) -> tuple[LinkCurve, ...]:
    """The `curve:` mapping of a link (collective -> measured curve), checked; () when absent.
    A curve's own bandwidth_GBps / latency_us default to the link's."""
    if data is None:
        return ()
    if not isinstance(data, dict) or not data:
        raise BadInput(f"must be a mapping of collective ({', '.join(OPS)}) to its curve", where, field_name)
    check_keys(data, OPS, where, field_name, "collective")
    curves = []
    for op in sorted(data, key=str):
        prefix = f"{field_name}.{op}"
        entry = data[op]
        if not isinstance(entry, dict):
            raise BadInput("must be a mapping with ranks, size_bytes and busbw_GBps", where, prefix)
        check_keys(entry, CURVE_KEYS, where, prefix)
        ranks_n = ranges.get(entry, "ranks", "degree", where, f"{prefix}.ranks")
        if ranks_n < 2:
            raise BadInput(f"must be at least 2 (a collective between ranks), got {ranks_n}", where, f"{prefix}.ranks")
        sizes = _numbers(entry, "size_bytes", "message_bytes", where, prefix, None)
        for i in range(1, len(sizes)):
            if sizes[i] <= sizes[i - 1]:
                raise BadInput(f"sizes must increase strictly: {sizes[i]} follows {sizes[i - 1]}", where,
                               f"{prefix}.size_bytes[{i}]")
        busbw = _numbers(entry, "busbw_GBps", "curve_GBps", where, prefix, len(sizes))
        for key, figure in (("time_us", "curve_time_us"), ("algbw_GBps", "curve_GBps")):
            if key in entry:
                _numbers(entry, key, figure, where, prefix, len(sizes))
        bw = ranges.get(entry, "bandwidth_GBps", "bandwidth_GBps", where, f"{prefix}.bandwidth_GBps",
                        required=False, default=bandwidth_bytes_per_s / GB)
        lat = ranges.get(entry, "latency_us", "latency_us", where, f"{prefix}.latency_us",
                         required=False, default=latency_s / US)
        curves.append(LinkCurve(op, ranks_n, tuple(float(s) for s in sizes), tuple(b * GB for b in busbw),
                                bw * GB, lat * US))
    return tuple(curves)
