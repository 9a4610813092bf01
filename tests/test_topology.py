"""The cluster's network as a graph (planner.inputs.topology): the link between two node groups is
the widest path between them, through switches only; `links:` is shorthand for direct edges."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from planner.inputs import topology
from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.cost.paths import pair_link
from planner.inputs.hardware import GB, US, cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

from .conftest import CLUSTERS_DIR, assert_bad_input, invoke

SPINE = "two-rack-a100-spine"


def group(name: str, nodes: int = 1, inter_GBps: float = 200, inter_us: float = 5) -> dict:
    return {"name": name, "gpu": "A100-SXM4-80GB", "nodes": nodes, "gpus_per_node": 8,
            "inter_node": {"bandwidth_GBps": inter_GBps, "latency_us": inter_us}}


def edge(a: str, b: str, bandwidth_GBps: float, latency_us: float = 0, **extra) -> dict:
    return {"between": [a, b], "bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us, **extra}


def spec(*groups: str, links=None, switches=None, topo_links=None) -> dict:
    out: dict = {"name": "t", "node_groups": [group(g) for g in groups]}
    if links is not None:
        out["links"] = links
    if switches is not None or topo_links is not None:
        out["topology"] = {"switches": switches or [], "links": topo_links or []}
    return out


def route(s: dict, a: str = "a", b: str = "b"):
    return cluster_from_spec(s, "c.yaml").group_link(a, b)


# --- the widest path ---------------------------------------------------------------------------


def test_a_wide_path_through_a_switch_beats_a_slow_direct_link():
    s = spec("a", "b", links=[edge("a", "b", 1.25, 20000)], switches=["spine"],
             topo_links=[edge("a", "spine", 50, 2), edge("spine", "b", 40, 3)])
    link = route(s)
    assert link.bandwidth_bytes_per_s == 40 * GB  # the narrower uplink bounds the path
    assert link.latency_s == pytest.approx(5 * US)  # the path's latencies add up
    assert link.kind == "via spine"
    assert route(s, "b", "a") == link


def test_a_direct_link_wider_than_the_switch_path_is_kept_with_its_own_figures():
    s = spec("a", "b", links=[edge("a", "b", 100, 30, kind="NVLink bridge")], switches=["spine"],
             topo_links=[edge("a", "spine", 50, 1), edge("spine", "b", 50, 1)])
    link = route(s)
    assert (link.bandwidth_bytes_per_s, link.latency_s, link.kind) == (100 * GB, 30 * US, "NVLink bridge")


def test_equal_widths_go_to_the_least_total_latency():
    s = spec("a", "b", switches=["s1", "s2"],
             topo_links=[edge("a", "s1", 50, 10), edge("s1", "b", 50, 10),
                         edge("a", "s2", 50, 1), edge("s2", "b", 50, 2)])
    link = route(s)
    assert (link.bandwidth_bytes_per_s, link.kind) == (50 * GB, "via s2")
    assert link.latency_s == pytest.approx(3 * US)


def test_a_wider_but_slower_prefix_does_not_hide_a_faster_path_of_equal_width():
    # a-s1 is wider but slow; a-s2-s1 is narrower but fast; both lose their width at s1-b.
    s = spec("a", "b", switches=["s1", "s2"],
             topo_links=[edge("a", "s1", 100, 10), edge("a", "s2", 50, 1), edge("s2", "s1", 100, 1),
                         edge("s1", "b", 20, 1)])
    link = route(s)
    assert link.bandwidth_bytes_per_s == 20 * GB
    assert link.latency_s == pytest.approx(3 * US)
    assert link.kind == "via s2, s1"


def test_a_path_never_passes_through_a_third_groups_nodes():
    s = spec("a", "b", "c", links=[edge("a", "b", 1.25, 20000), edge("a", "c", 100), edge("b", "c", 100)])
    assert route(s).bandwidth_bytes_per_s == 1.25 * GB


# --- oversubscription, shorthand, defaults ---------------------------------------------------------


def test_an_oversubscribed_spine_lowers_the_cross_rack_link_and_the_price():
    with_spine = load_cluster(SPINE)
    flat_spec = copy.deepcopy(dict(with_spine.spec))
    del flat_spec["topology"]
    flat = cluster_from_spec(flat_spec, "flat.yaml")
    assert with_spine.group_link("rack-a", "rack-b").bandwidth_bytes_per_s == 50 * GB
    assert flat.group_link("rack-a", "rack-b").bandwidth_bytes_per_s == 200 * GB
    assert with_spine.group_link("rack-a", "rack-a") == flat.group_link("rack-a", "rack-a")  # inside a rack
    assert pair_link(with_spine, "rack-a", "rack-b").bandwidth_bytes_per_s == 50 * GB / 8
    model, t = load_model("gpt2"), Training(64, 1024, "bf16", 1)

    def step(cluster) -> float:
        plan = uniform_plan(model, cluster, t, tp=1, pp=1, dp=32, zero=0, recompute="none",
                            sequence_parallel=False)
        return evaluate(plan).step_time_s

    assert step(with_spine) > step(flat)


def test_links_shorthand_equals_the_same_edge_in_the_topology():
    shorthand = cluster_from_spec(spec("a", "b", links=[edge("b", "a", 3, 7, kind="x")]), "c.yaml")
    in_topology = cluster_from_spec(spec("a", "b", topo_links=[edge("a", "b", 3, 7, kind="x")]), "c.yaml")
    assert shorthand.group_link("a", "b") == in_topology.group_link("a", "b")
    assert shorthand.topology.routes == in_topology.topology.routes


def test_a_switch_path_prices_like_a_links_entry_of_its_bottleneck_and_summed_latency():
    direct = route(spec("a", "b", links=[edge("a", "b", 25, 10)]))
    through = route(spec("a", "b", switches=["spine"], topo_links=[edge("a", "spine", 25, 4),
                                                                  edge("spine", "b", 60, 6)]))
    assert through.bandwidth_bytes_per_s == direct.bandwidth_bytes_per_s
    assert through.latency_s == pytest.approx(direct.latency_s)


def test_without_topology_two_groups_talk_at_the_smaller_inter_node_and_larger_latency():
    s = spec("a", "b")
    s["node_groups"][1]["inter_node"] = {"bandwidth_GBps": 50, "latency_us": 2}
    link = route(s)
    assert (link.bandwidth_bytes_per_s, link.latency_s) == (50 * GB, 5 * US)
    assert link.kind.endswith(topology.DEFAULT_KIND)


def test_a_default_path_with_an_ethernet_end_is_priced_as_ethernet():
    """NCCL speaks one transport per connection: an end with only Ethernet makes the path a
    socket one, which link_efficiency prices with the Ethernet figure, not the RDMA default."""
    from planner.cost.formulas import DEFAULT_PARAMS, link_efficiency

    s = spec("a", "b")
    s["node_groups"][1]["inter_node"] = {"bandwidth_GBps": 100, "latency_us": 2, "kind": "25GbE ethernet"}
    link = route(s)
    assert "ethernet" in link.kind.lower() and link.kind.endswith(topology.DEFAULT_KIND)
    assert link_efficiency(link, DEFAULT_PARAMS, intra=False) == DEFAULT_PARAMS.ethernet_link_efficiency


def test_with_topology_there_is_no_default_edge_behind_the_spine():
    s = spec("a", "b", switches=["spine"], topo_links=[edge("a", "spine", 10), edge("spine", "b", 10)])
    assert route(s).bandwidth_bytes_per_s == 10 * GB  # not the 200 GB/s inter_node default


def test_a_pair_is_searched_once_and_pricing_reuses_it(monkeypatch):
    cluster = load_cluster(SPINE)
    searches = []
    real = topology.least_latency_from
    monkeypatch.setattr(topology, "least_latency_from", lambda *a: searches.append(a) or real(*a))
    assert cluster.link(0, 31).bandwidth_bytes_per_s == 50 * GB
    assert len(searches) == 1
    plan = uniform_plan(load_model("gpt2"), cluster, Training(32, 512, "bf16", 1), tp=1, pp=2, dp=16,
                        zero=0, recompute="none", sequence_parallel=False)
    assert evaluate(plan).step_time_s > 0
    assert len(searches) == 1
    assert [(a, b) for a, b, _ in cluster.topology.routes] == [("rack-a", "rack-b")]


# --- the example and the CLI -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_spine_example_plans_and_its_plan_carries_the_topology(tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", SPINE, "--global-batch", "32",
                    "--seq-len", "512", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["cluster"]["spec"]["topology"]["switches"] == ["spine"]
    assert invoke("validate", out).exit_code == 0


BAD = [
    ("not a mapping", lambda s: s.update(topology=["spine"]), "topology: must be a mapping"),
    ("unknown key", lambda s: s["topology"].update(uplinks=[]), "topology.uplinks: unknown key"),
    ("switches not a list", lambda s: s["topology"].update(switches="spine"),
     "topology.switches: must be a list"),
    ("duplicate switch", lambda s: s["topology"]["switches"].append("spine"),
     "topology.switches[1]: duplicate switch 'spine'"),
    ("switch named like a group", lambda s: s["topology"]["switches"].append("rack-a"),
     "topology.switches[1]: duplicate name"),
    ("bad switch name", lambda s: s["topology"]["switches"].append("my switch"),
     "topology.switches[1]: must be a name"),
    ("unknown end", lambda s: s["topology"]["links"][0].update(between=["rack-a", "spline"]),
     "topology.links[0].between: unknown node group or switch 'spline'"),
    ("unknown group in links", lambda s: s.update(links=[edge("rack-a", "spine", 1)]),
     "links[0].between: unknown node group 'spine'"),
    ("one end", lambda s: s["topology"]["links"][0].update(between=["spine", "spine"]),
     "topology.links[0].between: a link joins two different ends"),
    ("duplicate edge", lambda s: s["topology"]["links"].append(edge("spine", "rack-a", 9)),
     "topology.links[2].between: a second link between 'rack-a' and 'spine' (the first is topology.links[0])"),
    ("duplicate across sections", lambda s: (s.update(links=[edge("rack-a", "rack-b", 9)]),
                                                  s["topology"]["links"].append(edge("rack-b", "rack-a", 9))),
     "topology.links[2].between: a second link between 'rack-a' and 'rack-b' (the first is links[0])"),
    ("zero bandwidth", lambda s: s["topology"]["links"][0].update(bandwidth_GBps=0),
     "topology.links[0].bandwidth_GBps: must be a number from 0.001"),
    ("missing bandwidth", lambda s: s["topology"]["links"][0].pop("bandwidth_GBps"),
     "topology.links[0].bandwidth_GBps: missing required field"),
    ("negative latency", lambda s: s["topology"]["links"][1].update(latency_us=-1),
     "topology.links[1].latency_us: must be a number from 0"),
    ("no route", lambda s: s["topology"]["links"].pop(), "topology: no route between node groups "
                                                            "'rack-a' and 'rack-b'"),
    ("idle switch", lambda s: s["topology"]["switches"].append("leaf"),
     "topology.switches[1]: switch 'leaf' has no link"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_topology_is_one_line_naming_file_and_field_exit_2(tmp_path, case):
    _, edit, needle = case
    s = yaml.safe_load((CLUSTERS_DIR / f"{SPINE}.yaml").read_text())
    edit(s)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(s))
    result = invoke("plan", "--model", "gpt2", "--cluster", path, "--global-batch", "32", "--seq-len", "512")
    assert_bad_input(result, f"{path}: {needle}")
    with pytest.raises(BadInput):
        cluster_from_spec(s, "c.yaml")
