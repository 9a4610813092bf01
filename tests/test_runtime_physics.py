"""The physics the fidelity fit rests on (issue 11): per-link NCCL efficiencies, a power-capped
GPU's sustained clock, torchtitan's per-op selective checkpointing, FSDP's prefetch overlap and
DeepSpeed's fp32 gradient all-reduce under bf16 and Megatron's fp32 gradient buffers."""

from __future__ import annotations

import pytest

from planner.cost.architectures import SUSTAINED_CLOCK, architecture_params
from planner.cost.formulas import DEFAULT_PARAMS, layer_time, link_efficiency
from planner.inputs.devices import Link
from planner.inputs.hardware import load_catalog
from planner.inputs.model import load_model
from planner.core.dims import StageDims
from planner.cost.pricing import DpLayout, saved_activation_bytes, zero_comm, zero_exposed_s
from planner.cost.stage_tail import grad_reduce_s
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding

CATALOG = load_catalog()
NVLINK = Link(300e9, 3e-6, "NVLink3 (NVSwitch)")


def test_pcie_and_ethernet_links_take_their_own_nccl_efficiency():
    p = DEFAULT_PARAMS.with_updates(pcie_link_efficiency=0.3, ethernet_link_efficiency=0.2)
    assert link_efficiency(Link(16e9, 5e-6, "PCIe 3.0 x16"), p) == 0.3
    assert link_efficiency(Link(6e9, 1e-5, "25 Gb/s Ethernet (typical assumption)"), p, intra=False) == 0.2
    assert link_efficiency(NVLINK, p) == p.intra_link_efficiency
    assert link_efficiency(Link(25e9, 5e-6, "8x HDR InfiniBand"), p, intra=False) == p.inter_link_efficiency


def test_t4_prices_its_compute_at_its_power_capped_sustained_clock():
    t4, titan = architecture_params(CATALOG["T4"]), architecture_params(CATALOG["TITAN-RTX"])
    clock = SUSTAINED_CLOCK["T4"][0]
    assert clock == pytest.approx(585 / 1590)
    assert t4["gemm_efficiency"] == pytest.approx(titan["gemm_efficiency"] * clock)
    assert t4["attention_efficiency"] == pytest.approx(DEFAULT_PARAMS.attention_efficiency * clock)
    assert "attention_efficiency" not in titan  # an uncapped Turing part keeps the default


def test_the_500_w_h100_runs_its_tensor_cores_at_the_cube_root_of_its_power_cap():
    capped, full = architecture_params(CATALOG["H100-SXM5-96GB"]), architecture_params(CATALOG["H100-SXM5-80GB"])
    clock = (500 / 700) ** (1 / 3)
    for field in ("gemm_efficiency", "attention_efficiency", "fp8_gemm_efficiency"):
        assert capped[field] == pytest.approx(full[field] * clock)
    assert CATALOG["H100-SXM5-96GB"].hbm_bandwidth_bytes_per_s == pytest.approx(2.4e12)  # HBM2e, as stated


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3-8b")


def test_torchtitan_selective_is_per_op_checkpointing(llama):
    """Under flash attention Megatron's selective recompute saves what no recompute saves;
    torchtitan's per-op policy saves less than that (more than full) and recomputes every second
    matmul and the elementwise ops."""
    block, gpu = llama.layers[1], CATALOG["A100-SXM4-80GB"]
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(), "selective")
    none = saved_activation_bytes(block, Sharding("bf16", 1, 4096, "flash", StageDims(), "none"))
    full = saved_activation_bytes(block, Sharding("bf16", 1, 4096, "flash", StageDims(), "full"))
    assert saved_activation_bytes(block, sh) == none
    assert full < saved_activation_bytes(block, sh, "op") < 0.6 * none
    megatron, titan = stack_params(gpu, "megatron"), stack_params(gpu, "torchtitan")
    args = (block, gpu, Sharding("bf16", 1, 4096, "flash", StageDims(), "selective"), NVLINK)
    assert layer_time(*args, megatron).recompute_s == 0.0
    op = layer_time(*args, titan)
    assert 0.25 * op.fwd_s < op.recompute_s < 0.6 * op.fwd_s


def test_fsdp_prefetch_hides_a_share_of_zero3_collectives_up_to_the_compute():
    assert zero_exposed_s(2.0, 5.0, 0.0) == 2.0
    assert zero_exposed_s(2.0, 5.0, 0.5) == 1.0
    assert zero_exposed_s(2.0, 1.0, 1.0) == 1.0  # only the compute's length hides
    layout = DpLayout(8, 8, 1, NVLINK, NVLINK)
    titan = stack_params(CATALOG["A100-SXM4-80GB"], "torchtitan")
    assert zero_comm(1e9, StageDims(dp=8, zero=3), "bf16", layout, titan).overlap == titan.overlap_zero_comm > 0
    assert zero_comm(1e9, StageDims(dp=8, zero=3), "bf16", layout, DEFAULT_PARAMS).overlap == 0


