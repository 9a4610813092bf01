"""`planner replan PLAN --lose ... --gain ...`: the plan after nodes are lost or gained
(planner.api.replan): the kept placement, a template or a new search, scored by step and move."""

from __future__ import annotations

import os

import click
from rich import box
from rich.table import Table

from ..api import PlanRequest, plan_json, require
from ..api.replan import parse_change, replan, templates_path
from ..core.errors import BadInput
from ..core.io import load_mapping
from ..core.markup import esc
from ..cost.move import LINKS
from ..core.outfile import check_output
from ..report.views import print_plan
from ..search.orchestration.driver import SearchResult
from ..verify.plan_checks import load_plan_file
from .output import emit, stdout, warn
from .plan import searched


@click.command("replan")
@click.argument("plan_file", metavar="PLAN")
@click.option("--lose", multiple=True, metavar="GROUP:COUNT|GROUP/NODE[,NODE]",
              help="Nodes lost: the last COUNT of a group, or those nodes of it (repeatable).")
@click.option("--gain", multiple=True, metavar="GROUP:COUNT[:GPU]",
              help="Nodes gained: COUNT more of a group, or a new group of that GPU (8 per node; repeatable).")
@click.option("--templates", "templates_file", default=None, metavar="FILE",
              help="Plans prepared by `plan --spares K` [default: PLAN's .templates.json where it exists].")
@click.option("--horizon-steps", type=float, default=None, metavar="N",
              help="Steps the new plan runs before it changes again [default: until the changed cluster's next "
                   "expected interruption].")
@click.option("--max-move-gb", type=float, default=None, metavar="X",
              help="Leave out a plan that moves more than X GB of weights and optimizer states.")
@click.option("--time-limit", "time_limit_s", type=float, default=300.0, show_default=True,
              help="The new search's time limit.")
@click.option("--json", "as_json", is_flag=True, help="Print the new plan JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the new plan JSON to FILE.")
def replan_command(plan_file, lose, gain, templates_file, horizon_steps, max_move_gb, time_limit_s, as_json,
                   output) -> None:
    """Plan again after nodes are lost or gained: keep the old placement where it pays, use a
    prepared template, or search again; report what moves and the new step.

    \b
    Examples:
      planner plan --spares 1 -o plan.json
      planner replan plan.json --lose v100:1
      planner replan plan.json --lose a100/0 --gain h100:2:H100-SXM5-80GB -o new.json
    """
    old = load_plan_file(plan_file)
    if output:
        check_output(output, [plan_file])
    for value, flag in ((horizon_steps, "--horizon-steps"), (max_move_gb, "--max-move-gb")):
        if value is not None and not 0 < value < 1e15:
            raise BadInput(f"must be a positive number, got {value:g}", flag)
    require(time_limit_s, "--time-limit")
    path = templates_file or (templates_path(plan_file) if os.path.exists(templates_path(plan_file)) else None)
    templates = load_mapping(path, "templates file") if path else None
    change = parse_change(old.cluster, tuple(lose), tuple(gain))
    base = PlanRequest(time_limit_s=time_limit_s)
    result, _ = searched(lambda on_progress: replan(old, change, base, templates, horizon_steps, max_move_gb,
                                                    path or "--templates"))
    chosen = result.chosen
    found = chosen.result if chosen.result is not None else SearchResult(
        chosen.plan, chosen.estimate, False, 0.0, 0.0, 0, result.seconds, 1, method="replan",
        not_proven=f"the {chosen.name} plan: not searched")
    data = plan_json(found)
    data["solver"]["replan"] = result.to_json()

    def show() -> None:
        print_plan(found)
        stdout().print(_candidates_table(result))
        if result.dropped:
            stdout().print("left out: " + esc("; ".join(result.dropped)))
    emit(data, output, as_json, show, "plan", [plan_file])
    if not as_json and path is None and chosen.name == "scratch":
        warn("no templates: `plan --spares K -o PLAN` prepares them, and replan then needs no search")


def _candidates_table(result) -> Table:
    table = Table(title=f"Replanned on {esc(result.cluster.name)} (old step {result.old_step_s:.3f} s; horizon "
                        f"{result.horizon_steps:,.0f} steps)", box=box.SIMPLE_HEAD, pad_edge=False)
    # GB moved, then by link (planner.cost.move.LINKS): in the node, over the network, from the checkpoint
    for name, justify in (("plan", "left"), ("step s", "right"), ("GB", "right"), ("node", "right"),
                          ("net", "right"), ("ckpt", "right"), ("move s", "right"), ("score s", "right"),
                          ("", "left")):
        table.add_column(name, justify=justify)
    for c in result.candidates:
        links = [f"{c.move.bytes_by_link.get(link, 0.0) / 1e9:,.1f}" for link in LINKS]
        table.add_row(c.name, f"{c.estimate.step_time_s:.3f}", f"{c.move.total_bytes / 1e9:,.1f}", *links,
                      f"{c.move.seconds:,.1f}", f"{c.score_s(result.horizon_steps):,.0f}",
                      "chosen" if c is result.chosen else "")
    return table
