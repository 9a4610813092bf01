"""`planner show`: a plan file -> its stages, memory and step time (planner.report.show draws them);
optionally its timeline as SVG."""

from __future__ import annotations

from pathlib import Path

import click

from ..core.errors import BadInput
from ..cost.evaluate import evaluate
from ..cost.runtimes import training_params
from ..core.outfile import check_output
from ..verify.plan_checks import load_plan_file
from ..report.show import (INSTALL_HINT, print_show, rank_timings, require_matplotlib, terminal_console,
                            write_timeline_svg)
from .output import bad_input_exit


@click.command("show")
@click.argument("plan_file", metavar="PLAN")
@click.option("--svg", "svg_file", type=str, default=None, metavar="FILE",
              help=f"Also draw one step's pipeline timeline to FILE (needs matplotlib: {INSTALL_HINT}).")
def show_command(plan_file: str, svg_file: str | None) -> None:
    """Show a plan file: stages on devices, memory, step time; optionally its timeline.

    Prices the plan with the default cost model. With --svg, draws the forward and
    backward of every micro-batch on every pipeline rank over one step (at most 64
    micro-batches; the first 64 of longer pipelines).

    \b
    Example:
      planner plan --model gpt2-xl --cluster a100-v100-mix --global-batch 64 \\
          --seq-len 1024 -o plan.json
      planner show plan.json --svg timeline.svg
    """
    try:
        plan = load_plan_file(plan_file)
        if svg_file is not None:
            require_matplotlib()
            if not Path(svg_file).resolve().parent.is_dir():
                raise BadInput("cannot write: the folder does not exist", svg_file)
            check_output(svg_file, [plan_file])
        params = training_params(plan.cluster.gpu_types, plan.training)  # as evaluate --plan prices it
        est = evaluate(plan, params)
        timings = rank_timings(plan, params)
        print_show(plan, est, timings, terminal_console())
        if svg_file is not None:
            write_timeline_svg(plan, est, timings, svg_file, inputs=(plan_file,))
            click.echo(f"timeline written to {svg_file}")
    except BadInput as exc:
        bad_input_exit(exc)


def add_commands(group: click.Group) -> None:
    """Register `show` on `group` (the CLI's main group, or a plain click.Group)."""
    group.add_command(show_command)
