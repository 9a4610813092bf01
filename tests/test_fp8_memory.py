"""The weights fp8 training keeps (planner.cost.fp8.weight_cache_bytes): Transformer Engine's fp8
parameters (Megatron --fp8-param-gather) with their transposes where the GPU needs them, the
torchao recipes' none, each GPU's own experts under expert parallelism."""

from __future__ import annotations

import pytest

from planner.core.dims import StageDims
from planner.cost.evaluate import evaluate
from planner.cost.fp8 import fp8_params_saving, non_tn_fp8_gemm, weight_cache_bytes
from planner.cost.runtimes import training_params
from planner.export import export_megatron
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

GIB = 2**30


def _cluster(gpu: str, nodes: int = 1):
    return cluster_from_spec({"name": "c", "node_groups": [{"name": "g", "gpu": gpu, "nodes": nodes,
                                                            "gpus_per_node": 8}]}, "test")


def _worst(model: str, gpu: str, dtype: str, runtime: str = "megatron", nodes: int = 1, **degrees):
    """The memory of the rank with the highest peak, for a uniform plan on `nodes` nodes of `gpu`."""
    cluster = _cluster(gpu, nodes)
    training = Training(64, 4096, dtype, 1, runtime=runtime)
    plan = uniform_plan(load_model(model), cluster, training, recompute="full", **degrees)
    est = evaluate(plan, training_params(cluster.gpu_types, training))
    return max(est.memory_by_rank.values(), key=lambda m: m.total_bytes)


def test_te_fp8_parameters_and_their_transposes_take_the_bf16_weights_place_on_hopper():
    # 1-byte data + 1-byte transpose (Hopper's fp8 GEMMs take only TN) = the 2-byte bf16 copy not kept
    bf16 = _worst("llama-3-8b", "H100-SXM5-80GB", "bf16", tp=2, pp=1, dp=4, zero=1)
    fp8 = _worst("llama-3-8b", "H100-SXM5-80GB", "fp8", tp=2, pp=1, dp=4, zero=1)
    assert fp8.weights_bytes == pytest.approx(bf16.weights_bytes)


def test_te_fp8_weights_on_datacenter_blackwell_keep_no_transpose():
    model = load_model("llama-3-8b")
    decoder_params = sum(layer.weight_params for layer in model.layers if layer.kind == "decoder")
    bf16 = _worst("llama-3-8b", "B200", "bf16", tp=2, pp=1, dp=4, zero=1)
    fp8 = _worst("llama-3-8b", "B200", "fp8", tp=2, pp=1, dp=4, zero=1)
    # one byte per decoder weight on the GPU (1/tp) instead of the bf16 copy's two
    assert bf16.weights_bytes - fp8.weights_bytes == pytest.approx(decoder_params / 2 * 1.0)


def test_non_tn_fp8_gemms_only_on_datacenter_blackwell():
    catalog = load_catalog()
    assert non_tn_fp8_gemm(catalog["B200"])
    assert not non_tn_fp8_gemm(catalog["H100-SXM5-80GB"])


@pytest.mark.parametrize("recipe", ["torchao-tensorwise", "torchao-rowwise"])
def test_torchao_recipes_keep_no_fp8_weights(recipe):
    gpu = load_catalog()["H100-SXM5-80GB"]
    decoder = next(layer for layer in load_model("llama-3-8b").layers if layer.kind == "decoder")
    assert weight_cache_bytes(decoder, StageDims(1), "fp8", recipe, gpu) == 0.0


def test_fp8_weight_bytes_count_only_the_gpus_own_experts():
    gpu = load_catalog()["B200"]
    moe = next(layer for layer in load_model("qwen3-30b-a3b").layers if layer.kind == "decoder")
    dims = StageDims(1, dp=8, ep=8)
    per_gpu = (moe.weight_params - moe.expert_params) + moe.expert_params / 8
    # datacenter Blackwell: 1 byte of fp8 data in place of the 2-byte copy, on this GPU's experts only
    assert weight_cache_bytes(moe, dims, "fp8", "te-delayed", gpu) == pytest.approx(per_gpu)
    assert fp8_params_saving(moe, dims, "fp8", "te-delayed") == pytest.approx(2 * per_gpu)


def test_llama31_405b_fp8_nemo_layout_fits_on_h100():
    # NeMo's Llama 3.1 405B fp8 pre-training layout on 1024 H100 (TP 8, PP 8, CP 2, VP 8, mbs 1,
    # bf16_with_fp8_mixed: fp8 parameters): weights 11.9, fp32 grads 23.8, optimizer 4.5,
    # activations 27.5 GiB of 80 (the fp8 copies beside bf16 weights made it 81.5)
    cluster = _cluster("H100-SXM5-80GB", nodes=128)
    training = Training(512, 8192, "fp8", 1, schedule="interleaved", virtual_stages=8, runtime="megatron")
    plan = uniform_plan(load_model("llama-3.1-405b"), cluster, training, tp=8, pp=8, dp=8, cp=2, zero=1,
                        sequence_parallel=True, recompute="none")
    est = evaluate(plan, training_params(cluster.gpu_types, training))
    worst = max(m.total_bytes for m in est.memory_by_rank.values())
    assert est.fits and worst < 72 * GIB


def test_without_the_distributed_optimizer_te_keeps_bf16_weights_and_cached_fp8_copies():
    # Megatron refuses --fp8-param-gather without --use-distributed-optimizer (ZeRO 0)
    model = load_model("llama-3-8b")
    decoder_params = sum(layer.weight_params for layer in model.layers if layer.kind == "decoder")
    bf16 = _worst("llama-3-8b", "H100-SXM5-80GB", "bf16", tp=2, pp=1, dp=4, zero=0)
    fp8 = _worst("llama-3-8b", "H100-SXM5-80GB", "fp8", tp=2, pp=1, dp=4, zero=0)
    assert fp8.weights_bytes - bf16.weights_bytes == pytest.approx(decoder_params / 2 * 2.0)


@pytest.mark.parametrize("zero, written", [(1, True), (0, False)])
def test_megatron_export_writes_fp8_param_gather_with_the_distributed_optimizer(zero, written):
    cluster = _cluster("H100-SXM5-80GB")
    plan = uniform_plan(load_model("llama-3-8b"), cluster, Training(64, 4096, "fp8", 1), tp=2, pp=1, dp=4,
                        zero=zero)
    assert ("--fp8-param-gather" in export_megatron(plan, lambda message: None)) is written


def test_te_keeps_the_routed_expert_gemm_inputs_in_fp8():
    from planner.cost.pricing import saved_activation_bytes
    from planner.cost.sharding import Sharding

    moe = next(layer for layer in load_model("qwen3-30b-a3b").layers if layer.kind == "decoder")
    c, s = moe.config, 4096
    bf16 = saved_activation_bytes(moe, Sharding("bf16", 1, s, "flash", StageDims(1), "none"), "attention", "te-delayed")
    fp8 = saved_activation_bytes(moe, Sharding("fp8", 1, s, "flash", StageDims(1), "none"), "attention", "te-delayed")
    # a byte less per element of the QKV input, the output projection's input and each routed
    # copy's FC1 and FC2 inputs (GroupedLinear saves them in fp8); the router keeps its input in bf16
    saved = s * (c.hidden + c.o_dim + c.experts_top_k * (c.hidden + c.ffn_hidden))
    assert bf16 - fp8 == pytest.approx(saved)
