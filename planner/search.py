"""Plan search: the fastest plan under the cost model, with a proof of optimality.

Search space (all of it searched jointly):
  * micro-batch size b (options), 1F1B schedule;
  * P pipeline stages over contiguous, uneven layer ranges (embedding with the first,
    head with the last);
  * each stage on whole nodes: any number of nodes of any node groups (so a stage can sit
    on one GPU type, as in Metis, or mix types across its data-parallel replicas, as in
    HAP), its own tensor-parallel degree (inside a node) and recompute mode; nodes may
    stay idle;
  * uneven batch shares between a stage's replicas, in whole micro-batches, bounded by
    each replica's memory.
  Sequence parallelism (whenever tp > 1) and ZeRO-1 (whenever dp > 1) are always on:
  under the cost model each is never slower and never uses more memory, so fixing them
  keeps the optimum. GPipe is dominated by 1F1B (same time, more memory).

Algorithm. Nodes of one group are interchangeable, so the dynamic programme's state is
(nodes used per group, stages placed, groups of the next stage) with the layers placed as
a vector, built from the last stage backwards (a stage's in-flight micro-batches, P - k,
is then known). The iteration time T = max_k X_k + sum_k tau_k (evaluate.pipeline_time_s)
has a bottleneck term and a sum, so the DP minimises sum tau subject to X_k <= W and W
descends (Alpa's t_max enumeration, Zheng et al. 2022, sec 5.2): a plan with X <= W_i
found with sum tau = S_i rules out every W in (min(X_i, UB - S_i), W_i], and the search
stops when no plan remains, which proves the best plan seen optimal. Decoder blocks are
identical, so stage costs depend on the block count only. Shares inside the DP come from
the closed-form makespan (shares.min_makespan); the final plan's shares are solved as an
integer program (shares.solve_shares_ilp) and the whole plan is re-priced by
evaluate.evaluate, which must agree.

Scale. On large clusters the node groups are cut into R identical bundles (R divides every
group's node count) and each stage's replicas span all bundles; plans from bundles are a
subset of the full space, so a bundled search reports optimal=false with the gap to a
lower bound (the step time if every GPU computed at its best rate, with no communication).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import reduce
from itertools import product
from typing import Iterator

import numpy as np

from .cost import DEFAULT_PARAMS, CostParams, hierarchical_allreduce_s, layer_time, model_state_bytes, optimizer_step_s
from .errors import BadInput, NoFeasiblePlan
from .evaluate import Estimate, collective_links, evaluate, p2p_s, pair_link, slowest
from .hardware import GIB, Cluster, Link, NodeGroup
from .model import DTYPE_BYTES, Layer, Model
from .plan import Plan, Replica, Stage, Training, structural_problems
from .shares import UNCAPPED, IlpOptions, min_makespan, solve_shares_ilp

INF = float("inf")


@dataclass(frozen=True)
class SolverOptions:
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    recompute_modes: tuple[str, ...] = ("none", "selective", "full")
    zero_stages: tuple[int, ...] = (1, 2, 3)  # with dp > 1; ZeRO-0 is dominated by ZeRO-1
    max_exact_nodes: int = 8  # clusters with at most this many nodes are searched whole (exact)
    max_bundle_nodes: int = 4  # larger clusters: identical bundles of at most this many nodes
    max_stages: int = 16
    time_limit_s: float | None = None
    ilp: IlpOptions = field(default_factory=IlpOptions)
    params: CostParams = DEFAULT_PARAMS


@dataclass(frozen=True)
class SearchResult:
    plan: Plan
    estimate: Estimate
    optimal: bool
    gap: float
    lower_bound_s: float
    candidates: int
    seconds: float
    bundles: int
    method: str = "dp+ilp"

    def solver_json(self) -> dict:
        return {"seconds": self.seconds, "optimal": self.optimal, "gap": self.gap,
                "candidates": self.candidates, "method": self.method, "bundles": self.bundles,
                "lower_bound_step_time_s": self.lower_bound_s}


# --- stage configurations and their cost as a function of the block count ----------------


@dataclass(frozen=True)
class StageConfig:
    nodes: tuple[int, ...]  # nodes of each bundle group (in bundle order)
    tp: int
    recompute: str
    zero: int

    def groups(self) -> frozenset[int]:
        return frozenset(i for i, n in enumerate(self.nodes) if n)


@dataclass
class _TypeArrays:
    """Per replica type of a config: arrays over the decoder-block count 0..L."""

    count: int  # replicas of this type (all bundles)
    group: NodeGroup
    time: dict[tuple[bool, bool], np.ndarray]  # (head, emb) -> per-micro-batch time, no p2p
    bwd: dict[tuple[bool, bool], np.ndarray]
    params: dict[tuple[bool, bool], np.ndarray]  # weight parameters per GPU
    in_flight_cap: dict[tuple[bool, bool], np.ndarray]  # micro-batches its memory holds
    boundary_bytes: float
    cost_params: CostParams


@dataclass(frozen=True)
class _Variant:
    """One merged cost curve of a family: per block count, tau, X and the config chosen."""

    tau: np.ndarray
    x: np.ndarray
    member: np.ndarray  # config id per block count, -1 where none
    x_min: float
    slopes: dict  # config id -> slope of its tau (None when not affine)


class _Problem:
    """Everything fixed for one (micro-batch, bundles) pair; prices stage configurations."""

    def __init__(self, model: Model, cluster: Cluster, base: Training, b: int, bundles: int,
                 options: SolverOptions):
        self.model, self.cluster, self.b, self.bundles, self.options = model, cluster, b, bundles, options
        self.t = Training(base.global_batch, base.seq_len, base.dtype, b, "1f1b", 1, base.attention)
        self.groups = [g for g in cluster.groups]
        self.bundle_nodes = tuple(g.nodes // bundles for g in self.groups)
        self.emb, self.dec, self.head = model.layers[0], model.layers[1], model.layers[-1]
        self.num_blocks = model.num_layers - 2
        self.microbatches = base.global_batch // b
        self.nb = DTYPE_BYTES[base.dtype]
        self.grad_bytes = 4 if base.dtype == "fp32" else self.nb
        self.blocks = np.arange(self.num_blocks + 1, dtype=float)
        self._types: dict[StageConfig, list[_TypeArrays] | None] = {}
        self.config_list: list[StageConfig] = []
        self._config_ids: dict[StageConfig, int] = {}
        self._fitting: dict[tuple[int, ...], list[tuple[int, tuple[int, ...], int]]] = {}
        self.signatures: list[tuple[Link, ...]] = []
        self.family_list: list[tuple[int, ...]] = []
        self._family_ids: dict[tuple[int, ...], int] = {}
        self._family: dict[tuple, tuple] = {}
        self._signature_ids: dict[tuple, int] = {}
        self._stage: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.evaluations = 0
        self.smallest_overflow: tuple[float, str] | None = None

    # configurations -------------------------------------------------------------------

    def configs(self, used: tuple[int, ...]) -> Iterator[StageConfig]:
        ranges = [range(0, total - u + 1) for total, u in zip(self.bundle_nodes, used)]
        heads = self.model.config.num_heads if self.model.config else 1
        modes = [m for m in self.options.recompute_modes
                 if not (m == "selective" and self.t.attention == "flash")]  # identical to none
        for nodes in product(*ranges):
            if not any(nodes):
                continue
            gpn = [self.groups[i].gpus_per_node for i, n in enumerate(nodes) if n]
            for tp in self.options.tp_degrees:
                if any(g % tp for g in gpn) or heads % tp:
                    continue
                dp = self.bundles * sum(n * self.groups[i].gpus_per_node for i, n in enumerate(nodes)) // tp
                for mode in modes:
                    for zero in (self.options.zero_stages if dp > 1 else (0,)):
                        yield StageConfig(nodes, tp, mode, zero)

    def type_arrays(self, config: StageConfig) -> list[_TypeArrays] | None:
        if config in self._types:
            return self._types[config]
        t, tp, b, s = self.t, config.tp, self.b, self.t.seq_len
        sp = tp > 1
        counts = {i: self.bundles * n * self.groups[i].gpus_per_node // tp
                  for i, n in enumerate(config.nodes) if n}
        dp = sum(counts.values())
        zero = config.zero
        per_group = {self.groups[i].name: self.bundles * n for i, n in enumerate(config.nodes) if n}
        dp_intra, dp_inter = collective_links(self.cluster, per_group)
        dp_per_node = max(self.groups[i].gpus_per_node // tp for i in counts)
        dp_nodes = sum(per_group.values())
        out = []
        config_worst = (-INF, "")
        n = self.blocks
        for i, count in counts.items():
            group = self.groups[i]
            gpu = group.gpu
            p = self.options.params
            link = group.intra_node

            def lt(layer: Layer):
                return layer_time(layer, gpu, t.dtype, b, s, tp, sp, t.attention, config.recompute, link, p)

            dec, emb, head = lt(self.dec), lt(self.emb), lt(self.head)
            act = {x: layer.act_bytes_per_sample(s, config.recompute, tp, sp, t.attention, self.nb) * b
                   for x, layer in (("dec", self.dec), ("emb", self.emb), ("head", self.head))}
            transient = 0.0
            if config.recompute == "full":
                transient = self.dec.act_bytes_per_sample(s, "none", tp, sp, t.attention, self.nb) * b
            times, bwds, params, caps = {}, {}, {}, {}
            worst = (-INF, "")
            for has_head, has_emb in product((False, True), repeat=2):
                hh, ee = float(has_head), float(has_emb)
                times[(has_head, has_emb)] = (n * (dec.compute_s + dec.tp_comm_s) + hh * (head.compute_s + head.tp_comm_s)
                                              + ee * (emb.compute_s + emb.tp_comm_s))
                bwds[(has_head, has_emb)] = (n * (dec.bwd_s + dec.recompute_s) + hh * (head.bwd_s + head.recompute_s)
                                             + ee * (emb.bwd_s + emb.recompute_s))
                w = (n * self.dec.weight_params + hh * self.head.weight_params + ee * self.emb.weight_params) / tp
                params[(has_head, has_emb)] = w
                if zero >= 2:
                    # per micro-batch: reduce-scatter of gradients; ZeRO-3 also gathers the
                    # weights before forward and backward (evaluate.evaluate, same formulas)
                    zero_s = hierarchical_allreduce_s(w * self.grad_bytes, dp_per_node, dp_nodes, dp_intra,
                                                      dp_inter, p) / 2
                    if zero >= 3:
                        zero_s = zero_s + 2 * hierarchical_allreduce_s(w * self.nb, dp_per_node, dp_nodes,
                                                                       dp_intra, dp_inter, p) / 2
                    times[(has_head, has_emb)] = times[(has_head, has_emb)] + zero_s
                weights, grads, opt = model_state_bytes(w, t.dtype, zero, dp)
                acts = n * act["dec"] + hh * act["head"] + ee * act["emb"]
                free = gpu.memory_bytes - weights - grads - opt - p.reserved_memory_bytes \
                    - np.where(n >= 1, transient, 0.0)
                with np.errstate(divide="ignore", invalid="ignore"):
                    cap = np.where(acts > 0, np.floor(free / np.where(acts > 0, acts, 1.0)), UNCAPPED)
                cap = np.where(free < 0, 0, np.minimum(cap, UNCAPPED)).astype(np.int64)
                caps[(has_head, has_emb)] = cap
                if (has_head, has_emb) == (False, False):
                    # some stage must hold this many blocks; its overflow with one
                    # micro-batch in flight is what a "does not fit" message reports
                    need = -(-self.num_blocks // max(1, min(self.options.max_stages, sum(self.bundle_nodes))))
                    over = float(acts[need] - free[need]) if np.ndim(free) else float(acts[need] - free)
                    worst = max(worst, (over, gpu.name))
            boundary = self.dec.out_bytes_per_sample(s, self.nb) * b / tp
            out.append(_TypeArrays(count, group, times, bwds, params, caps, boundary, p))
            config_worst = max(config_worst, worst)
        if self.smallest_overflow is None or config_worst[0] < self.smallest_overflow[0]:
            self.smallest_overflow = config_worst
        self._types[config] = out
        return out

    def transitions(self, used: tuple[int, ...]) -> list[tuple[int, tuple[int, ...], int]]:
        """(family id, nodes used after it, its signature id) for every node vector that fits.
        A family is every config on one node vector (tp, recompute, ZeRO stage)."""
        if used not in self._fitting:
            families: dict[tuple[int, ...], list[int]] = {}
            for config in self.configs(used):
                if config not in self._config_ids:
                    self._config_ids[config] = len(self.config_list)
                    self.config_list.append(config)
                families.setdefault(config.nodes, []).append(self._config_ids[config])
            out = []
            for nodes, members in families.items():
                if nodes not in self._family_ids:
                    self._family_ids[nodes] = len(self.family_list)
                    self.family_list.append(tuple(members))
                new_used = tuple(u + n for u, n in zip(used, nodes))
                groups = frozenset(i for i, n in enumerate(nodes) if n)
                out.append((self._family_ids[nodes], new_used, self.signature_id(groups)))
            self._fitting[used] = out
        return self._fitting[used]

    def family_cost(self, fid: int, stage_from_end: int, has_emb: bool, successor_id: int) -> tuple["_Variant", ...]:
        """The family's configs merged per block count: at each count only the configs not
        dominated in both tau and X matter (a dominated one is never better for any bound),
        so variant j holds the j-th such config by tau. Usually one variant remains."""
        key = (fid, min(stage_from_end, self.microbatches), stage_from_end == 1, has_emb, successor_id)
        cached = self._family.get(key)
        if cached is not None:
            return cached
        members = self.family_list[fid]
        costs = [self.stage_cost(cid, stage_from_end, has_emb, successor_id) for cid in members]
        taus = np.stack([c[0] for c in costs])
        xs = np.stack([c[1] for c in costs])
        feasible = np.isfinite(xs)
        taus = np.where(feasible, taus, INF)
        m = len(members)
        order_index = np.arange(m)[:, None, None]
        other_index = np.arange(m)[None, :, None]
        ta, tb = taus[:, None, :], taus[None, :, :]
        xa, xb = xs[:, None, :], xs[None, :, :]
        # b dominates a: no worse in both, and better in one or equal and earlier
        dominates = feasible[None, :, :] & (tb <= ta) & (xb <= xa) & \
            ((tb < ta) | (xb < xa) | (other_index < order_index))
        kept = feasible & ~dominates.any(axis=1)
        sort_key = np.where(kept, taus, INF)
        order = np.argsort(sort_key, axis=0, kind="stable")
        count = kept.sum(axis=0)
        variants = []
        columns = np.arange(taus.shape[1])
        for j in range(int(count.max()) if count.size else 0):
            pick = order[j]
            valid = j < count
            member = np.where(valid, np.asarray(members)[pick], -1)
            tau_v = np.where(valid, taus[pick, columns], INF)
            x_v = np.where(valid, xs[pick, columns], INF)
            slopes = {cid: c[2] for cid, c in zip(members, costs)}
            variants.append(_Variant(tau_v, x_v, member, float(x_v.min()), slopes))
        self._family[key] = tuple(variants)
        return self._family[key]

    def signature_id(self, groups: frozenset[int]) -> int:
        sig = self.signature(groups)
        key = tuple((l.bandwidth_bytes_per_s, l.latency_s, l.kind) for l in sig)
        if key not in self._signature_ids:
            self._signature_ids[key] = len(self.signatures)
            self.signatures.append(sig)
        return self._signature_ids[key]

    def signature(self, groups: frozenset[int]) -> tuple[Link, ...]:
        """How a stage on `groups` looks to the stage before it: the boundary link from each
        group. Successors with equal signatures are interchangeable in the DP."""
        return tuple(slowest([pair_link(self.cluster, g.name, self.groups[j].name) for j in sorted(groups)])
                     for g in self.groups)

    def boundary(self, config: StageConfig, successor: tuple[Link, ...]) -> Link:
        """evaluate.boundary_link: the slowest pair between this stage and its successor."""
        return slowest([successor[i] for i in sorted(config.groups())])

    def stage_cost(self, cid: int, stage_from_end: int, has_emb: bool,
                   successor_id: int) -> tuple[np.ndarray, np.ndarray, float | None, float]:
        """(tau, X, slope) over block counts for a stage placed `stage_from_end` (1 = last
        stage) before a successor with signature `successor_id` (-1: none). `slope` is set
        when tau is affine in the block count (one replica type), else None; the last item
        is the smallest X over block counts."""
        has_head = stage_from_end == 1
        key = (cid, min(stage_from_end, self.microbatches), has_head, has_emb, successor_id)
        cached = self._stage.get(key)
        if cached is not None:
            return cached
        config = self.config_list[cid]
        successor = self.signatures[successor_id] if successor_id >= 0 else None
        self.evaluations += 1
        types = self.type_arrays(config)
        flags = (has_head, has_emb)
        in_flight = stage_from_end  # 1F1B: P - k micro-batches (Narayanan et al. 2021)
        times, caps = [], []
        for ta in types:
            tm = ta.time[flags]
            if successor is not None:
                tm = tm + p2p_s(ta.boundary_bytes, self.boundary(config, successor), False, ta.cost_params)
            times.append(tm)
            cap = ta.in_flight_cap[flags]
            caps.append(np.where(cap >= in_flight, UNCAPPED, cap))
        busy = min_makespan(self.microbatches, [ta.count for ta in types], times, caps)
        tau = reduce(np.maximum, times)
        # exposed gradient reduction and optimizer step (evaluate.evaluate, same formulas)
        dp = sum(ta.count for ta in types)
        params = types[0].params[flags]
        tail = np.zeros_like(tau)
        if dp > 1 and config.zero <= 2:
            per_group = {self.groups[i].name: self.bundles * n for i, n in enumerate(config.nodes) if n}
            intra, inter = collective_links(self.cluster, per_group)
            per_node = max(self.groups[i].gpus_per_node // config.tp for i, n in enumerate(config.nodes) if n)
            slow = min(types, key=lambda ta: (min(f for _, f in ta.group.gpu.peak_flops), ta.group.gpu.name))
            p = slow.cost_params
            reduce_s = hierarchical_allreduce_s(params * self.grad_bytes, per_node, sum(per_group.values()),
                                                intra, inter, p)
            if config.zero == 2:
                reduce_s = reduce_s / 2  # only the weight all-gather is left at the end
            if p.overlap_grad_reduce:
                reduce_s = np.maximum(0.0, reduce_s - reduce(np.minimum, [ta.bwd[flags] for ta in types]))
            tail = tail + reduce_s
        tail = tail + reduce(np.maximum, [optimizer_step_s(params / (dp if dp > 1 else 1), ta.group.gpu,
                                                           ta.cost_params) for ta in types])
        x = busy + tail - tau
        x = np.where(np.isfinite(busy), x, INF)
        if not has_head and not has_emb:
            x = x.copy()
            x[0] = INF  # a stage holds at least one layer
        slope = None
        if len(types) == 1 and len(tau) > 1:
            slope = float(tau[1] - tau[0])
        self._stage[key] = (tau, x, slope, float(x.min()))
        return self._stage[key]


# --- the dynamic programme for one bound W ---------------------------------------------------


@dataclass
class _Cell:
    value: np.ndarray  # min sum tau over items placed from the end (0..L+2)
    parent: np.ndarray  # index into `moves` per item count (-1: none)


@dataclass(frozen=True)
class _Move:
    prev: tuple
    fid: int
    variant: int
    has_emb: bool


def _run_dp(problem: _Problem, bound: float) -> tuple[dict[tuple, _Cell], list[dict[tuple, _Cell]], list[_Move]]:
    """All states reachable with every stage's X <= bound; value = min sum tau.

    A state is (nodes used per group, stages placed, signature id of the last placed
    stage); its value is an array over the number of layer items placed from the end.
    """
    items = problem.num_blocks + 2
    start_key = (tuple(0 for _ in problem.bundle_nodes), 0, -1)
    start = _Cell(np.full(items + 1, INF), np.full(items + 1, -1, dtype=np.int64))
    start.value[0] = 0.0
    layers: list[dict[tuple, _Cell]] = [{start_key: start}]
    moves: list[_Move] = []
    finals: dict[tuple, _Cell] = {}
    max_stages = min(problem.options.max_stages, sum(problem.bundle_nodes), items)
    for placed in range(max_stages):
        nxt: dict[tuple, _Cell] = {}
        head = 1 if placed == 0 else 0
        for key in sorted(layers[placed]):
            cell = layers[placed][key]
            used, _, successor = key
            if not np.isfinite(cell.value[:items]).any():
                continue
            for fid, new_used, sig in problem.transitions(used):
                for has_emb in (False, True):
                    for v_index, variant in enumerate(problem.family_cost(fid, placed + 1, has_emb, successor)):
                        if variant.x_min > bound:
                            continue
                        cand = _relax(cell.value, variant, bound, head, has_emb, items)
                        if cand is None:
                            continue
                        new_key = (new_used, placed + 1, sig)
                        target = nxt.get(new_key)
                        if target is None:
                            target = _Cell(np.full(items + 1, INF), np.full(items + 1, -1, dtype=np.int64))
                            nxt[new_key] = target
                        better = cand < target.value
                        if better.any():
                            moves.append(_Move(key, fid, v_index, has_emb))
                            np.copyto(target.value, cand, where=better)
                            target.parent[better] = len(moves) - 1
        for key, cell in nxt.items():
            if np.isfinite(cell.value[items]):
                finals[key] = cell
        layers.append(nxt)
        if not nxt:
            break
    return finals, layers, moves


def _window_min(values: np.ndarray, width: int) -> np.ndarray:
    """out[q] = min(values[q - width + 1 .. q]) (indices below 0 ignored), by doubling."""
    acc = values
    span = 1
    while span * 2 <= width:
        shifted = np.concatenate([np.full(span, INF), acc[:-span]]) if span < len(acc) else np.full(len(acc), INF)
        acc = np.minimum(acc, shifted)
        span *= 2
    rest = width - span
    if rest:
        shifted = np.concatenate([np.full(rest, INF), acc[:-rest]]) if rest < len(acc) else np.full(len(acc), INF)
        acc = np.minimum(acc, shifted)
    return acc


def _relax(value: np.ndarray, variant: _Variant, bound: float, head: int, has_emb: bool,
           items: int) -> np.ndarray | None:
    """cand[l + blocks + head + emb] = min over allowed blocks of value[l] + tau[blocks],
    where a block count is allowed when the stage's X is finite and <= bound."""
    tau, x = variant.tau, variant.x
    ok = (x <= bound) & (variant.member >= 0)
    if bound == INF:
        ok &= np.isfinite(x)
    if not ok.any():
        return None
    n_blocks = len(tau) - 1
    cand = np.full(items + 1, INF)
    if has_emb:
        # the stage takes every remaining item: l + blocks + head + 1 == items
        ell = np.arange(items - head)  # blocks = items - 1 - head - l >= 0
        blocks = items - 1 - head - ell
        inside = blocks <= n_blocks
        ell, blocks = ell[inside], blocks[inside]
        totals = np.where(ok[blocks], value[ell] + tau[blocks], INF)
        best = totals.min() if totals.size else INF
        if not np.isfinite(best):
            return None
        cand[items] = best
        return cand
    members = variant.member[ok]
    for cid in np.unique(members):
        mask = ok & (variant.member == cid)
        allowed = np.flatnonzero(mask)
        low, high = int(allowed[0]), int(allowed[-1])
        slope = variant.slopes.get(int(cid))
        if slope is not None and high - low + 1 == allowed.size:
            # tau affine on a contiguous run: a sliding-window minimum of value[l] - slope * l
            ell = np.arange(items + 1, dtype=float)
            shifted = _window_min(value - slope * ell, high - low + 1)
            intercept = float(tau[low]) - slope * low
            targets = np.arange(head + low, items)  # j < items: the embedding is not placed yet
            if targets.size:
                q = targets - head - low
                cand[targets] = np.minimum(cand[targets], intercept + slope * (targets - head) + shifted[q])
        else:
            tau_ok = np.where(mask, tau, INF)
            padded = np.concatenate([np.full(n_blocks, INF), value])
            windows = np.lib.stride_tricks.sliding_window_view(padded, n_blocks + 1)
            sums = (windows + tau_ok[::-1]).min(axis=1)
            rows = items - head
            cand[head:head + rows] = np.minimum(cand[head:head + rows], sums[:rows])
            cand[items] = INF
    if not np.isfinite(cand).any():
        return None
    return cand


