"""The DeepSpeed launch of a `--to deepspeed` export: a hostfile and the `deepspeed` launcher line
(in ds_config.json's `planner_launch`, and as files with `--launch-dir`).

DeepSpeed's launcher (deepspeed/launcher/runner.py, launch.py) reads `HOST slots=N` lines, keeps
the GPUs `--num_nodes`/`--num_gpus` or `--include HOST:SLOT,...@...` select (each host's slots in
ascending order, the hosts in hostfile order), numbers the global ranks host by host in that
order (launch.py global_rank_mapping) and gives LOCAL_RANK j the host's j-th selected GPU
(CUDA_VISIBLE_DEVICES). The hostfile lists the plan's nodes in node-rank order
(planner.export.launch.node_launches), so every pipeline stage runs on the GPUs its plan chose.
Host names are placeholders, GROUP-NODE, which the user replaces with the nodes' addresses.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ..plan import Plan
from .base import comment_line
from .launch import node_launches, placeable, power_cap_lines

TRAIN_SCRIPT = "train.py"  # the user's DeepSpeed training script (its PipelineModule cut at planner_pipeline.parts)


@dataclass(frozen=True)
class Host:
    name: str  # placeholder host name
    group: str
    node: int  # the node's index in its group
    slots: int  # the node's GPUs (hostfile slots)
    devices: tuple[int, ...]  # the GPUs it runs, for LOCAL_RANK 0, 1, ...


def _host_word(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "node"


def deepspeed_hosts(plan: Plan, world: int) -> list[Host]:
    """The launch's nodes in hostfile order: the plan's node ranks where its placement is kept
    (placeable), else the first `world` GPUs of the cluster's nodes in cluster order."""
    if placeable(plan):
        nodes = [(n.group, n.node, n.gpus_per_node, n.devices) for n in node_launches(plan)]
    else:
        nodes, left = [], world
        for g in plan.cluster.groups:
            for node in range(g.nodes):
                if left > 0:
                    nodes.append((g.name, node, g.gpus_per_node, tuple(range(min(left, g.gpus_per_node)))))
                    left -= g.gpus_per_node
    names: set[str] = set()
    hosts = []
    for i, (group, node, slots, devices) in enumerate(nodes):
        name = f"{_host_word(group)}-{node}"
        if name in names:  # two group names that differ only in characters a host name cannot hold
            name = f"node{i}-{name}"
        names.add(name)
        hosts.append(Host(name, group, node, slots, devices))
    return hosts


def reordered_hosts(hosts: list[Host]) -> list[Host]:
    """Hosts whose planned GPU order the launcher cannot keep (it runs a host's GPUs ascending)."""
    return [h for h in hosts if list(h.devices) != sorted(h.devices)]


def launcher_words(hosts: list[Host], hostfile: str, script: str, config: str) -> list[str]:
    """`deepspeed [--hostfile H] --num_nodes N --num_gpus G | --include ... SCRIPT --deepspeed
    --deepspeed_config CONFIG`: --num_nodes/--num_gpus where every host runs its first G GPUs,
    else --include (the launcher refuses both together); one host runs locally, without ssh
    or hostfile (runner.py: no hostfile, the local GPUs)."""
    g = len(hosts[0].devices)
    every_first = all(sorted(h.devices) == list(range(g)) for h in hosts)
    words = ["deepspeed"]
    if len(hosts) > 1:
        words += ["--hostfile", hostfile]
    if every_first and len(hosts) > 1:
        words += ["--num_nodes", str(len(hosts)), "--num_gpus", str(g)]
    elif every_first:
        words += ["--num_gpus", str(g)]
    else:
        words += ["--include", "@".join(f"{h.name if len(hosts) > 1 else 'localhost'}:"
                                        + ",".join(map(str, sorted(h.devices))) for h in hosts)]
    return words + [script, "--deepspeed", "--deepspeed_config", config]


def launch_notes(hosts: list[Host], tp: int, pp: int, sequence_parallel: bool, script: str = TRAIN_SCRIPT) -> list[str]:
    notes = [f"hostfile: the {len(hosts)} nodes in node-rank order (DeepSpeed numbers ranks host by host in "
             "hostfile order); replace each placeholder name (GROUP-NODE) with that node's address, reachable "
             "by passwordless ssh from the node that runs the command"
             if len(hosts) > 1 else "one node: the command runs on it, without the hostfile",
             f"{script}: your training script, building a PipelineModule cut at planner_pipeline.parts "
             "and calling deepspeed.initialize with this config"]
    if tp > 1:
        # DeepSpeed's engine has no tensor-parallel layers; Megatron-DeepSpeed's model and mpu give them
        notes.append(f"tensor_parallel_size {tp}: DeepSpeed has no tensor parallelism of its own; run the model with "
                     "Megatron-DeepSpeed (github.com/deepspeedai/Megatron-DeepSpeed: pretrain_gpt.py "
                     f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp}"
                     + (" --sequence-parallel" if sequence_parallel else "")
                     + " --deepspeed --deepspeed_config ds_config.json) as " + script)
    return notes


def launch_entry(plan: Plan, world: int, tp: int, pp: int, sequence_parallel: bool) -> dict:
    """ds_config.json's `planner_launch`: {"hostfile": [lines], "command": str, "notes": [str]}."""
    hosts = deepspeed_hosts(plan, world)
    return {"hostfile": [f"{h.name} slots={h.slots}" for h in hosts],
            "command": shlex.join(launcher_words(hosts, "hostfile", TRAIN_SCRIPT, "ds_config.json")),
            "notes": launch_notes(hosts, tp, pp, sequence_parallel)}


def deepspeed_launch_files(plan: Plan, config_path: str, world: int, tp: int, pp: int,
                           sequence_parallel: bool) -> dict[str, str]:
    """{"hostfile": ..., "launch.sh": ...} for `--launch-dir`; `config_path` is the exported
    ds_config.json, relative to the folder or absolute."""
    hosts = deepspeed_hosts(plan, world)
    hostfile = "\n".join([comment_line(text) for text in (
        f"planner export --to deepspeed: {plan.model.name} on {plan.cluster.name}",
        "replace each host name with that node's address; the lines are in node-rank order",
        *(f"{h.name}: node {h.node} of node group {h.group!r}, GPUs {list(h.devices)}" for h in hosts))]
        + [f"{h.name} slots={h.slots}" for h in hosts]) + "\n"
    words = launcher_words(hosts, "__HOSTFILE__", "__SCRIPT__", "__CONFIG__")
    run = shlex.join(words).replace("__HOSTFILE__", '"$HERE/hostfile"').replace(
        "__SCRIPT__", '"$TRAIN_SCRIPT"').replace("__CONFIG__", '"$CONFIG"')
    script = "\n".join([
        "#!/usr/bin/env bash",
        *(comment_line(text) for text in (f"planner export --to deepspeed: {plan.model.name} on {plan.cluster.name}",
                                          *launch_notes(hosts, tp, pp, sequence_parallel, "TRAIN_SCRIPT"))),
        *(comment_line(f"on {h.name}: {line}") for h in hosts for line in power_cap_lines(plan, h.group, h.node)
          if not line.startswith("#")),
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"CONFIG={shlex.quote(config_path)}",
        '[[ "$CONFIG" = /* ]] || CONFIG="$HERE/$CONFIG"',
        ': "${TRAIN_SCRIPT:?set TRAIN_SCRIPT to your DeepSpeed training script}"',
        f'exec {run} "$@"']) + "\n"
    return {"hostfile": hostfile, "launch.sh": script}
