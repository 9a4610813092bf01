"""planner.core.dims: a stage's parallel dimensions, and the only place a replica's figures are
divided by their degrees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.cost.states import model_state_bytes
from planner.core.dims import StageDims, zero_divisors
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, uniform_plan

PACKAGE = Path(__file__).resolve().parent.parent / "planner"
# the modules that price a stage: none divides by a sharding degree itself
PRICING_MODULES = ("cost/formulas.py", "cost/pricing.py", "search/pricing/stages.py", "cost/evaluate.py",
                   "cost/replica_pricer.py",
                   "search/pricing/interleave.py", "report/show.py", "search/bounds/layer_floor.py", "export/base.py")
DIVISION = re.compile(r"/\s*(\w+\.)*(tp|sp_div)\b|/\s*\(dp if zero")


def test_no_pricing_module_divides_by_a_sharding_degree():
    found = [f"{name}:{n}: {line.strip()}" for name in PRICING_MODULES
             for n, line in enumerate((PACKAGE / name).read_text().splitlines(), 1)
             if DIVISION.search(line.split("#")[0])]
    assert not found, "divide through planner.core.dims.StageDims instead:\n" + "\n".join(found)


def test_the_division_check_sees_a_division_by_tp():
    assert DIVISION.search("w = span.weight_params / config.tp")
    assert DIVISION.search("x = a / (dp if zero >= 1 else 1)")
    assert not DIVISION.search("x = dims.weight_share(w)")


def test_activation_share_splits_the_replicated_part_only_with_sequence_parallelism():
    assert StageDims(4).activation_share(8.0, 8.0) == 8.0 + 2.0
    assert StageDims(4, sequence_parallel=True).activation_share(8.0, 8.0) == 2.0 + 2.0


@pytest.mark.parametrize("tp,sp", [(1, False), (2, False), (4, True)])
def test_model_activations_are_the_dims_share_of_the_unsharded_parts(tp, sp):
    """model.Layer.act_bytes_per_sample divides through StageDims.activation_share: its
    replicated and sharded parts (read off tp=1 and tp=2 without sequence parallelism)
    divide at any tp as the dims say."""
    block = load_model("gpt2-medium").layers[1]
    whole = block.act_bytes_per_sample(1024, "none", 1, False, "flash", 2)  # R + S
    sharded = 2 * (whole - block.act_bytes_per_sample(1024, "none", 2, False, "flash", 2))  # R + S/2
    replicated = whole - sharded
    assert replicated > 0 and sharded > 0
    got = block.act_bytes_per_sample(1024, "none", tp, sp, "flash", 2)
    assert got == pytest.approx(StageDims(tp, sp).activation_share(replicated, sharded), rel=1e-12)


@pytest.mark.parametrize("zero,expected", [(0, (1, 1, 1)), (1, (1, 1, 8)), (2, (1, 8, 8)), (3, (8, 8, 8))])
def test_zero_shards_optimizer_then_gradients_then_weights_over_dp(zero, expected):
    assert zero_divisors(zero, 8) == StageDims(dp=8, zero=zero).state_divisors == expected
    weights, grads, optimizer = model_state_bytes(1e9, "bf16", zero, 8)
    assert (2e9 / weights, 2e9 / grads, 12e9 / optimizer) == pytest.approx(expected)


def test_a_plan_stage_reports_its_dims():
    plan = uniform_plan(load_model("gpt2-medium"), load_cluster("a100-v100-mix"), Training(96, 1024, "fp16", 1),
                        tp=2, pp=3, dp=8, zero=1, sequence_parallel=True)
    dims = plan.stages[0].dims
    assert dims == StageDims(tp=2, sequence_parallel=True, dp=8, zero=1)
    assert dims.gpus == 16 and dims.replicas_on(16) == 8
    assert dims.within_replica == StageDims(2, True)
