"""Activation offload (Stage.offload_activations): the first K decoder blocks' saved activations
in host memory, priced with the node's PCIe link and host memory; Megatron's --cpu-offloading."""

from __future__ import annotations

import pytest

from planner.api import EvaluateRequest, plan_from_flags
from planner.core.errors import BadInput
from planner.cost.evaluate import evaluate
from planner.cost.replica_pricer import PlanPricer

import dataclasses

FLAGS = dict(model="llama-3-8b", cluster="dgx-a100", global_batch=64, seq_len=16384, tp=8, pp=1, dp=4, micro_batch=1)


def offloaded(k: int, **flags):
    return plan_from_flags(EvaluateRequest(**{**FLAGS, **flags}, offload_activations=k))


@pytest.fixture(scope="module")
def estimates():
    return {k: evaluate(offloaded(k)) for k in (0, 1, 2, 6)}


def _block(plan):
    """A decoder block's LayerPrice on the plan's GPUs, and the PCIe bandwidth of its node."""
    st = plan.stages[0]
    price = PlanPricer(plan).replica([st], st.replicas[0])
    layers = plan.model.layers[st.layers[0]:st.layers[1]]
    lp = next(lp for layer, (_, lp) in zip(layers, price.span.parts) if layer.kind == "decoder")
    return lp, plan.cluster.group_of_rank(0).host.pcie_bytes_per_s


def test_offload_moves_all_but_a_double_buffer_of_blocks_off_the_gpu(estimates):
    lp, _ = _block(offloaded(6))
    act = lambda k: estimates[k].memory_by_rank[0].activations_bytes  # noqa: E731
    # one or two blocks offloaded: the double buffer holds them, the GPU saves nothing
    assert act(1) == pytest.approx(act(0), rel=1e-12) and act(2) == pytest.approx(act(0), rel=1e-12)
    # six blocks, one micro-batch in flight (pp = 1): four blocks' activations leave the GPU
    assert act(0) - act(6) == pytest.approx(4 * lp.act_bytes, rel=1e-9)
    assert act(0) - act(6) > 2**30  # (a figure that matters: over 1 GiB here)


def test_offload_exposes_the_pcie_copies_that_the_blocks_compute_does_not_hide(estimates):
    lp, pcie = _block(offloaded(6))
    copy = lp.act_bytes / pcie
    per_block = (max(0.0, copy - (lp.fwd_s + lp.tp_comm_fwd_s)) + max(0.0, copy - (lp.bwd_s + lp.tp_comm_bwd_s)))
    n_micro = FLAGS["global_batch"] // FLAGS["dp"]
    assert per_block > 0  # 16k tokens on tp 8: a block's copy outlasts its compute
    assert estimates[6].step_time_s - estimates[0].step_time_s == pytest.approx(n_micro * 6 * per_block, rel=1e-9)
    assert estimates[6].breakdown_s["offload"] == pytest.approx(n_micro * 6 * per_block, rel=1e-9)
    assert "offload" not in estimates[0].breakdown_s
    assert sum(estimates[6].breakdown_s.values()) == pytest.approx(estimates[6].step_time_s, rel=1e-9)


def test_a_faster_pcie_link_hides_the_copies():
    from planner.inputs.hardware import cluster_from_spec

    cluster = cluster_from_spec({"name": "fast-pcie", "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 4, "gpus_per_node": 8,
         "host": {"pcie_GBps": 10000}}]})
    assert "offload" not in evaluate(offloaded(6, cluster=cluster)).breakdown_s


