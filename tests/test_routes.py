"""The network paths between consecutive stages (planner.report.routes), as `planner show` and
`planner export` describe them for a cluster file with a `topology:` section."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from planner.cli.export import add_commands as add_export
from planner.cli.show import add_commands as add_show
from planner.export import export_plan
from planner.inputs.hardware import load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan
from planner.report.routes import stage_routes

ROUTE = ("stage 0 -> 1: rack-a -> rack-b via rack-a - spine - rack-b; bottleneck rack-a - spine "
         "50 GB/s per node, path latency 8 us")


def _plan(cluster: str, runtime: str = "megatron"):
    """Two stages of 16 GPUs: on two-rack-a100-spine, stage 0 fills rack-a and stage 1 rack-b."""
    training = Training(32, 512, "bf16", 1, runtime=runtime)
    return uniform_plan(load_model("gpt2"), load_cluster(cluster), training, tp=4, pp=2, dp=4)


def _cli(*args: str):
    group = click.Group()
    add_show(group)
    add_export(group)
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    return runner.invoke(group, list(args))


def test_stage_routes_name_the_widest_path_and_its_bottleneck_hop():
    routes = stage_routes(_plan("two-rack-a100-spine"))
    assert [r.describe() for r in routes] == [ROUTE]
    entry = routes[0].to_json()
    assert entry["path"] == ["rack-a", "spine", "rack-b"]
    assert entry["bottleneck"]["between"] == ["rack-a", "spine"] and entry["bottleneck"]["bandwidth_GBps"] == 50


def test_show_and_export_describe_the_topology(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(_plan("two-rack-a100-spine"))))
    shown = _cli("show", str(path))
    assert shown.exit_code == 0, shown.output
    assert ROUTE in " ".join(shown.stdout.split())
    megatron = _cli("export", str(path), "--to", "megatron")
    assert f"# network: {ROUTE}" in megatron.stdout.splitlines()
    rankmap = json.loads(_cli("export", str(path), "--to", "rankmap").stdout)
    assert rankmap["stage_routes"][0]["path"] == ["rack-a", "spine", "rack-b"]
    ds_path = tmp_path / "deepspeed-plan.json"
    ds_path.write_text(json.dumps(plan_to_json(_plan("two-rack-a100-spine", runtime="deepspeed"))))
    deepspeed = json.loads(_cli("export", str(ds_path), "--to", "deepspeed").stdout)
    assert deepspeed["planner_pipeline"]["stage_routes"] == rankmap["stage_routes"]


def test_without_a_topology_section_nothing_is_added():
    # stages across a100 and v100 nodes, joined by the default fabric (no topology section)
    plan = uniform_plan(load_model("gpt2"), load_cluster("a100-v100-mix"), Training(96, 512, "bf16", 1),
                        tp=2, pp=3, dp=8)
    assert {plan.cluster.group_of_rank(r).name for r in plan.used_ranks()} == {"a100", "v100"}
    assert stage_routes(plan) == []
    assert "stage_routes" not in json.loads(export_plan(plan, "rankmap", lambda _: None))
    assert "network:" not in export_plan(plan, "megatron", lambda _: None)
