"""Cluster description -> typed `Cluster` (GPU catalog, node groups, devices, topology).

All quantities are SI inside: bytes, bytes/s (one direction), seconds, FLOP/s. Files use
the units in their key names (GiB, GBps, us, tflops) and are converted here, once.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..core import ranges
from .devices import (DTYPES, GB, GIB, HOUR, TFLOPS, US, Device, GpuPower, GpuSpec, HostSpec,  # noqa: F401
                      Link, NodeGroup, read_link)
from ..core.errors import BadInput
from ..core.io import check_keys, get_str, load_mapping
from ..core.names import check_name, name_from_file
from ..core.ranges import MAX_CLUSTER_GPUS  # noqa: F401  (re-exported)
from .node_groups import node_groups
from .topology import Topology, topology_from_spec



def profiles_dir() -> Path:
    """The data folder: `planner/profiles` in an installed wheel, else the checkout's `profiles/`.

    The installed copy is looked for first: next to an installed package the folder above
    (site-packages) is not ours. In a checkout (or an editable install) only `profiles/` exists.
    """
    package = Path(__file__).resolve().parents[1]  # planner/
    installed = package / "profiles"
    return installed if installed.is_dir() else package.parent / "profiles"


PROFILES_DIR = profiles_dir()
CATALOG_PATH = PROFILES_DIR / "hardware" / "gpus.yaml"
CLUSTERS_DIR = PROFILES_DIR / "clusters"

# A GPU type declared in a cluster file without link figures gets PCIe 4.0 x16 inside the
# node and 100 Gb/s Ethernet between nodes: the common case for a workstation-class card.
DEFAULT_INTRA = {"kind": "PCIe 4.0 x16 (assumed)", "bandwidth_GBps": 32.0, "latency_us": 5.0}
DEFAULT_INTER = {"kind": "100 Gb/s Ethernet (assumed)", "bandwidth_GBps": 12.5, "latency_us": 10.0}

# The keys of each mapping of a cluster file (formats.md section 1); any other is bad input.
CLUSTER_KEYS = ("name", "gpus", "node_groups", "links", "topology", "pue", "checkpoint_write_GBps", "restart_s")
NODE_GROUP_KEYS = ("name", "gpu", "nodes", "gpus_per_node", "intra_node", "inter_node", "host",
                   "price_per_gpu_hour", "node_power_W", "gpu_mtbf_hours", "node_mtbf_hours", "preemptions_per_hour",
                   "bridges")
GPU_KEYS = ("architecture", "segment", "vendor", "memory_GiB", "peak_tflops", "hbm_GBps", "intra_node",
            "inter_node", "source", "power_W", "power_source", "price_per_gpu_hour", "price_source")
POWER_KEYS = ("board", "idle", "min_cap")  # a catalog entry's power_W


@dataclass(frozen=True)
class Cluster:
    name: str
    groups: tuple[NodeGroup, ...]
    topology: Topology  # the network between the groups, every pair's link resolved
    spec: Mapping[str, Any] = field(compare=False, hash=False, default_factory=dict)
    # power usage effectiveness: the facility's energy per unit of the nodes' (the file's `pue`, 1: none)
    pue: float = field(default=1.0, compare=False)
    # checkpoints (planner.cost.reliability): the storage's write bandwidth for all nodes together and
    # a restart's own time; None: the cost model's defaults
    checkpoint_bytes_per_s: float | None = field(default=None, compare=False)
    restart_s: float | None = field(default=None, compare=False)

    @cached_property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)

    @cached_property
    def _first_ranks(self) -> tuple[int, ...]:
        return tuple(g.first_rank for g in self.groups)

    @cached_property
    def gpu_types(self) -> tuple[GpuSpec, ...]:
        seen: dict[str, GpuSpec] = {}
        for g in self.groups:
            seen.setdefault(g.gpu.name, g.gpu)
        return tuple(seen.values())

    @cached_property
    def _group_of(self) -> dict[str, NodeGroup]:
        return {g.name: g for g in self.groups}

    def group(self, name: str) -> NodeGroup:
        return self._group_of[name]

    def group_of_rank(self, rank: int) -> NodeGroup:
        # groups hold consecutive rank ranges in order: the last group starting at or before rank
        index = bisect_right(self._first_ranks, rank) - 1
        if index < 0 or rank >= self.num_gpus:
            raise IndexError(f"rank {rank} out of range 0..{self.num_gpus - 1}")
        return self.groups[index]

    def node_of(self, rank: int) -> tuple[str, int]:
        """(node group name, node index within the group) of a rank."""
        g = self.group_of_rank(rank)
        return g.name, (rank - g.first_rank) // g.gpus_per_node

    def device(self, rank: int) -> Device:
        g = self.group_of_rank(rank)
        _, node = self.node_of(rank)
        return Device(rank=rank, gpu=g.gpu.name, group=g.name, node=node,
                      local_rank=g.local_rank((rank - g.first_rank) % g.gpus_per_node))

    def devices(self) -> Iterator[Device]:
        for rank in range(self.num_gpus):
            yield self.device(rank)

    def group_link(self, name_a: str, name_b: str) -> Link:
        """Link between nodes of two groups: the group's own inter_node, else the widest path
        between them in the cluster's topology (planner.inputs.topology), searched once."""
        if name_a == name_b:
            return self.group(name_a).inter_node
        return self.topology.route(name_a, name_b)

    def link_class(self, name: str) -> tuple:
        """A key that node groups alike in every link share (GPUs per node, inter_node and
        Topology.route_class): pair links from any of them to any other group are equal."""
        return self._link_class[name]

    @cached_property
    def _link_class(self) -> dict[str, tuple]:
        return {g.name: (g.gpus_per_node, g.inter_node, self.topology.route_class(g.name)) for g in self.groups}

    def link(self, rank_a: int, rank_b: int) -> Link:
        """Same node -> intra_node; same group -> inter_node; else the group link."""
        da, db = self.device(rank_a), self.device(rank_b)
        if da.group == db.group:
            g = self.group(da.group)
            return g.intra_node if da.node == db.node else g.inter_node
        return self.group_link(da.group, db.group)

    def common_dtype(self) -> str:
        """bf16 where every GPU supports it, else fp16 (formats.md section 4)."""
        return "bf16" if all(g.supports("bf16") for g in self.gpu_types) else "fp16"


