"""Memory savers: recompute "block" (the first k decoder blocks of a stage recompute) priced,
searched and exported."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Training
from planner.search.orchestration.driver import SolverOptions, solve
from planner.verify.oracle import brute_force

from .conftest import assert_solves_to_the_optimum


# runtime: any (per-stage tp, recompute and ZeRO)
BLOCK_OPTIONS = dict(micro_batches=(1,), tp_degrees=(1,), recompute_modes=("none", "full", "block"),
                     virtual_stages=(1,), offload=False, zero_bubble=False)  # ZB-H1: tests/test_zero_bubble_search.py
OFFLOAD_OPTIONS = dict(micro_batches=(1,), tp_degrees=(1,), recompute_modes=("none", "block"), virtual_stages=(1,),
                       offload=True, zero_bubble=False)


def block_instance(seed: int):
    """2-3 one-GPU nodes of two types, 3-6 decoder blocks, long sequences: GPU memory between
    what every block recomputed and none recomputed need, so recomputing some blocks binds."""
    rng = random.Random(seed)
    blocks = rng.randint(3, 6)
    hidden = rng.choice([512, 1024])
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": blocks,
              "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": hidden * 3,
              "vocab_size": 4096}
    model = model_from_dict(config, f"block-{seed}")
    seq_len = rng.choice([4096, 8192])
    dec = model.layers[1]
    kept = dec.act_bytes_per_sample(seq_len, "none")
    states = model.params * 16 + model.layers[-1].act_bytes_per_sample(seq_len) + 2 * kept
    nodes = rng.choice([(1, 1), (2, 1), (1, 2)])
    gpus, groups = {}, []
    for i, (gpu, count) in enumerate(zip(("A100-SXM4-80GB", "V100-SXM2-32GB"), nodes)):
        # the 2 GiB reserve plus a share of the states and of 1..all blocks' saved activations
        share = (states + kept * rng.uniform(0.3, 1.0) * blocks) / rng.choice([1, 2])
        gpus[gpu] = {"memory_GiB": 2.0 + share / 2**30}
        groups.append({"name": f"g{i}", "gpu": gpu, "nodes": count, "gpus_per_node": 1,
                       "inter_node": {"bandwidth_GBps": rng.choice([10, 100]), "latency_us": 5}})
    cluster = cluster_from_spec({"name": f"block-{seed}", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(rng.choice([2, 3]), seq_len, "fp16", 1, runtime="any")


@pytest.mark.slow
@pytest.mark.parametrize("seed", (1, 2, 6, 8, 9, 10))  # block wins in 1, 2, 6 and 10
def test_block_recompute_search_equals_brute_force_over_every_block_count(seed):
    model, cluster, base = block_instance(seed)
    expected, _, _ = brute_force(model, cluster, base, BLOCK_OPTIONS["micro_batches"], BLOCK_OPTIONS["tp_degrees"],
                                 BLOCK_OPTIONS["recompute_modes"], virtual_stages=(1,))
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**BLOCK_OPTIONS))


def test_smallest_fitting_k_is_the_first_count_that_fits_by_enumeration():
    import numpy as np

    from planner.search.pricing.block import smallest_fitting_k

    rng = random.Random(0)
    for _ in range(200):
        n = np.arange(8, dtype=float)
        acts, saved, transient = rng.uniform(5, 10) * n + 1, rng.uniform(1, 4), rng.uniform(0, 10)
        free, f = rng.uniform(0, 80) + 0 * n, rng.choice([1.0, 2.0, 3.0])
        k = smallest_fitting_k(free, acts, saved, transient, f, n)
        for count in range(8):
            fits = [j for j in range(count + 1) if f * (acts[count] - j * saved) + (transient if j else 0) <= free[count]]
            assert k[count] == (fits[0] if fits else count)


def _uniform(recompute, layers=0):
    from planner.api import EvaluateRequest, plan_from_flags

    return plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=256, seq_len=4096,
                                           tp=2, pp=4, dp=4, micro_batch=1, recompute=recompute,
                                           recompute_layers=layers))


def test_block_recompute_prices_between_none_and_full_and_ends_at_both():
    none, full = evaluate(_uniform("none")), evaluate(_uniform("full"))
    zero, half, every = (evaluate(_uniform("block", k)) for k in (0, 4, 8))
    assert zero.step_time_s == pytest.approx(none.step_time_s, rel=1e-12)
    assert none.step_time_s < half.step_time_s < every.step_time_s
    # every block recomputed: full's memory; full also recomputes the embedding and head
    assert every.step_time_s < full.step_time_s
    peak = lambda e: max(m.total_bytes for m in e.memory_by_rank.values())  # noqa: E731
    assert peak(full) == pytest.approx(peak(every), rel=1e-12)
    assert peak(every) < peak(half) < peak(none)


def test_block_recompute_plan_json_round_trips_and_exports_megatron_block_flags():
    from planner.export.megatron import export_megatron
    from planner.plan import plan_from_json, plan_to_json
    from planner.verify.plan_checks import validate_plan_data

    plan = _uniform("block", 3)
    data = plan_to_json(plan)
    assert [s["recompute_layers"] for s in data["stages"]] == [3, 3, 3, 3]
    assert validate_plan_data(data) == []
    assert plan_from_json(data).stages == plan.stages
    data["stages"][1]["recompute_layers"] = 9
    assert any(path == "stages[1].recompute_layers" for path, _ in validate_plan_data(data))
    warnings = []
    text = export_megatron(plan, warnings.append)
    assert "--recompute-method block" in text and "--recompute-num-layers 3" in text


def test_block_recompute_exports_torchtitan_every_nth_layer():
    from planner.export.torchtitan import titan_settings

    sections, _ = titan_settings(_uniform("block", 4), lambda message: None)
    assert sections["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}


def test_optimizer_names_match_the_priced_table():
    from planner.cost.states import OPTIMIZERS
    from planner.plan import OPTIMIZER_NAMES

    assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES


def _with_optimizer(name):
    from planner.api import EvaluateRequest, plan_from_flags

    return plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=256, seq_len=4096,
                                           tp=2, pp=4, dp=4, micro_batch=1, optimizer=name))


@pytest.mark.parametrize("name,state_bytes", [("adamw", 12), ("adamw-8bit", 6.0039), ("adafactor", 4.0078),
                                              ("adamw-bf16", 6), ("sgd", 8)])
def test_optimizer_states_per_parameter_and_step_traffic_order(name, state_bytes):
    plan = _with_optimizer(name)
    est = evaluate(plan)
    params = sum(layer.weight_params for layer in plan.model.layers[plan.stages[1].layers[0]:plan.stages[1].layers[1]])
    rank = plan.stages[1].replicas[0].ranks[0]
    assert est.memory_by_rank[rank].optimizer_bytes == pytest.approx(params / 2 * state_bytes, rel=1e-3)
    adamw = evaluate(_with_optimizer("adamw"))
    if name != "adamw":  # every other optimizer moves less memory per step than fused AdamW
        assert est.breakdown_s["optimizer"] < adamw.breakdown_s["optimizer"]


def test_optimizer_is_kept_in_plan_json_and_refused_by_runtimes_without_it():
    from planner.core.errors import BadInput
    from planner.export.deepspeed import export_deepspeed
    from planner.export.megatron import export_megatron
    from planner.plan import plan_from_json, plan_to_json

    plan = _with_optimizer("adamw-8bit")
    data = plan_to_json(plan)
    assert data["training"]["optimizer"] == "adamw-8bit"
    assert plan_from_json(data).training.optimizer == "adamw-8bit"
    with pytest.raises(BadInput, match="no adamw-8bit optimizer"):
        export_megatron(plan, lambda message: None)
    with pytest.raises(BadInput, match="no adamw-8bit optimizer"):
        export_deepspeed(plan, lambda message: None)
    assert "--optimizer sgd" in export_megatron(_with_optimizer("sgd"), lambda message: None)
    with pytest.raises(BadInput, match="no adamw-bf16 optimizer"):  # priced, exported to none
        export_megatron(_with_optimizer("adamw-bf16"), lambda message: None)


@pytest.mark.slow
@pytest.mark.parametrize("seed,optimizer", [(1, "adamw-8bit"), (6, "adafactor"), (10, "sgd")])
def test_search_with_a_lighter_optimizer_equals_brute_force(seed, optimizer):
    # the optimizer's state bytes move what fits: the search and the oracle price the same states
    model, cluster, base = block_instance(seed)
    base = dataclasses.replace(base, optimizer=optimizer)
    expected, _, _ = brute_force(model, cluster, base, BLOCK_OPTIONS["micro_batches"], BLOCK_OPTIONS["tp_degrees"],
                                 BLOCK_OPTIONS["recompute_modes"], virtual_stages=(1,))
    result = solve(model, cluster, base, SolverOptions(**BLOCK_OPTIONS))
    assert result.optimal and result.plan.training.optimizer == optimizer
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
# offload wins in 6 and 10 (with block in 10; block beside offload in make test:
# test_search_with_cp_block_and_offload_equals_brute_force[0]); 10's brute force takes 10 s or more
@pytest.mark.parametrize("seed", (6, 8, pytest.param(10, marks=pytest.mark.exhaustive)))
def test_offload_search_equals_brute_force_with_offload_per_stage(seed):
    model, cluster, base = block_instance(seed)
    expected, plan, _ = brute_force(model, cluster, base, OFFLOAD_OPTIONS["micro_batches"],
                                    OFFLOAD_OPTIONS["tp_degrees"], OFFLOAD_OPTIONS["recompute_modes"],
                                    virtual_stages=(1,), offload=True)
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**OFFLOAD_OPTIONS))


def test_offload_frees_the_optimizer_states_and_prices_the_cpu_step():
    from planner.api import EvaluateRequest, plan_from_flags

    def priced(offload):
        return evaluate(plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=256,
                                                        seq_len=4096, tp=2, pp=4, dp=4, micro_batch=1, zero=1,
                                                        offload=offload)))

    on_gpu, offloaded = priced(False), priced(True)
    rank = 8  # a middle stage
    assert offloaded.memory_by_rank[rank].optimizer_bytes == 0
    assert on_gpu.memory_by_rank[rank].optimizer_bytes > 0
    assert offloaded.breakdown_s["optimizer"] > 10 * on_gpu.breakdown_s["optimizer"]


def test_offload_beyond_host_memory_does_not_fit():
    from planner.api import EvaluateRequest, plan_from_flags
    from planner.inputs.hardware import cluster_from_spec

    cluster = cluster_from_spec({"name": "small-host", "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8, "host": {"memory_GiB": 16}}]})
    est = evaluate(plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster=cluster, global_batch=64, seq_len=4096,
                                                   tp=1, pp=1, dp=8, micro_batch=1, zero=1, offload=True)))
    assert not est.fits and "host memory" in est.overflows[0].gpu


def test_offload_exports_deepspeed_offload_optimizer_and_megatron_cpu_offload_and_torchtitan_refuses():
    import json

    from planner.api import EvaluateRequest, plan_from_flags
    from planner.core.errors import BadInput
    from planner.export.deepspeed import export_deepspeed
    from planner.export.megatron import export_megatron
    from planner.export.torchtitan import titan_settings

    plan = plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=256, seq_len=4096,
                                           tp=2, pp=4, dp=4, micro_batch=1, zero=1, offload=True))
    config = json.loads(export_deepspeed(plan, lambda message: None))
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "--optimizer-cpu-offload" in export_megatron(plan, lambda message: None)
    with pytest.raises(BadInput, match="no optimizer-only offload"):
        titan_settings(plan, lambda message: None)


@pytest.mark.slow
@pytest.mark.parametrize("seed", (6, 10))  # offload wins in both under `any`
def test_megatron_search_with_offload_equals_brute_force_within_megatron(seed):
    # runtime: megatron (one tp/dp grid, even shares, one recompute and one offload setting for
    # every stage, offload with a distributed optimizer: capability.violations)
    model, cluster, base = block_instance(seed)
    base = dataclasses.replace(base, runtime="megatron")
    options = dict(OFFLOAD_OPTIONS, recompute_modes=("none", "full"))
    expected, plan, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                    options["recompute_modes"], virtual_stages=(1,), runtime="megatron",
                                    offload=True)
    result = assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**options))
    assert result is None or len({s.offload for s in result.plan.stages}) == 1


def test_runtime_capability_of_block_counts_and_offload():
    from planner.cost.runtimes.capability import violations
    from planner.export.runnable import runtime_problems

    plan = _uniform("block", 3)  # 8 blocks per stage, 3 recomputed in each
    assert violations(plan, "megatron") == () and runtime_problems(plan, "megatron") == []
    stages = list(plan.stages)
    stages[1] = dataclasses.replace(stages[1], recompute_layers=5)
    uneven = dataclasses.replace(plan, stages=tuple(stages))
    assert any("same number of blocks" in v for v in violations(uneven, "megatron"))
    assert violations(uneven, "any") == ()
    # the export refuses it for the capability's reason (one source of truth)
    assert runtime_problems(uneven, "megatron") == list(violations(uneven, "megatron"))
    offloaded = plan_with(offload=True, zero=1)
    assert violations(offloaded, "megatron") == () and runtime_problems(offloaded, "megatron") == []
    assert any("ZeRO-Offload" in v for v in violations(offloaded, "torchtitan"))
    assert any("only with ZeRO-1 or above" in p for p in runtime_problems(plan_with(offload=True, zero=0), "megatron"))
    some = dataclasses.replace(offloaded, stages=(dataclasses.replace(offloaded.stages[0], offload=False),)
                               + offloaded.stages[1:])
    assert any("every stage or of none" in v for v in violations(some, "megatron"))


def test_exact_megatron_exports_of_block_and_offload_warn_nothing():
    from planner.export.megatron import export_megatron

    for plan in (_uniform("block", 3), plan_with(offload=True, zero=1)):
        warnings = []
        export_megatron(plan, warnings.append)
        assert warnings == []


def plan_with(**flags):
    from planner.api import EvaluateRequest, plan_from_flags

    return plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=256, seq_len=4096,
                                           tp=2, pp=4, dp=4, micro_batch=1, **flags))


def test_torchtitan_runs_block_as_every_nth_block_only_where_the_counts_match():
    from planner.cost.runtimes.capability import violations

    assert not any("N-th" in v for v in violations(_uniform("block", 4), "torchtitan"))  # 8 blocks: every 2nd
    assert any("N-th" in v for v in violations(_uniform("block", 3), "torchtitan"))  # no N recomputes 3 of 8


@pytest.mark.slow
@pytest.mark.parametrize("seed", (0, 4, 7))  # block with offload and cp 2 (4), with cp 1 (0); block beside cp 2 (7)
def test_search_with_cp_block_and_offload_equals_brute_force(seed):
    # runtime: any (per-stage cp, recompute block counts and offload)
    from .test_context_parallel import cp_instance

    model, cluster, base = cp_instance(seed)
    base = dataclasses.replace(base, runtime="any")
    options = dict(micro_batches=(1,), tp_degrees=(1, 2), recompute_modes=("none", "full", "block"),
                   virtual_stages=(1,), cp_degrees=(1, 2), cp_min_seq_len=1, offload=True, zero_bubble=False)
    expected, _, _ = brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                                 options["recompute_modes"], cp_degrees=options["cp_degrees"], runtime="any",
                                 offload=True)
    result = solve(model, cluster, base, SolverOptions(**options))
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


def test_deepspeed_offload_on_one_replica_exports_zero1_without_a_warning():
    """ZeRO-1 on one replica shards nothing: DeepSpeed's offload_optimizer (which needs ZeRO >= 1) runs
    the priced ZeRO-0 plan exactly; with more replicas ZeRO-1 would shard the states: warned."""
    from planner.api import EvaluateRequest, plan_from_flags
    from planner.export import export_plan

    for tp, dp, warned in ((8, 1, False), (4, 2, True)):
        plan = plan_from_flags(EvaluateRequest(model="llama-3-8b", cluster="dgx-a100", global_batch=64, seq_len=1024,
                                               tp=tp, pp=4, dp=dp, micro_batch=1, zero=0, offload=True,
                                               runtime="deepspeed", recompute="full"))
        lost: list[str] = []
        config = json.loads(export_plan(plan, "deepspeed", lost.append))
        assert config["zero_optimization"]["stage"] == 1 and config["zero_optimization"]["offload_optimizer"]
        assert bool(lost) == warned, lost
