"""The Blackwell catalog entries B300, GB200 and GB300 (NVIDIA data sheets, dense peaks)."""

from __future__ import annotations

import pytest

from planner.inputs.hardware import GB, GIB, load_catalog, load_cluster

from .conftest import benchmark_module, invoke, ok_json

TF = 1e12

# name -> (memory GiB, dense TFLOP/s per dtype, HBM GB/s): the entries' cited data sheets,
# sparse figures halved, board / superchip / rack figures divided by their GPU count
SOURCED = {
    "B300": (288, {"fp32": 75, "tf32": 1125, "fp16": 2250, "bf16": 2250, "fp8": 4500}, 8000),
    "GB200": (186, {"fp32": 80, "tf32": 1250, "fp16": 2500, "bf16": 2500, "fp8": 5000}, 8000),
    "GB300": (288, {"fp32": 83.3, "tf32": 1250, "fp16": 2500, "bf16": 2500, "fp8": 5000}, 8000),
}


@pytest.mark.parametrize("name", sorted(SOURCED))
def test_blackwell_entry_is_a_blackwell_datacenter_part(name):
    gpu = load_catalog()[name]
    assert (gpu.architecture, gpu.segment, gpu.vendor) == ("blackwell", "datacenter", "NVIDIA")
    assert "https://www.nvidia.com/" in gpu.source


@pytest.mark.parametrize("name", sorted(SOURCED))
def test_blackwell_entry_carries_its_sourced_dense_peaks_and_memory(name):
    gpu = load_catalog()[name]
    memory_gib, peaks, hbm_gbps = SOURCED[name]
    assert gpu.memory_bytes == memory_gib * GIB
    assert gpu.hbm_bandwidth_bytes_per_s == hbm_gbps * GB
    for dtype, tflops in peaks.items():
        assert gpu.peak(dtype) == pytest.approx(tflops * TF)


@pytest.mark.parametrize("name", sorted(SOURCED))
def test_blackwell_entry_links_at_nvlink5_speed(name):
    gpu = load_catalog()[name]
    assert gpu.intra_node.bandwidth_bytes_per_s == 900 * GB  # 1.8 TB/s bidirectional per GPU
    assert "NVLink5" in gpu.intra_node.kind


# --- NVL72 racks: one switched NVLink domain of 72 GPUs --------------------------------------


def test_gb200_nvl72_example_is_one_node_of_72_gpus_on_nvlink():
    cluster = load_cluster("gb200-nvl72")
    (group,) = cluster.groups
    assert (group.gpu.name, group.nodes, group.gpus_per_node) == ("GB200", 1, 72)
    assert group.intra_node.bandwidth_bytes_per_s == 900 * GB
    assert group.inter_node.bandwidth_bytes_per_s == 72 * 50 * GB  # 72 ConnectX-7 at 400 Gb/s


def test_gb200_nvl72_example_plans_llama_3_70b():
    data = ok_json(invoke("plan", "--model", "llama-3-70b", "--cluster", "gb200-nvl72", "--global-batch", "256",
                          "--seq-len", "8192", "--json"))
    assert data["cluster"]["name"] == "gb200-nvl72"
    assert data["predicted"]["step_time_s"] > 0


def test_gb200_nvl72_lets_tensor_parallelism_span_trays():
    data = ok_json(invoke("plan", "--model", "llama-3-70b", "--cluster", "gb200-nvl72", "--global-batch", "256",
                          "--seq-len", "8192", "--tp", "8", "--json"))
    assert {stage["tp"] for stage in data["stages"]} == {8}  # 8 GPUs: two compute trays of 4


def test_moe_replay_puts_nvl72_rows_on_rack_nodes_with_the_racks_nics():
    moe = benchmark_module("fidelity_moe")
    spec = moe.nvl72_spec("GB200", 256)
    (group,) = spec["node_groups"]
    assert (group["nodes"], group["gpus_per_node"]) == (4, 64)  # 64 of each rack's 72 GPUs
    assert group["inter_node"]["bandwidth_GBps"] == pytest.approx(64 * 50)  # their share of the rack's NICs
    assert moe.nvl72_spec("GB300", 8)["node_groups"][0]["gpus_per_node"] == 8


def test_moe_replay_prices_the_gb200_row_the_catalog_knows():
    moe = benchmark_module("fidelity_moe")
    run = next(r for r in moe.load_moe_runs() if r["id"].startswith("megatronbridge-moe-25.09-gb200-qwen3"))
    case = moe.moe_case(run)
    assert not case.skip and case.gpus == ("GB200",)
    assert case.plan.cluster.groups[0].gpus_per_node == 8
