"""`planner export`: a plan file -> planner.export -> a runtime's launch configuration."""

from __future__ import annotations

import os

import click

from ..core.errors import BadInput
from ..export import (LAUNCH_TARGETS, TARGET_RUNTIMES, TARGETS, describe_form, export_plan, launch_scripts,
                      runtime_problems)
from ..core.outfile import check_output, write_output
from ..verify.plan_checks import load_plan_file
from .output import bad_input_exit, err, warn


def _step_s(evaluation, runtime: str) -> str:
    """`143.8 s per step under megatron`, with `(does NOT fit in memory)` when it does not."""
    return (f"{evaluation.estimate.step_time_s:.1f} s per step under {runtime}"
            + ("" if evaluation.fits else " (does NOT fit in memory)"))


@click.command("export")
@click.argument("plan_file", metavar="PLAN")
@click.option("--to", "target", type=click.Choice(TARGETS), required=True, help="Runtime to export for.")
@click.option("-o", "--output", type=str, default=None, help="Write to FILE instead of stdout.")
@click.option("--lossy", is_flag=True,
              help="Export a plan the target cannot run exactly as the nearest plan it can, re-priced.")
@click.option("--launch-dir", type=str, default=None, metavar="DIR",
              help="Also write a torchrun script per node into DIR (megatron, torchtitan), or DeepSpeed's "
                   "hostfile and launch.sh (deepspeed); needs -o.")
def export_command(plan_file: str, target: str, output: str | None, lossy: bool, launch_dir: str | None) -> None:
    """Write a plan as a runtime's launch configuration.

    megatron: launch flags (one per line); deepspeed: ds_config.json with a
    `planner_pipeline` key for PipelineModule; torchtitan: job-config TOML;
    torchtitan-cli: the same as command-line overrides; rankmap: JSON per rank plus
    torchrun lines (always exact). A plan made for another runtime (training.runtime), or
    one the target cannot express (per-stage TP or DP, uneven batch shares, ...), is refused
    (exit 2) unless --lossy, which writes the nearest plan the target runs and prints its
    step time, re-priced under the target's runtime, next to the plan's.

    \b
    Example:
      planner plan --model llama-3-8b --cluster dgx-a100 --global-batch 256 -o plan.json
      planner export plan.json --to megatron -o megatron.args --launch-dir launch/
    """
    try:
        if output:
            check_output(output, [plan_file])  # `export p.json -o p.json` would lose the plan
        if launch_dir is not None:
            if target not in LAUNCH_TARGETS:
                raise BadInput(f"launch scripts are written for {', '.join(LAUNCH_TARGETS)}", "--launch-dir")
            if not output:
                raise BadInput("the scripts read the exported file: give it with -o FILE", "--launch-dir")
        plan = load_plan_file(plan_file)
        problems = runtime_problems(plan, target)
        if problems and not lossy:
            runtime = TARGET_RUNTIMES[target][0]
            # a plan of the target's own runtime that it cannot run (made by hand, or by an older
            # planner): planning again with --runtime would not help, so only the reasons are said
            again = "" if plan.training.runtime in TARGET_RUNTIMES[target] else f"Plan with --runtime {runtime}, or e"
            raise BadInput(f"{target} cannot run this plan exactly: {'; '.join(problems)}. "
                           f"{again or 'E'}xport with --lossy for the nearest plan it runs (re-priced)", "--to")
        if problems:
            from ..api import lossy_form

            planned, runtime, exported, note = lossy_form(plan, target)
            if note:  # the dtype changed: said, never silently
                err(f"lossy: {note}")
            err(f"lossy: {target} runs {describe_form(exported.plan)}: "
                f"{_step_s(exported, exported.plan.training.runtime)}; the plan: {_step_s(planned, runtime)}")
            plan = exported.plan
        text = export_plan(plan, target, lambda message: warn(f"{target}: {message}"))
        scripts = {}
        if launch_dir is not None:
            assert output is not None
            config = os.path.relpath(os.path.abspath(output), os.path.abspath(launch_dir))
            scripts = launch_scripts(plan, target, config)
        if output:
            write_output(output, text, inputs=[plan_file])
        else:
            click.echo(text, nl=False)
        if launch_dir is not None:
            os.makedirs(launch_dir, exist_ok=True)
            for name, script in scripts.items():
                path = os.path.join(launch_dir, name)
                write_output(path, script, inputs=[plan_file])
                if name.endswith(".sh"):
                    os.chmod(path, 0o755)
            err(f"wrote {len(scripts)} launch scripts to {launch_dir}: " + ", ".join(scripts))
    except BadInput as exc:  # also when registered on a plain click.Group
        bad_input_exit(exc)


def add_commands(group: click.Group) -> None:
    """Register `export` on `group` (the CLI's main group, or a plain click.Group)."""
    group.add_command(export_command)
