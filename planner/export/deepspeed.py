"""`planner export --to deepspeed`: a ds_config.json with the pipeline split (planner.export)."""

from __future__ import annotations

from typing import Any

from ..core.errors import BadInput
from ..core.io import json_text
from ..inputs.devices import QUANTIZED_FORMATS
from ..plan import Plan
from .base import Uniform, Warn, route_entries, runtime_optimizer, uniform_form
from .ds_launch import deepspeed_hosts, deepspeed_launch_files, launch_entry, reordered_hosts
from .launch import node_launches, placeable


def export_deepspeed(plan: Plan, warn: Warn) -> str:
    # DeepSpeed's engine builds its own AdamW, else the torch.optim class of that name
    # (runtime/engine.py _configure_basic_optimizer); the training script may pass its own
    optimizer = runtime_optimizer(plan, "deepspeed", {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"})
    placed = placeable(plan)
    form = uniform_form(plan, "deepspeed", warn, placed)
    _refuse_model_code_parallelism(form)
    zero = _pipeline_zero(form, warn)
    config: dict[str, Any] = {
        "train_batch_size": form.global_batch,
        "train_micro_batch_size_per_gpu": form.micro,
        "gradient_accumulation_steps": form.grad_accum,
        "zero_optimization": {"stage": zero},
    }
    _add_training_entries(config, form, zero, optimizer, warn)
    config["planner_pipeline"] = _pipeline_entry(plan, form, placed)
    for host in reordered_hosts(deepspeed_hosts(plan, form.world)):
        warn(f"DeepSpeed's launcher runs a node's GPUs in ascending order: node {host.node} of group {host.group!r} "
             f"runs its ranks on GPUs {sorted(host.devices)}, not the plan's {list(host.devices)}")
    config["planner_launch"] = launch_entry(plan, form.world, form.tp, form.pp, form.sequence_parallel)
    return json_text(config) + "\n"


def _refuse_model_code_parallelism(form: Uniform) -> None:
    """Context and expert parallelism, which DeepSpeed sets in the model code, not in its config."""
    if form.cp > 1:
        # DeepSpeed-Ulysses is wired into the model code (deepspeed.sequence.layer.DistributedAttention
        # around the attention), not set by the engine's config: nothing here can carry it
        raise BadInput(f"the plan uses context parallelism (cp={form.cp}); DeepSpeed's config has no setting for "
                       "it (Ulysses is wired into the model code): export it --to megatron or --to torchtitan",
                       "--to deepspeed")
    if form.ep > 1 or form.etp:
        raise BadInput(f"the plan uses expert parallelism (ep={form.ep}), which DeepSpeed sets in the model code "
                       "(deepspeed.moe.layer.MoE(ep_size=...)), not in its config; export --to megatron or "
                       "--to rankmap", "--to deepspeed")


def _pipeline_zero(form: Uniform, warn: Warn) -> int:
    """The ZeRO stage DeepSpeed's pipeline engine runs for the plan's (at most 1 with pp > 1)."""
    zero = form.zero
    if form.pp > 1 and zero >= 2:
        warn(f"ZeRO-{zero} cannot run with DeepSpeed's pipeline engine (pp={form.pp}); exported ZeRO-1: "
             "gradients" + (" and parameters" if zero == 3 else "") + " are no longer sharded")
        zero = 1
    if form.v > 1:
        warn(f"DeepSpeed has no interleaved schedule: the {form.pp * form.v} virtual stages become {form.pp} "
             "contiguous 1F1B stages holding each pipeline rank's layer total")
    return zero


def _add_training_entries(config: dict[str, Any], form: Uniform, zero: int, optimizer: str, warn: Warn) -> None:
    """Precision, ZeRO-Offload, optimizer and activation checkpointing entries of the config."""
    if form.dtype in QUANTIZED_FORMATS:
        raise BadInput(f"DeepSpeed's pipeline engine has no {form.dtype} training path (no Transformer Engine or "
                       "torchao float8 linears): export --to megatron" + (" or --to torchtitan" if form.dtype == "fp8"
                                                                          else "") + ", or plan in bf16",
                       "--to deepspeed")
    if form.offload:  # ZeRO-Offload (DeepSpeed runtime/zero/offload_config.py): the optimizer on the CPU
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if zero == 0:
            # one replica: ZeRO-1 shards nothing, so it is the priced ZeRO-0 (capability.offload_min_zero
            # counts stages with dp > 1); more replicas: ZeRO-1 shards the optimizer states, unlike the plan
            if form.dp > 1:
                warn("ZeRO-Offload needs ZeRO >= 1 in DeepSpeed; exported ZeRO-1 with offload")
            config["zero_optimization"]["stage"] = 1
    if optimizer != "AdamW":
        config["optimizer"] = {"type": optimizer, "params": {"lr": 1e-4}}
        warn(f"{optimizer} exported with lr 1e-4: set the learning rate (and momentum) of your run")
    if form.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif form.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                          "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    if form.recompute != "none":
        if form.recompute == "selective":
            warn("DeepSpeed checkpoints whole layers: selective recompute exported as full activation "
                 "checkpointing (less memory, about one extra forward pass of compute)")
        elif form.recompute == "block":
            warn("DeepSpeed's pipeline checkpoints every layer or none (activation_checkpoint_interval): "
                 f"recompute block ({form.recompute_layers} of {form.decoders} blocks per stage) exported as full "
                 "activation checkpointing (less memory, more recomputation)")
        config["activation_checkpointing"] = {
            "partition_activations": form.tp > 1, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}


def _pipeline_entry(plan: Plan, form: Uniform, placed: bool) -> dict[str, Any]:
    """The config's "planner_pipeline" entry: the layer split per pipeline rank and the node order."""
    # stage boundaries over the planner's layer list, one contiguous part per pipeline rank
    per_rank = [0] * form.pp
    for s in plan.stages:
        per_rank[s.pipeline_rank] += s.layers[1] - s.layers[0]
    parts = [0]
    for count in per_rank:
        parts.append(parts[-1] + count)
    # the decoder blocks per pipeline rank; equal: DeepSpeed's own "type:transformer" partitioning
    # (PipelineModule._partition_layers: partition_balanced over the layers whose class name matches,
    # Megatron-DeepSpeed GPTModelPipe's default) gives exactly `parts` (capability layer_split "equal")
    blocks = [0] * form.pp
    for s, count in zip(plan.stages, form.decoders):
        blocks[s.pipeline_rank] += count
    method = "type:transformer" if len(set(blocks)) == 1 else "custom"
    entry = {
        "num_stages": form.pp, "parts": parts, "partition_method": method,
        "layer_list": "planner layers: 0 = embedding, 1..L = decoder blocks, last = final norm + head",
        "activation_checkpoint_interval": 1 if form.recompute != "none" else 0,
        "tensor_parallel_size": form.tp, "data_parallel_size": form.dp,
        "sequence_parallel": form.sequence_parallel, **route_entries(plan)}
    if placed:  # PipeModelDataParallelTopology orders ranks pipe, data, model: start the nodes in this order
        entry["node_ranks"] = [
            {"node_rank": n.node_rank, "group": n.group, "node": n.node, "gpu": n.gpu, "devices": list(n.devices),
             "ranks": {"first": n.first_rank, "last": n.first_rank + n.nproc - 1},
             "pipeline_ranks": list(n.pipeline_ranks)}
            for n in node_launches(plan)]
    return entry


def deepspeed_launch_dir(plan: Plan, config_path: str) -> dict[str, str]:
    """`--launch-dir` files of a deepspeed export (planner.export.ds_launch.deepspeed_launch_files);
    the export itself has reported the losses already."""
    form = uniform_form(plan, "deepspeed", lambda message: None, placeable(plan))
    return deepspeed_launch_files(plan, config_path, form.world, form.tp, form.pp, form.sequence_parallel)
