"""A cluster file's node group -> NodeGroups: its GPU type (or one per local rank: a mixed node, one
NodeGroup per type), its links and bridges, its host, its price (formats.md section 1)."""

from __future__ import annotations

from typing import Any, Mapping

from ..core import ranges
from ..core.errors import BadInput
from ..core.io import check_keys, get_str
from ..core.names import check_name
from ..core.ranges import MAX_CLUSTER_GPUS
from .devices import GB, HOUR, US, GpuSpec, HostSpec, Link, NodeGroup, read_link


def node_groups(g: Mapping[str, Any], name: str, gpu_for, first_rank: int, where: str,
                prefix: str) -> list[NodeGroup]:
    """A cluster file's node group as NodeGroups: itself, or, where `gpu` lists one GPU type per local
    rank (a mixed node), one NodeGroup per type, named `name/GPU`, on the same nodes (`machine`)."""
    gpus = _gpu_list(g, gpu_for, where, prefix)
    nodes = ranges.get(g, "nodes", "nodes", where, f"{prefix}.nodes")
    if isinstance(g.get("gpu"), list) and "gpus_per_node" not in g:
        per_node = len(gpus)
    else:
        per_node = ranges.get(g, "gpus_per_node", "gpus_per_node", where, f"{prefix}.gpus_per_node")
    if len(gpus) > 1 and len(gpus) != per_node:
        raise BadInput(f"lists {len(gpus)} GPUs, one per local rank, for {per_node} GPUs per node",
                       where, f"{prefix}.gpu")
    if nodes * per_node > MAX_CLUSTER_GPUS or first_rank + nodes * per_node > MAX_CLUSTER_GPUS:
        raise BadInput(f"cluster exceeds {MAX_CLUSTER_GPUS} GPUs", where, f"{prefix}.nodes")
    types = sorted({gpu.name: gpu for gpu in gpus}.values(), key=lambda gpu: gpus.index(gpu))
    # the node's links default to its slowest GPU type's catalog figures
    slow_intra = min((gpu.intra_node for gpu in types), key=lambda link: (link.bandwidth_bytes_per_s, -link.latency_s))
    slow_inter = min((gpu.inter_node for gpu in types), key=lambda link: (link.bandwidth_bytes_per_s, -link.latency_s))
    intra = read_link(g.get("intra_node"), where, f"{prefix}.intra_node", _link_default(slow_intra))
    inter = read_link(g.get("inter_node"), where, f"{prefix}.inter_node", _link_default(slow_inter))
    bridges = read_bridges(g.get("bridges"), per_node, where, f"{prefix}.bridges")
    common = dict(
        nodes=nodes, inter_node=inter, host=read_host(g.get("host"), where, f"{prefix}.host"),
        node_power_W=ranges.get(g, "node_power_W", "node_power_W", where, f"{prefix}.node_power_W",
                                required=False) or 0.0,
        gpu_mtbf_h=ranges.get(g, "gpu_mtbf_hours", "mtbf_hours", where, f"{prefix}.gpu_mtbf_hours", required=False),
        node_mtbf_h=ranges.get(g, "node_mtbf_hours", "mtbf_hours", where, f"{prefix}.node_mtbf_hours",
                               required=False),
        preemptions_per_h=ranges.get(g, "preemptions_per_hour", "preemptions_per_hour", where,
                                     f"{prefix}.preemptions_per_hour", required=False) or 0.0)
    if len(types) == 1:
        return [NodeGroup(name=name, gpu=types[0], gpus_per_node=per_node, first_rank=first_rank,
                          intra_node=bridged(bridges, tuple(range(per_node)), intra),
                          price_usd_per_gpu_s=_group_price(g, types[0], where, prefix), **common)]
    out = []
    for gpu in types:
        local = tuple(j for j, other in enumerate(gpus) if other.name == gpu.name)
        part = check_name(f"{name}/{gpu.name}", where, f"{prefix}.name")
        out.append(NodeGroup(name=part, gpu=gpu, gpus_per_node=len(local), first_rank=first_rank,
                             intra_node=bridged(bridges, local, intra),
                             price_usd_per_gpu_s=_group_price(g, gpu, where, prefix),
                             machine=name, local_ranks=local, node_gpus=per_node, fabric=intra, **common))
        first_rank += nodes * len(local)
    return out


