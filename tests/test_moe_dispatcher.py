"""The MoE token dispatcher as a training choice (`--moe-dispatcher alltoall|flex`):
recorded in the plan, priced, exported to Megatron-LM, refused where it cannot run; and the
MoE runs' stated settings (force-balanced routing, a recipe's flex dispatcher) in the fidelity replay."""

from __future__ import annotations

import json

import pytest

from planner.export import export_deepspeed, export_megatron
from planner.core.errors import BadInput
from planner.plan import plan_from_json, plan_to_json

from .conftest import assert_bad_input, benchmark_module, evaluate_args, invoke, ok_json


# Qwen3-30B-A3B on two DGX H100 with its 128 experts over all 16 GPUs: the EP group spans both nodes
QWEN_EP16 = evaluate_args("qwen3-30b-a3b", "dgx-h100-2node", global_batch=64, seq_len=4096, dp=16,
                          extra=("--ep", "16", "--zero", "1"))


def evaluated(*flags: str) -> dict:
    return ok_json(invoke(*QWEN_EP16, *flags))


@pytest.fixture(scope="module")
def flex_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("flex") / "plan.json"
    ok_json(invoke(*QWEN_EP16, "--moe-dispatcher", "flex", "--plan-out", str(path)))
    return plan_from_json(json.loads(path.read_text()))


def test_flex_prices_a_multi_node_expert_parallel_step_faster_than_alltoall():
    alltoall, flex = evaluated(), evaluated("--moe-dispatcher", "flex")
    assert flex["step_time_s"] < alltoall["step_time_s"]
    assert evaluated("--moe-dispatcher", "alltoall")["step_time_s"] == alltoall["step_time_s"]
    assert flex["config"]["moe_dispatcher"] == "flex" and "moe_dispatcher" not in alltoall["config"]


def test_the_dispatcher_round_trips_through_the_plan_file(flex_plan):
    assert flex_plan.training.moe_dispatcher == "flex"
    data = plan_to_json(flex_plan)
    assert data["training"]["moe_dispatcher"] == "flex"
    assert plan_from_json(json.loads(json.dumps(data))).training == flex_plan.training


def test_an_alltoall_plan_file_carries_no_dispatcher_key(flex_plan):
    from dataclasses import replace

    plain = replace(flex_plan, training=replace(flex_plan.training, moe_dispatcher="alltoall"))
    assert "moe_dispatcher" not in plan_to_json(plain)["training"]


def test_evaluate_of_a_flex_plan_file_prices_it_with_flex(flex_plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(flex_plan)))
    again = ok_json(invoke("evaluate", "--plan", str(path), "--json"))
    assert again["step_time_s"] == pytest.approx(evaluated("--moe-dispatcher", "flex")["step_time_s"])


def test_the_human_header_names_a_flex_dispatcher_and_not_alltoall():
    human = [a for a in QWEN_EP16 if a != "--json"]
    assert "flex MoE dispatcher" in " ".join(invoke(*human, "--moe-dispatcher", "flex").stdout.split())
    assert "MoE dispatcher" not in " ".join(invoke(*human).stdout.split())


def test_megatron_export_writes_the_flex_dispatcher_and_its_hybridep_backend(flex_plan):
    text = export_megatron(flex_plan, lambda message: None)
    assert "--moe-token-dispatcher-type flex \\" in text
    assert "--moe-flex-dispatcher-backend hybridep \\" in text


def test_megatron_export_of_an_alltoall_plan_keeps_the_alltoall_dispatcher(flex_plan):
    from dataclasses import replace

    plain = replace(flex_plan, training=replace(flex_plan.training, moe_dispatcher="alltoall"))
    text = export_megatron(plain, lambda message: None)
    assert "--moe-token-dispatcher-type alltoall" in text and "flex-dispatcher-backend" not in text


def test_an_exporter_without_the_flex_dispatcher_refuses_it(flex_plan):
    with pytest.raises(BadInput, match="has no flex MoE token dispatcher"):
        export_deepspeed(flex_plan, lambda message: None)


def test_export_to_a_runtime_without_flex_is_one_line_exit_2(flex_plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(flex_plan)))
    assert_bad_input(invoke("export", str(path), "--to", "deepspeed"), "no flex MoE token dispatcher")


