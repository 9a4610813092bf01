"""ZB-V, looped BFS and DualPipeV in `plan` as uniform candidates (planner.search.orchestration.space.uniform_schedules),
an MoE model's with expert parallelism: priced by evaluate where the runtime runs them, they compete with
the exact search's plan as seeds, and a plan that wins this way is reported not proven optimal."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import product

import pytest

from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import capability, violations
from planner.core.errors import BadInput
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Training, structural_problems, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.orchestration.space import uniform_space, within

OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"))
EXTRA = ("zbv", "looped-bfs", "dualpipev")


def titan_instance(hidden: int, nodes: int, gpus_per_node: int):
    """A 4-block llama on one-type nodes with slow links, bf16 under torchtitan (8 samples of 1024)."""
    model = model_from_dict({"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": 4,
                             "num_attention_heads": 8, "num_key_value_heads": 8,
                             "intermediate_size": hidden * 4, "vocab_size": 32000}, f"titan-{hidden}")
    cluster = cluster_from_spec({"name": "titan", "gpus": {"A100-SXM4-80GB": {"memory_GiB": 8}}, "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": nodes, "gpus_per_node": gpus_per_node,
         "inter_node": {"bandwidth_GBps": 25, "latency_us": 5}}]})
    return model, cluster, Training(8, 1024, "bf16", 1, runtime="torchtitan")


def moe_instance(memory_GiB: float = 10, link_GBps: float = 50):
    """An 8-block MoE (64 experts, top-4) on one node of 8 GPUs of `memory_GiB` joined at `link_GBps`,
    bf16 under torchtitan (32 samples of 2048): DualPipeV with EP 4 hides the all-to-all ZB-V exposes."""
    hidden = 1024
    model = model_from_dict({"model_type": "qwen3_moe", "hidden_size": hidden, "num_hidden_layers": 8,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": hidden // 8,
                             "intermediate_size": 4 * hidden, "moe_intermediate_size": hidden, "num_experts": 64,
                             "num_experts_per_tok": 4, "vocab_size": 32000}, "tiny-moe")
    cluster = cluster_from_spec({"name": "moe", "gpus": {"A100-SXM4-80GB": {"memory_GiB": memory_GiB}}, "node_groups": [
        {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8,
         "intra_node": {"bandwidth_GBps": link_GBps, "latency_us": 5}}]})
    return model, cluster, Training(32, 2048, "bf16", 1, runtime="torchtitan")


# where looped BFS wins, where ZB-V wins (hidden, nodes, GPUs per node), where DualPipeV wins
CASES = {"looped-bfs": lambda: titan_instance(1024, 4, 1), "zbv": lambda: titan_instance(2048, 2, 2),
         "dualpipev": moe_instance}


def _ep_degrees(model, cluster, tp: int, dp: int) -> list[int]:
    """Every expert-parallel degree of a uniform plan: dividing the experts and dp, tp x ep within a node."""
    experts = model.config.num_experts
    per_node = cluster.groups[0].gpus_per_node
    return [e for e in range(1, dp + 1) if experts % e == 0 and dp % e == 0 and tp * e <= per_node] \
        if experts > 1 else [1]


def brute_force_extra(model, cluster, base):
    """(step, schedule) of the fastest uniform ZB-V / looped-BFS / DualPipeV plan (V = 2) the runtime runs,
    by enumerating every tp, pp, dp, micro-batch, recompute mode and ZeRO stage of OPTIONS, and for an MoE
    model every expert-parallel degree (_ep_degrees)."""
    best = None
    n = cluster.num_gpus
    for schedule, tp, b, recompute, zero in product(EXTRA, OPTIONS["tp_degrees"], OPTIONS["micro_batches"],
                                                    OPTIONS["recompute_modes"], (0, 1, 2, 3)):
        for pp in range(2, n // tp + 1):
            if n % (tp * pp):
                continue
            training = replace(base, micro_batch=b, schedule=schedule, virtual_stages=2)
            dp = n // (tp * pp)
            for ep in _ep_degrees(model, cluster, tp, dp):
                try:
                    plan = uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=dp, zero=zero if dp > 1 else 0,
                                        recompute=recompute, sequence_parallel=tp > 1, ep=ep)
                except BadInput:
                    continue
                if structural_problems(plan) or violations(plan, base.runtime):
                    continue
                estimate = evaluate(plan)
                if estimate.fits and (best is None or estimate.step_time_s < best[0]):
                    best = (estimate.step_time_s, schedule)
    return best


@pytest.fixture(scope="module")
def uniform_results():
    out = {}
    for name, instance in CASES.items():
        model, cluster, base = instance()
        out[name] = (model, cluster, base, solve(model, cluster, base, SolverOptions(**OPTIONS)),
                     solve(model, cluster, base, SolverOptions(**OPTIONS, uniform_schedules=False)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_uniform_candidate_is_the_best_of_the_brute_force_enumeration(uniform_results, name):
    model, cluster, base, result, _ = uniform_results[name]
    expected = brute_force_extra(model, cluster, base)
    assert expected is not None and expected[1] == name
    assert result.plan.training.schedule == name and result.plan.training.virtual_stages == 2
    assert result.estimate.step_time_s == pytest.approx(expected[0], rel=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_winning_uniform_schedule_beats_the_exact_search_and_is_not_proven_optimal(uniform_results, name):
    _, _, _, result, without = uniform_results[name]
    assert without.plan.training.schedule not in EXTRA and without.optimal
    assert result.estimate.step_time_s < without.estimate.step_time_s * (1 - 1e-9)
    assert not result.optimal
    assert not violations(result.plan, "torchtitan") and result.plan.pp >= 2


def test_uniform_schedules_only_where_the_runtime_runs_them_and_no_zero_bubble_leaves_out_zbv():
    def schedules(runtime, **flags):
        cap = capability(runtime)
        return uniform_space(within(SolverOptions(**flags), cap), cap, whole_nodes=False).schedules

    assert schedules("torchtitan") == ("zbv", "looped-bfs", "dualpipev")
    assert schedules("any") == ("zbv", "looped-bfs", "dualpipev", "combined-1f1b")
    assert schedules("megatron") == ("combined-1f1b",) and schedules("deepspeed") == ()
    # --no-zero-bubble: no split backward (ZB-V, DualPipeV); looped BFS is not a zero-bubble schedule
    assert schedules("torchtitan", zero_bubble=False) == ("looped-bfs",)
    assert schedules("any", uniform_schedules=False) == () and schedules("any", zero_bubble=False) == (
        "looped-bfs", "combined-1f1b")
    assert schedules("torchtitan", max_stages=1) == ()
    cap = capability("torchtitan")  # the whole-node space (the search's backup) has none
    assert uniform_space(within(SolverOptions(), cap), cap).schedules == ()


def test_plan_torchtitan_returns_zbv_for_llama_3_8b_and_its_export_is_clean(tmp_path):
    # runtime: torchtitan; global batch 32 x 4096 on 4 DGX A100 nodes: ZB-V at pp 2 beats the
    # best plan without it (tp 2 FSDP, one stage)
    from planner.api import plan_json
    from planner.inputs.hardware import load_cluster
    from planner.inputs.model import load_model

    from .conftest import invoke

    model, cluster = load_model("llama-3-8b"), load_cluster("dgx-a100")
    base = Training(32, 4096, "bf16", 1, runtime="torchtitan")
    options = SolverOptions(micro_batches=(1, 2))
    result = solve(model, cluster, base, options)
    without = solve(model, cluster, base, replace(options, uniform_schedules=False))
    assert result.plan.training.schedule == "zbv" and result.plan.pp == 2 and not result.optimal
    assert without.plan.training.schedule not in EXTRA
    assert result.estimate.step_time_s < without.estimate.step_time_s * (1 - 1e-9)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_json(result)))
    exported = invoke("export", path, "--to", "torchtitan", "-o", tmp_path / "job.toml")
    assert exported.exit_code == 0 and exported.stderr == ""
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in (tmp_path / "job.toml").read_text()
