"""GPU catalog, cluster files and link resolution."""

from __future__ import annotations

import copy

import pytest

from planner.core.errors import BadInput
from planner.inputs.hardware import GB, GIB, MAX_CLUSTER_GPUS, US, cluster_from_spec, load_catalog, load_cluster

from .conftest import CATALOG_NAMES, CLUSTERS_DIR

NO_BF16 = {"V100-SXM2-32GB", "V100-PCIE-32GB", "T4", "TITAN-RTX", "RTX-2080", "RTX-2080-Ti"}  # Volta and Turing


def one_group(gpu: str, nodes: int = 1, gpus_per_node: int = 1, **extra) -> dict:
    return {"node_groups": [{"name": "g", "gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node, **extra}]}


# --- catalog ---------------------------------------------------------------------------------


def test_catalog_holds_exactly_the_documented_names():
    assert sorted(load_catalog()) == sorted(CATALOG_NAMES)


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_catalog_name_resolves_case_insensitively(name):
    for spelling in (name, name.lower(), name.swapcase()):
        cluster = cluster_from_spec(one_group(spelling))
        assert cluster.groups[0].gpu.name == name


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_catalog_entry_has_positive_figures_and_a_source(name):
    gpu = load_catalog()[name]
    assert gpu.memory_bytes >= 8 * GIB  # RTX-2080 has 8 GB
    assert gpu.hbm_bandwidth_bytes_per_s > 0
    assert gpu.peak("fp16") > gpu.peak("fp32") > 0
    assert gpu.intra_node.bandwidth_bytes_per_s > 0 and gpu.inter_node.bandwidth_bytes_per_s > 0
    assert gpu.source


@pytest.mark.parametrize("name", sorted(NO_BF16))
def test_v100_and_t4_have_no_bf16(name):
    gpu = load_catalog()[name]
    assert not gpu.supports("bf16")
    with pytest.raises(BadInput, match="bf16"):
        gpu.peak("bf16")


@pytest.mark.parametrize("name", sorted(set(CATALOG_NAMES) - NO_BF16))
def test_every_other_gpu_has_bf16(name):
    assert load_catalog()[name].supports("bf16")


def test_common_dtype_is_bf16_only_when_every_gpu_has_it():
    assert load_cluster("dgx-a100").common_dtype() == "bf16"
    assert load_cluster("a100-v100-mix").common_dtype() == "fp16"
    assert cluster_from_spec(one_group("T4")).common_dtype() == "fp16"


def test_a100_80gb_data_sheet_figures():
    gpu = load_catalog()["A100-SXM4-80GB"]
    assert gpu.memory_bytes == 80 * GIB
    assert gpu.peak("bf16") == pytest.approx(312e12)


# --- cluster files ---------------------------------------------------------------------------


EXAMPLE_SIZES = {"a100-v100-mix": 48, "consumer-3090-4090": 16, "dgx-a100": 32, "dgx-h100-2node": 16, "gb200-nvl72": 72,
                 "h100-a100-v100": 48, "two-rack-a100-spine": 32, "two-region-a100": 32,
                 "workstation-4090-3090": 4}


def test_every_example_cluster_is_listed():
    assert sorted(p.stem for p in CLUSTERS_DIR.glob("*.yaml")) == sorted(EXAMPLE_SIZES)


@pytest.mark.parametrize("path", sorted(CLUSTERS_DIR.glob("*")), ids=lambda p: p.name)
def test_every_example_cluster_loads(path):
    by_path = load_cluster(str(path))
    by_name = load_cluster(path.stem)
    assert by_path == by_name
    assert by_path.name == path.stem
    assert by_path.num_gpus == EXAMPLE_SIZES[path.stem]
    assert [d.rank for d in by_path.devices()] == list(range(by_path.num_gpus))


def test_file_units_are_converted_to_si():
    spec = one_group("A100-SXM4-80GB", intra_node={"bandwidth_GBps": 300, "latency_us": 3},
                     inter_node={"bandwidth_GBps": 200, "latency_us": 5})
    group = cluster_from_spec(spec).groups[0]
    assert group.intra_node.bandwidth_bytes_per_s == 300 * GB
    assert group.intra_node.latency_s == pytest.approx(3 * US)
    assert group.inter_node.bandwidth_bytes_per_s == 200 * GB


def test_links_default_to_the_gpu_catalog_entry():
    gpu = load_catalog()["H100-SXM5-80GB"]
    group = cluster_from_spec(one_group("H100-SXM5-80GB")).groups[0]
    assert group.intra_node == gpu.intra_node
    assert group.inter_node == gpu.inter_node


def test_custom_gpu_declared_under_gpus():
    spec = one_group("MyCard", gpus_per_node=2)
    spec["gpus"] = {"MyCard": {"memory_GiB": 24, "peak_tflops": {"bf16": 100, "fp16": 100, "fp32": 20},
                               "hbm_GBps": 900}}
    gpu = cluster_from_spec(spec).groups[0].gpu
    assert gpu.name == "MyCard" and gpu.memory_bytes == 24 * GIB and gpu.peak("bf16") == 100e12


def test_gpus_entry_overrides_catalog_figures_and_keeps_the_rest():
    spec = one_group("a100-sxm4-80gb")
    spec["gpus"] = {"A100-SXM4-80GB": {"memory_GiB": 40}}
    gpu = cluster_from_spec(spec).groups[0].gpu
    catalog = load_catalog()["A100-SXM4-80GB"]
    assert gpu.memory_bytes == 40 * GIB
    assert gpu.peak_flops == catalog.peak_flops
    assert gpu.hbm_bandwidth_bytes_per_s == catalog.hbm_bandwidth_bytes_per_s


def test_ranks_are_laid_out_group_by_group_node_by_node():
    cluster = load_cluster("a100-v100-mix")
    assert cluster.device(0).group == "a100"
    assert (cluster.device(9).node, cluster.device(9).local_rank) == (1, 1)
    assert cluster.device(16).group == "v100" and cluster.device(16).node == 0
    assert cluster.device(47).gpu == "V100-SXM2-32GB"


def test_duplicate_group_names_are_bad_input():
    spec = {"node_groups": [one_group("T4")["node_groups"][0], one_group("L4")["node_groups"][0]]}
    with pytest.raises(BadInput, match=r"node_groups\[1\].name"):
        cluster_from_spec(spec, "c.yaml")


# --- link resolution -------------------------------------------------------------------------


def two_groups(with_link: bool) -> dict:
    spec = {"node_groups": [
        {"name": "fast", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 4,
         "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
         "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}},
        {"name": "slow", "gpu": "V100-SXM2-32GB", "nodes": 2, "gpus_per_node": 4,
         "intra_node": {"bandwidth_GBps": 150, "latency_us": 4},
         "inter_node": {"bandwidth_GBps": 50, "latency_us": 7}}]}
    if with_link:
        spec["links"] = [{"between": ["slow", "fast"], "bandwidth_GBps": 1.25, "latency_us": 20000}]
    return spec


def test_same_node_uses_intra_node_link():
    cluster = cluster_from_spec(two_groups(False))
    assert cluster.link(0, 3) == cluster.group("fast").intra_node
    assert cluster.link(8, 11) == cluster.group("slow").intra_node
    assert cluster.link(0, 3).bandwidth_bytes_per_s == 300 * GB


def test_same_group_other_node_uses_inter_node_link():
    cluster = cluster_from_spec(two_groups(False))
    assert cluster.link(0, 4) == cluster.group("fast").inter_node
    assert cluster.link(9, 13) == cluster.group("slow").inter_node


def test_two_groups_with_a_links_entry_use_that_link():
    cluster = cluster_from_spec(two_groups(True))
    link = cluster.link(0, 8)
    assert link.bandwidth_bytes_per_s == 1.25 * GB
    assert link.latency_s == pytest.approx(20000 * US)
    assert cluster.link(12, 3) == link  # symmetric, in either order of `between`


def test_two_groups_without_a_links_entry_use_the_smaller_inter_node():
    cluster = cluster_from_spec(two_groups(False))
    link = cluster.link(0, 8)
    assert link.bandwidth_bytes_per_s == 50 * GB
    assert link.latency_s == pytest.approx(7 * US)


def test_topology_graph_carries_the_links_entry_as_its_edge():
    cluster = cluster_from_spec(two_groups(True))
    edge = cluster.topology.graph.edges["fast", "slow"]
    assert edge["bandwidth_bytes_per_s"] == 1.25 * GB
    assert sorted(cluster.topology.graph.nodes) == ["fast", "slow"]


def test_link_between_a_group_and_itself_is_bad_input():
    spec = two_groups(False)
    spec["links"] = [{"between": ["fast", "fast"], "bandwidth_GBps": 1}]
    with pytest.raises(BadInput, match=r"links\[0\].between"):
        cluster_from_spec(spec, "c.yaml")


# --- size limit --------------------------------------------------------------------------------


def test_cluster_of_exactly_the_limit_is_accepted():
    cluster = cluster_from_spec(one_group("H100-SXM5-80GB", nodes=MAX_CLUSTER_GPUS // 8, gpus_per_node=8))
    assert cluster.num_gpus == 1_048_576


def test_cluster_over_1_048_576_gpus_is_rejected():
    with pytest.raises(BadInput, match="1048576"):
        cluster_from_spec(one_group("H100-SXM5-80GB", nodes=MAX_CLUSTER_GPUS // 8 + 1, gpus_per_node=8), "c.yaml")


def test_groups_that_together_exceed_the_limit_are_rejected():
    group = one_group("H100-SXM5-80GB", nodes=MAX_CLUSTER_GPUS // 16, gpus_per_node=8)["node_groups"][0]
    other = copy.deepcopy(group) | {"name": "h"}
    other["nodes"] += 1
    with pytest.raises(BadInput, match=r"node_groups\[1\].nodes"):
        cluster_from_spec({"node_groups": [group, other]}, "c.yaml")