def test_offloaded_activations_count_against_the_nodes_host_memory():
    from planner.inputs.hardware import cluster_from_spec

    cluster = cluster_from_spec({"name": "small-host", "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 4, "gpus_per_node": 8, "host": {"memory_GiB": 16}}]})
    assert evaluate(offloaded(1, cluster=cluster)).fits  # 1 block: well under 2 GiB per GPU
    est = evaluate(offloaded(30, cluster=cluster))  # 30 blocks: more than each GPU's 2 GiB share
    assert not est.fits and "host memory" in est.overflows[0].gpu


def test_plan_json_round_trips_offload_activations_and_checks_it_against_the_blocks():
    from planner.plan import plan_from_json, plan_to_json
    from planner.verify.plan_checks import validate_plan_data

    plan = offloaded(6)
    data = plan_to_json(plan)
    assert data["stages"][0]["offload_activations"] == 6
    assert validate_plan_data(data) == []
    assert plan_from_json(data).stages == plan.stages
    assert "offload_activations" not in plan_to_json(offloaded(0))["stages"][0]
    data["stages"][0]["offload_activations"] = 33
    assert any(path == "stages[0].offload_activations" for path, _ in validate_plan_data(data))


def test_megatron_runs_activation_offload_with_one_stage_no_recompute_and_fewer_blocks():
    from planner.cost.runtimes.capability import violations

    assert violations(offloaded(6), "megatron") == ()
    assert violations(offloaded(6, pp=2, dp=2), "any") == ()
    assert any("without pipeline parallelism" in v for v in violations(offloaded(6, pp=2, dp=2), "megatron"))
    assert any("without recomputation" in v for v in violations(offloaded(6, recompute="selective"), "megatron"))
    # megatron-core: cpu_offloading_num_layers must be below num_layers (32 blocks here)
    assert any("32 of 32" in v for v in violations(offloaded(32), "megatron"))
    assert violations(offloaded(31), "megatron") == ()
    for runtime in ("torchtitan", "deepspeed"):
        assert any("no activation offload" in v for v in violations(offloaded(6), runtime))


def test_activation_offload_exports_megatron_cpu_offloading_and_others_refuse():
    from planner.export.deepspeed import export_deepspeed
    from planner.export.megatron import export_megatron
    from planner.export.torchtitan import titan_settings

    warnings = []
    text = export_megatron(offloaded(6), warnings.append)
    assert "--cpu-offloading \\" in text and "--cpu-offloading-num-layers 6" in text
    assert warnings == []
    with pytest.raises(BadInput, match="without pipeline parallelism"):
        export_megatron(offloaded(6, pp=2, dp=2), lambda message: None)
    with pytest.raises(BadInput, match="no activation offload"):
        titan_settings(offloaded(6), lambda message: None)
    with pytest.raises(BadInput, match="no activation offload"):
        export_deepspeed(offloaded(6), lambda message: None)


# --- the search (one-stage uniform plans that do not fit: planner.search.uniform.fewest_offloaded)


def _box():
    """One workstation of 4 RTX-4090 (24 GiB), Phi-3-mini at 8k tokens: no one-stage plan fits
    without recomputation."""
    from planner.inputs.hardware import cluster_from_spec
    from planner.inputs.model import load_model
    from planner.plan import Training

    cluster = cluster_from_spec({"name": "box-4090", "node_groups": [
        {"name": "a", "gpu": "RTX-4090", "nodes": 1, "gpus_per_node": 4}]})
    from planner.api.load import check_training_inputs

    model, training = load_model("phi-3-mini"), Training(32, 8192, "bf16", 1, runtime="megatron")
    check_training_inputs(model, training)
    return model, cluster, training


@pytest.mark.parametrize("tp,zero", ((1, 1), (2, 0), (2, 1)))  # none fits with any count but in (2, 1)
def test_fewest_offloaded_blocks_is_the_fastest_fitting_count_by_enumeration(tp, zero):
    from planner.plan import uniform_plan
    from planner.search.uniform import fewest_offloaded

    model, cluster, training = _box()
    plan = uniform_plan(model, cluster, training, tp=tp, pp=1, dp=4 // tp, zero=zero, sequence_parallel=tp > 1)
    assert not evaluate(plan).fits
    blocks = plan.stages[0].decoder_blocks(model)
    best = None
    for k in range(blocks):  # Megatron: fewer than the model's blocks
        form = dataclasses.replace(plan, stages=(dataclasses.replace(plan.stages[0], offload_activations=k),))
        est = evaluate(form)
        if est.fits and (best is None or est.step_time_s < best[1]):
            best = (k, est.step_time_s)
    found = fewest_offloaded(plan)
    if best is None:
        assert found is None
    else:
        assert (found[0].stages[0].offload_activations, found[1].step_time_s) == (best[0],
                                                                                 pytest.approx(best[1], rel=1e-12))
    assert (best is not None) == ((tp, zero) == (2, 1))


def test_megatron_search_offloads_activations_where_memory_binds_and_it_beats_recompute():
    # runtime: megatron (activation offload with one stage, no recompute); torchtitan has none
    from planner.search.orchestration.driver import SolverOptions, solve

    model, cluster, training = _box()
    options = SolverOptions(micro_batches=(1,))
    with_offload = solve(model, cluster, training, options)
    without = solve(model, cluster, training, dataclasses.replace(options, activation_offload=False))
    assert with_offload.plan.stages[0].offload_activations > 0 and with_offload.plan.pp == 1
    assert with_offload.estimate.step_time_s < without.estimate.step_time_s
    assert all(s.offload_activations == 0 for s in without.plan.stages)
    assert not with_offload.optimal  # offload is priced on uniform one-stage plans, not proven
    titan = solve(model, cluster, dataclasses.replace(training, runtime="torchtitan"), options)
    assert all(s.offload_activations == 0 for s in titan.plan.stages)


def test_evaluate_flag_prices_activation_offload_and_a_plan_file_refuses_it(tmp_path):
    import json

    from planner.plan import plan_to_json

    from .conftest import invoke

    args = ["evaluate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--global-batch", "64", "--seq-len", "16384",
            "--tp", "8", "--pp", "1", "--dp", "4", "--micro-batch", "1", "--json"]
    result = invoke(*args, "--offload-activations", "6")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["breakdown_s"]["offload"] > 0
    assert invoke(*args, "--offload-activations", "-1").exit_code == 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(offloaded(6))))
    again = invoke("evaluate", "--plan", path, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["breakdown_s"]["offload"] == pytest.approx(
        data["breakdown_s"]["offload"], rel=1e-12)
    assert invoke("evaluate", "--plan", path, "--offload-activations", "3").exit_code == 2