def test_the_dispatcher_on_a_dense_model_is_refused():
    for value in ("flex", "alltoall"):
        assert_bad_input(invoke(*evaluate_args("gpt2", "dgx-a100", global_batch=32, dp=32, extra=("--moe-dispatcher", value))),
                         "--moe-dispatcher", "needs a model with experts", "gpt2 is dense")


def test_a_plan_file_with_a_dispatcher_on_a_dense_model_is_refused(tmp_path):
    path = tmp_path / "dense.json"
    ok_json(invoke(*evaluate_args("gpt2", "dgx-a100", global_batch=32, dp=32, extra=("--plan-out", str(path)))))
    data = json.loads(path.read_text())
    data["training"]["moe_dispatcher"] = "flex"
    with pytest.raises(BadInput, match="needs a model with experts"):
        plan_from_json(data)


def test_flex_under_a_runtime_without_it_is_refused():
    assert_bad_input(invoke(*QWEN_EP16, "--moe-dispatcher", "flex", "--runtime", "deepspeed"),
                     "--moe-dispatcher", "no flex MoE token dispatcher", "--runtime megatron or any")


def test_plan_keeps_the_chosen_dispatcher():
    data = ok_json(invoke("plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100-2node", "--global-batch", "64",
                          "--seq-len", "4096", "--moe-dispatcher", "flex", "--time-limit", "60", "--json"),
                   quiet=False)
    assert data["training"]["moe_dispatcher"] == "flex"


# --- the MoE runs' stated settings (benchmarks/fidelity_moe.py, Case.settings) ------------------

@pytest.fixture(scope="module")
def fidelity_moe():
    return benchmark_module("fidelity_moe")


def test_every_row_quoting_the_force_balance_note_is_priced_with_balanced_experts(fidelity_moe):
    runs = fidelity_moe.load_moe_runs()
    for run in runs:
        stated = fidelity_moe.FORCE_BALANCED in " ".join(" ".join(map(str, run.get("notes", ()))).split())
        assert (("moe_imbalance", 1.0) in fidelity_moe.run_settings(run)) == stated
    assert any(("moe_imbalance", 1.0) in c.settings for c in fidelity_moe.moe_cases() if not c.skip)


def test_a_row_whose_recipe_sets_a_flex_backend_is_priced_with_the_flex_dispatcher(fidelity_moe):
    runs = fidelity_moe.load_moe_runs()
    flex = [r for r in runs if ("moe_dispatcher", "flex") in fidelity_moe.run_settings(r)]
    stated = [r for r in flex if '"moe_flex_dispatcher_backend": "hybridep"' in " ".join(map(str, r["notes"]))]
    assert stated and all(r in stated or fidelity_moe.missed_recipe_backend(r)
                          or fidelity_moe.names_full_iteration_recipe(r) for r in flex)
    plain = next(r for r in runs if "moe_flex_dispatcher_backend" not in " ".join(map(str, r.get("notes", ())))
                 and not fidelity_moe.missed_recipe_backend(r) and not fidelity_moe.names_full_iteration_recipe(r))
    assert ("moe_dispatcher", "flex") not in fidelity_moe.run_settings(plain)


def test_a_row_matching_a_recipe_through_its_inherited_defaults_gets_the_recipes_backend(fidelity_moe):
    import copy

    row = next(r for r in fidelity_moe.load_moe_runs() if r["id"].startswith("megatronbridge-moe-26.06-h100-qwen3"))
    assert fidelity_moe.missed_recipe_backend(row) == "hybridep"
    assert ("moe_dispatcher", "flex") in fidelity_moe.run_settings(row)
    other = copy.deepcopy(row)
    other["global_batch"] = 512  # not the recipe's global_batch_size=1024
    assert fidelity_moe.missed_recipe_backend(other) == "" and ("moe_dispatcher", "flex") not in fidelity_moe.run_settings(other)


def test_the_moe_assumption_quotes_the_force_balance_line(fidelity_moe):
    assert "we force-balance the token distribution among experts" in fidelity_moe.ASSUMPTION
    assert "moe_flex_dispatcher_backend" in fidelity_moe.ASSUMPTION
