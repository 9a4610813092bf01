"""Link fragments (formats.md section 6): what `planner profile-links` writes and `plan` /
`evaluate --links FILE` read. A fragment holds cluster-file link mappings (planner.inputs.devices.
read_link, with an optional measured `curve`): `intra_node` and `inter_node` for every node
group, `node_groups.NAME.intra_node / inter_node` for one group, and `links` entries between
two groups. Merged into a cluster file's spec, the fragment's links replace the file's.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .devices import read_link
from ..core.errors import BadInput
from ..core.io import check_keys, load_mapping
from .linkcurve import OPS, curve_json
from ..core.names import check_name, name_from_file

FORMAT = "planner.links/v1"
FRAGMENT_KEYS = ("format", "measured", "intra_node", "inter_node", "node_groups", "links")
NODE_LINKS = ("intra_node", "inter_node")


def _between(entry: Any, where: str, prefix: str) -> tuple[str, str]:
    between = entry.get("between") if isinstance(entry, dict) else None
    if (not isinstance(between, list) or len(between) != 2 or not all(isinstance(x, str) for x in between)
            or between[0] == between[1]):
        raise BadInput("must be a list of two different node group names", where, f"{prefix}.between")
    a, b = sorted(between)
    return a, b


def check_fragment(data: Mapping[str, Any], where: str) -> dict:
    """`data` if it is a valid fragment, else BadInput naming `where` and the field."""
    check_keys(data, FRAGMENT_KEYS, where)
    if data.get("format", FORMAT) != FORMAT:
        raise BadInput(f"expected {FORMAT!r}, got {data['format']!r}", where, "format")
    if data.get("measured") is not None and not isinstance(data["measured"], dict):
        raise BadInput("must be a mapping (provenance of the measurement)", where, "measured")
    for key in NODE_LINKS:
        if data.get(key) is not None:
            read_link(data[key], where, key, {})
    groups = data.get("node_groups") or {}
    if not isinstance(groups, dict):
        raise BadInput("must be a mapping of node group name to intra_node / inter_node", where, "node_groups")
    for name, entry in groups.items():
        check_name(name, where, "node_groups (a group name)")
        if not isinstance(entry, dict) or not entry:
            raise BadInput("must be a mapping with intra_node and/or inter_node", where, f"node_groups.{name}")
        check_keys(entry, NODE_LINKS, where, f"node_groups.{name}")
        for key in entry:
            read_link(entry[key], where, f"node_groups.{name}.{key}", {})
    links = data.get("links") or []
    if not isinstance(links, list):
        raise BadInput("must be a list of links between two node groups", where, "links")
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(links):
        pair = _between(entry, where, f"links[{i}]")
        if pair in seen:
            raise BadInput(f"a second link between {pair[0]!r} and {pair[1]!r}", where, f"links[{i}].between")
        seen.add(pair)
        read_link(entry, where, f"links[{i}]", {}, ("between",))
    if not any(data.get(k) for k in (*NODE_LINKS, "node_groups", "links")):
        raise BadInput("holds no link (intra_node, inter_node, node_groups or links)", where)
    return dict(data)


def load_fragment(path: str) -> dict:
    return check_fragment(load_mapping(path, "links file"), str(path))


def merge_fragment(spec: Mapping[str, Any], fragment: Mapping[str, Any], where: str) -> dict:
    """A cluster spec with the fragment's links in place of its own (node groups and names
    checked against the spec; `where` names the fragment)."""
    groups = spec.get("node_groups")
    names = [g.get("name") for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []
    per_group = fragment.get("node_groups") or {}
    for name in per_group:
        if name not in names:
            raise BadInput(f"the cluster has no node group {name!r} (it has {', '.join(map(str, names))})",
                           where, f"node_groups.{name}")
    merged_groups = []
    for g in groups or []:
        g = dict(g) if isinstance(g, dict) else g
        if isinstance(g, dict):
            for key in NODE_LINKS:
                own = (per_group.get(g.get("name")) or {}).get(key)
                if own is not None or fragment.get(key) is not None:
                    g[key] = own if own is not None else fragment[key]
        merged_groups.append(g)
    new_pairs = {}
    for i, entry in enumerate(fragment.get("links") or []):
        pair = _between(entry, where, f"links[{i}]")
        for x in pair:
            if x not in names:
                raise BadInput(f"the cluster has no node group {x!r}", where, f"links[{i}].between")
        new_pairs[pair] = entry
    kept = [e for e in (spec.get("links") or []) if not isinstance(e, dict)
            or not isinstance(e.get("between"), list) or tuple(sorted(map(str, e["between"]))) not in new_pairs]
    merged = {**spec, "node_groups": merged_groups}
    if kept or new_pairs:
        merged["links"] = kept + list(new_pairs.values())
    return merged


def cluster_with_links(cluster_name: str, links_path: str):
    """The cluster of `cluster_name` (file or built-in name) with the fragment at `links_path`
    merged in; its spec (which plan files embed) holds the measured links."""
    from .hardware import cluster_from_spec, resolve_cluster_path

    fragment = load_fragment(links_path)
    path = resolve_cluster_path(cluster_name)
    spec = load_mapping(path, "cluster file")
    merged = merge_fragment(spec, fragment, links_path)
    merged.setdefault("name", name_from_file(path))
    return cluster_from_spec(merged, f"{path} (with {links_path})")


# --- writing (planner profile-links) ------------------------------------------------------------


def measured_link(kind: str, ranks: int, sizes: Mapping[str, Sequence[int]], times: Mapping[str, Sequence[float]],
                  share: int = 1) -> dict:
    """A link mapping from one link's measurements: per collective the curve and its fitted
    line (linkcurve.curve_json); the link's own bandwidth_GBps / latency_us are all-reduce's."""
    curve = {op: curve_json(op, ranks, sizes[op], times[op], share) for op in OPS if op in times}
    first = curve.get("all_reduce") or next(iter(curve.values()))
    return {"kind": kind, "bandwidth_GBps": first["bandwidth_GBps"], "latency_us": first["latency_us"],
            "curve": curve}


def assemble_fragment(measured: dict, links: Sequence[tuple[str, tuple[str, ...], dict]], named: bool) -> dict:
    """The fragment of measured links: `links` are (scope, groups, link mapping), scope
    intra, inter (two nodes of one group) or pair (two groups). Without named groups,
    intra and inter go to the top-level intra_node / inter_node."""
    out: dict = {"format": FORMAT, "measured": measured}
    for scope, groups, link in links:
        if scope == "pair":
            out.setdefault("links", []).append({"between": list(groups), **link})
        elif named:
            out.setdefault("node_groups", {}).setdefault(groups[0], {})[f"{scope}_node"] = link
        else:
            out[f"{scope}_node"] = link
    return out
