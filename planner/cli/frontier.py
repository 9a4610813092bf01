"""`planner frontier`: the flags of `plan` -> planner.api.frontier -> the Pareto set of step time,
dollars and energy over the sets of whole nodes to rent (table, --json, -o FILE, --svg FILE)."""

from __future__ import annotations

import sys

import click

from ..api import PlanRequest, input_files
from ..api.flags import from_cli
from ..api.frontier import frontier, frontier_json
from ..core.errors import BadInput
from ..core.outfile import check_output, write_output
from ..report.frontier import frontier_svg, print_frontier
from .declared import request_options
from ..core.markup import esc
from .output import EXIT_INTERRUPTED, emit, err, stdout, warn
from .plan import searched


@click.command("frontier")
@request_options(PlanRequest, "training")
@request_options(PlanRequest, "objective")
@request_options(PlanRequest, "measurement")
@click.option("--json", "as_json", is_flag=True, help="Print the frontier JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the frontier JSON to FILE.")
@click.option("--svg", "svg_file", type=str, default=None, metavar="FILE",
              help="Also plot step time against dollars per step (energy where no price is known) to FILE.")
@click.option("--time-limit", "time_limit_s", type=float, default=300.0, show_default=True,
              help="Plan every set of nodes within S seconds together; those left are reported unsearched.")
def frontier_command(as_json, output, svg_file, time_limit_s, **flags) -> None:
    """The Pareto set of (step time, dollars, energy) over the sets of whole nodes of the cluster to
    rent, each planned for time, and what each node group adds.

    \b
    Examples:
      planner frontier
      planner frontier --model llama-3-70b --cluster h100-a100-v100 --global-batch 1024 \\
          --seq-len 4096 --svg frontier.svg
    """
    if flags.get("objective") not in (None, "time"):
        raise BadInput("a frontier weighs every objective; drop it", "--objective")
    request = from_cli(PlanRequest, flags, time_limit_s=time_limit_s)
    inputs = input_files(flags["model"], flags["cluster"], request.profiles, request.calibrations)
    for path in (output, svg_file):
        if path:
            check_output(path, inputs)
    result, interrupted = searched(lambda on_progress: frontier(request, on_progress, warn))
    emit(frontier_json(result), output, as_json, lambda: print_frontier(result, stdout()), "frontier", inputs)
    if svg_file:
        write_output(svg_file, frontier_svg(result), inputs=inputs)
        if not as_json:
            stdout().print(f"plot written to {esc(svg_file)}")
    if interrupted:  # Ctrl-C: the sets not planned are listed unsearched, as at the time limit
        err("interrupted: the frontier above is of the sets planned so far")
        sys.exit(EXIT_INTERRUPTED)
