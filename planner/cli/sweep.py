"""`planner sweep`: flags -> planner.sweep.run.sweep (every row planned by planner.api.plan, as
`planner plan` would) -> the results file; a summary line on stderr."""

from __future__ import annotations

import sys
from typing import Callable

import click
from rich.console import Console

from ..core.errors import BadInput
from ..sweep.grid import SWEEP_FLAGS, sweep_flag
from ..sweep.run import EXECUTORS, parse_shard, sweep
from ..sweep.output import SweepInterrupted, output_format
from .declared import option
from .output import err


def _shard_option(ctx, param, value):
    try:
        return parse_shard(value)
    except BadInput as exc:
        raise click.BadParameter(exc.message) from None


def sweep_options(group: str) -> Callable[[Callable], Callable]:
    """A decorator adding the sweep's flags of `group` (planner.sweep.grid), each built from its
    PlanRequest field's declaration; its value arrives as its sweep() keyword."""
    def decorate(func: Callable) -> Callable:
        for s in reversed([s for s in SWEEP_FLAGS if s.group == group]):
            flag, default = sweep_flag(s)
            func = option(s.keyword, flag, default, **({"required": True} if s.required else {}))(func)
        return func

    return decorate


@click.command("sweep")
@sweep_options("grid")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes, or Ray tasks at a time [default: the number of CPUs, of this machine "
                   "or of the Ray cluster]; 1 (local) runs in this process.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="local: processes on this machine; ray: Ray tasks on the cluster RAY_ADDRESS names, "
                   "else on a local Ray started for the run (needs the ray extra).")
@click.option("--plans-dir", type=str, default=None, metavar="DIR",
              help="Also write each feasible plan as DIR/<model>__<cluster>__<global_batch>__<seq_len>.json "
                   "(then __<runtime>, __<dtype>, __<optimizer>, __cp<N>, __ep<N> where not plan's default; "
                   "-<hash>.json where distinct inputs would share a name or it is over 128 characters).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in the output file and plan only the missing combinations.")
@click.option("--shard", type=str, default=None, metavar="i/n", callback=_shard_option,
              help="Plan only the combinations whose index % n == i (0 <= i < n).")
@sweep_options("rows")
@click.option("-o", "--output", type=str, required=True, metavar="FILE",
              help="Results file: .csv or .jsonl (one JSON object per line).")
def sweep_command(jobs, executor, plans_dir, resume, shard, output, **grid) -> None:
    """Plan every combination of models, clusters, global batches and sequence lengths
    (and runtimes, dtypes, optimizers, cp and ep degrees).

    Combinations are the cartesian product of the repeated options, numbered models
    outermost, then clusters, batches, sequence lengths, runtimes, dtypes, optimizers, cp and
    ep degrees, in the order given. Each gets one row: model, cluster, global_batch, seq_len,
    status (ok, infeasible, error, or failed: not finished for a reason outside its inputs,
    which --resume plans again), reason, step_time_s, tokens_per_s, mfu, pp, tp, dp,
    num_gpus_used, solver_seconds, runtime, any_runtime_step_s (with --compare-any), dtype,
    optimizer, cp_degrees, ep_degrees, model_name, micro_batch, schedule, virtual_stages, cp,
    ep, zero, recompute, peak_memory_GiB, stages (each stage's tp.dp.cp.ep),
    mfu_above_published (the best published MFU that mfu is above; empty: not above). One bad
    combination never stops the others. Each row is the plan `planner plan` finds for the
    same inputs (--micro-batch and --virtual-stages as there). Rows are appended as they finish; at the end the
    file is rewritten sorted by combination index, so it does not depend on --jobs or
    --executor. The file is never truncated in place (a temporary file replaces it), a
    symbolic link as -o or in --plans-dir is refused, and a second sweep on the same -o
    while one runs exits 2, as does a results file that cannot be written (a full disk: the
    file keeps its complete rows). Ctrl-C stops the workers, keeps every row written and
    exits 130 (SIGTERM: 143); --resume continues.

    \b
    Examples:
      planner sweep --model llama-3-8b --model llama-3-70b --cluster a100-v100-mix \\
          --global-batch 512 --global-batch 1024 --seq-len 4096 -o results.csv
      planner sweep ... -o results.csv --resume    # after an interruption

    \b
    On a Slurm cluster, one array task per shard, each with its own output file:
      #SBATCH --array=0-7
      planner sweep --model ... --cluster ... --global-batch ... --seq-len ... \\
          --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT \\
          --jobs $SLURM_CPUS_PER_TASK -o results.$SLURM_ARRAY_TASK_ID.csv
    then concatenate the shards (one header):
      awk 'FNR > 1 || NR == 1' results.*.csv > results.csv    # CSV
      cat results.*.jsonl > results.jsonl                    # JSONL

    \b
    On a Ray cluster (every node: pip install 'planner[ray]'), one task per
    combination; the rows and --plans-dir files are written on this machine:
      RAY_ADDRESS=ray-head:6379 planner sweep ... --executor ray -o results.csv
    Without RAY_ADDRESS, --executor ray starts a local Ray for the run.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    output_format(output)  # a bad extension is bad input before any work
    console = Console(stderr=True)
    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, disable=not console.is_terminal, transient=False)
    task = bar.add_task("sweep", total=None)

    def progress(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    try:
        with bar:
            counts = sweep(output=output, jobs=jobs, plans_dir=plans_dir, resume=resume, shard=shard,
                           progress=progress, executor=executor, **grid)
    except SweepInterrupted as exc:
        err(str(exc))
        sys.exit(exc.exit_code)
    kept = f", {counts['kept']} kept from {output}" if resume else ""
    failed = f", {counts['failed']} failed (--resume retries them)" if counts["failed"] else ""
    click.echo(f"planner sweep: {counts['ok']} ok, {counts['infeasible']} infeasible, {counts['error']} error"
               f"{failed} ({counts['rows']} rows in {output}{kept})", err=True)


def add_commands(group: click.Group) -> None:
    """Register `sweep` on `group` (the CLI's main group, or a plain click.Group)."""
    group.add_command(sweep_command)
