"""torch.compile in the cost model (CostParams.torch_compile: TorchInductor's fused elementwise
kernels) and the replay's runs that used it; FlashAttention-2's slower backward (issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import FLASH_BWD_EFFICIENCY_RATIO, attention_s, layer_time
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.inputs.hardware import load_catalog
from planner.inputs.devices import Link
from planner.inputs.model import load_model

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
NVLINK = Link(450e9, 3e-6, "NVLink4 (NVSwitch)")


@pytest.fixture(scope="module")
def decoder_h100():
    layer = next(l for l in load_model("llama-3-8b").layers if l.kind == "decoder")
    return layer, load_catalog()["H100-SXM5-80GB"]


def test_compile_prices_the_elementwise_kernels_fused_and_leaves_gemms_and_attention(decoder_h100):
    layer, gpu = decoder_h100
    eager = stack_params(gpu, "torchtitan")
    assert eager.elementwise_traffic_factor > 1  # the fitted eager traffic
    sh = Sharding("bf16", 1, 8192, "flash", StageDims(1), "none")
    slow = layer_time(layer, gpu, sh, NVLINK, eager)
    compiled = layer_time(layer, gpu, sh, NVLINK, eager.with_updates(torch_compile=True))
    fused = layer_time(layer, gpu, sh, NVLINK, eager.with_updates(elementwise_traffic_factor=1.0))
    assert compiled == fused  # Inductor's kernels move the fused traffic, whatever the eager factor
    assert compiled.fwd_s < slow.fwd_s and compiled.bwd_s < slow.bwd_s
    assert compiled.wgrad_s == slow.wgrad_s  # the GEMMs do not change


def test_flash_backward_runs_at_63_73_of_the_forward_efficiency(decoder_h100):
    layer, gpu = decoder_h100
    p = stack_params(gpu, "torchtitan")
    fwd, bwd = attention_s(layer, gpu, Sharding("bf16", 1, 32768, "flash", StageDims(1), "none"), p)
    assert FLASH_BWD_EFFICIENCY_RATIO == pytest.approx(63 / 73)
    assert bwd == pytest.approx(2.5 * fwd * 73 / 63)  # 2.5x the matmuls at the slower rate
    fwd_s, bwd_s = attention_s(layer, gpu, Sharding("bf16", 1, 4096, "standard", StageDims(1), "none"), p)
    assert bwd_s == pytest.approx(2 * fwd_s)  # batched GEMMs: backward at the forward's rate


def test_the_replay_prices_the_runs_that_used_torch_compile_as_compiled():
    sys.path.insert(0, str(BENCH))
    try:
        import fidelity_runs
    finally:
        sys.path.remove(str(BENCH))
    runs = {r["id"]: r for r in fidelity_runs.load_runs()}
    compiled = ["torchtitan-2412-t1-8b-8gpu-FSDP-torchcompile",  # the id says so
                "torchtitan-2412-t2-8b-fsdp1-cp8-seq262144",  # Table 2's title: "+ torch.compile"
                "torchtitan-trainy-h200-8b-4nodes"]  # its command line: --training.compile
    for rid in compiled:
        c = fidelity_runs.case(runs[rid])
        assert not c.skip and ("torch_compile", True) in c.settings, rid
    eager = fidelity_runs.case(runs["torchtitan-2412-t1-8b-8gpu-FSDP"])  # Table 1's "FSDP" row
    assert not eager.skip and "torch_compile" not in dict(eager.settings)