def _choose_blocks(value: np.ndarray, variant: _Variant, bound: float, head: int,
                   has_emb: bool, target: int) -> int:
    """The block count a stage took to reach item count `target` (smallest on ties)."""
    best, best_k = INF, -1
    for k in range(len(variant.tau)):
        if not (variant.member[k] >= 0 and variant.x[k] <= bound and np.isfinite(variant.x[k])):
            continue
        ell = target - head - k - int(has_emb)
        if 0 <= ell and value[ell] + variant.tau[k] < best:
            best, best_k = value[ell] + variant.tau[k], k
    assert best_k >= 0, "a traced move must have a block count"
    return best_k


# --- reconstruction, shares, verification ---------------------------------------------------


@dataclass(frozen=True)
class _StageChoice:
    cid: int
    config: StageConfig
    blocks: int
    has_head: bool
    has_emb: bool
    successor: int  # signature id of the next stage, -1 for the last stage
    from_end: int


def _trace(problem: _Problem, key: tuple, layers: list[dict[tuple, _Cell]], moves: list[_Move],
           bound: float) -> list[_StageChoice]:
    """Stages of the plan ending in state `key`, front (embedding) to back (head)."""
    items = problem.num_blocks + 2
    out = []
    ell = items
    while key[1] > 0:
        cell = layers[key[1]][key]
        move = moves[int(cell.parent[ell])]
        has_head = move.prev[1] == 0
        prev_cell = layers[move.prev[1]][move.prev]
        variant = problem.family_cost(move.fid, key[1], move.has_emb, move.prev[2])[move.variant]
        blocks = _choose_blocks(prev_cell.value, variant, bound, int(has_head), move.has_emb, ell)
        cid = int(variant.member[blocks])
        out.append(_StageChoice(cid, problem.config_list[cid], blocks, has_head, move.has_emb,
                                move.prev[2], key[1]))
        ell -= blocks + int(has_head) + int(move.has_emb)
        key = move.prev
    assert ell == 0, "trace must consume every layer"
    return out


