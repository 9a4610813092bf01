"""The GPUs and links of the Sailor runs the DeepSpeed pipeline engine's parameters are fitted on: a
quad-GH200 node's GPU-to-GPU figure is per GPU (3 peers x 6 NVLink4 links), as the catalog's
convention wants; Sailor's MIT "RTX-2080" is the 11 GiB RTX 2080 Ti."""

from __future__ import annotations

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import layer_time
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model

from .conftest import benchmark_module


CATALOG = load_catalog()


def node_link(gpu: str, per_node: int):
    spec = {"name": "one", "node_groups": [{"name": "g", "gpu": gpu, "nodes": 1, "gpus_per_node": per_node}]}
    return cluster_from_spec(spec).groups[0].intra_node


def test_a_gh200_node_links_each_gpu_to_its_three_peers_at_150_GBps_each():
    # CSCS's node schematic: "GPU All2all: 3x6 P2P NVLink, 150GB/s per direction"
    assert node_link("GH200-96GB", 4).bandwidth_bytes_per_s == pytest.approx(3 * 6 * 25e9)


def test_tp_all_reduces_in_a_gh200_node_run_at_an_nvswitch_h100s_per_gpu_rate():
    # the same 18 NVLink4 links per GPU: direct to three peers, or into the NVSwitch
    layer = next(l for l in load_model("gpt2-medium").layers if l.kind == "decoder")
    sh = Sharding("bf16", 1, 2048, "standard", StageDims(4), "none")
    times = {}
    for gpu, per_node in (("GH200-96GB", 4), ("H100-SXM5-80GB", 8)):
        lt = layer_time(layer, CATALOG[gpu], sh, node_link(gpu, per_node), stack_params(CATALOG[gpu], "deepspeed"))
        times[gpu] = lt.tp_comm_fwd_s + lt.tp_comm_bwd_s
    assert times["GH200-96GB"] == pytest.approx(times["H100-SXM5-80GB"], rel=1e-9)


def _fidelity_runs():
    return benchmark_module("fidelity_runs")


def test_sailors_mit_rtx_2080_is_priced_as_the_11_gib_card_its_cluster_config_describes():
    # sailor/Planner/simulations/configs/basic_cluster_config.json: "RTX-2080": mem_per_gpu 11811160064
    # (the RTX 2080 Ti's 11 GiB; the RTX 2080 has 8 GB)
    gpu = CATALOG[_fidelity_runs().CATALOG["rtx-2080"]]
    assert gpu.memory_bytes == 11811160064
    assert gpu.architecture == "turing" and gpu.peak("fp32") == pytest.approx(13.4e12)
