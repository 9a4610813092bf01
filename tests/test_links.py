"""Measured links: size curves in the cost model, the link fragment (`--links`), its loader,
and the parts of `planner profile-links` that need no torch."""

from __future__ import annotations

import math

import pytest
import yaml

from planner.cost.formulas import DEFAULT_PARAMS, hierarchical_allreduce_s, ring_allgather_s, ring_allreduce_s
from planner.inputs.devices import Link, read_link
from planner.core.errors import BadInput
from planner.inputs.linkcurve import LinkCurve, bus_factor, curve_json, fit_line, latency_hops
from planner.calibrate.linkprof import group_names, node_layout, parse_node_groups, parse_sizes, plan_links
from planner.inputs.links import assemble_fragment, check_fragment, measured_link, merge_fragment
from planner.cost.pricing import p2p_s

from .conftest import assert_bad_input, evaluate_args, invoke

GB = 1e9
SIZES = [1e3, 1e6]


def curve(op: str, busbw: list[float], ranks: int = 2, fit_bw: float = 5 * GB, fit_lat: float = 1e-5) -> LinkCurve:
    return LinkCurve(op, ranks, tuple(SIZES), tuple(busbw), fit_bw, fit_lat)


def test_curve_prices_a_collective_at_the_bus_bandwidth_of_its_size():
    link = Link(300 * GB, 3e-6, "nvlink", (curve("all_reduce", [0.1 * GB, 10 * GB]),))
    # at a measured size: factor S / busbw(S), the efficiency not applied (measured figures)
    assert ring_allreduce_s(1e3, 4, link, 0.8) == pytest.approx(1.5 * 1e3 / (0.1 * GB), rel=1e-12)
    # between sizes: busbw linear in log size (the geometric middle gets the mean)
    middle = math.sqrt(1e3 * 1e6)
    assert ring_allreduce_s(middle, 4, link, 0.8) == pytest.approx(1.5 * middle / (5.05 * GB), rel=1e-12)
    # an array of sizes prices each element the same way
    assert list(ring_allreduce_s([1e3, middle], 4, link, 0.8)) == pytest.approx(
        [ring_allreduce_s(1e3, 4, link, 0.8), ring_allreduce_s(middle, 4, link, 0.8)])


def test_curve_beyond_its_ends_uses_the_fitted_line():
    link = Link(300 * GB, 3e-6, "nvlink", (curve("all_reduce", [0.1 * GB, 10 * GB]),))
    for n in (10.0, 1e9):
        assert ring_allreduce_s(n, 4, link, 0.8) == pytest.approx(1.5 * n / (5 * GB) + 6 * 1e-5, rel=1e-12)


def test_each_collective_uses_its_own_curve_else_the_links_line():
    link = Link(2 * GB, 1e-6, "", (curve("all_gather", [1 * GB, 1 * GB]), curve("reduce_scatter", [2 * GB, 2 * GB]),
                                   curve("sendrecv", [4 * GB, 4 * GB])))
    assert ring_allgather_s(1e4, 2, link, 0.8) == pytest.approx(0.5 * 1e4 / GB)
    assert ring_allgather_s(1e4, 2, link, 0.8, "reduce_scatter") == pytest.approx(0.5 * 1e4 / (2 * GB))
    assert p2p_s(1e4, link, True, DEFAULT_PARAMS) == pytest.approx(2 * 1e4 / (4 * GB))
    # no all-reduce curve: the link's own (measured) figures, without the efficiency
    assert ring_allreduce_s(1e4, 2, link, 0.8) == pytest.approx(1e4 / (2 * GB) + 2 * 1e-6)


def test_a_link_without_curve_prices_as_before():
    link = Link(100 * GB, 5e-6, "x")
    assert ring_allreduce_s(1e6, 4, link, 0.8) == 2 * 3 / 4 * 1e6 / (100 * GB * 0.8) + 2 * 3 * 5e-6
    assert hierarchical_allreduce_s(1e6, 4, 2, link, link, DEFAULT_PARAMS) == (
        2 * ring_allgather_s(1e6, 4, link, 0.8) + ring_allreduce_s(1e6 / 4, 2, link, 0.8))


def test_a_slower_curve_makes_the_collective_slower():
    plain = Link(100 * GB, 5e-6, "x")
    measured = Link(100 * GB, 5e-6, "x", (curve("all_reduce", [0.05 * GB, 5 * GB], fit_bw=6 * GB),))
    for n in (1e3, 1e5, 1e6):
        assert ring_allreduce_s(n, 2, measured, 0.8) > ring_allreduce_s(n, 2, plain, 0.8)


