"""`planner plan`: flags -> planner.api.plan_top -> the plan (human view, --json, -o FILE); with
--top K the K fastest configurations too; Ctrl-C keeps the best plan found so far (exit 130)."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator

import click
from rich import box
from rich.table import Table

from ..api import PlanRequest, input_files, plan_json, plan_top, require
from ..api.objective import needs_subsets, plan_objective
from ..api.flags import from_cli
from ..api.ranked import Ranking, configuration_text, loses_by, peak_gib
from ..core.clock import clear_stop, request_stop, stop_requested
from ..core.errors import BadInput, NoFeasiblePlan
from ..core.io import json_text
from ..core.markup import esc
from ..core.outfile import write_output
from ..inputs.links import cluster_with_links
from ..core.outfile import check_output
from ..report.costs import objective_lines
from ..report.views import print_plan
from ..cost.runtimes import get_runtime
from .declared import request_options
from .options import links_option
from .output import EXIT_INTERRUPTED, emit, err, search_progress, stdout, warn


@click.command("plan")
@request_options(PlanRequest, "training")
@request_options(PlanRequest, "search")
@request_options(PlanRequest, "objective")
@request_options(PlanRequest, "measurement")
@links_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the plan JSON to FILE.")
def plan_command(links, as_json, output, **flags) -> None:
    """Find the fastest plan for a model on a (mixed) cluster, and prove it.

    Without options it plans llama-3-8b on the built-in A100 + V100 example cluster.

    \b
    Examples:
      planner plan
      planner plan --model llama-3-70b --cluster h100-a100-v100 --global-batch 1024 \\
          --seq-len 4096 -o plan.json
      planner plan --virtual-stages 1          # 1F1B only, no interleaving
      planner plan --compare-any               # and what --runtime any would gain
      planner plan --runtime torchtitan --compile   # torchtitan with torch.compile
    """
    request = from_cli(PlanRequest, flags)
    get_runtime(request.runtime)  # an unknown name is a bad input before anything is read
    inputs = input_files(flags["model"], flags["cluster"], request.profiles, request.calibrations, links)
    if output:
        check_output(output, inputs)  # before the search, which can take minutes
    if links:
        request = replace(request, cluster=cluster_with_links(request.cluster, links))
    if request.spares and not output:
        raise BadInput("writes its templates beside the plan file: give -o PLAN", "--spares")
    if needs_subsets(request):
        _plan_objective(request, as_json, output, inputs)
        return
    if request.tokens is not None:
        require(request.tokens, "--tokens")
    top = request.top
    ranking, interrupted = searched(lambda on_progress: plan_top(request, on_progress, warn))
    first = ranking.results[0]
    data = [plan_json(r, request.tokens) for r in ranking.results] if top > 1 else plan_json(first, request.tokens)
    if output and top > 1:  # the file is a plan file: the fastest plan's
        write_output(output, json_text(plan_json(first)) + "\n", inputs=inputs)
    emit(data, None if top > 1 else output, as_json, lambda: _show(ranking, top, request.tokens), "plan", inputs)
    if output and top > 1 and not as_json:
        stdout().print(f"plan written to {esc(output)}")
    if interrupted:  # Ctrl-C: the best plan found so far was printed and written, as at the time limit
        err("interrupted: the plan above is the best found so far")
        sys.exit(EXIT_INTERRUPTED)
    if request.spares:
        _write_templates(first.plan, request, output, inputs, as_json)


def _write_templates(plan, request, output: str, inputs, as_json: bool) -> None:
    """`--spares K`: the templates file beside the plan file (planner.api.replan.make_templates)."""
    from ..api.replan import make_templates, templates_path

    path = templates_path(output)
    check_output(path, inputs)
    data, _ = searched(lambda on_progress: make_templates(plan, request, request.spares, request.time_limit_s))
    write_output(path, json_text(data) + "\n", inputs=inputs)
    if not as_json:
        ready = sum("plan" in entry for entry in data["templates"])
        stdout().print(f"{ready} of {len(data['templates'])} templates written to {esc(path)}")


def searched(run: Callable) -> tuple[Any, bool]:
    """`run(on_progress)` with a progress line on a terminal and Ctrl-C stopping it as its time limit
    would: (its result, whether Ctrl-C stopped it); stopped before any result, exit 130."""
    with search_progress(sys.stderr.isatty()) as on_progress, stop_on_sigint():
        try:
            found = run(on_progress)
        except NoFeasiblePlan:
            if stop_requested():
                err("interrupted before a plan was found")
                sys.exit(EXIT_INTERRUPTED)
            raise
        return found, stop_requested()


@contextmanager
def stop_on_sigint() -> Iterator[None]:
    """Ctrl-C stops the search as its time limit would (planner.core.clock.request_stop): the best
    plan so far is kept; a second Ctrl-C interrupts at once (KeyboardInterrupt)."""
    def on_sigint(signum, frame) -> None:
        if stop_requested():
            raise KeyboardInterrupt
        request_stop()

    clear_stop()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        yield
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
        clear_stop()  # the request ends with this command (tests run many in one process)


def _plan_objective(request, as_json: bool, output: str | None, inputs) -> None:
    """`--objective cost|energy` or a --max-* constraint: the subsets of nodes planned, the chosen
    plan printed and written as `plan` does, with solver.objective."""
    chosen, interrupted = searched(lambda on_progress: plan_objective(request, on_progress, warn))
    data = plan_json(chosen.result, request.tokens)
    data["solver"]["objective"] = chosen.to_json()

    def show() -> None:
        print_plan(chosen.result, tokens=request.tokens)
        for line in objective_lines(chosen):
            stdout().print(line)
    emit(data, output, as_json, show, "plan", inputs)
    if interrupted:
        err("interrupted: the plan above is the best found so far")
        sys.exit(EXIT_INTERRUPTED)


def _show(ranking: Ranking, top: int, tokens: int | None = None) -> None:
    """The first plan's view, then with --top K the table of the K plans."""
    first = ranking.results[0]
    print_plan(first, tokens=tokens)
    if top <= 1:
        return
    table = Table(title=f"The {len(ranking.results)} fastest configurations", box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in (("rank", "right"), ("configuration", "left"), ("step s", "right"),
                          ("peak GiB", "right"), ("why it loses to #1", "left")):
        table.add_column(name, justify=justify)
    for rank, result in enumerate(ranking.results, 1):
        table.add_row(str(rank), configuration_text(result.plan), f"{result.estimate.step_time_s:.4f}",
                      f"{peak_gib(result):.1f}", "" if rank == 1 else loses_by(first, result))
    stdout().print(table)
    proof = ("proven: each is the next fastest configuration" if ranking.proven
             else "not proven (a search was cut short, or a per-stage mix of degrees)")
    stdout().print(f"ranking {proof}" + (f"; {ranking.note}" if ranking.note else ""))
