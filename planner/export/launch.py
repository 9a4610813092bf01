"""Which node takes which torchrun node rank, so that each pipeline stage runs on the GPUs its plan
chose, and a launch script per node (`planner export --launch-dir`).

Megatron-LM numbers ranks in the order "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py,
initialize_model_parallel's `order`): TP innermost, then DP, then PP, so with cp = ep = 1 the rank
of TP rank i of DP replica d of pipeline rank k is k*tp*dp + d*tp + i. torchtitan's device mesh
(ParallelDims: pp, dp_replicate, dp_shard, cp, tp) and DeepSpeed's PipeModelDataParallelTopology
(axes pipe, data, model) order them the same way. torchrun gives node rank n the global ranks
after those of node ranks 0..n-1 (torch.distributed.elastic: base global rank = the local world
sizes of the lower group ranks), LOCAL_RANK j the j-th of them; CUDA_VISIBLE_DEVICES maps LOCAL_RANK j
to the GPU the plan chose.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ..core.errors import BadInput
from ..plan import Plan
from ..schedules import get_schedule
from .base import comment_line


@dataclass(frozen=True)
class NodeLaunch:
    node_rank: int
    group: str
    node: int  # the node's index in its group
    gpu: str
    devices: tuple[int, ...]  # the node's GPU for LOCAL_RANK 0, 1, ...
    gpus_per_node: int
    first_rank: int  # global rank of LOCAL_RANK 0
    pipeline_ranks: tuple[int, ...]

    @property
    def nproc(self) -> int:
        return len(self.devices)

    @property
    def visible(self) -> str | None:
        """CUDA_VISIBLE_DEVICES, or None when the node runs on all its GPUs in order."""
        return None if self.devices == tuple(range(self.gpus_per_node)) else ",".join(map(str, self.devices))


def global_ranks(plan: Plan) -> dict[int, int]:
    """Cluster rank -> runtime global rank (TP innermost, then CP, DP, PP: Megatron's tp-cp-ep-dp-pp);
    plans of one TP, CP and DP only. A replica's ranks are already TP-innermost, then CP."""
    group, dp = plan.stages[0].tp * plan.stages[0].cp, plan.stages[0].dp
    out: dict[int, int] = {}
    for s in plan.stages:
        assert s.tp * s.cp == group and s.dp == dp, "global_ranks needs one TP, CP and DP"
        for r in s.replicas:
            for i, rank in enumerate(r.ranks):
                g = s.pipeline_rank * group * dp + r.dp_rank * group + i
                if out.setdefault(rank, g) != g:
                    raise BadInput(f"GPU {rank} holds two positions of the runtime's rank grid "
                                   "(chunks of one pipeline rank on different GPUs)", "--to")
    return out


def node_launches(plan: Plan) -> list[NodeLaunch]:
    """One entry per node that the plan uses, in node-rank order; BadInput when a node's GPUs are not
    one run of consecutive global ranks (torchrun cannot give them those ranks)."""
    ranks = global_ranks(plan)
    by_node: dict[tuple[str, int], dict[int, int]] = {}
    for rank, g in ranks.items():
        dev = plan.cluster.device(rank)
        by_node.setdefault((dev.group, dev.node), {})[g] = dev.local_rank
    per_stage = plan.stages[0].tp * plan.stages[0].cp * plan.stages[0].dp
    out = []
    for (group, node), local in by_node.items():
        first = min(local)
        if sorted(local) != list(range(first, first + len(local))):
            raise BadInput(f"node {node} of group {group!r} holds global ranks {sorted(local)}, not one "
                           "consecutive run: no node rank gives them (export --to rankmap keeps any placement)",
                           "--to")
        g = plan.cluster.group(group)
        out.append(NodeLaunch(0, group, node, g.gpu.name, tuple(local[first + j] for j in range(len(local))),
                              g.gpus_per_node, first,
                              tuple(sorted({x // per_stage for x in local}))))
    out.sort(key=lambda n: n.first_rank)
    return [NodeLaunch(i, n.group, n.node, n.gpu, n.devices, n.gpus_per_node, n.first_rank, n.pipeline_ranks)
            for i, n in enumerate(out)]


def placeable(plan: Plan) -> bool:
    """One TP and one DP on every stage, and node_launches gives every GPU its plan's position."""
    if len({(s.tp, s.cp, s.dp) for s in plan.stages}) > 1:
        return False
    try:
        node_launches(plan)
    except BadInput:
        return False
    return True


def placement_comments(plan: Plan) -> list[str]:
    """`node rank 0: node 0 of group 'h100' (8 x H100...), GPUs 0-7 -> ranks 0-7, pipeline rank 0`."""
    nodes = node_launches(plan)
    return [f"node rank {n.node_rank} of {len(nodes)}: node {n.node} of group {n.group!r} ({n.gpu}), "
            f"{n.nproc} processes, GPUs {list(n.devices)} -> ranks {n.first_rank}-{n.first_rank + n.nproc - 1}, "
            f"pipeline rank {', '.join(map(str, n.pipeline_ranks))}" for n in nodes]


def power_cap_lines(plan: Plan, group: str, node: int) -> list[str]:
    """`nvidia-smi -i GPUS -pl W` for the node's GPUs whose stage the plan caps (Stage.power_cap_W), one
    line per cap, GPUs by their index in the node; caps are set outside the trainer, and need root."""
    cluster = plan.cluster
    by_cap: dict[float, list[int]] = {}
    for st in plan.stages:
        if st.power_cap_W:
            for rep in st.replicas:
                for rank in rep.ranks:
                    device = cluster.device(rank)
                    if (device.group, device.node) == (group, node):
                        by_cap.setdefault(st.power_cap_W, []).append(device.local_rank)
    if not by_cap:
        return []
    return [comment_line("the plan's power caps (planner.cost.power); nvidia-smi -pl needs root and lasts until reset")] + [
        f"nvidia-smi -i {','.join(map(str, sorted(set(gpus))))} -pl {cap:g}" for cap, gpus in sorted(by_cap.items())]


def _file_word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "_"


def device_connections(plan: Plan) -> int | None:
    """CUDA_DEVICE_MAX_CONNECTIONS of the plan's Megatron-LM job (None: any). The EP overlap of combined 1F1B
    (--overlap-moe-expert-parallel-comm) runs its all-to-all on a stream of its own: 32, as Megatron-LM's
    warning suggests (below Blackwell the plan is then priced without the TP overlap:
    Schedule.connections_over_tp_overlap). Else with TP or CP 1, which Megatron-LM's validate_args asserts
    below Blackwell and on which the priced TP overlap rests (planner.export.megatron.priced_flags)."""
    if get_schedule(plan.training.schedule).connections_over_tp_overlap:
        return 32
    return 1 if any(s.tp > 1 or s.cp > 1 for s in plan.stages) else None


def launch_scripts(plan: Plan, target: str, config_path: str) -> dict[str, str]:
    """{file name: bash script} for every node of `node_launches`; `config_path` is the exported file
    (megatron args / torchtitan TOML), relative to the scripts' folder or absolute."""
    nodes = node_launches(plan)
    master = nodes[0]
    cfg = shlex.quote(config_path)
    out = {}
    for n in nodes:
        name = f"node-rank-{n.node_rank:02d}-{_file_word(n.group)}-{n.node}.sh"
        lines = ["#!/usr/bin/env bash", *(comment_line(text) for text in (
            f"planner export --to {target}: {plan.model.name} on {plan.cluster.name}",
            f"run on node {n.node} of node group {n.group!r} ({n.gpu}): node rank {n.node_rank} of {len(nodes)}, "
            f"global ranks {n.first_rank}-{n.first_rank + n.nproc - 1} on its GPUs {list(n.devices)}, "
            f"pipeline rank {', '.join(map(str, n.pipeline_ranks))}",
            f"MASTER_ADDR: the address of node rank 0 (node {master.node} of group {master.group!r})")),
            "set -euo pipefail",
            'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            f'CONFIG={cfg}',
            '[[ "$CONFIG" = /* ]] || CONFIG="$HERE/$CONFIG"',
            ': "${MASTER_ADDR:?set MASTER_ADDR to the address of node rank 0}"']
        lines += power_cap_lines(plan, n.group, n.node)
        if n.visible is not None:
            lines.append(f"export CUDA_VISIBLE_DEVICES={n.visible}")
        if plan.training.tf32_matmul is not None:
            # fp32 GEMMs on TF32 or not, as priced (Training.tf32_matmul): PyTorch's cuBLAS override
            # (what NGC containers set), or the switch that turns TF32 off in cuBLAS and cuDNN
            lines.append("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" if plan.training.tf32_matmul
                         else "export NVIDIA_TF32_OVERRIDE=0")
        run = (f"torchrun --nnodes {len(nodes)} --node-rank {n.node_rank} --nproc-per-node {n.nproc} "
               '--master-addr "$MASTER_ADDR" --master-port "${MASTER_PORT:-29500}"')
        if target == "megatron":
            connections = device_connections(plan)
            lines += [f"export CUDA_DEVICE_MAX_CONNECTIONS={connections}  # the EP overlap's all-to-all stream"
                      if connections and connections > 1 else
                      "export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron asks for it with TP or sequence parallelism",
                      "eval \"ARGS=($(grep -v '^#' \"$CONFIG\"))\"  # the flags, one per line, shell-quoted",
                      f'exec {run} "${{MEGATRON_LM:-.}}/pretrain_gpt.py" "${{ARGS[@]}}" "$@"']
        elif target == "torchtitan":
            lines.append(f'exec {run} -m torchtitan.train --job.config_file "$CONFIG" "$@"')
        elif target == "torchtitan-cli":
            lines += ["eval \"ARGS=($(cat \"$CONFIG\"))\"  # the overrides, shell-quoted",
                      f'exec {run} -m torchtitan.train "${{ARGS[@]}}" "$@"']
        else:
            raise BadInput(f"no launch scripts for --to {target}", "--launch-dir")
        out[name] = "\n".join(lines) + "\n"
    return out