def test_a_shared_link_scales_its_curve_per_gpu():
    link = Link(80 * GB, 5e-6, "nic", (curve("all_reduce", [1 * GB, 8 * GB], fit_bw=8 * GB),))
    one = link.shared_by(8)
    assert one.bandwidth_bytes_per_s == 10 * GB
    assert one.curves[0].bus_bandwidths_bytes_per_s == pytest.approx((GB / 8, GB))
    assert one.curves[0].bandwidth_bytes_per_s == pytest.approx(GB)
    assert Link(80 * GB, 5e-6).shared_by(8) == Link(80 * GB / 8, 5e-6)


@pytest.mark.parametrize("op,ranks", [("all_reduce", 2), ("all_reduce", 4), ("all_gather", 4), ("sendrecv", 2)])
def test_fit_line_recovers_latency_and_bandwidth(op, ranks):
    sizes = [4096 * 4**i for i in range(6)]
    alpha, bus = 40e-6, 3 * GB
    times = [alpha + bus_factor(op, ranks) * s / bus for s in sizes]
    bandwidth, latency = fit_line(op, ranks, sizes, times)
    assert bandwidth == pytest.approx(bus, rel=1e-9)
    assert latency * latency_hops(op, ranks) == pytest.approx(alpha, rel=1e-9)


def test_fit_line_keeps_latency_non_negative():
    sizes = [1e3, 1e4, 1e5]
    times = [1e-7, 1e-5, 1e-4]  # a free line would cross zero above the origin
    bandwidth, latency = fit_line("sendrecv", 2, sizes, times)
    assert latency == 0.0 and bandwidth > 0


def test_curve_json_follows_the_nccl_tests_convention():
    entry = curve_json("all_reduce", 4, [1000, 2000], [1e-6, 1e-6])
    assert entry["algbw_GBps"] == [1.0, 2.0]
    assert entry["busbw_GBps"] == [1.5, 3.0]  # algbw x 2(n-1)/n
    node = curve_json("all_gather", 2, [1000, 2000], [1e-6, 1e-6], share=4)
    assert node["busbw_GBps"] == [2.0, 4.0]  # algbw x (n-1)/n x 4 pairs at once


# --- reading -----------------------------------------------------------------------------------


def link_entry(**curve_changes) -> dict:
    entry = {"ranks": 2, "bandwidth_GBps": 2.0, "latency_us": 30.0, "size_bytes": [4096, 65536],
             "busbw_GBps": [0.1, 1.0], "time_us": [41.0, 65.5], "algbw_GBps": [0.1, 1.0]}
    entry.update(curve_changes)
    return {"kind": "measured", "bandwidth_GBps": 2.0, "latency_us": 30.0, "curve": {"all_reduce": entry}}


def test_a_cluster_link_reads_its_curve_in_si_units():
    link = read_link(link_entry(), "c.yaml", "intra_node", {})
    (c,) = link.curves
    assert (c.op, c.ranks, c.sizes_bytes) == ("all_reduce", 2, (4096.0, 65536.0))
    assert c.bus_bandwidths_bytes_per_s == (0.1 * GB, 1.0 * GB)
    assert (c.bandwidth_bytes_per_s, c.latency_s) == (2 * GB, pytest.approx(30e-6))


def test_a_curve_may_hold_the_low_bandwidth_of_a_small_message():
    # measured on a loaded CPU: 4 KiB reduce-scattered in 3.7 ms is 0.00055 GB/s of bus bandwidth
    link = read_link(link_entry(busbw_GBps=[0.000551643, 0.5], time_us=[3712.55, 65.5]), "c.yaml", "intra_node", {})
    assert link.curves[0].bus_bandwidths_bytes_per_s[0] == pytest.approx(551643.0)


@pytest.mark.parametrize("changes,field,words", [
    ({"size_bytes": [65536, 4096]}, "intra_node.curve.all_reduce.size_bytes[1]", "increase strictly"),
    ({"size_bytes": [4096, 4096]}, "intra_node.curve.all_reduce.size_bytes[1]", "increase strictly"),
    ({"busbw_GBps": [-1.0, 1.0]}, "intra_node.curve.all_reduce.busbw_GBps[0]", "got -1.0"),
    ({"busbw_GBps": [1.0]}, "intra_node.curve.all_reduce.busbw_GBps", "1 values for 2 sizes"),
    ({"size_bytes": "4096"}, "intra_node.curve.all_reduce.size_bytes", "list of at least 2"),
    ({"size_bytes": [4096]}, "intra_node.curve.all_reduce.size_bytes", "list of at least 2"),
    ({"bandwidth_GBps": 0}, "intra_node.curve.all_reduce.bandwidth_GBps", "GB/s"),
    ({"ranks": 1}, "intra_node.curve.all_reduce.ranks", "at least 2"),
    ({"time_us": [1, "x"]}, "intra_node.curve.all_reduce.time_us[1]", "'x'"),
    ({"colour": 1}, "intra_node.curve.all_reduce.colour", "unknown key"),
])
def test_a_bad_curve_is_bad_input_naming_file_and_field(changes, field, words):
    with pytest.raises(BadInput) as err:
        read_link(link_entry(**changes), "c.yaml", "intra_node", {})
    assert str(err.value).startswith(f"c.yaml: {field}: ") and words in str(err.value)


