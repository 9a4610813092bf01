"""The GEMM efficiency knee per execution path (issue 32): fp32 GEMMs on the CUDA cores (no
TF32) fall to half efficiency at a smallest dimension scaled by their FLOP:byte balance; tensor-core
paths keep the fitted knee."""

from __future__ import annotations

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import FITTED_KNEE_BALANCE, attention_s, gemm_half_dim
from planner.cost.runtimes import stack_params
from planner.cost.sharding import Sharding
from planner.inputs.hardware import load_catalog
from planner.inputs.model import load_model

CATALOG = load_catalog()


def test_the_fitted_knee_belongs_to_the_a100s_bf16_tensor_cores():
    a100 = CATALOG["A100-SXM4-80GB"]
    assert FITTED_KNEE_BALANCE == pytest.approx(a100.peak("bf16") * 2 / a100.hbm_bandwidth_bytes_per_s, rel=1e-3)


def test_fp32_gemms_on_cuda_cores_fall_to_half_at_a_knee_scaled_by_their_balance():
    gpu = CATALOG["RTX-2080"]
    p = stack_params(gpu, "deepspeed")
    balance = 10.1e12 * 4 / 448e9  # fp32 peak x 4 bytes / GDDR6 bandwidth (Turing whitepaper)
    assert gemm_half_dim(gpu, "fp32", p) == pytest.approx(p.gemm_half_dim * balance / (312e12 * 2 / 2039e9))
    assert gemm_half_dim(gpu, "fp32", p) < p.gemm_half_dim / 3


def test_tensor_core_paths_keep_the_fitted_knee():
    for name, runtime, dtype in (("T4", "deepspeed", "fp16"), ("V100-SXM2-32GB", "megatron", "fp16"),
                                 ("H100-SXM5-80GB", "torchtitan", "bf16"),
                                 ("GH200-96GB", "deepspeed", "fp32")):  # fp32 on TF32 tensor cores
        p = stack_params(CATALOG[name], runtime)
        assert gemm_half_dim(CATALOG[name], dtype, p) == p.gemm_half_dim, name


def test_an_ampere_fp32_run_with_tf32_off_takes_the_cuda_core_knee():
    gpu = CATALOG["A100-SXM4-80GB"]
    p = stack_params(gpu, "torchtitan")  # PyTorch's allow_tf32 default: off
    assert not p.tf32_matmul
    assert gemm_half_dim(gpu, "fp32", p) < p.gemm_half_dim


def test_fp32_standard_attention_on_turing_prices_its_score_gemms_at_the_cuda_core_knee():
    layer = next(l for l in load_model("gpt2-medium").layers if l.kind == "decoder")
    gpu = CATALOG["TITAN-RTX"]
    p = stack_params(gpu, "deepspeed")
    sh = Sharding("fp32", 1, 2048, "standard", StageDims(4), "none")
    fwd, _ = attention_s(layer, gpu, sh, p)
    knee = gemm_half_dim(gpu, "fp32", p)
    head_dim = layer.config.head_dim
    eff = p.gemm_efficiency * head_dim / (head_dim + knee)
    flops = layer.attention_flops_per_sample(2048, 4, causal_skip=False)
    assert fwd == pytest.approx(flops / (gpu.peak("fp32") * eff))
    assert eff > p.gemm_efficiency * head_dim / (head_dim + p.gemm_half_dim)  # faster than the tensor-core knee
