"""The plan, evaluate and show tables at 80 and 160 columns: nothing cut, rules for the short forms."""

from __future__ import annotations

import dataclasses
import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from planner.report.views import print_estimate, print_plan
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import GIB, cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Plan, Replica, Training, uniform_plan
from planner.report.show import print_show, rank_timings
from planner.report.tables import gpu_labels, rank_text, replicas_by_gpu, shares_text, short_gpu_name, types_label

from .conftest import mixed_any_result

WIDTHS = (80, 160)


def big_mix_spec(a100_nodes: int = 25, v100_nodes: int = 50) -> dict:
    """The a100-v100-mix example scaled to 600 GPUs (25 A100 nodes, 50 V100 nodes)."""
    return {"name": "big-mix", "node_groups": [
        {"name": "a100", "gpu": "A100-SXM4-80GB", "nodes": a100_nodes, "gpus_per_node": 8,
         "intra_node": {"bandwidth_GBps": 300, "latency_us": 3}, "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}},
        {"name": "v100", "gpu": "V100-SXM2-32GB", "nodes": v100_nodes, "gpus_per_node": 8,
         "intra_node": {"bandwidth_GBps": 150, "latency_us": 3}, "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}]}


def result_of(plan: Plan) -> SimpleNamespace:
    """What print_plan reads from a search result, for a plan not found by the search."""
    return SimpleNamespace(plan=plan, estimate=evaluate(plan), optimal=True, gap=0.0, candidates=1,
                           seconds=0.0, decomposition="exact")


def interleave_nodes(plan: Plan, ways: int) -> Plan:
    """The plan with its nodes dealt round-robin: stage k's j-th node becomes node ways*j + k,
    so each stage's ranks are many equal blocks at a fixed step."""
    nodes = plan.cluster.num_gpus // 8
    per = nodes // ways
    new_node = {n: ways * (n % per) + n // per for n in range(nodes)}
    move = {r: 8 * new_node[r // 8] + r % 8 for r in range(plan.cluster.num_gpus)}
    stages = tuple(dataclasses.replace(s, replicas=tuple(
        Replica(r.dp_rank, r.batch_share, tuple(move[x] for x in r.ranks)) for r in s.replicas))
        for s in plan.stages)
    return dataclasses.replace(plan, stages=stages)


@pytest.fixture(scope="module")
def default_result():
    return mixed_any_result()


@pytest.fixture(scope="module")
def big_result():
    from planner.search.orchestration.driver import SolverOptions, solve

    # runtime any (per-stage TP and DP); micro-batch 1 and 1F1B only: the tables need a big
    # plan from the search, not the best one, and the narrower search takes a fraction of the time
    return solve(load_model("llama-3-8b"), cluster_from_spec(big_mix_spec()),
                 Training(2400, 4096, "fp16", 1, runtime="any"),
                 SolverOptions(micro_batches=(1,), virtual_stages=(1,)))


@pytest.fixture(scope="module")
def strided_plan() -> Plan:
    plan = uniform_plan(load_model("llama-3-8b"), cluster_from_spec(big_mix_spec()),
                        Training(2400, 4096, "fp16", 1), tp=2, pp=3, dp=100, zero=1, recompute="selective")
    return interleave_nodes(plan, 3)


def render(width: int, draw) -> str:
    console = Console(width=width, file=io.StringIO(), highlight=False, no_color=True, force_terminal=False)
    draw(console)
    return console.file.getvalue()


def assert_nothing_cut(out: str, plan: Plan, width: int) -> None:
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    for s in plan.stages:
        for tp in s.tp_degrees:  # (per-replica TP: each GPU type's row its own degree)
            assert f"{tp}/{s.dp}/{s.zero}" in out, f"stage {s.index}'s tp/dp/zero missing"
    labels = gpu_labels(plan.cluster)
    for s in plan.stages:
        for gpu, replicas in replicas_by_gpu(plan, s.replicas).items():
            ranks = [x for r in replicas for x in r.ranks]
            assert f"{len(ranks)}× {types_label(labels, gpu)}" in out
            for word in rank_text(ranks).split():  # may wrap between words, never inside one
                assert word in out


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("which", ["default", "big", "strided"])
def test_plan_and_show_tables_cut_no_cell(which, width, request):
    if which == "strided":
        result = result_of(request.getfixturevalue("strided_plan"))
    else:
        result = request.getfixturevalue(f"{which}_result")
    plan = result.plan
    assert_nothing_cut(render(width, lambda c: print_plan(result, c)), plan, width)
    shown = render(width, lambda c: print_show(plan, result.estimate, rank_timings(plan), c))
    assert_nothing_cut(shown, plan, width)
    for gpu in {g.name for g in plan.cluster.gpu_types}:  # the legend names each type in full
        assert gpu in shown


@pytest.mark.parametrize("width", WIDTHS)
def test_evaluate_table_cuts_no_cell(width, strided_plan):
    out = render(width, lambda c: print_estimate(strided_plan, evaluate(strided_plan), c))
    assert "…" not in out and "A100-SXM4-80GB" in out and "V100-SXM2-32GB" in out
    assert max(len(line) for line in out.splitlines()) <= width


def test_default_plan_at_80_columns_shows_whole_cells(default_result):
    out = render(80, lambda c: print_plan(default_result, c))
    assert "32× V100-32G" in out and "16× A100-80G" in out
    for stage in default_result.plan.stages:  # each type's replicas and their shares, whole
        for replicas in replicas_by_gpu(default_result.plan, stage.replicas).values():
            assert shares_text(replicas) in out
    est = default_result.estimate
    for rank in (0, 16):  # peak/capacity of each type, whole
        peak, cap = est.memory_by_rank[rank].total_bytes / GIB, est.capacity_by_rank[rank] / GIB
        assert f"{peak:.1f}/{cap:.0f}" in out


def test_strided_ranks_are_summarised(strided_plan):
    stage = strided_plan.stages[0]
    a100 = replicas_by_gpu(strided_plan, stage.replicas)[("A100-SXM4-80GB",)]
    assert rank_text([x for r in a100 for x in r.ranks]) == "0-7, 24-31, .., 192-199 (9 × 8, step 24)"


@pytest.mark.parametrize("ranks, text", [
    ([0, 1, 2, 3, 8, 9], "0-3, 8-9"),
    ([5], "5"),
    (list(range(0, 16)) + list(range(32, 48)), "0-15, 32-47"),
    ([0, 2, 4], "0, 2, 4"),  # too few blocks to summarise
    (list(range(0, 600, 2)), "0, 2, .., 598 (300 × 1, step 2)"),
    ([0, 1, 4, 5, 8, 9, 13, 14], "0-1, 4-5, 8-9, 13-14"),  # irregular step: all ranges
    ([0, 1, 4, 5, 8, 9, 12], "0-1, 4-5, 8-9, 12"),  # unequal blocks: all ranges
])
def test_rank_lists_compress_to_ranges(ranks, text):
    assert rank_text(ranks) == text


@pytest.mark.parametrize("name, gib, short", [
    ("A100-SXM4-80GB", 80, "A100-80G"), ("V100-SXM2-32GB", 32, "V100-32G"), ("H200-SXM-141GB", 141, "H200-141G"),
    ("H100-PCIE-80GB", 80, "H100-80G"), ("T4", 16, "T4"), ("RTX-4090", 24, "RTX-4090"), ("MI300X", 192, "MI300X"),
])
def test_gpu_names_shorten_to_family_and_memory(name, gib, short):
    assert short_gpu_name(name, gib * GIB) == short


def test_colliding_short_names_stay_in_full():
    spec = big_mix_spec(1, 1)
    spec["node_groups"][1]["gpu"] = "A100-PCIE-80GB"
    labels = gpu_labels(cluster_from_spec(spec))
    assert labels == {"A100-SXM4-80GB": "A100-SXM4-80GB", "A100-PCIE-80GB": "A100-PCIE-80GB"}


def test_names_from_files_print_literally():
    # the name rule refuses such names at load (planner/core/names.py); the tables escape them
    # anyway, so build the cluster past the loader
    spec = big_mix_spec(1, 1) | {"gpus": {
        "custom-v": {"memory_GiB": 32, "peak_tflops": {"fp16": 100, "fp32": 20}, "hbm_GBps": 900}}}
    spec["node_groups"][1]["gpu"] = "custom-v"
    cluster = cluster_from_spec(spec)
    groups = tuple(dataclasses.replace(g, gpu=dataclasses.replace(g.gpu, name="evil[/]")) if g.gpu.name == "custom-v"
                   else g for g in cluster.groups)
    cluster = dataclasses.replace(cluster, name="lab[bold]x", groups=groups)
    plan = uniform_plan(load_model("gpt2"), cluster, Training(16, 1024, "fp16", 1), tp=1, pp=2, dp=8)
    result = result_of(plan)
    for draw in (lambda c: print_plan(result, c), lambda c: print_show(plan, result.estimate, rank_timings(plan), c),
                 lambda c: print_estimate(plan, result.estimate, c)):
        out = render(160, draw)
        assert "evil[/]" in out and "lab[bold]x" in out