def test_an_unknown_collective_is_bad_input():
    entry = link_entry()
    entry["curve"] = {"broadcast": entry["curve"]["all_reduce"]}
    with pytest.raises(BadInput, match="intra_node.curve.broadcast: unknown collective"):
        read_link(entry, "c.yaml", "intra_node", {})


TWO_GROUPS = """\
name: two
node_groups:
  - {name: a, gpu: A100-SXM4-80GB, nodes: 1, gpus_per_node: 2,
     intra_node: {bandwidth_GBps: 300, latency_us: 3}, inter_node: {bandwidth_GBps: 25, latency_us: 5}}
  - {name: b, gpu: A100-SXM4-80GB, nodes: 1, gpus_per_node: 2,
     intra_node: {bandwidth_GBps: 300, latency_us: 3}, inter_node: {bandwidth_GBps: 25, latency_us: 5}}
"""


def slow_fragment() -> dict:
    """Measured links far slower than the cluster file's: 2 GB/s inside a node, 1 GB/s between groups."""
    sizes = [4096 * 4**i for i in range(5)]
    ops = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
    times = {op: [20e-6 + s / 2e9 for s in sizes] for op in ops}
    intra = measured_link("measured (test)", 2, {op: sizes for op in ops}, times)
    pair = measured_link("measured (test)", 2, {op: sizes for op in ops}, {op: [2 * t for t in times[op]] for op in ops}, 2)
    return assemble_fragment({"backend": "test"}, [("intra", ("a",), intra), ("intra", ("b",), intra),
                                                   ("pair", ("a", "b"), pair)], named=True)


@pytest.fixture
def two_groups(tmp_path):
    cluster = tmp_path / "two.yaml"
    cluster.write_text(TWO_GROUPS)
    links = tmp_path / "links.yaml"
    links.write_text(yaml.safe_dump(slow_fragment(), sort_keys=False))
    return cluster, links


def test_evaluate_with_measured_links_prices_communication_by_them(two_groups):
    cluster, links = two_groups
    args = evaluate_args(cluster=str(cluster), global_batch=16, tp=2, dp=2)
    before, after = invoke(*args), invoke(*args, "--links", str(links))
    assert before.exit_code == 0 and after.exit_code == 0, after.output
    b, a = yaml.safe_load(before.stdout)["breakdown_s"], yaml.safe_load(after.stdout)["breakdown_s"]
    assert a["tp_comm"] > 10 * b["tp_comm"]  # 2 GB/s measured where the file says 300
    assert a["dp_comm"] > b["dp_comm"]
    assert a["compute"] == b["compute"]


def test_plan_with_links_embeds_the_measured_links_in_the_plan_file(two_groups, tmp_path):
    cluster, links = two_groups
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", cluster, "--global-batch", 8, "--seq-len", 256,
                    "--links", links, "--micro-batch", 1, "--virtual-stages", 1, "-o", out)
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(out.read_text())["cluster"]["spec"]
    assert spec["node_groups"][0]["intra_node"]["curve"]["all_reduce"]["ranks"] == 2
    assert spec["links"][0]["between"] == ["a", "b"]
    again = invoke("evaluate", "--plan", out, "--json")
    assert again.exit_code == 0 and yaml.safe_load(again.stdout)["step_time_s"] == pytest.approx(
        yaml.safe_load(out.read_text())["predicted"]["step_time_s"], rel=1e-9)


def test_merge_puts_top_level_links_on_every_group_and_named_ones_on_theirs():
    spec = yaml.safe_load(TWO_GROUPS)
    spec["links"] = [{"between": ["b", "a"], "bandwidth_GBps": 9}]
    fragment = {"intra_node": {"bandwidth_GBps": 1}, "node_groups": {"b": {"intra_node": {"bandwidth_GBps": 2}}},
                "links": [{"between": ["a", "b"], "bandwidth_GBps": 3}]}
    merged = merge_fragment(spec, check_fragment(fragment, "f.yaml"), "f.yaml")
    assert [g["intra_node"]["bandwidth_GBps"] for g in merged["node_groups"]] == [1, 2]
    assert [g["inter_node"]["bandwidth_GBps"] for g in merged["node_groups"]] == [25, 25]
    assert merged["links"] == [{"between": ["a", "b"], "bandwidth_GBps": 3}]
    assert spec["node_groups"][0]["intra_node"]["bandwidth_GBps"] == 300  # the input is not changed


