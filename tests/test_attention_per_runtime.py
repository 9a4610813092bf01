"""What `attention: flash` runs is a function of the runtime and the GPU architecture (issue 32):
before sm80 Megatron-LM (Transformer Engine's unfused backend) and Megatron-DeepSpeed run standard
attention, PyTorch SDPA runtimes (torchtitan, FSDP) the CUTLASS memory-efficient kernel; from
Ampere every runtime runs FlashAttention-2. The search prices it exactly as evaluate does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.core.dims import StageDims
from planner.cost.evaluate import evaluate
from planner.cost.pricing import layer_price
from planner.cost.runtimes import RUNTIMES, attention_kernels, stack_params, training_params
from planner.cost.sharding import Sharding
from planner.inputs.devices import Link
from planner.inputs.hardware import cluster_from_spec, load_catalog
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan
from planner.search.pricing.stage_configs import searched_recompute_modes
from planner.search.pricing.stage_types import SolverOptions
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, tiny_instance

from .conftest import assert_solves_to_the_optimum, invoke, ok_json

CATALOG = load_catalog()
V100 = CATALOG["V100-SXM2-32GB"]
NVLINK2 = Link(150e9, 3e-6, "NVLink2 (hybrid cube-mesh)")


def _price(decoder, attention: str, runtime: str, gpu=V100, seq_len: int = 4096):
    sh = Sharding("fp16", 1, seq_len, attention, StageDims(1), "none")
    return layer_price(decoder, sh, gpu, NVLINK2, stack_params(gpu, runtime))


@pytest.mark.parametrize("runtime", ["megatron", "deepspeed", "megatron-2021"])
def test_flash_under_megatron_and_deepspeed_on_a_v100_is_priced_as_standard_attention(llama2_decoder, runtime):
    flash, standard = _price(llama2_decoder, "flash", runtime), _price(llama2_decoder, "standard", runtime)
    assert (flash.fwd_s, flash.bwd_s, flash.time_s) == (standard.fwd_s, standard.bwd_s, standard.time_s)
    # the s x s softmax output (llama: no dropout) it saves for its backward: 32 heads x s^2 x 2 bytes
    assert flash.act_bytes == standard.act_bytes
    assert flash.act_bytes - _price(llama2_decoder, "flash", "torchtitan").act_bytes == pytest.approx(
        32 * 4096 ** 2 * 2 - 4 * 32 * 4096, rel=1e-6)


@pytest.mark.parametrize("gpu", ["V100-SXM2-32GB", "T4", "RTX-2080"])
def test_torchtitan_and_fsdp1_on_volta_and_turing_price_the_cutlass_kernel(llama2_decoder, gpu):
    for runtime in ("torchtitan", "fsdp1"):
        assert stack_params(CATALOG[gpu], runtime).fused_attention == "cutlass"
    flash, standard = _price(llama2_decoder, "flash", "torchtitan", CATALOG[gpu]), _price(llama2_decoder, "standard", "torchtitan",
                                                                                 CATALOG[gpu])
    # the memory-efficient kernel: the causal half of standard attention's work, no saved scores
    assert flash.fwd_s < standard.fwd_s and flash.act_bytes < standard.act_bytes


def test_runtime_any_prices_the_kernel_sdpa_runs_so_no_runtime_beats_it(llama2_decoder):
    """--runtime any (the whole space, a lower bound on every runtime's plans) keeps the
    architecture's own kernel, not Megatron's unfused fallback."""
    for gpu in ("V100-SXM2-32GB", "T4"):
        assert stack_params(CATALOG[gpu], "any").fused_attention == "cutlass"
    assert _price(llama2_decoder, "flash", "any").time_s < _price(llama2_decoder, "flash", "megatron").time_s


def test_every_runtime_prices_flashattention_2_from_ampere(llama2_decoder):
    for name in ("A100-SXM4-80GB", "H100-SXM5-80GB", "RTX-3090"):
        for runtime in RUNTIMES:
            assert stack_params(CATALOG[name], runtime).fused_attention == "flash2", (name, runtime)
    a100 = CATALOG["A100-SXM4-80GB"]
    assert _price(llama2_decoder, "flash", "megatron", a100).act_bytes < _price(llama2_decoder, "standard", "megatron", a100).act_bytes


def test_the_runtime_record_names_the_kernel_per_architecture():
    megatron, titan = RUNTIMES["megatron"].pricing, RUNTIMES["torchtitan"].pricing
    assert megatron.flash_kernel("volta", "cutlass") == "standard"
    assert megatron.flash_kernel("turing", "cutlass") == "standard"
    assert megatron.flash_kernel("ampere", "flash2") == "flash2"
    assert titan.flash_kernel("volta", "cutlass") == "cutlass"


def test_the_search_tries_selective_recompute_where_flash_runs_as_standard_attention():
    training = Training(64, 4096, "fp16", 1, runtime="megatron")
    for gpu, selective in ((V100, True), (CATALOG["A100-SXM4-80GB"], False)):
        options = SolverOptions(recompute_modes=("none", "selective", "full"),
                                params=stack_params(gpu, "megatron"))
        assert ("selective" in searched_recompute_modes(options, training, gpu.name)) is selective, gpu.name


def test_a_v100_plan_under_megatron_reports_its_attention_kernel():
    spec = {"name": "v100x8", "node_groups": [{"name": "v", "gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 8,
                                               "intra_node": {"bandwidth_GBps": 150, "latency_us": 3}}]}
    cluster = cluster_from_spec(spec, "test")
    model = load_model("llama-2-7b")
    training = Training(16, 4096, "fp16", 1, runtime="megatron")
    assert attention_kernels(cluster.gpu_types, training) == {"V100-SXM2-32GB": "standard"}
    assert attention_kernels(cluster.gpu_types, replace(training, runtime="torchtitan")) == {
        "V100-SXM2-32GB": "cutlass"}
    assert attention_kernels(cluster.gpu_types, replace(training, attention="standard")) == {}
    plan = uniform_plan(model, cluster, training, tp=8, pp=1, dp=1, recompute="full")
    flash = evaluate(plan, training_params(cluster.gpu_types, training))
    standard_training = replace(training, attention="standard")
    standard = evaluate(replace(plan, training=standard_training), training_params(cluster.gpu_types,
                                                                                   standard_training))
    assert flash.step_time_s == standard.step_time_s


def test_plan_json_names_the_kernel_flash_runs_on_a_v100(tmp_path):
    (tmp_path / "v.yaml").write_text(
        "name: v100x8\nnode_groups:\n  - {name: v, gpu: V100-SXM2-32GB, nodes: 1, gpus_per_node: 8,\n"
        "     intra_node: {bandwidth_GBps: 150, latency_us: 3}}\n")
    data = ok_json(invoke("plan", "--model", "gpt2", "--cluster", str(tmp_path / "v.yaml"), "--global-batch", "16",
                          "--seq-len", "1024", "--json"))
    assert data["predicted"]["attention_kernel"] == {"V100-SXM2-32GB": "standard"}


def _volta_instance(seed: int, memory_gib: float):
    """tiny_instance(seed)'s model and batch on one 2-GPU V100 node and one 2-GPU T4 node."""
    model, _, base = tiny_instance(seed)
    spec = {"name": f"volta-{seed}", "gpus": {"V100-SXM2-32GB": {"memory_GiB": memory_gib},
                                             "T4": {"memory_GiB": memory_gib}},
            "node_groups": [{"name": "v", "gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 2},
                            {"name": "t", "gpu": "T4", "nodes": 1, "gpus_per_node": 2,
                             "inter_node": {"bandwidth_GBps": 10, "latency_us": 5}}]}
    return model, cluster_from_spec(spec, "test"), base


@pytest.mark.parametrize("seed,memory_gib", [(1, 3.0), (1, 3.5), (5, 3.0), (9, 3.5)])
@pytest.mark.parametrize("runtime", ["megatron", "torchtitan"])
def test_search_prices_volta_attention_as_evaluate_does(monkeypatch, runtime, seed, memory_gib):
    """flash requested on V100 + T4: the solver, given the runtime's parameters per GPU, finds the
    optimum of the brute force over every plan priced by evaluate with the same parameters,
    selective recomputation among the modes."""
    import planner.verify.oracle as oracle

    model, cluster, base = _volta_instance(seed, memory_gib)
    base = replace(base, runtime=runtime, dtype="fp16" if runtime == "megatron" else "fp32", attention="flash")
    params = training_params(cluster.gpu_types, base)
    monkeypatch.setattr(oracle, "evaluate", lambda plan: evaluate(plan, params))
    options = dict(TINY_OPTIONS, recompute_modes=("none", "selective", "full"))
    expected, best, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], zero_stages=(0, 1, 2, 3),
                                    virtual_stages=options["virtual_stages"], runtime=runtime)
    assert expected < float("inf")
    assert_solves_to_the_optimum(expected, model, cluster, base,
                                 SolverOptions(**options, gpu_params=tuple(sorted(params.items()))))
