"""Flags shared by several commands."""

from __future__ import annotations

from typing import Callable

import click

from ..inputs.model import ATTENTION_KINDS
from ..plan import FP8_RECIPE_NAMES, OPTIMIZER_NAMES


def common_options(func: Callable) -> Callable:
    """--model, --cluster, --global-batch, --seq-len, --dtype, --fp8-recipe, --compile, --tf32/--no-tf32,
    --attention, --optimizer (plan, evaluate)."""
    options = [
        click.option("--model", "model_name", help="Catalog name, HF config.json or layer-profile file."),
        click.option("--cluster", "cluster_name", help="Cluster file (YAML/JSON) or built-in example name."),
        click.option("--global-batch", type=int, help="Sequences per optimizer step."),
        click.option("--seq-len", type=int, help="Tokens per sequence."),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32", "fp8"]), default=None,
                     help="Training dtype [default: bf16 if every GPU has it, else fp16]; fp8: the decoder "
                          "GEMMs in fp8 (Ada, Hopper, Blackwell, MI300X; runtimes megatron, torchtitan)."),
        click.option("--fp8-recipe", type=click.Choice(FP8_RECIPE_NAMES), default=None,
                     help="With --dtype fp8: the scaling recipe [default: the runtime's; megatron te-delayed, "
                          "torchtitan torchao-tensorwise]; torchao-rowwise: torchao's per-row scales (torchtitan)."),
        click.option("--compile", "torch_compile", is_flag=True,
                     help="Run the model under torch.compile (torchtitan's [compile] enable): priced with "
                          "TorchInductor's fused elementwise kernels, recorded as training.compile. Runtimes "
                          "torchtitan and any only (any is priced as megatron, whose fused kernels already "
                          "price the same: no change in time); megatron, megatron-2021, deepspeed and fsdp1 "
                          "exit 2."),
        click.option("--tf32/--no-tf32", "tf32", default=None,
                     help="With --dtype fp32: run the fp32 GEMMs on TF32 tensor cores where the GPU has them "
                          "(Ampere and later), priced at the TF32 peak, MFU relative to it; recorded as "
                          "training.tf32_matmul [default: the runtime's: on for megatron, megatron-2021, "
                          "deepspeed and any (NGC containers allow TF32), off for torchtitan and fsdp1 "
                          "(PyTorch's allow_tf32 default)]."),
        click.option("--attention", type=click.Choice(ATTENTION_KINDS), default="flash", show_default=True,
                     help="flash keeps no s^2 scores; standard keeps them (2021-22 kernels)."),
        click.option("--optimizer", type=click.Choice(OPTIMIZER_NAMES), default="adamw", show_default=True,
                     help="Its states set the memory per parameter and its step time (a training choice, "
                          "not searched): adamw 12 B, adamw-8bit 6 B, adafactor 4 B, adamw-bf16 6 B, sgd (momentum) 8 B."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


RUNTIME_HELP = ("Software stack the cost model prices and `plan` plans for (only what it can run: "
                "planner.cost.runtimes.capability): megatron (Megatron-LM, megatron-core), megatron-2021, "
                "deepspeed (pipeline engine), torchtitan (FSDP2), fsdp1 (llm-foundry), or any (per-stage TP and DP, "
                "uneven shares; priced as megatron). Default megatron; a plan file is re-priced under its own.")


def measurement_options(func: Callable) -> Callable:
    """`--runtime NAME`, `--profile GPU=FILE` and `--calibration FILE`, shared by plan and evaluate."""
    func = click.option("--runtime", "runtime", type=str, default=None, metavar="NAME",
                        help=RUNTIME_HELP)(func)
    func = click.option("--calibration", "calibrations", multiple=True, metavar="FILE",
                        help="Fitted efficiencies for a GPU type (planner calibrate); repeatable.")(func)
    return click.option("--profile", "profiles", multiple=True, metavar="GPU=FILE",
                        help="Price this GPU type from a measured layer profile (planner profile); "
                             "repeatable.")(func)


def links_option(func: Callable) -> Callable:
    """`--links FILE`: a link fragment (planner profile-links) merged into the cluster (plan, evaluate)."""
    return click.option("--links", "links", default=None, metavar="FILE",
                        help="Measured links (planner profile-links) in place of the cluster file's "
                             "intra_node / inter_node / links.")(func)
