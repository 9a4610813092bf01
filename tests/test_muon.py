"""`--optimizer muon` (planner.cost.muon): fp32 master and momentum for the decoders' 2-D weights,
AdamW's states for the embedding, the head and the 1-D parameters, and the Newton-Schulz matmuls of
each step, sharded as the states are."""

from __future__ import annotations

import json

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.muon import NS_STEPS, muon_matrices, newton_schulz_flops, newton_schulz_rate
from planner.cost.pricing import Sharding, layers_price
from planner.cost.runtimes import RUNTIMES
from planner.cost.stage_memory import replica_memory
from planner.cost.stage_tail import optimizer_s
from planner.export import export_plan
from planner.inputs.hardware import load_catalog, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

from .conftest import invoke, ok_json

LLAMA = load_model("llama-3-8b")
H100 = load_catalog()["H100-SXM5-80GB"]
NVLINK = load_cluster("dgx-h100-2node").groups[0].intra_node
PARAMS = RUNTIMES["megatron"].pricing.params(DEFAULT_PARAMS)


def test_newton_schulz_costs_five_quintic_iterations_of_three_matmuls():
    # a square n x n matrix: X X^T, A^2 and B X, each 2 n^3, five times
    assert newton_schulz_flops(1024, 1024) == NS_STEPS * 3 * 2 * 1024 ** 3
    # a wide matrix is orthogonalized on its smaller side: the same for its transpose
    assert newton_schulz_flops(1024, 4096) == newton_schulz_flops(4096, 1024) == \
        NS_STEPS * (4 * 1024 ** 2 * 4096 + 2 * 1024 ** 3)


def test_muon_takes_every_decoder_weight_matrix_and_leaves_the_embedding_and_head_to_adamw():
    c = LLAMA.config
    block = LLAMA.layers[1]
    matrices, dense, experts = muon_matrices(block)
    assert matrices == block.params - 2 * c.hidden  # all but its two RMSNorms
    assert experts == 0 and dense > 0
    assert muon_matrices(LLAMA.layers[0]) == muon_matrices(LLAMA.layers[-1]) == (0.0, 0.0, 0.0)
    moe = load_model("qwen3-30b-a3b").layers[1]
    _, dense, experts = muon_matrices(moe)
    # 128 experts of gate+up (1536 x 2048) and down (2048 x 768) each
    assert experts == 128 * (newton_schulz_flops(2 * 768, 2048) + newton_schulz_flops(2048, 768))


def _stage(dims: StageDims):
    sh = Sharding("bf16", 1, 4096, "flash", dims.within_replica, "full")
    return layers_price(LLAMA.layers, sh, H100, NVLINK, PARAMS)


def test_muon_keeps_8_bytes_of_state_per_matrix_parameter_and_adamws_12_for_the_rest():
    dims = StageDims(2, True, 1, 0)
    span = _stage(dims)
    states = {opt: replica_memory(span, 1, "bf16", dims, PARAMS, optimizer=opt).optimizer_bytes
              for opt in ("adamw", "muon")}
    matrices = sum(muon_matrices(layer)[0] for layer in LLAMA.layers) / 2  # on one of 2 TP ranks
    assert states["adamw"] - states["muon"] == pytest.approx(4 * matrices)
    assert states["adamw"] == pytest.approx(12 * LLAMA.params / 2)


def test_muons_step_adds_newton_schulz_on_whole_matrices_sharded_over_the_data_parallel_replicas():
    rate = newton_schulz_rate(H100, PARAMS.gemm_efficiency)
    ns = sum(muon_matrices(layer)[1] for layer in LLAMA.layers)
    steps = {}
    for tp, dp, zero in ((1, 8, 0), (2, 8, 0), (2, 8, 1)):
        dims = StageDims(tp, tp > 1, dp, zero)
        span = _stage(dims)
        adam = optimizer_s(span.weight_params, dims, H100, PARAMS, optimizer="adamw")
        muon = optimizer_s(span.weight_params, dims, H100, PARAMS, optimizer="muon", ns_flops=span.ns_flops)
        steps[tp, dp, zero] = muon - adam * 20 / 28  # its traffic is 20 B per parameter against AdamW's 28
    # each TP rank orthogonalizes whole matrices (megatron-core's duplicated mode): TP does not divide it
    assert steps[1, 8, 0] == pytest.approx(ns / rate) == pytest.approx(steps[2, 8, 0])
    # the layer-wise distributed optimizer (ZeRO-1) gives each replica 1/dp of them
    assert steps[2, 8, 1] == pytest.approx(ns / rate / 8)


def test_a_muon_plan_is_searched_priced_and_exported_to_megatron(tmp_path):
    args = ("--model", "llama-3-8b", "--cluster", "dgx-h100-2node", "--global-batch", "64", "--seq-len", "4096",
            "--runtime", "megatron", "--json")
    plans = {"muon": ok_json(invoke("plan", *args, "--optimizer", "muon"))}
    assert plans["muon"]["training"]["optimizer"] == "muon"
    path = tmp_path / "muon.json"
    path.write_text(json.dumps(plans["muon"]))
    again = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    assert again["step_time_s"] == pytest.approx(plans["muon"]["predicted"]["step_time_s"], rel=1e-9)
    # the same plan under AdamW: 4 B more of state per matrix parameter, no Newton-Schulz in its step
    adamw = tmp_path / "adamw.json"
    adamw.write_text(json.dumps(plans["muon"] | {"training": plans["muon"]["training"] | {"optimizer": "adamw"}}))
    other = ok_json(invoke("evaluate", "--plan", str(adamw), "--json"))
    assert again["breakdown_s"]["optimizer"] > other["breakdown_s"]["optimizer"]
    assert max(again["peak_memory_GiB"].values()) < max(other["peak_memory_GiB"].values())
    exported = invoke("export", str(path), "--to", "megatron")
    assert exported.exit_code == 0, exported.stderr
    assert "--optimizer muon" in exported.stdout


def test_runtimes_without_muon_refuse_its_export():
    plan = uniform_plan(LLAMA, load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1, optimizer="muon",
                                                                        runtime="deepspeed"), tp=1, pp=1, dp=16)
    with pytest.raises(Exception, match="no muon optimizer"):
        export_plan(plan, "deepspeed", lambda message: None)