def _price(problem: _Problem, choices: list[_StageChoice]) -> tuple[float, float, float]:
    """(T, sum tau, max X) of a traced plan, from the DP's own stage costs."""
    taus, xs = [], []
    for c in choices:
        tau, x, _, _ = problem.stage_cost(c.cid, c.from_end, c.has_emb, c.successor)
        taus.append(float(tau[c.blocks]))
        xs.append(float(x[c.blocks]))
    return max(xs) + sum(taus), sum(taus), max(xs)


def _build_plan(problem: _Problem, choices: list[_StageChoice]) -> Plan:
    cluster, b, bundles = problem.cluster, problem.b, problem.bundles
    next_node = [[beta * n for beta in range(bundles)] for n in problem.bundle_nodes]
    stages = []
    first = 0
    for k, c in enumerate(choices):
        end = first + c.blocks + int(c.has_emb) + int(c.has_head)
        types = problem.type_arrays(c.config)
        replicas_ranks: list[tuple[int, ...]] = []
        replica_type: list[int] = []
        for beta in range(bundles):
            type_index = 0
            for i, nodes in enumerate(c.config.nodes):
                if not nodes:
                    continue
                group = problem.groups[i]
                for node in range(next_node[i][beta], next_node[i][beta] + nodes):
                    for slot in range(group.gpus_per_node // c.config.tp):
                        base = group.first_rank + node * group.gpus_per_node + slot * c.config.tp
                        replicas_ranks.append(tuple(range(base, base + c.config.tp)))
                        replica_type.append(type_index)
                next_node[i][beta] += nodes
                type_index += 1
        # per-replica time and memory cap at this stage's block count, as in stage_cost
        flags = (c.has_head, c.has_emb)
        times, caps = [], []
        for ta in types:
            tm = float(ta.time[flags][c.blocks])
            if c.successor >= 0:
                tm += p2p_s(ta.boundary_bytes, problem.boundary(c.config, problem.signatures[c.successor]), False,
                            ta.cost_params)
            cap = int(ta.in_flight_cap[flags][c.blocks])
            times.append(tm)
            caps.append(UNCAPPED if cap >= c.from_end else cap)
        solution = solve_shares_ilp(problem.microbatches, [times[t] for t in replica_type],
                                    [caps[t] for t in replica_type], problem.options.ilp)
        if not solution.optimal:
            raise NoFeasiblePlan("the share ILP did not prove optimality")
        replicas = tuple(Replica(d, n * b, ranks) for d, (n, ranks) in enumerate(zip(solution.shares, replicas_ranks)))
        dp = len(replicas)
        stages.append(Stage(k, (first, end), c.config.tp, c.config.zero, c.config.recompute, replicas, k,
                            c.config.tp > 1))
        first = end
    return Plan(problem.model, cluster, problem.t, tuple(stages))


def compute_lower_bound_s(model: Model, cluster: Cluster, base: Training, options: SolverOptions) -> float:
    """A lower bound on any plan's step time, as a linear program.

    Each layer of each sample must run on some GPU type, costing at least its compute time
    there at the most efficient micro-batch with tp = 1, no recomputation and no
    communication; no type can be busy longer than (its GPU count) x T. Assigning
    layer-samples to types fractionally and minimising T relaxes every plan:
      1. variables: x[i, g] >= 0, samples of layer kind i run on type g; T;
      2. objective: minimise T;
      3. constraints: (a) sum_g x[i, g] = global batch x (layers of kind i);
         (b) sum_i x[i, g] c[i, g] <= GPUs of type g x T.
    """
    import pulp

    from .shares import _quiet_stdout

    b = max(options.micro_batches)
    kinds = {"embedding": [], "decoder": [], "head": []}
    for layer in model.layers:
        kinds[layer.kind].append(layer)
    gpus: dict[str, tuple] = {}
    for g in cluster.groups:
        count, group = gpus.get(g.gpu.name, (0, g))
        gpus[g.gpu.name] = (count + g.num_gpus, group)
    prob = pulp.LpProblem("step_time_lower_bound", pulp.LpMinimize)
    step = prob.add_variable("T", lowBound=0)
    share = {(kind, name): prob.add_variable(f"x_{kind}_{j}", lowBound=0)
             for kind in kinds for j, name in enumerate(sorted(gpus))}
    prob += step
    busy = {name: [] for name in gpus}
    for kind, layers in kinds.items():
        if not layers:
            continue
        prob += pulp.lpSum(share[(kind, name)] for name in gpus) == base.global_batch * len(layers), f"a_{kind}"
        for name, (_, group) in sorted(gpus.items()):
            per_sample = sum(layer_time(layer, group.gpu, base.dtype, b, base.seq_len, 1, False, base.attention,
                                        "none", group.intra_node, options.params).compute_s
                             for layer in layers) / b / len(layers)
            busy[name].append(share[(kind, name)] * per_sample)
    for name, (count, _) in sorted(gpus.items()):
        prob += pulp.lpSum(busy[name]) <= count * step, f"b_{name}"
    with _quiet_stdout():
        prob.solve(pulp.HiGHS(msg=False))
    if prob.status != pulp.LpStatusOptimal:
        return 0.0
    return float(step.value())


def choose_bundles(cluster: Cluster, max_exact_nodes: int, max_bundle_nodes: int) -> int:
    """1 (the whole cluster, exact) when it has at most `max_exact_nodes` nodes; else the
    fewest identical bundles of at most `max_bundle_nodes` nodes (or the smallest bundles
    the node counts allow)."""
    common = reduce(math.gcd, [g.nodes for g in cluster.groups])
    total = sum(g.nodes for g in cluster.groups)
    if total <= max_exact_nodes:
        return 1
    for r in range(1, common + 1):
        if common % r == 0 and total // r <= max_bundle_nodes:
            return r
    return common


def solve(model: Model, cluster: Cluster, base: Training, options: SolverOptions = SolverOptions()) -> SearchResult:
    """The fastest plan in the search space (module docstring), proven optimal when the
    whole cluster is one bundle and the time limit did not bite."""
    started = time.perf_counter()
    if model.config is None or any(l.kind != "decoder" for l in model.layers[1:-1]) \
            or model.layers[0].kind != "embedding" or model.layers[-1].kind != "head":
        raise BadInput("the solver needs embedding, decoder blocks and head", "--model")
    bundles = choose_bundles(cluster, options.max_exact_nodes, options.max_bundle_nodes)
    lower_bound = compute_lower_bound_s(model, cluster, base, options)
    best: tuple | None = None
    evaluations = 0
    complete = True
    shortfall = None
    deadline = None if options.time_limit_s is None else started + options.time_limit_s
    for b in sorted(options.micro_batches):
        if base.global_batch % b:
            continue
        problem = _Problem(model, cluster, base, b, bundles, options)

        def explore(bound: float) -> tuple[float, float] | None:
            """DP with every X <= bound: (min sum tau, X of that plan); updates the best."""
            nonlocal best
            finals, layers, moves = _run_dp(problem, bound)
            if not finals:
                return None
            found = None
            for key in sorted(finals):
                choices = _trace(problem, key, layers, moves, bound)
                step, sum_tau, max_x = _price(problem, choices)
                used = sum(sum(c.config.nodes) for c in choices)
                if best is None or (step, used, b) < best[0:3]:
                    best = (step, used, b, problem, choices)
                if found is None or (sum_tau, max_x) < found:
                    found = (sum_tau, max_x)
            return found

        first = explore(INF)
        if problem.smallest_overflow and (shortfall is None or problem.smallest_overflow[0] < shortfall[0]):
            shortfall = problem.smallest_overflow
        if first is None:
            evaluations += problem.evaluations
            continue
        # Descend the bound on the bottleneck X (Alpa's t_max enumeration): the DP found the
        # least sum of latencies S for plans with X <= bound, and a plan p with that S. A plan
        # with X in (X_p, bound] has T > X_p + S = T_p, and one with X >= best - S has
        # T >= best, so the next bound is just below min(X_p, best - S); when no plan
        # remains under the bound, the best plan seen is optimal.
        found = first
        while found is not None:
            if deadline is not None and time.perf_counter() > deadline:
                complete = False
                break
            sum_tau, max_x = found
            bound = min(max_x, best[0] - sum_tau)
            bound -= abs(bound) * 1e-12 + 1e-15
            if bound <= 0:
                break
            found = explore(bound)
        evaluations += problem.evaluations
        if not complete:
            break
    if best is None:
        raise _no_plan(shortfall)
    step, _, _, problem, choices = best
    plan = _build_plan(problem, choices)
    problems = structural_problems(plan)
    assert not problems, f"solver built an invalid plan: {problems}"
    estimate = evaluate(plan, options.params)
    assert estimate.fits, "solver built a plan that does not fit"
    assert abs(estimate.step_time_s - step) <= 1e-6 * step, \
        f"re-priced step {estimate.step_time_s} differs from the search's {step}"
    optimal = complete and bundles == 1
    gap = 0.0 if optimal else max(0.0, (estimate.step_time_s - lower_bound) / estimate.step_time_s)
    return SearchResult(plan, estimate, optimal, gap, lower_bound, evaluations,
                        time.perf_counter() - started, bundles)


def _no_plan(shortfall: tuple[float, str] | None) -> NoFeasiblePlan:
    if shortfall is None or shortfall[0] <= 0:
        return NoFeasiblePlan("no configuration in the search space fits (the global batch may be "
                              "smaller than the replicas need, or the layers too few for the stages)")
    over, gpu = shortfall
    return NoFeasiblePlan(
        f"nothing fits: the smallest memory shortfall found is {over / GIB:.1f} GiB on {gpu}; "
        "add GPUs or use larger ones, or shorten --seq-len (the search already tried full recomputation, "
        "ZeRO-1 and the smallest micro-batch)",
        shortfall_bytes=over, device=gpu)
