"""Uneven batch shares: how many micro-batches each data-parallel replica of a stage takes.

The stage's busy time is the makespan of M identical micro-batches on replicas of
different speeds, each replica taking at least one and at most what its memory holds.
`min_makespan` computes it in closed form (vectorised over layer counts, used inside
the search); `solve_shares_ilp` solves the same problem as an integer program with
PuLP and returns per-replica shares for the final plan; the two must agree.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from functools import reduce
from typing import Iterator, Sequence

import numpy as np
import pulp

UNCAPPED = 1 << 40


def even_makespan(total: int, counts: Sequence[int], times: Sequence[np.ndarray],
                  caps: Sequence[np.ndarray], least: int = 1) -> np.ndarray:
    """The makespan when every replica takes total / replicas micro-batches (a runtime without
    uneven shares, planner.cost.runtimes.capability): the slowest replica's time; inf where the
    replicas do not divide the micro-batches, the share is below `least` or a replica's memory
    cap is below its share."""
    shape = np.broadcast(*times, *caps).shape
    replicas = sum(counts)
    if replicas == 0 or total % replicas or total // replicas < least:
        return np.full(shape, np.inf)
    load = total // replicas
    slowest = np.full(shape, -np.inf)
    for t, c in zip(times, caps):
        t = np.broadcast_to(np.asarray(t, dtype=float), shape)
        slowest = np.maximum(slowest, np.where(np.broadcast_to(np.asarray(c), shape) >= load, t, np.inf))
    return np.where(np.isfinite(slowest), load * slowest, np.inf)


def min_makespan(total: int, counts: Sequence[int], times: Sequence[np.ndarray],
                 caps: Sequence[np.ndarray], least: int = 1) -> np.ndarray:
    """Smallest C such that replicas of type g (counts[g] of them, per-micro-batch time
    times[g], at most caps[g] each, at least `least` each) can take `total` micro-batches
    with every replica finishing by C. Vectorised over the arrays' common shape (a count may
    be an integer array broadcasting to it: one stage's per row); inf where infeasible. C is
    always j * times[g] for some type g and load j, and feasibility is monotone in C, so a
    binary search over j per type finds it.

    With least L > 1 (a zero-bubble schedule's p micro-batches per replica) it is
    max(C_1, L * slowest time), C_1 the makespan with at least one each: both bound it from
    below, and at that C every replica may take between L and min(cap, C / t) >= L, which
    together hold `total` since C >= C_1 (so it is reached), given total >= L x replicas
    and every cap >= L.
    """
    shape = np.broadcast(*times, *caps).shape
    # too few micro-batches for the replicas (a count may be an array: one per row)
    short = total < least * sum(counts)
    if np.all(short):
        return np.full(shape, np.inf)
    if least > 1:
        out = at_least(least, times, caps, min_makespan(total, counts, times, caps))
    elif len(counts) == 1:
        # one speed class: the busiest replica takes ceil(total / count) micro-batches
        load = -(-total // counts[0])
        t = np.broadcast_to(np.asarray(times[0], dtype=float), shape)
        ok = np.broadcast_to(np.asarray(caps[0]), shape) >= load
        out = np.where(ok & np.isfinite(t), load * t, np.inf)
    else:
        out = _several_types(total, counts, times, caps, shape)
    return np.where(short, np.inf, out) if np.any(short) else out


def _several_types(total: int, counts: Sequence, times: Sequence[np.ndarray], caps: Sequence[np.ndarray],
                   shape: tuple[int, ...]) -> np.ndarray:
    """min_makespan with at least one micro-batch per replica, several replica types: computed
    only where shares can exist (every type finite and holding one, all together `total`)."""
    times = [np.broadcast_to(np.asarray(t, dtype=float), shape) for t in times]
    caps = [np.broadcast_to(np.asarray(c, dtype=np.int64), shape) for c in caps]
    counts = [n if np.ndim(n) == 0 else np.broadcast_to(n, shape) for n in counts]
    float_caps = [c.astype(float) for c in caps]  # (min(load, cap) in floats, as numpy promotes it)
    capacity = sum(n * c for n, c in zip(counts, float_caps))
    possible = capacity >= total
    for c in caps:
        possible &= c >= 1
    for t in times:
        possible &= np.isfinite(t)
    out = np.full(shape, np.inf)
    if possible.any():
        with np.errstate(invalid="ignore", divide="ignore"):
            out[possible] = _walk_up(total, [n if np.ndim(n) == 0 else n[possible] for n in counts],
                                     [t[possible] for t in times], [c[possible] for c in caps],
                                     [c[possible] for c in float_caps])
    return out


def _feasible(total: int, bound: np.ndarray, counts: list, times: list[np.ndarray],
              float_caps: list[np.ndarray]) -> np.ndarray:
    """Whether every replica finishing by `bound` can take `total` micro-batches between them."""
    ok = taken = None
    for n, t, c in zip(counts, times, float_caps):
        load = np.floor(bound / t * (1 + 1e-12))
        ok = load >= 1 if ok is None else ok & (load >= 1)
        share = n * np.minimum(load, c)
        taken = share if taken is None else taken + share
    return ok & (taken >= total)


def _walk_up(total: int, counts: list, times: list[np.ndarray], caps: list[np.ndarray],
             float_caps: list[np.ndarray]) -> np.ndarray:
    """_several_types over entries (1-D) where shares exist: the smallest feasible candidate C."""
    # Walk the candidates upwards from a lower bound (the continuous optimum without
    # memory caps, and no less than the slowest single micro-batch): the first feasible
    # candidate is the optimum. Entries still open after a few steps fall back to the
    # binary search below.
    rates = [n / t for n, t in zip(counts, times)]  # each type's micro-batches per second
    bound = total / sum(rates)
    filled = [c * t for t, c in zip(times, caps)]  # when a replica of the type reaches its cap
    held = [n * c for n, c in zip(counts, float_caps)]  # what the type's replicas hold at their caps
    for _ in range(len(counts)):
        # continuous relaxation with caps: a type whose cap binds at `bound` takes only
        # its cap; the others share the rest in proportion to their speed
        saturated = [f <= bound for f in filled]
        fixed = sum(np.where(sat, h, 0.0) for h, sat in zip(held, saturated))
        rate = sum(np.where(sat, 0.0, r) for r, sat in zip(rates, saturated))
        bound = np.maximum(bound, np.where(rate > 0, (total - fixed) / np.where(rate > 0, rate, 1.0), bound))
    bound = np.maximum(bound, reduce(np.maximum, times))
    result = np.full(len(bound), np.inf)
    index = np.arange(len(bound))  # the entries still open
    for _ in range(8):
        step = reduce(np.minimum, [np.ceil(bound / t * (1 - 1e-12)) * t for t in times])
        done = _feasible(total, step, counts, times, float_caps)
        result[index[done]] = step[done]
        if done.all():
            return result
        open_ = ~done
        index, bound = index[open_], step[open_] * (1 + 1e-12)
        counts = [n if np.ndim(n) == 0 else n[open_] for n in counts]
        times, caps, float_caps = ([a[open_] for a in arrays] for arrays in (times, caps, float_caps))
    best = np.full(len(index), np.inf)
    for n_g, t_g, c_g in zip(counts, times, caps):
        lo = np.ones(len(index), dtype=np.int64)
        hi = np.minimum(c_g, -(-total // n_g)).astype(np.int64)
        hi = np.maximum(hi, 1)
        # smallest j in [lo, hi] with feasible(j * t_g); if hi infeasible, this type never binds
        ok_hi = _feasible(total, hi * t_g, counts, times, float_caps)
        # the bisection over the entries still searching only (each entry's steps are its own)
        at = np.flatnonzero(ok_hi & (lo < hi))
        n_at, t_at, f_at = counts, times, float_caps
        while at.size:
            if len(at) < len(t_at[0]):
                n_at = [n if np.ndim(n) == 0 else n[at] for n in counts]
                t_at, f_at = [t[at] for t in times], [c[at] for c in float_caps]
            low, high = lo[at], hi[at]
            mid = (low + high) // 2
            ok_mid = _feasible(total, mid * t_g[at], n_at, t_at, f_at)
            high = np.where(ok_mid, mid, high)
            low = np.where(ok_mid, low, mid + 1)
            hi[at], lo[at] = high, low
            at = at[low < high]
        candidate = np.where(ok_hi, lo * t_g, np.inf)
        best = np.minimum(best, candidate)
    result[index] = best
    return result


def at_least(least: int, times: Sequence[np.ndarray], caps: Sequence[np.ndarray], one: np.ndarray) -> np.ndarray:
    """min_makespan with at least `least` > 1 micro-batches per replica from `one`, its makespan
    with at least one each: max(one, least x slowest time) where every cap holds `least` (the
    caller has checked total >= least x replicas; min_makespan's docstring)."""
    shape = np.broadcast(*times, *caps).shape
    # (elementwise, so each array at its own shape, broadcast by the operations)
    slowest = reduce(np.maximum, [np.asarray(t, dtype=float) for t in times])
    ok = reduce(np.logical_and, [np.asarray(c) >= least for c in caps])
    out = np.where(ok, np.maximum(one, least * slowest), np.inf)
    return out if out.shape == shape else np.array(np.broadcast_to(out, shape))


@dataclass(frozen=True)
class ShareSolution:
    shares: tuple[int, ...]  # micro-batches per replica, in the order given
    optimal: bool


@dataclass(frozen=True)
class IlpOptions:
    solver: str = "HiGHS"  # "HiGHS" (highspy) or "CBC" (bundled with PuLP)
    time_limit_s: float | None = None


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """highspy prints a banner on stdout from C when a model is created, whatever the
    options say; --json promises nothing but JSON on stdout, so silence fd 1 meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def highs(time_limit_s: float | None = None, gap_rel: float | None = None):
    """PuLP's HiGHS interface as every solve of the planner runs it: quiet and on one thread.
    HiGHS keeps one thread scheduler per process, sized by its first solve (a later solve asking
    another size is refused), and its worker threads do not survive a fork: with one thread
    there are none, so the lane processes (orchestration.parallel) fork a process that holds
    no solver thread (a thread holding a lock at the fork leaves the child waiting on it)."""
    return pulp.HiGHS(msg=False, threads=1, timeLimit=time_limit_s, gapRel=gap_rel)


def _solver(options: IlpOptions):
    if options.solver.upper() == "CBC":
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=options.time_limit_s, gapRel=0)
    return highs(options.time_limit_s, 0)


def solve_shares_ilp(total: int, replica_times: Sequence[float], replica_caps: Sequence[int],
                     options: IlpOptions = IlpOptions(), least: int = 1) -> ShareSolution:
    """Integer program for the shares of one stage, aggregated by replica speed class.

    1. Variables: per class g, k_g (largest load of one replica, integer) and m_g (the
       class's micro-batches, integer); C, the makespan.
    2. Objective: minimise C.
    3. Constraints: (a) k_g t_g <= C; (b) m_g <= n_g k_g; (c) m_g >= n_g L (each replica at
       least L = `least`, 1 but for zero bubble's p); (d) k_g <= cap_g (memory); (e) sum_g m_g = total.
    Accepts only a proven-optimal solution; shares are then spread evenly inside a class.
    """
    classes: dict[tuple[float, int], list[int]] = {}
    for index, (t, cap) in enumerate(zip(replica_times, replica_caps)):
        classes.setdefault((t, cap), []).append(index)
    keys = sorted(classes)
    prob = pulp.LpProblem("stage_shares", pulp.LpMinimize)
    # 1. variables
    makespan = prob.add_variable("C", lowBound=0)
    load = {i: prob.add_variable(f"k_{i}", lowBound=least, upBound=min(cap, total), cat="Integer")
            for i, (t, cap) in enumerate(keys)}
    assigned = {i: prob.add_variable(f"m_{i}", lowBound=0, upBound=total, cat="Integer")
                for i in range(len(keys))}
    # 2. objective
    prob += makespan
    # 3. constraints
    for i, (t, _cap) in enumerate(keys):
        n = len(classes[keys[i]])
        prob += load[i] * t <= makespan, f"a_makespan_{i}"
        prob += assigned[i] <= n * load[i], f"b_class_capacity_{i}"
        prob += assigned[i] >= n * least, f"c_at_least_one_each_{i}"
    prob += pulp.lpSum(assigned.values()) == total, "e_all_microbatches"
    with quiet_stdout():
        prob.solve(_solver(options))
    optimal = prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal
    if prob.status != pulp.LpStatusOptimal:
        raise ValueError(f"share ILP not solved: {pulp.LpStatus[prob.status]}")
    shares = [0] * len(replica_times)
    for i, key in enumerate(keys):
        members = classes[key]
        m = int(round(assigned[i].value()))
        base, extra = divmod(m, len(members))
        for j, index in enumerate(members):
            shares[index] = base + (1 if j < extra else 0)
    return ShareSolution(tuple(shares), optimal)