# --- loading -------------------------------------------------------------------------------


def _gpu_spec(name: str, entry: Any, where: str, prefix: str) -> GpuSpec:
    if not isinstance(entry, dict):
        raise BadInput("must be a mapping", where, prefix)
    check_keys(entry, GPU_KEYS, where, prefix)
    memory = ranges.get(entry, "memory_GiB", "memory_GiB", where, f"{prefix}.memory_GiB")
    peaks = entry.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise BadInput("missing or empty peak_tflops mapping", where, f"{prefix}.peak_tflops")
    check_keys(peaks, DTYPES, where, f"{prefix}.peak_tflops", "dtype")
    peak_flops = {}
    for dtype in sorted(peaks, key=str):
        peak_flops[dtype] = ranges.get(peaks, dtype, "peak_tflops", where, f"{prefix}.peak_tflops.{dtype}") * TFLOPS
    hbm = ranges.get(entry, "hbm_GBps", "hbm_GBps", where, f"{prefix}.hbm_GBps")
    price = ranges.get(entry, "price_per_gpu_hour", "price_per_gpu_hour", where, f"{prefix}.price_per_gpu_hour",
                       required=False)
    return GpuSpec(
        name=name,
        memory_bytes=memory * GIB,
        peak_flops=tuple(sorted(peak_flops.items())),
        hbm_bandwidth_bytes_per_s=hbm * GB,
        intra_node=read_link(entry.get("intra_node"), where, f"{prefix}.intra_node", DEFAULT_INTRA),
        inter_node=read_link(entry.get("inter_node"), where, f"{prefix}.inter_node", DEFAULT_INTER),
        vendor=str(entry.get("vendor", "")),
        source=str(entry.get("source", "")),
        architecture=_choice(entry, "architecture", ARCHITECTURES, where, prefix),
        segment=_choice(entry, "segment", SEGMENTS, where, prefix),
        power=_power(entry, where, prefix),
        price_usd_per_gpu_s=None if price is None else price / HOUR,
        price_source=str(entry.get("price_source", "")),
    )


def _power(entry: Mapping[str, Any], where: str, prefix: str) -> GpuPower | None:
    """A catalog entry's `power_W: {board, idle, min_cap}` (W; min_cap optional), None when absent;
    idle below the board power, the lowest cap at most the board power."""
    data = entry.get("power_W")
    if data is None:
        return None
    path = f"{prefix}.power_W"
    if not isinstance(data, dict):
        raise BadInput("must be a mapping of board, idle, min_cap (W)", where, path)
    check_keys(data, POWER_KEYS, where, path)
    board = ranges.get(data, "board", "power_W", where, f"{path}.board")
    idle = ranges.get(data, "idle", "power_W", where, f"{path}.idle")
    min_cap = ranges.get(data, "min_cap", "power_W", where, f"{path}.min_cap", required=False) or 0.0
    if idle >= board:
        raise BadInput(f"idle power {idle:g} W must be below the board power {board:g} W", where, f"{path}.idle")
    if min_cap > board:
        raise BadInput(f"must be at most the board power ({board:g} W)", where, f"{path}.min_cap")
    return GpuPower(board, idle, min_cap, str(entry.get("power_source", "")))


ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3")
SEGMENTS = ("datacenter", "consumer")


