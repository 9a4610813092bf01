"""`planner plan`: flags -> planner.api.plan_top -> the plan (human view, --json, -o FILE); with
--top K the K fastest configurations too; Ctrl-C keeps the best plan found so far (exit 130)."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import click
from rich import box
from rich.table import Table

from ..api import DEFAULT_PLAN, PlanRequest, input_files, plan_json, plan_top
from ..api.ranked import Ranking, configuration_text, loses_by, peak_gib
from ..core.clock import clear_stop, request_stop, stop_requested
from ..core.errors import NoFeasiblePlan
from ..core.io import json_text
from ..core.markup import esc
from ..core.outfile import write_output
from ..core.clock import DEFAULT_TIME_LIMIT_S
from ..inputs.links import cluster_with_links
from ..core.outfile import check_output
from ..report.views import print_plan
from ..cost.runtimes import get_runtime
from .options import common_options, links_option, measurement_options
from .output import EXIT_INTERRUPTED, emit, err, search_progress, stdout, warn


@click.command("plan")
@common_options
@click.option("--micro-batch", "micro_batches", type=int, multiple=True,
              help="Micro-batch sizes to search (repeatable) [default: 1 2 4 8].")
@click.option("--virtual-stages", "virtual_stages", type=int, multiple=True,
              help="Pipeline chunks per rank to search (repeatable): 1 is 1F1B, V > 1 the interleaved "
                   "schedule with V chunks per rank [default: 1 2].")
@click.option("--zero-bubble/--no-zero-bubble", "zero_bubble", default=True, show_default=True,
              help="Search ZB-H1 (split backward, 1F1B's memory plus the deferred weight-gradient inputs) where "
                   "the runtime runs it (--runtime any), and price uniform ZB-V plans (V = 2) where it runs "
                   "that (torchtitan, any). Uniform looped-BFS plans are priced either way.")
@click.option("--cp", "cp_degrees", type=int, multiple=True,
              help="Context-parallel degrees to search (repeatable; 1 is always searched) [default: 1 2 4 8 for "
                   "sequences of 16,384 tokens or more; --cp 1: no context parallelism].")
@click.option("--ep", "ep_degrees", type=int, multiple=True,
              help="Expert-parallel degrees an MoE model's stages may take, only these, across nodes too "
                   "(repeatable; --ep 1: none) [default: 1 and the largest inside a node].")
@click.option("--tp", "tp_degrees", type=int, multiple=True,
              help="Tensor-parallel degrees every stage may take (repeatable) [default: 1 2 4 8].")
@click.option("--pp", "pp_degrees", type=int, multiple=True,
              help="Pipeline depths the plan may have (repeatable) [default: any up to --max-pp].")
@click.option("--dp", "dp_degrees", type=int, multiple=True,
              help="Data-parallel degrees every stage may take (repeatable) [default: any].")
@click.option("--max-pp", "max_pp", type=int, default=None,
              help="The most pipeline stages [default: 16, or the largest --pp].")
@click.option("--top", "top", type=click.IntRange(min=1), default=1, show_default=True, metavar="K",
              help="List the K fastest plans of distinct configurations (tp, pp, dp, cp, ep, micro-batch, "
                   "virtual stages) and why each loses to the first; --json prints a list, -o writes the first.")
@click.option("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, show_default=True,
              help="Return within S seconds with the best plan found so far and its gap (exit 1 if none).")
@click.option("--max-bundle-nodes", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Clusters of more than 8 nodes are searched on this many parts of nodes, any node counts "
                   "(identical bundles where they divide; not proven optimal).")
@click.option("--solver", type=click.Choice(["highs", "cbc"]), default="highs", show_default=True,
              help="MILP solver for the batch shares.")
@click.option("--jobs", "-j", type=click.IntRange(min=1, max=2), default=2, show_default=True, metavar="N",
              help="Search processes: 2 runs two searches at a time, 1 runs them in turn. The plan is the same "
                   "either way; solver.candidates counts the work done, which two processes partly repeat.")
@click.option("--compare-any", "compare_any", is_flag=True,
              help="Search once more under --runtime any, bounded by the plan found, and report what a runtime "
                   "with uneven shares and per-stage TP would gain (solver.any_runtime_step_s); it can take "
                   "longer than the plan's own search.")
@measurement_options
@links_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Write the plan JSON to FILE.")
def plan_command(model_name, cluster_name, global_batch, seq_len, dtype, fp8_recipe, torch_compile, tf32, attention,
                 optimizer,
                 micro_batches, virtual_stages,
                 zero_bubble, cp_degrees, ep_degrees, tp_degrees, pp_degrees, dp_degrees, max_pp, top, time_limit, max_bundle_nodes, solver, jobs, compare_any, runtime, profiles, calibrations, links, as_json, output) -> None:
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
    runtime = runtime or "megatron"
    get_runtime(runtime)  # an unknown name is a bad input before anything is read
    inputs = input_files(model_name, cluster_name, profiles, calibrations, links)
    if output:
        check_output(output, inputs)  # before the search, which can take minutes
    cluster = cluster_name or DEFAULT_PLAN["cluster"]
    request = PlanRequest(
        model=model_name or DEFAULT_PLAN["model"], cluster=cluster_with_links(cluster, links) if links else cluster,
        global_batch=DEFAULT_PLAN["global_batch"] if global_batch is None else global_batch,
        seq_len=DEFAULT_PLAN["seq_len"] if seq_len is None else seq_len, dtype=dtype, attention=attention,
        optimizer=optimizer, fp8_recipe=fp8_recipe or "", compile=torch_compile, tf32=tf32,
        micro_batches=tuple(micro_batches), virtual_stages=tuple(virtual_stages), zero_bubble=zero_bubble,
        time_limit_s=time_limit,
        cp_degrees=tuple(cp_degrees),
        ep_degrees=tuple(ep_degrees), tp_degrees=tuple(tp_degrees), pp_degrees=tuple(pp_degrees),
        dp_degrees=tuple(dp_degrees), max_pp=max_pp, top=top,
        max_bundle_nodes=max_bundle_nodes, solver=solver, profiles=tuple(profiles),
        calibrations=tuple(calibrations), runtime=runtime, compare_any=compare_any,
        jobs=jobs)
    with search_progress(sys.stderr.isatty()) as on_progress, stop_on_sigint():
        try:
            ranking = plan_top(request, on_progress, warn)
        except NoFeasiblePlan:
            if stop_requested():
                err("interrupted before a plan was found")
                sys.exit(EXIT_INTERRUPTED)
            raise
        interrupted = stop_requested()
    first = ranking.results[0]
    data = [plan_json(r) for r in ranking.results] if top > 1 else plan_json(first)
    if output and top > 1:  # the file is a plan file: the fastest plan's
        write_output(output, json_text(plan_json(first)) + "\n", inputs=inputs)
    emit(data, None if top > 1 else output, as_json, lambda: _show(ranking, top), "plan", inputs)
    if output and top > 1 and not as_json:
        stdout().print(f"plan written to {esc(output)}")
    if interrupted:  # Ctrl-C: the best plan found so far was printed and written, as at the time limit
        err("interrupted: the plan above is the best found so far")
        sys.exit(EXIT_INTERRUPTED)


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


def _show(ranking: Ranking, top: int) -> None:
    """The first plan's view, then with --top K the table of the K plans."""
    first = ranking.results[0]
    print_plan(first)
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
