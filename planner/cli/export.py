"""`planner export`: a plan file -> planner.export -> a runtime's launch configuration."""

from __future__ import annotations

import click

from ..core.errors import BadInput
from ..export import TARGETS, export_plan
from ..core.outfile import check_output, write_output
from ..verify.plan_checks import load_plan_file
from .output import bad_input_exit, warn


@click.command("export")
@click.argument("plan_file", metavar="PLAN")
@click.option("--to", "target", type=click.Choice(TARGETS), required=True, help="Runtime to export for.")
@click.option("-o", "--output", type=str, default=None, help="Write to FILE instead of stdout.")
def export_command(plan_file: str, target: str, output: str | None) -> None:
    """Write a plan as a runtime's launch configuration.

    megatron: launch flags (one per line); deepspeed: ds_config.json with a
    `planner_pipeline` key for PipelineModule; torchtitan: job-config TOML;
    torchtitan-cli: the same as command-line overrides; rankmap: JSON per rank plus
    torchrun lines (always exact). What a runtime cannot express is reduced to the
    closest uniform form and reported on stderr; exit 2 when there is none.

    \b
    Example:
      planner plan --model llama-3-8b --cluster dgx-a100 --global-batch 256 -o plan.json
      planner export plan.json --to megatron -o megatron.args
    """
    try:
        if output:
            check_output(output, [plan_file])  # `export p.json -o p.json` would lose the plan
        text = export_plan(load_plan_file(plan_file), target, lambda message: warn(f"{target}: {message}"))
        if output:
            write_output(output, text, inputs=[plan_file])
        else:
            click.echo(text, nl=False)
    except BadInput as exc:  # also when registered on a plain click.Group
        bad_input_exit(exc)


def add_commands(group: click.Group) -> None:
    """Register `export` on `group` (the CLI's main group, or a plain click.Group)."""
    group.add_command(export_command)
