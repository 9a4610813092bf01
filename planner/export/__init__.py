"""`planner export PLAN --to TARGET`: turn a plan file into a training runtime's launch config
(megatron, deepspeed, torchtitan, torchtitan-cli, rankmap). A plan of the target's runtime exports
exactly; the exporters reduce any other plan to the closest uniform form the target runs and warn
of each loss on stderr. Each target's output, the reductions and the refusals:
docs/runtimes-and-exports.md, "Export targets and formats"."""

from __future__ import annotations

from ..core.errors import BadInput
from ..plan import Plan
from .base import RECOMPUTE_ORDER, Uniform, Warn, comment_line, decoder_counts, uniform_form
from .deepspeed import export_deepspeed
from .deepspeed import deepspeed_launch_dir
from .launch import NodeLaunch, node_launches, placeable
from .launch import launch_scripts as _torchrun_scripts
from .megatron import export_megatron, megatron_layout, vocab_divisor
from .rankmap import export_rankmap
from .runnable import capability_problems, describe_form, runnable_form, runnable_forms, runtime_problems
from .targets import EXPORT_TARGETS, LAUNCH_TARGETS, TARGET_RUNTIMES, TARGETS, ExportTarget
from .torchtitan import export_torchtitan, export_torchtitan_cli, titan_cli_args, titan_fqns, titan_settings

__all__ = ["EXPORT_TARGETS", "ExportTarget", "LAUNCH_TARGETS", "NodeLaunch", "RECOMPUTE_ORDER", "TARGETS",
           "TARGET_RUNTIMES", "Uniform", "Warn",
           "capability_problems", "comment_line", "decoder_counts", "describe_form",
           "export_deepspeed", "export_megatron", "export_plan", "export_rankmap", "export_torchtitan",
           "export_torchtitan_cli", "launch_scripts", "megatron_layout", "node_launches", "placeable",
           "runnable_form", "runnable_forms", "runtime_problems",
           "titan_cli_args", "titan_fqns", "titan_settings", "uniform_form", "vocab_divisor"]


def launch_scripts(plan: Plan, target: str, config_path: str) -> dict[str, str]:
    """`--launch-dir` files: {file name: text}; a torchrun script per node (planner.export.launch),
    or DeepSpeed's hostfile and launcher script (planner.export.ds_launch)."""
    if target == "deepspeed":
        return deepspeed_launch_dir(plan, config_path)
    return _torchrun_scripts(plan, target, config_path)


def export_plan(plan: Plan, target: str, warn: Warn) -> str:
    """`plan` as `target`'s text (EXPORT_TARGETS; the exporter's warnings to `warn`)."""
    if target not in EXPORT_TARGETS:
        raise BadInput(f"unknown target {target!r} (one of {', '.join(TARGETS)})", "--to")
    return EXPORT_TARGETS[target].export(plan, warn)