@pytest.mark.parametrize("edit,field", [
    (lambda f: f.update(colour=1), "colour: unknown key"),
    (lambda f: f.update(format="planner.links/v9"), "format: expected"),
    (lambda f: f["node_groups"].update(c=f["node_groups"]["a"]), "node_groups.c: the cluster has no node group 'c'"),
    (lambda f: f["links"][0].update(between=["a", "z"]), "links[0].between: the cluster has no node group 'z'"),
    (lambda f: f["links"][0].update(between=["a", "a"]), "links[0].between: must be a list of two different"),
    (lambda f: f["node_groups"]["a"]["intra_node"]["curve"]["sendrecv"].update(size_bytes=[4096, 1024, 2, 3, 4]),
     "node_groups.a.intra_node.curve.sendrecv.size_bytes[1]: sizes must increase strictly"),
    (lambda f: f["links"][0]["curve"]["all_to_all"]["busbw_GBps"].__setitem__(2, -3.0),
     "links[0].curve.all_to_all.busbw_GBps[2]: must be a number"),
    (lambda f: f["node_groups"]["a"].update(dp_node={}), "node_groups.a.dp_node: unknown key"),
    (lambda f: [f.pop(k) for k in ("node_groups", "links")], "holds no link"),
])
def test_a_bad_links_file_exits_2_naming_file_and_field(two_groups, edit, field):
    cluster, links = two_groups
    fragment = slow_fragment()
    edit(fragment)
    links.write_text(yaml.safe_dump(fragment, sort_keys=False))
    line = assert_bad_input(invoke(*evaluate_args(cluster=str(cluster), tp=2, dp=2), "--links", str(links)))
    assert line.startswith(f"planner: {links}: {field}"), line


def test_links_with_a_plan_file_is_refused(two_groups, tmp_path):
    _, links = two_groups
    assert_bad_input(invoke("evaluate", "--plan", tmp_path / "p.json", "--links", links), "--links", "--plan")


# --- profile-links without torch -----------------------------------------------------------------


def test_profile_links_outside_torchrun_is_bad_input(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert_bad_input(invoke("profile-links"), "torchrun")


def test_sizes_parse_as_lists_or_geometric_ranges():
    assert parse_sizes("4K:64K:4") == (4096, 16384, 65536)
    assert parse_sizes("1K:4K") == (1024, 2048, 4096)
    assert parse_sizes("4096,1M,1GiB") == (4096, 2**20, 2**30)
    for bad in ("4K", "64K:4K", "4K:64K:1", "1K,1K", "x,1K", "0,4"):
        with pytest.raises(BadInput, match="--sizes"):
            parse_sizes(bad)


def test_node_groups_name_nodes_in_order():
    assert parse_node_groups("a100:2,v100:1") == (("a100", 2), ("v100", 1))
    assert group_names(3, (("a100", 2), ("v100", 1))) == ["a100", "a100", "v100"]
    with pytest.raises(BadInput, match="--node-groups"):
        group_names(4, (("a100", 2), ("v100", 1)))
    for bad in ("a100", "a100:0", "a:1,a:1", "-x:1"):
        with pytest.raises(BadInput, match="--node-groups"):
            parse_node_groups(bad)


def test_links_measured_are_nodes_node_pairs_and_group_pairs():
    nodes = node_layout(["h1", "h1", "h2", "h2", "h3", "h3"], None)
    assert nodes == [[0, 1], [2, 3], [4, 5]]
    assert node_layout([0] * 4, 2) == [[0, 1], [2, 3]]  # fake nodes of 2 ranks
    assert plan_links(nodes, ["a", "a", "b"]) == [
        ("intra", ("a",), [[0, 1], [2, 3]]), ("intra", ("b",), [[4, 5]]),
        ("inter", ("a",), [[0, 2], [1, 3]]), ("pair", ("a", "b"), [[0, 4], [1, 5]])]
    assert plan_links([[0], [1]], ["all", "all"]) == [("inter", ("all",), [[0, 1]])]


def test_unnamed_fragment_has_top_level_links():
    link = {"bandwidth_GBps": 1.0}
    out = assemble_fragment({}, [("intra", ("all",), link), ("inter", ("all",), link)], named=False)
    assert out["intra_node"] == link and out["inter_node"] == link and "node_groups" not in out
    check_fragment(out, "f.yaml")
