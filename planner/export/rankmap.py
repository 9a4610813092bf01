"""`planner export --to rankmap`: every used rank's stage, groups, share and placement, and a
torchrun line per run of alike nodes (planner.export)."""

from __future__ import annotations

from typing import Any

from ..core.io import json_text
from ..plan import Plan
from .base import Warn, route_entries


def export_rankmap(plan: Plan, warn: Warn) -> str:
    t = plan.training
    entries: dict[int, dict[str, Any]] = {}
    for s in plan.stages:
        # the stage's GPUs replica by replica (the expert grid's positions, StageDims.ep_group)
        flat = [rank for rep in sorted(s.replicas, key=lambda rep: rep.dp_rank) for rank in rep.ranks]
        position = {rank: q for q, rank in enumerate(flat)}
        for r in s.replicas:
            for i, rank in enumerate(r.ranks):
                e = entries.get(rank)
                if e is None:
                    dev = plan.cluster.device(rank)
                    # a replica is cp groups of tp ranks, TP innermost (plan.Replica), at its own degree
                    tp = s.replica_tp(r)
                    tp_rank, cp_rank = i % tp, i // tp
                    e = entries[rank] = {
                        "rank": rank, "stage": s.index, "stages": [], "pipeline_rank": s.pipeline_rank,
                        "layers": [], "tp": tp, "tp_rank": tp_rank, "tp_group": list(r.ranks[cp_rank * tp:(cp_rank + 1) * tp]),
                        **({"cp_rank": cp_rank, "cp_group": list(r.ranks[tp_rank::tp])} if s.cp > 1 else {}),
                        # uneven TP shards: the query heads and FFN columns this rank holds
                        **({"tp_shard": {"heads": s.tp_heads[tp_rank], "ffn": s.tp_ffn[tp_rank]}}
                           if s.uneven_tp else {}),
                        "dp_rank": r.dp_rank,
                        "dp_group": dp_group(s, i, tp),
                        # MoE expert parallelism: the ranks its all-to-all spans and those holding
                        # the same experts (Megatron-core's expert-model- and expert-data-parallel groups)
                        **({"ep_group": [flat[q] for q in s.dims.ep_group(position[rank])],
                            "edp_group": [flat[q] for q in s.dims.edp_group(position[rank])]}
                           if s.ep > 1 or s.etp else {}),
                        "batch_share": r.batch_share, "micro_batches": r.batch_share // t.micro_batch,
                        "gpu": dev.gpu, "group": dev.group, "node": dev.node, "local_rank": dev.local_rank}
                e["stages"].append(s.index)
                e["layers"].append(list(s.layers))
    ranks = [entries[r] for r in sorted(entries)]
    # torchrun: nodes in cluster order, only those with used GPUs; world rank = order of use
    by_node: dict[tuple[str, int], list[int]] = {}
    for e in ranks:
        by_node.setdefault((e["group"], e["node"]), []).append(e["local_rank"])
    nodes = list(by_node.items())
    for world_rank, e in enumerate(ranks):
        e["world_rank"] = world_rank
    launch = []
    i = 0
    while i < len(nodes):
        (group, _), locals_ = nodes[i]
        j = i
        while j + 1 < len(nodes) and nodes[j + 1][0][0] == group and nodes[j + 1][1] == locals_:
            j += 1
        gpus_per_node = plan.cluster.group(group).gpus_per_node
        visible = "" if locals_ == list(range(gpus_per_node)) else \
            f"CUDA_VISIBLE_DEVICES={','.join(map(str, locals_))} "
        launch.append({
            "group": group, "nodes": [n for (_, n), _ in nodes[i:j + 1]],
            "nnodes": len(nodes), "nproc_per_node": len(locals_), "node_rank_range": {"first": i, "last": j},
            "torchrun": f"{visible}torchrun --nnodes={len(nodes)} --nproc_per_node={len(locals_)} "
                        f"--node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 "
                        f"-m planner.cli run plan.json  # NODE_RANK in {i}..{j}"})
        i = j + 1
    out = {"format": "planner.rankmap/v1", "model": plan.model.name, "cluster": plan.cluster.name,
           "world_size": len(ranks), "global_batch": t.global_batch, "micro_batch": t.micro_batch,
           "seq_len": t.seq_len, "dtype": t.dtype, "schedule": t.schedule,
           "virtual_stages": t.virtual_stages, "pp": plan.pp,
           "note": "rank = the plan's cluster rank; world_rank = torchrun's rank when launched as below",
           "ranks": ranks, "launch": launch, **route_entries(plan)}
    return json_text(out) + "\n"


def dp_group(stage, position: int, tp: int) -> list[int]:
    """The ranks a gradient of rank `position` of a replica at `tp` is reduced with: per replica, the rank
    holding the start of its shard (TP rank floor(position x u / tp) of a replica at degree u; the rank
    at the same position where every replica has the stage's degree; cp is 1 under per-replica TP)."""
    return [rep.ranks[(position % tp) * stage.replica_tp(rep) // tp + position // tp * stage.replica_tp(rep)]
            for rep in stage.replicas]
