"""`planner export --to deepspeed`: a ds_config.json with the pipeline split (planner.export)."""

from __future__ import annotations

from typing import Any

from ..core.errors import BadInput
from ..core.io import json_text
from ..plan import Plan
from .base import Warn, route_entries, runtime_optimizer, uniform_form
from .ds_launch import deepspeed_hosts, deepspeed_launch_files, launch_entry, reordered_hosts
from .launch import node_launches, placeable


def export_deepspeed(plan: Plan, warn: Warn) -> str:
    # DeepSpeed's engine builds its own AdamW, else the torch.optim class of that name
    # (runtime/engine.py _configure_basic_optimizer); the training script may pass its own
    optimizer = runtime_optimizer(plan, "deepspeed", {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"})
    placed = placeable(plan)
    u = uniform_form(plan, "deepspeed", warn, placed)
    if u.cp > 1:
        # DeepSpeed-Ulysses is wired into the model code (deepspeed.sequence.layer.DistributedAttention
        # around the attention), not set by the engine's config: nothing here can carry it
        raise BadInput(f"the plan uses context parallelism (cp={u.cp}); DeepSpeed's config has no setting for "
                       "it (Ulysses is wired into the model code): export it --to megatron or --to torchtitan",
                       "--to deepspeed")
    if u.ep > 1 or u.etp:
        raise BadInput(f"the plan uses expert parallelism (ep={u.ep}), which DeepSpeed sets in the model code "
                       "(deepspeed.moe.layer.MoE(ep_size=...)), not in its config; export --to megatron or "
                       "--to rankmap", "--to deepspeed")
    zero = u.zero
    if u.pp > 1 and zero >= 2:
        warn(f"ZeRO-{zero} cannot run with DeepSpeed's pipeline engine (pp={u.pp}); exported ZeRO-1: "
             "gradients" + (" and parameters" if zero == 3 else "") + " are no longer sharded")
        zero = 1
    if u.v > 1:
        warn(f"DeepSpeed has no interleaved schedule: the {u.pp * u.v} virtual stages become {u.pp} "
             "contiguous 1F1B stages holding each pipeline rank's layer total")
    # stage boundaries over the planner's layer list, one contiguous part per pipeline rank
    per_rank = [0] * u.pp
    for s in plan.stages:
        per_rank[s.pipeline_rank] += s.layers[1] - s.layers[0]
    parts = [0]
    for count in per_rank:
        parts.append(parts[-1] + count)
    config: dict[str, Any] = {
        "train_batch_size": u.global_batch,
        "train_micro_batch_size_per_gpu": u.micro,
        "gradient_accumulation_steps": u.grad_accum,
        "zero_optimization": {"stage": zero},
    }
    if u.dtype == "fp8":
        raise BadInput("DeepSpeed's pipeline engine has no fp8 training path (no Transformer Engine or "
                       "torchao float8 linears): export --to megatron or --to torchtitan, or plan in bf16",
                       "--to deepspeed")
    if u.offload:  # ZeRO-Offload (DeepSpeed runtime/zero/offload_config.py): the optimizer on the CPU
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if zero == 0:
            # one replica: ZeRO-1 shards nothing, so it is the priced ZeRO-0 (capability.offload_min_zero
            # counts stages with dp > 1); more replicas: ZeRO-1 shards the optimizer states, unlike the plan
            if u.dp > 1:
                warn("ZeRO-Offload needs ZeRO >= 1 in DeepSpeed; exported ZeRO-1 with offload")
            config["zero_optimization"]["stage"] = 1
    if optimizer != "AdamW":
        config["optimizer"] = {"type": optimizer, "params": {"lr": 1e-4}}
        warn(f"{optimizer} exported with lr 1e-4: set the learning rate (and momentum) of your run")
    if u.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif u.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                          "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    if u.recompute != "none":
        if u.recompute == "selective":
            warn("DeepSpeed checkpoints whole layers: selective recompute exported as full activation "
                 "checkpointing (less memory, about one extra forward pass of compute)")
        elif u.recompute == "block":
            warn("DeepSpeed's pipeline checkpoints every layer or none (activation_checkpoint_interval): "
                 f"recompute block ({u.recompute_layers} of {u.decoders} blocks per stage) exported as full "
                 "activation checkpointing (less memory, more recomputation)")
        config["activation_checkpointing"] = {
            "partition_activations": u.tp > 1, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}
    # the decoder blocks per pipeline rank; equal: DeepSpeed's own "type:transformer" partitioning
    # (PipelineModule._partition_layers: partition_balanced over the layers whose class name matches,
    # Megatron-DeepSpeed GPTModelPipe's default) gives exactly `parts` (capability layer_split "equal")
    blocks = [0] * u.pp
    for s, count in zip(plan.stages, u.decoders):
        blocks[s.pipeline_rank] += count
    method = "type:transformer" if len(set(blocks)) == 1 else "custom"
    config["planner_pipeline"] = {
        "num_stages": u.pp, "parts": parts, "partition_method": method,
        "layer_list": "planner layers: 0 = embedding, 1..L = decoder blocks, last = final norm + head",
        "activation_checkpoint_interval": 1 if u.recompute != "none" else 0,
        "tensor_parallel_size": u.tp, "data_parallel_size": u.dp,
        "sequence_parallel": u.sequence_parallel, **route_entries(plan)}
    if placed:  # PipeModelDataParallelTopology orders ranks pipe, data, model: start the nodes in this order
        config["planner_pipeline"]["node_ranks"] = [
            {"node_rank": n.node_rank, "group": n.group, "node": n.node, "gpu": n.gpu, "devices": list(n.devices),
             "ranks": {"first": n.first_rank, "last": n.first_rank + n.nproc - 1},
             "pipeline_ranks": list(n.pipeline_ranks)}
            for n in node_launches(plan)]
    for host in reordered_hosts(deepspeed_hosts(plan, u.world)):
        warn(f"DeepSpeed's launcher runs a node's GPUs in ascending order: node {host.node} of group {host.group!r} "
             f"runs its ranks on GPUs {sorted(host.devices)}, not the plan's {list(host.devices)}")
    config["planner_launch"] = launch_entry(plan, u.world, u.tp, u.pp, u.sequence_parallel)
    return json_text(config) + "\n"


def deepspeed_launch_dir(plan: Plan, config_path: str) -> dict[str, str]:
    """`--launch-dir` files of a deepspeed export (planner.export.ds_launch.deepspeed_launch_files);
    the export itself has reported the losses already."""
    u = uniform_form(plan, "deepspeed", lambda message: None, placeable(plan))
    return deepspeed_launch_files(plan, config_path, u.world, u.tp, u.pp, u.sequence_parallel)