def _gpu_list(g: Mapping[str, Any], gpu_for, where: str, prefix: str) -> list[GpuSpec]:
    """A node group's `gpu`: one name, or a list of one name per local rank."""
    raw = g.get("gpu")
    if isinstance(raw, list):
        if not raw:
            raise BadInput("must be a GPU name or a non-empty list of one per local rank", where, f"{prefix}.gpu")
        return [gpu_for(check_name(item, where, f"{prefix}.gpu[{j}]"), f"{prefix}.gpu[{j}]")
                for j, item in enumerate(raw)]
    return [gpu_for(check_name(get_str(g, "gpu", where, f"{prefix}.gpu"), where, f"{prefix}.gpu"), f"{prefix}.gpu")]


def _link_default(link: Link) -> dict:
    return {"bandwidth_GBps": link.bandwidth_bytes_per_s / GB, "latency_us": link.latency_s / US, "kind": link.kind}


def read_bridges(raw: Any, per_node: int, where: str, path: str) -> tuple[tuple[int, int, Link], ...]:
    """A node group's `bridges`: direct links between two GPUs of a node (NVLink bridges), each
    `between` two local ranks, as (lower rank, higher rank, Link) sorted."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadInput("must be a list of links, each between two local ranks", where, path)
    out: dict[tuple[int, int], Link] = {}
    for j, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise BadInput("must be a mapping", where, f"{path}[{j}]")
        pair = entry.get("between")
        if (not isinstance(pair, list) or len(pair) != 2 or not all(type(x) is int and 0 <= x < per_node for x in pair)
                or pair[0] == pair[1]):
            raise BadInput(f"must be two different local ranks, 0 to {per_node - 1}", where, f"{path}[{j}].between")
        key = (min(pair), max(pair))
        if key in out:
            raise BadInput(f"a second bridge between local ranks {key[0]} and {key[1]}", where, f"{path}[{j}].between")
        out[key] = read_link({k: v for k, v in entry.items() if k != "between"}, where, f"{path}[{j}]",
                             {"latency_us": 0.0})
    return tuple((a, b, link) for (a, b), link in sorted(out.items()))


def bridged(bridges: tuple[tuple[int, int, Link], ...], local: tuple[int, ...], intra: Link) -> Link:
    """The link among GPUs `local` of a node: the slowest of their bridges where every pair of them
    is bridged (two bridged GPUs), else the node's `intra_node`."""
    of = {(a, b): link for a, b, link in bridges}
    pairs = [(a, b) for i, a in enumerate(local) for b in local[i + 1:]]
    if not pairs or any(pair not in of for pair in pairs):
        return intra
    return min((of[pair] for pair in pairs), key=lambda link: (link.bandwidth_bytes_per_s, -link.latency_s))


def _group_price(group: Mapping[str, Any], gpu: GpuSpec, where: str, prefix: str) -> float | None:
    """A node group's price per GPU-second: its `price_per_gpu_hour` (0 for owned hardware), else
    its GPU's catalog price; None where neither is known."""
    price = ranges.get(group, "price_per_gpu_hour", "price_per_gpu_hour", where, f"{prefix}.price_per_gpu_hour",
                       required=False)
    return gpu.price_usd_per_gpu_s if price is None else price / HOUR


HOST_KEYS = {"memory_GiB": 2**30, "pcie_GBps": GB, "memory_bandwidth_GBps": GB}


def read_host(data: Any, where: str, path: str) -> HostSpec:
    """A node group's optional `host:` {memory_GiB, pcie_GBps, memory_bandwidth_GBps}; what
    is left out keeps HostSpec's default."""
    if data is None:
        return HostSpec()
    if not isinstance(data, dict):
        raise BadInput("must be a mapping of memory_GiB, pcie_GBps, memory_bandwidth_GBps", where, path)
    check_keys(data, HOST_KEYS, where, path)
    values = {}
    for key, unit in HOST_KEYS.items():
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
                raise BadInput(f"must be a positive number, got {value!r}", where, f"{path}.{key}")
            values[key] = value * unit
    default = HostSpec()
    return HostSpec(values.get("memory_GiB", default.memory_bytes), values.get("pcie_GBps", default.pcie_bytes_per_s),
                    values.get("memory_bandwidth_GBps", default.memory_bandwidth_bytes_per_s))