def test_deepspeed_all_reduces_fp32_gradients_under_bf16():
    layout = DpLayout(8, 2, 4, NVLINK, Link(6.25e9, 5e-6, "4x Omni-Path"))
    gpu = CATALOG["A100-SXM4-80GB"]
    ds, megatron = stack_params(gpu, "deepspeed"), stack_params(gpu, "megatron-2021")
    fp32_reduce = grad_reduce_s(1e9, StageDims(dp=8, zero=0), "bf16", layout, ds, 0.0)
    assert fp32_reduce == pytest.approx(2 * grad_reduce_s(1e9, StageDims(dp=8, zero=0), "bf16", layout, megatron, 0.0), rel=1e-3)
    # ZeRO-1: and the 16-bit weights gathered after the sharded step (half a 16-bit all-reduce)
    assert grad_reduce_s(1e9, StageDims(dp=8, zero=1), "bf16", layout, ds, 0.0) == pytest.approx(1.25 * fp32_reduce, rel=1e-3)
    assert grad_reduce_s(1e9, StageDims(dp=8, zero=0), "fp16", layout, ds, 0.0) == pytest.approx(fp32_reduce / 2, rel=1e-3)


def test_megatron_reduces_fp32_gradients_under_bf16_and_fp8():
    """Megatron-LM's bf16 (and fp8, on bf16 parameters) fp32 gradient buffers: DDP all-reduces
    them at 4 bytes; the distributed optimizer reduce-scatters them at 4 bytes and all-gathers
    the 16-bit weights; fp16 reduces 16-bit gradients."""
    layout = DpLayout(8, 2, 4, NVLINK, Link(6.25e9, 5e-6, "4x Omni-Path"))
    megatron = stack_params(CATALOG["H100-SXM5-80GB"], "megatron")
    reduce = {(dtype, zero): grad_reduce_s(1e9, StageDims(dp=8, zero=zero), dtype, layout,
                                           megatron.with_updates(overlap_grad_reduce=False), 0.0)
              for dtype in ("fp16", "bf16", "fp8") for zero in (0, 1)}
    assert reduce["fp16", 0] == pytest.approx(reduce["fp16", 1])  # reduce-scatter + all-gather: one all-reduce
    assert reduce["bf16", 0] == pytest.approx(2 * reduce["fp16", 0], rel=1e-3)
    assert reduce["bf16", 1] == pytest.approx(1.5 * reduce["fp16", 1], rel=1e-3)
    assert reduce["fp8", 0] == reduce["bf16", 0] and reduce["fp8", 1] == reduce["bf16", 1]


def test_a_plan_carries_its_runtime_and_is_re_priced_under_it(tmp_path, titan_debug):
    import json

    from planner import api
    from planner.verify.plan_checks import load_plan_file

    from .conftest import invoke

    request = api.PlanRequest(model=titan_debug, cluster="dgx-a100", global_batch=64, seq_len=1024, runtime="torchtitan",
                              time_limit_s=None)
    result = api.plan(request)
    data = api.plan_json(result)
    assert data["training"]["runtime"] == "torchtitan"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert load_plan_file(str(path)).training.runtime == "torchtitan"
    own = api.evaluate_plan_file(str(path)).estimate.step_time_s
    assert own == pytest.approx(data["predicted"]["step_time_s"], rel=1e-9)
    assert api.evaluate_plan_file(str(path), runtime="megatron").estimate.step_time_s != pytest.approx(own, rel=1e-3)
    data["training"]["runtime"] = "no-such-stack"
    path.write_text(json.dumps(data))
    bad = invoke("validate", str(path))
    assert bad.exit_code == 2 and "training.runtime" in bad.stderr


def test_torchtitan_fsdp2_reduce_scatters_fp32_gradients_per_micro_batch_and_under_pp():
    """torchtitan's mixed_precision_reduce float32 (FSDP2 MixedPrecisionPolicy reduce_dtype): the
    reduce-scatter moves 4-byte gradients where Megatron-less 16-bit FSDP moves 2; the weight
    gathers stay 16-bit. Under PP (ZeRO-1) the once-per-step reduce-scatter is fp32 too."""
    bare = Link(300e9, 0.0, "NVLink3 (NVSwitch)")  # no latency: bytes alone
    layout = DpLayout(8, 8, 1, bare, bare)
    fsdp, zero1 = StageDims(1, dp=8, zero=3), StageDims(1, dp=8, zero=1)
    plain = DEFAULT_PARAMS.with_updates(overlap_grad_reduce=False)
    titan = plain.with_updates(fp32_grad_accumulation=True)
    a, b = zero_comm(1e9, fsdp, "bf16", layout, plain), zero_comm(1e9, fsdp, "bf16", layout, titan)
    assert b.reduce_scatter_s == pytest.approx(2 * a.reduce_scatter_s)
    assert b.gather_s == a.gather_s
    assert zero_comm(1e9, fsdp, "fp32", layout, titan).reduce_scatter_s == pytest.approx(b.reduce_scatter_s)
    # ZeRO-1: half an all-reduce of fp32 gradients plus half of 16-bit weights, against a 16-bit all-reduce
    assert grad_reduce_s(1e9, zero1, "bf16", layout, titan, 0.0) == pytest.approx(
        1.5 * grad_reduce_s(1e9, zero1, "bf16", layout, plain, 0.0))