def _choice(entry: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str, prefix: str) -> str:
    """An optional catalog word (architecture, segment): one of `allowed`, or "" when absent."""
    value = entry.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or value.lower() not in allowed:
        raise BadInput(f"must be one of {', '.join(allowed)}", where, f"{prefix}.{key}")
    return value.lower()


def load_catalog_data(path: Path = CATALOG_PATH) -> dict[str, dict]:
    data = load_mapping(path, "GPU catalog")
    return {check_name(k, str(path), "(a GPU name)"): v for k, v in data.items()}


def load_catalog(path: Path = CATALOG_PATH) -> dict[str, GpuSpec]:
    """The built-in GPU catalog, keyed by canonical name."""
    where = str(path)
    return {name: _gpu_spec(name, entry, where, name) for name, entry in load_catalog_data(path).items()}


def resolve_cluster_path(name_or_path: str) -> Path:
    """A path to a cluster file, or the stem of a built-in example (profiles/clusters)."""
    p = Path(name_or_path)
    if p.exists():
        return p
    for ext in (".yaml", ".yml", ".json"):
        candidate = CLUSTERS_DIR / f"{name_or_path}{ext}"
        if candidate.exists():
            return candidate
    raise BadInput("cluster file not found (and not a built-in example: "
                   f"{', '.join(sorted(q.stem for q in CLUSTERS_DIR.glob('*.yaml')))})", name_or_path)


def load_cluster(name_or_path: str) -> Cluster:
    path = resolve_cluster_path(name_or_path)
    return cluster_from_spec(load_mapping(path, "cluster file"), str(path))


def cluster_from_spec(spec: Mapping[str, Any], where: str = "cluster") -> Cluster:
    """Build a typed Cluster from a parsed cluster file (formats.md section 1)."""
    if not isinstance(spec, dict):
        raise BadInput("cluster must be a mapping", where)
    check_keys(spec, CLUSTER_KEYS, where)
    catalog_raw = load_catalog_data()
    by_lower = {k.lower(): k for k in catalog_raw}
    extra = spec.get("gpus") or {}
    if not isinstance(extra, dict):
        raise BadInput("must be a mapping of GPU name to figures", where, "gpus")
    for key in extra:
        check_name(key, where, "gpus (a GPU name)")

    def gpu_for(name: str, field_name: str) -> GpuSpec:
        base_key = by_lower.get(name.lower())
        own_key = next((k for k in extra if str(k).lower() == name.lower()), None)
        if own_key is not None:
            base = catalog_raw.get(base_key, {}) if base_key else {}
            entry = extra[own_key]
            if not isinstance(entry, dict):
                raise BadInput("must be a mapping", where, f"gpus.{own_key}")
            check_keys(entry, GPU_KEYS, where, f"gpus.{own_key}")
            merged = {**base, **entry}
            return _gpu_spec(base_key or str(own_key), merged, where, f"gpus.{own_key}")
        if base_key is None:
            raise BadInput(f"unknown GPU {name!r} (see `planner gpus`, or declare it under `gpus:`)",
                           where, field_name)
        return _gpu_spec(base_key, catalog_raw[base_key], str(CATALOG_PATH), base_key)

    groups_raw = spec.get("node_groups")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise BadInput("must be a non-empty list of node groups", where, "node_groups")
    groups: list[NodeGroup] = []
    names: set[str] = set()
    for i, g in enumerate(groups_raw):
        prefix = f"node_groups[{i}]"
        if not isinstance(g, dict):
            raise BadInput("must be a mapping", where, prefix)
        check_keys(g, NODE_GROUP_KEYS, where, prefix)
        name = check_name(get_str(g, "name", where, f"{prefix}.name"), where, f"{prefix}.name")
        if name in names:
            raise BadInput(f"duplicate node group name {name!r}", where, f"{prefix}.name")
        names.add(name)
        first_rank = groups[-1].ranks.stop if groups else 0
        groups += node_groups(g, name, gpu_for, first_rank, where, prefix)
    for part in (g for g in groups if g.machine and g.name in names):
        raise BadInput(f"node group name {part.name!r} is also a GPU type's part of mixed node group "
                       f"{part.machine!r}; rename one", where, "node_groups")

    topology = topology_from_spec(spec, groups, where)
    if spec.get("name"):
        cluster_name = check_name(spec["name"], where, "name")
    else:
        cluster_name = name_from_file(where)
    pue = ranges.get(spec, "pue", "pue", where, "pue", required=False)
    write = ranges.get(spec, "checkpoint_write_GBps", "checkpoint_write_GBps", where, "checkpoint_write_GBps",
                       required=False)
    return Cluster(cluster_name, tuple(groups), topology, spec=dict(spec), pue=1.0 if pue is None else pue,
                   checkpoint_bytes_per_s=None if write is None else write * GB,
                   restart_s=ranges.get(spec, "restart_s", "restart_s", where, "restart_s", required=False))
