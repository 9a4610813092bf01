"""The Blackwell catalog entries B300, GB200 and GB300 (NVIDIA data sheets, dense peaks)."""

from __future__ import annotations

import pytest

from planner.inputs.hardware import GB, GIB, load_catalog

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
