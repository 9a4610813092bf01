"""The types of the plan search: solver options, a stage configuration, a replica type's cost
arrays over block counts, a merged cost curve, and the share cap (planner.stages prices them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .cost import DEFAULT_PARAMS, CostParams
from .hardware import NodeGroup
from .shares import UNCAPPED, IlpOptions

INF = float("inf")


@dataclass(frozen=True)
class SolverOptions:
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    recompute_modes: tuple[str, ...] = ("none", "selective", "full")
    zero_stages: tuple[int, ...] = (1, 2, 3)  # with dp > 1; ZeRO-0 is dominated by ZeRO-1
    max_exact_nodes: int = 8  # clusters with at most this many nodes are searched whole (exact)
    max_bundle_nodes: int = 4  # larger clusters: at most this many parts (planner.decompose)
    max_stages: int = 16
    # pipeline chunks per rank: 1 is plain 1F1B, V > 1 the interleaved schedule with V
    # virtual stages per rank (Narayanan et al. 2021, sec 2.2); V must divide the blocks
    virtual_stages: tuple[int, ...] = (1, 2)
    time_limit_s: float | None = None
    ilp: IlpOptions = field(default_factory=IlpOptions)
    params: CostParams = DEFAULT_PARAMS
    gpu_params: tuple[tuple[str, CostParams], ...] = ()  # per GPU type, e.g. measured times

    def params_for(self, gpu_name: str) -> CostParams:
        return next((p for name, p in self.gpu_params if name == gpu_name), self.params)

    def params_mapping(self) -> dict[str, CostParams]:
        """The form planner.evaluate.evaluate takes: per GPU type, '*' for the rest."""
        return {"*": self.params, **dict(self.gpu_params)}


# --- stage configurations and their cost as a function of the block count ----------------


@dataclass(frozen=True)
class StageConfig:
    nodes: tuple[int, ...]  # nodes of each node group of the cluster
    tp: int
    recompute: str
    zero: int

    def groups(self) -> frozenset[int]:
        return frozenset(i for i, n in enumerate(self.nodes) if n)


@dataclass
class TypeArrays:
    """Per replica type of a config: arrays over the decoder-block count 0..L."""

    count: int  # replicas of this type
    group: NodeGroup
    time: dict[tuple[bool, bool], np.ndarray]  # (head, emb) -> per-micro-batch time, no p2p
    bwd: dict[tuple[bool, bool], np.ndarray]
    params: dict[tuple[bool, bool], np.ndarray]  # weight parameters per GPU
    room: dict[tuple[bool, bool], np.ndarray]  # micro-batches its memory holds (fractional)
    boundary_bytes: float
    cost_params: CostParams
    # interleaved: per-micro-batch time of one chunk by its block count, no p2p: a plain
    # chunk, the chunk with the embedding, the chunk with the head
    chunk: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    """One merged cost curve of a family: per block count, tau, X and the config chosen."""

    tau: np.ndarray
    x: np.ndarray
    member: np.ndarray  # config id per block count, -1 where none
    x_min: float
    runs: tuple  # (config id, where the variant uses it, slope of its tau or None), by config id


def share_cap(room: np.ndarray, in_flight: float) -> np.ndarray:
    """The most micro-batches a replica may take: unbounded when its memory holds the
    in-flight ones, else those that fit (a replica with n micro-batches holds min(n, in-flight))."""
    return np.where(room >= in_flight, UNCAPPED, np.maximum(np.floor(room), 0)).astype(np.int64)
