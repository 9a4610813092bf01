"""`planner evaluate`: flags or a plan file -> planner.api.evaluate -> the estimate; exit 1
when the configuration does not fit."""

from __future__ import annotations

import os
import sys

import click

from ..core.errors import BadInput
from ..api import EvaluateRequest, evaluate, evaluate_plan_file, evaluation_plan_json, input_files, require
from ..api.flags import from_cli, plan_file_conflicts
from ..core.io import json_text
from ..core.markup import esc
from ..core.outfile import check_output, write_output
from ..inputs.links import cluster_with_links
from ..inputs.hardware import GIB
from ..cost.runtimes import get_runtime
from ..report.views import print_estimate
from .declared import request_options
from .options import links_option
from .output import EXIT_INFEASIBLE, emit, err, stdout, warn


@click.command("evaluate")
@request_options(EvaluateRequest, "training")
@request_options(EvaluateRequest, "configuration")
@click.option("--plan", "plan_file", type=str, default=None, help="Re-price a plan JSON instead of flags.")
@request_options(EvaluateRequest, "measurement")
@request_options(EvaluateRequest, "objective")
@links_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("-o", "--output", type=str, default=None, help="Also write the JSON to FILE.")
@click.option("--plan-out", type=str, default=None, metavar="FILE",
              help="Also write the configuration as a plan file (planner.plan/v1, as `plan -o` writes one) for "
                   "validate, export and run; none when it does not fit (exit 1).")
def evaluate_command(plan_file, links, as_json, output, plan_out, **flags) -> None:
    """Price one configuration: step time, its breakdown, memory per GPU type.

    \b
    Examples:
      planner evaluate --model llama-3-8b --cluster dgx-a100 --global-batch 256 \\
          --seq-len 4096 --tp 4 --pp 2 --dp 4 --micro-batch 1 --recompute selective
      planner evaluate --plan plan.json --json
      planner evaluate --model gpt2 --cluster consumer-3090-4090 --global-batch 64 \\
          --seq-len 1024 --tp 1 --pp 1 --dp 16 --micro-batch 4 --plan-out hand.json
    """
    runtime = flags["runtime"]
    if runtime is not None:
        get_runtime(runtime)  # an unknown name is a bad input before anything is read
    profiles, calibrations = tuple(flags["profiles"]), tuple(flags["calibrations"])
    inputs = input_files(flags["model"], flags["cluster"], profiles, calibrations, plan_file, links)
    if plan_out:
        check_output(plan_out, inputs, "--plan-out")  # before pricing, as `plan -o` does
        if output and os.path.abspath(output) == os.path.abspath(plan_out):
            raise BadInput("names the same file as -o (the report); give the plan its own file", "--plan-out")
    if plan_file:
        given = plan_file_conflicts(EvaluateRequest, flags) + (["--links"] if links is not None else [])
        if given:
            raise BadInput(f"a plan file carries its own configuration; drop {', '.join(given)}", "--plan")
        result = evaluate_plan_file(plan_file, profiles, calibrations, warn, runtime)
    else:
        cluster = flags["cluster"]
        if links:
            cluster = cluster_with_links(require(cluster, "--cluster"), links)
        result = evaluate(from_cli(EvaluateRequest, flags, cluster=cluster), warn)
    tokens = require(flags["tokens"], "--tokens") if flags.get("tokens") is not None else None
    plan, estimate = result.plan, result.estimate
    # the plan file is checked (exit 2 when not a valid plan) before anything is printed
    plan_data = evaluation_plan_json(result, runtime) if plan_out and estimate.fits else None
    emit(result.to_json(tokens), output, as_json, lambda: print_estimate(plan, estimate, tokens=tokens), None, inputs)
    if not estimate.fits:
        worst = max(estimate.overflows, key=lambda o: o.over_bytes)
        err(f"does not fit: rank {worst.rank} ({worst.gpu}) needs {worst.need_bytes / GIB:.1f} GiB of "
            f"{worst.capacity_bytes / GIB:.1f} GiB (over by {worst.over_bytes / GIB:.1f} GiB; "
            f"{len(estimate.overflows)} ranks overflow)" + (f"; no plan written to {plan_out}" if plan_out else ""))
        sys.exit(EXIT_INFEASIBLE)
    if plan_data is not None:
        write_output(plan_out, json_text(plan_data) + "\n", inputs=inputs)
        if not as_json:
            stdout().print(f"plan written to {esc(plan_out)}")
