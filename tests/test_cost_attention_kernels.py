"""Attention kernels per GPU architecture (issue 32): no FlashAttention-2 before Ampere, so
`flash` on Volta and Turing runs the CUTLASS memory-efficient kernel, priced against standard
attention, with FlashAttention's memory; Volta's own GEMM efficiency."""

from __future__ import annotations

import pytest

from planner.core.dims import StageDims
from planner.cost.architectures import architecture_params
from planner.cost.attention_kernels import KERNELS
from planner.cost.elementwise import elementwise_bytes
from planner.cost.formulas import DEFAULT_PARAMS, attention_s, layer_time
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.inputs.devices import Link
from planner.inputs.hardware import load_catalog

CATALOG = load_catalog()
NVLINK2 = Link(150e9, 3e-6, "NVLink2 (hybrid cube-mesh)")


def test_volta_and_turing_run_the_cutlass_kernel_and_ampere_flashattention_2():
    for name in ("V100-SXM2-32GB", "V100-PCIE-32GB", "T4", "TITAN-RTX", "RTX-2080"):  # under SDPA (torchtitan)
        assert stack_params(CATALOG[name], "torchtitan").fused_attention == "cutlass", name
    for name in ("A100-SXM4-80GB", "H100-SXM5-80GB", "RTX-3090"):
        assert stack_params(CATALOG[name], "megatron").fused_attention == "flash2", name


def test_volta_gemms_reach_83_of_the_v100s_125_tflops():
    assert architecture_params(CATALOG["V100-SXM2-32GB"])["gemm_efficiency"] == pytest.approx(83 / 125)
    assert architecture_params(CATALOG["V100-SXM2-32GB"])["gemm_efficiency"] < DEFAULT_PARAMS.gemm_efficiency


def test_flash_on_a_v100_is_standard_attention_at_the_cutlass_ratios_over_the_causal_half(llama2_decoder):
    gpu = CATALOG["V100-SXM2-32GB"]
    p = stack_params(gpu, "torchtitan")  # PyTorch SDPA: the CUTLASS kernel before sm80
    seq, b = 4096, 2
    fwd, bwd = attention_s(llama2_decoder, gpu, Sharding("fp16", b, seq, "flash", StageDims(1), "none"), p)
    gemm_fwd, gemm_bwd = attention_s(llama2_decoder, gpu, Sharding("fp16", b, seq, "standard", StageDims(1), "none"), p)
    scores = elementwise_bytes(llama2_decoder, seq, 1, False, "standard", 2)[1] * b / (gpu.hbm_bandwidth_bytes_per_s
                                                                                * p.hbm_efficiency)
    causal = (llama2_decoder.attention_flops_per_sample(seq, 1, causal_skip=True)
              / llama2_decoder.attention_flops_per_sample(seq, 1, causal_skip=False))
    kernel = KERNELS["cutlass"]
    assert fwd == pytest.approx(causal * kernel.fwd_vs_standard * (gemm_fwd + scores))
    assert bwd == pytest.approx(causal * kernel.bwd_vs_standard * (gemm_bwd + 1.5 * scores))
    # FlashAttention-2's price (the A100's kernel) would be several times faster on the same GPU
    fa2_fwd, _ = attention_s(llama2_decoder, gpu, Sharding("fp16", b, seq, "flash", StageDims(1), "none"),
                             p.with_updates(fused_attention="flash2"))
    assert fa2_fwd < fwd / 2


def test_flash_on_a_v100_keeps_no_score_traffic_outside_its_kernel_and_no_scores_in_memory(llama2_decoder):
    gpu = CATALOG["V100-SXM2-32GB"]
    p = stack_params(gpu, "torchtitan")  # PyTorch SDPA: the CUTLASS kernel before sm80
    flash = Sharding("fp16", 1, 4096, "flash", StageDims(1), "none")
    standard = Sharding("fp16", 1, 4096, "standard", StageDims(1), "none")
    t_flash, t_standard = layer_time(llama2_decoder, gpu, flash, NVLINK2, p), layer_time(llama2_decoder, gpu, standard, NVLINK2, p)
    # the kernel's time is the causal share of standard attention's (GEMMs and score traffic) at
    # +5 % / +15 %: a long causal sequence runs faster than standard attention, but not FA2's 2-4x
    assert 0.5 * t_standard.fwd_s < t_flash.fwd_s < t_standard.fwd_s
    saved = llama2_decoder.act_bytes_per_sample(4096, "none", 1, False, "flash", 2)
    # standard attention holds the fp16 softmax output (llama: no dropout), 32 heads x s^2, for its
    # backward; the memory-efficient kernel its fp32 log-sum-exp, 32 heads x s
    held_scores = llama2_decoder.act_bytes_per_sample(4096, "none", 1, False, "standard", 2) - saved
    assert held_scores == pytest.approx(32 * 4096 ** 2 * 2 - 4 * 32 * 4096)


def test_a100_flash_pricing_is_flashattention_2s(llama2_decoder):
    gpu = CATALOG["A100-SXM4-80GB"]
    p = stack_params(gpu, "megatron")
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(1), "none")
    flops = llama2_decoder.attention_flops_per_sample(4096, 1, causal_skip=True)
    fwd, _ = attention_s(llama2_decoder, gpu, sh, p)
    assert fwd == pytest.approx(flops / (gpu.peak("bf16") * p.attention_efficiency))


def test_the_cutlass_kernel_is_slower_against_standard_attention_under_fp32(llama2_decoder):
    gpu = CATALOG["V100-SXM2-32GB"]
    p = stack_params(gpu, "torchtitan")  # fp32 on the CUDA cores
    kernel = KERNELS["cutlass"]
    assert kernel.ratios("fp32") == (1.04, 1.30) and kernel.ratios("fp16") == (1.05, 1.15)
    seq = 2048
    flash = attention_s(llama2_decoder, gpu, Sharding("fp32", 1, seq, "flash", StageDims(1), "none"), p)
    standard = attention_s(llama2_decoder, gpu, Sharding("fp32", 1, seq, "standard", StageDims(1), "none"), p)
    scores = elementwise_bytes(llama2_decoder, seq, 1, False, "standard", 4)[1] / (gpu.hbm_bandwidth_bytes_per_s
                                                                            * p.hbm_efficiency)
    causal = (llama2_decoder.attention_flops_per_sample(seq, 1, causal_skip=True)
              / llama2_decoder.attention_flops_per_sample(seq, 1, causal_skip=False))
    assert flash[1] == pytest.approx(causal * 1.30 * (standard[1] + 1.5 * scores))
