"""Exports a user can launch: DeepSpeed's hostfile and launcher line (and its `--launch-dir`
files), rank ranges written as {"first", "last"}, and the `viz` extra's install hint."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess

import pytest

from planner.core.errors import BadInput
from planner.export import export_plan, node_launches
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan

from .conftest import assert_bad_input, invoke, require, small_cluster_spec


def deepspeed_plan(nodes: int = 2, gpus_per_node: int = 4, tp: int = 2, pp: int = 2):
    """A plan of the deepspeed runtime (no sequence parallelism: its capability)."""
    cluster = cluster_from_spec(small_cluster_spec(nodes=nodes, gpus_per_node=gpus_per_node))
    dp = nodes * gpus_per_node // (tp * pp)
    return uniform_plan(load_model("llama-3-8b"), cluster, Training(16, 1024, "bf16", 1, runtime="deepspeed"),
                        tp=tp, pp=pp, dp=dp, zero=1)


def on_last_gpus(plan, gpus_per_node: int = 4):
    """`plan` (on nodes of 2 GPUs) moved onto the last 2 GPUs of nodes of `gpus_per_node`."""
    spec = small_cluster_spec(nodes=len({plan.cluster.device(r).node for r in plan.used_ranks()}),
                              gpus_per_node=gpus_per_node)
    move = {r: (r // 2) * gpus_per_node + gpus_per_node - 2 + r % 2 for r in plan.used_ranks()}
    def moved(rep):
        return dataclasses.replace(rep, ranks=tuple(move[r] for r in rep.ranks))

    stages = tuple(dataclasses.replace(s, replicas=tuple(moved(rep) for rep in s.replicas)) for s in plan.stages)
    return dataclasses.replace(plan, cluster=cluster_from_spec(spec), stages=stages)


def deepspeed_config(plan) -> tuple[dict, list[str]]:
    warnings: list[str] = []
    return json.loads(export_plan(plan, "deepspeed", warnings.append)), warnings


def launched_ranks(hostfile: list[str], command: str) -> dict[int, tuple[str, int]]:
    """global rank -> (host, GPU) as DeepSpeed's launcher gives them (deepspeed/launcher/runner.py
    main: the hostfile, --include or --num_nodes/--num_gpus; launch.py: ranks host by host in
    hostfile order, LOCAL_RANK j on the host's j-th GPU)."""
    require("deepspeed.launcher.runner", "PLANNER_REQUIRE_INTEGRATION")
    from deepspeed.launcher import runner

    words = shlex.split(command)
    assert words[0] == "deepspeed"
    args = runner.parse_args(words[1:])
    pool = runner._parse_hostfile(hostfile) if "--hostfile" in words else {"localhost": 8}
    active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
    active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    placed = [(host, gpu) for host, gpus in active.items() for gpu in gpus]
    return dict(enumerate(placed))


def planned_ranks(plan, hosts: list[str]) -> dict[int, tuple[str, int]]:
    """global rank -> (host, GPU) the plan chose, its node ranks named by the hostfile's hosts."""
    return {n.first_rank + j: (hosts[n.node_rank], gpu) for n in node_launches(plan) for j, gpu in enumerate(n.devices)}


def test_deepspeed_export_writes_a_hostfile_and_launcher_line():
    config, warnings = deepspeed_config(deepspeed_plan())
    assert warnings == []
    launch = config["planner_launch"]
    assert launch["hostfile"] == ["g-0 slots=4", "g-1 slots=4"]
    assert launch["command"] == ("deepspeed --hostfile hostfile --num_nodes 2 --num_gpus 4 train.py "
                                 "--deepspeed --deepspeed_config ds_config.json")


@pytest.mark.parametrize("tp, named", [(2, True), (1, False)])
def test_deepspeed_export_says_tensor_parallelism_needs_megatron_deepspeed(tp, named):
    config, _ = deepspeed_config(deepspeed_plan(tp=tp))
    notes = " ".join(config["planner_launch"]["notes"])
    assert ("Megatron-DeepSpeed" in notes) == named
    if named:
        assert "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --deepspeed" in notes


@pytest.mark.integration
@pytest.mark.parametrize("case", ["whole nodes", "last GPUs of each node", "one node"])
def test_deepspeed_launcher_gives_every_rank_the_gpu_its_plan_chose(case):
    if case == "whole nodes":
        plan = deepspeed_plan()
    elif case == "last GPUs of each node":
        plan = on_last_gpus(deepspeed_plan(gpus_per_node=2, tp=2, pp=2))
    else:
        plan = deepspeed_plan(nodes=1, gpus_per_node=8)
    launch = deepspeed_config(plan)[0]["planner_launch"]
    hosts = [line.split()[0] for line in launch["hostfile"]]
    if case == "one node":
        assert "--hostfile" not in launch["command"]
        hosts = ["localhost"]
    if case == "last GPUs of each node":
        assert "--include g-0:2,3@g-1:2,3 " in launch["command"]
    assert launched_ranks(launch["hostfile"], launch["command"]) == planned_ranks(plan, hosts)


def test_launch_dir_writes_deepspeed_hostfile_and_script(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(deepspeed_plan())))
    result = invoke("export", path, "--to", "deepspeed", "-o", tmp_path / "ds.json",
                    "--launch-dir", tmp_path / "launch")
    assert result.exit_code == 0, result.stderr
    hostfile = (tmp_path / "launch" / "hostfile").read_text().splitlines()
    assert [line for line in hostfile if not line.startswith("#")] == ["g-0 slots=4", "g-1 slots=4"]
    script = tmp_path / "launch" / "launch.sh"
    text = script.read_text()
    assert script.stat().st_mode & 0o111
    assert 'exec deepspeed --hostfile "$HERE/hostfile" --num_nodes 2 --num_gpus 4 "$TRAIN_SCRIPT" --deepspeed ' \
           '--deepspeed_config "$CONFIG" "$@"' in text
    assert "CONFIG=../ds.json" in text and "Megatron-DeepSpeed" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_host_names_are_host_names_whatever_the_group_is_called():
    plan = deepspeed_plan()
    groups = (dataclasses.replace(plan.cluster.groups[0], name="A100 $(rm -rf /)\nx slots=99"),)
    config, _ = deepspeed_config(dataclasses.replace(plan, cluster=dataclasses.replace(plan.cluster, groups=groups)))
    hostfile = config["planner_launch"]["hostfile"]
    assert all(re.fullmatch(r"[a-z0-9-]+ slots=4", line) for line in hostfile) and len(set(hostfile)) == 2


def test_rank_ranges_are_written_first_and_last():
    plan = deepspeed_plan()
    nodes = deepspeed_config(plan)[0]["planner_pipeline"]["node_ranks"]
    assert [n["ranks"] for n in nodes] == [{"first": 0, "last": 3}, {"first": 4, "last": 7}]
    rankmap = json.loads(export_plan(plan, "rankmap", lambda message: None))
    assert [run["node_rank_range"] for run in rankmap["launch"]] == [{"first": 0, "last": 1}]


def test_viz_extra_error_names_the_install_from_a_checkout(monkeypatch, tmp_path):
    from planner.report.show import require_matplotlib

    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(BadInput) as raised:
        require_matplotlib()
    assert "pip install -e '.[viz]'" in str(raised.value) and "pip install 'planner[viz]'" in str(raised.value)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(deepspeed_plan())))
    assert "pip install -e '.[viz]'" in assert_bad_input(invoke("show", path, "--svg", tmp_path / "t.svg"), "--svg")
