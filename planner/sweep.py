"""`planner sweep`: plan every combination of models, clusters, global batches and sequence
lengths, in parallel, and write one row per combination (formats.md, section 4).

Rows are appended to the output file as they finish (flushed, one complete line each; fsynced
at least once a second), so an interrupted sweep leaves every finished row on disk for
`--resume`. The output is never truncated in place: the file a sweep starts from (the header,
and with --resume the rows kept) and the final file, sorted by combination index so that it
does not depend on `--jobs` or on the order in which workers finished, are each written to a
temporary file that replaces the output (planner.outfile). A sweep holds an exclusive lock
(`<output>.lock`) while it runs; a second sweep on the same output is refused. Ctrl-C or
SIGTERM stop the workers, keep every row written and raise SweepInterrupted.

Combination index: the cartesian product of the options, models outermost, then clusters,
global batches and sequence lengths, each in the order given (repeated values are dropped).

Model and cluster names travel to local worker processes as strings, not objects, and every
worker loads them itself (cached per process). How rows are run: planner.executors (`local`
processes or `ray` tasks); every executor plans each row with plan_combination.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import click

from .clock import DEFAULT_TIME_LIMIT_S
from .errors import BadInput, NoFeasiblePlan
from .io import json_text
from .ranges import RANGES, check
from .outfile import check_output, exclusive_lock, input_paths, write_output
from .sweep_output import COLUMNS, FORMATS, STATUSES, SweepInterrupted, rows_on_disk, sigterm_interrupts, \
    write_all, output_format, read_rows, start_output

EXECUTORS = ("local", "ray")  # planner.executors


@dataclass(frozen=True)
class Combination:
    index: int
    model: str
    cluster: str
    global_batch: int
    seq_len: int
    plan_name: str = ""  # its --plans-dir file name, when plan_file_names set it

    @property
    def key(self) -> tuple[str, str, str, str]:
        return row_key({"model": self.model, "cluster": self.cluster, "global_batch": self.global_batch,
                        "seq_len": self.seq_len})


def row_key(row: dict) -> tuple[str, str, str, str]:
    """What matches a row to a combination; numbers as text, so CSV and JSONL rows agree."""
    def text(value: Any) -> str:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value).strip()

    return tuple(text(row.get(c)) for c in ("model", "cluster", "global_batch", "seq_len"))  # type: ignore[return-value]


def combinations(models: Iterable[str], clusters: Iterable[str], batches: Iterable[int],
                 seq_lens: Iterable[int]) -> list[Combination]:
    """The cartesian product in a fixed order (models outermost), duplicates dropped."""
    def unique(values: Iterable) -> list:
        return list(dict.fromkeys(values))

    product = itertools.product(unique(models), unique(clusters), unique(batches), unique(seq_lens))
    return [Combination(i, *values) for i, values in enumerate(product)]


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise BadInput(f"expected i/n (e.g. 0/4), got {text!r}", "--shard")
    i, n = int(match.group(1)), int(match.group(2))
    if n < 1 or not 0 <= i < n:
        raise BadInput(f"expected 0 <= i < n, got {i}/{n}", "--shard")
    return i, n


def plan_file_name(combo: Combination) -> str:
    """The name plan_file_names gave the combination, else the plain one:
    <model>__<cluster>__<global_batch>__<seq_len>.json, with path separators and other unsafe
    characters of the names (which may be file paths) replaced by '_'."""
    if combo.plan_name:
        return combo.plan_name
    def safe(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9._+-]", "_", name).strip(".") or "_"

    return f"{safe(combo.model)}__{safe(combo.cluster)}__{combo.global_batch}__{combo.seq_len}.json"


def _identity(name: str) -> str:
    """What a model or cluster name denotes: the resolved path of a file, else the name."""
    return os.path.realpath(name) if os.path.exists(name) else name


def plan_file_names(combos: list[Combination]) -> list[Combination]:
    """The combinations with unique plan file names: the plain name, and where distinct inputs
    share one (`../cfg.json` and `./cfg.json` are both `_cfg.json`), a `-<10 hex>` hash of the
    resolved inputs before `.json` on each of them. Deterministic for the same inputs."""
    plain = {c.index: plan_file_name(c) for c in combos}
    owners: dict[str, set[tuple]] = {}
    for c in combos:
        owners.setdefault(plain[c.index], set()).add(
            (_identity(c.model), _identity(c.cluster), c.global_batch, c.seq_len))
    named = []
    for c in combos:
        name = plain[c.index]
        if len(owners[name]) > 1:
            ident = "\0".join(map(str, (_identity(c.model), _identity(c.cluster), c.global_batch, c.seq_len)))
            name = f"{name[:-len('.json')]}-{hashlib.sha256(ident.encode()).hexdigest()[:10]}.json"
        named.append(replace(c, plan_name=name))
    return named


# --- one combination (runs in a worker process) -----------------------------------------------


@lru_cache(maxsize=64)
def _model(name: str):
    from .model import load_model

    return load_model(name)


@lru_cache(maxsize=64)
def _cluster(name: str):
    from .hardware import load_cluster

    return load_cluster(name)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _empty_row(combo: Combination, status: str, reason: str) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(model=combo.model, cluster=combo.cluster, global_batch=combo.global_batch,
               seq_len=combo.seq_len, status=status, reason=_one_line(reason))
    return row


def plan_combination(combo: Combination, time_limit: float | None, want_plan: bool = False,
                     model=None, cluster=None) -> tuple[dict, dict | None]:
    """Plan one combination: its row, and its plan JSON when `want_plan` and feasible. Never
    raises (every failure is a row). Every executor runs this for every row; `model` and
    `cluster`, when given, are the loaded forms of combo.model and combo.cluster."""
    started = time.perf_counter()
    try:
        from .cli import check_training_inputs, plan_json, resolve_dtype
        from .plan import Training
        from .search import SolverOptions, solve

        model = model if model is not None else _model(combo.model)
        cluster = cluster if cluster is not None else _cluster(combo.cluster)
        training = Training(combo.global_batch, combo.seq_len, resolve_dtype(cluster, None), 1)
        check_training_inputs(model, training)
        result = solve(model, cluster, training, SolverOptions(time_limit_s=time_limit))
        est, plan = result.estimate, result.plan
        row = _empty_row(combo, "ok", "")
        row.update(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu, pp=plan.pp,
                   tp=max(s.tp for s in plan.stages), dp=max(s.dp for s in plan.stages),
                   num_gpus_used=est.num_gpus_used, solver_seconds=result.seconds)
        return row, plan_json(result) if want_plan else None
    except NoFeasiblePlan as exc:
        row = _empty_row(combo, "infeasible", exc.message)
        row["solver_seconds"] = time.perf_counter() - started
        return row, None
    except BadInput as exc:
        return _empty_row(combo, "error", str(exc)), None
    except RecursionError:
        return _empty_row(combo, "error", "input too deeply nested"), None
    except Exception as exc:  # noqa: BLE001 - one bad combination never stops the others
        return _empty_row(combo, "error", f"{type(exc).__name__}: {exc}"), None


def save_plan(combo: Combination, row: dict, plan: dict | None, plans_dir: str | None) -> dict:
    """Write `plan` to plans_dir (if both are given); the row, or an error row if that fails.
    Written like every output (planner.outfile): a symbolic link there is refused, not followed."""
    if plan is None or plans_dir is None:
        return row
    path = str(Path(plans_dir) / plan_file_name(combo))
    try:
        write_output(path, json_text(plan) + "\n", inputs=(combo.model, combo.cluster))
    except BadInput as exc:
        return _empty_row(combo, "error", f"plan not written: {exc}")
    return row


def run_combination(combo: Combination, time_limit: float | None, plans_dir: str | None) -> dict:
    """Plan one combination and save its plan into plans_dir; never raises."""
    row, plan = plan_combination(combo, time_limit, plans_dir is not None)
    return save_plan(combo, row, plan, plans_dir)


# --- the sweep --------------------------------------------------------------------------------


def sweep(models: Iterable[str], clusters: Iterable[str], batches: Iterable[int], seq_lens: Iterable[int],
          output: str, *, jobs: int | None = 1, plans_dir: str | None = None, resume: bool = False,
          shard: tuple[int, int] | None = None, time_limit: float | None = None,
          progress: Callable[[int, int], Any] | None = None, executor: str = "local") -> dict[str, int]:
    """Run the sweep and write `output`; returns the count of each status in the final file.

    `executor` is "local" (`jobs` processes; None: one per CPU) or "ray" (at most `jobs` Ray
    tasks at a time; None: the cluster's CPUs), see planner.executors.
    `progress(done, total)` is called once before the first row and after every row.
    Ctrl-C or SIGTERM: the workers stop, every row written stays, SweepInterrupted is raised.
    A second sweep on the same output while one runs is BadInput (see exclusive_lock)."""
    fmt = output_format(output)
    if time_limit is not None:
        check(time_limit, "time_limit_s", "--time-limit")
    models, clusters = list(models), list(clusters)
    combos = combinations(models, clusters, batches, seq_lens)
    if plans_dir is not None:
        combos = plan_file_names(combos)  # over every combination, so shards agree
    if shard is not None:
        i, n = shard
        combos = [c for c in combos if c.index % n == i]
    check_output(output, input_paths(models, clusters))
    if plans_dir is not None:
        try:
            Path(plans_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"cannot create: {exc.strerror}", plans_dir) from None
        if not Path(plans_dir).is_dir():
            raise BadInput("is not a directory", plans_dir)

    with exclusive_lock(output, "another planner sweep"), sigterm_interrupts():
        try:
            return _sweep_locked(combos, output, fmt, jobs=jobs, plans_dir=plans_dir, resume=resume,
                                 time_limit=time_limit, progress=progress, executor=executor)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (_Terminated)
            raise SweepInterrupted(rows_on_disk(output, fmt), getattr(exc, "signum", signal.SIGINT)) from None


def _sweep_locked(combos: list[Combination], output: str, fmt: str, *, jobs: int | None, plans_dir: str | None,
                  resume: bool, time_limit: float | None, progress: Callable[[int, int], Any] | None,
                  executor: str) -> dict[str, int]:
    """The sweep, with the output locked."""
    from .executors import start_executor

    kept = read_rows(output, fmt) if resume else []
    kept_keys = {row_key(r) for r in kept}
    todo = [c for c in combos if c.key not in kept_keys]
    new_rows: dict[int, dict] = {}
    total = len(combos)
    done_count = total - len(todo)

    with start_executor(executor, jobs, todo) as execute:  # fails (e.g. no Ray) before touching output
        writer = start_output(output, fmt, kept)  # the kept rows first, so an interruption never loses them
        with writer.handle:
            if progress:
                progress(done_count, total)

            def on_row(index: int, row: dict) -> None:
                nonlocal done_count
                writer.write(row)
                writer.sync()
                new_rows[index] = row
                done_count += 1
                if progress:
                    progress(done_count, total)

            try:
                execute(todo, time_limit, plans_dir, on_row)
            finally:
                writer.sync(force=True)

    # Deterministic final file: rows of this sweep's combinations by index; kept rows of
    # other combinations (e.g. an earlier sweep over other values) after them, as they were.
    by_key = {row_key(r): r for r in kept}
    final = []
    for combo in combos:
        row = new_rows.get(combo.index) or by_key.pop(combo.key, None)
        if row is not None:
            final.append(row)
    final.extend(r for r in kept if row_key(r) in by_key)
    write_all(output, fmt, final)
    counts = {s: 0 for s in STATUSES}
    for row in final:
        counts[row["status"]] += 1
    counts["kept"] = len(kept)
    counts["rows"] = len(final)
    return counts


# --- the command ------------------------------------------------------------------------------


def _shard_option(ctx, param, value):
    try:
        return parse_shard(value)
    except BadInput as exc:
        raise click.BadParameter(exc.message) from None


@click.command("sweep")
@click.option("--model", "models", multiple=True, required=True, metavar="M",
              help="Catalog name, HF config.json or layer-profile file; repeatable.")
@click.option("--cluster", "clusters", multiple=True, required=True, metavar="C",
              help="Cluster file (YAML/JSON) or built-in example name; repeatable.")
@click.option("--global-batch", "batches", multiple=True, required=True, metavar="B",
              type=click.IntRange(1, int(RANGES["global_batch"].high)), help="Sequences per optimizer step; repeatable.")
@click.option("--seq-len", "seq_lens", multiple=True, required=True, metavar="S",
              type=click.IntRange(1, int(RANGES["seq_len"].high)), help="Tokens per sequence; repeatable.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes, or Ray tasks at a time [default: the number of CPUs, of this machine "
                   "or of the Ray cluster]; 1 (local) runs in this process.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="local: processes on this machine; ray: Ray tasks on the cluster RAY_ADDRESS names, "
                   "else on a local Ray started for the run (needs the ray extra).")
@click.option("--plans-dir", type=str, default=None, metavar="DIR",
              help="Also write each feasible plan as DIR/<model>__<cluster>__<global_batch>__<seq_len>.json "
                   "(-<hash>.json where distinct inputs would share a name).")
@click.option("--resume", is_flag=True,
              help="Keep the rows already in the output file and plan only the missing combinations.")
@click.option("--shard", type=str, default=None, metavar="i/n", callback=_shard_option,
              help="Plan only the combinations whose index % n == i (0 <= i < n).")
@click.option("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, show_default=True, metavar="S",
              help="Stop each search after S seconds with its best plan so far and the gap.")
@click.option("-o", "--output", type=str, required=True, metavar="FILE",
              help="Results file: .csv or .jsonl (one JSON object per line).")
def sweep_command(models, clusters, batches, seq_lens, jobs, executor, plans_dir, resume, shard, time_limit,
                  output) -> None:
    """Plan every combination of models, clusters, global batches and sequence lengths.

    Combinations are the cartesian product of the repeated options, numbered models
    outermost, then clusters, batches and sequence lengths, in the order given. Each gets one
    row: model, cluster, global_batch, seq_len, status (ok, infeasible or error), reason,
    step_time_s, tokens_per_s, mfu, pp, tp, dp, num_gpus_used, solver_seconds. One bad
    combination never stops the others. Rows are appended as they finish; at the end the
    file is rewritten sorted by combination index, so it does not depend on --jobs or
    --executor. The file is never truncated in place (a temporary file replaces it), a
    symbolic link as -o or in --plans-dir is refused, and a second sweep on the same -o
    while one runs exits 2. Ctrl-C stops the workers, keeps every row written and exits
    130 (SIGTERM: 143); --resume continues.

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
    from rich.console import Console
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
            counts = sweep(models, clusters, batches, seq_lens, output, jobs=jobs, plans_dir=plans_dir,
                           resume=resume, shard=shard, time_limit=time_limit, progress=progress,
                           executor=executor)
    except SweepInterrupted as exc:
        click.echo(f"planner: {exc}", err=True)
        sys.exit(exc.exit_code)
    kept = f", {counts['kept']} kept from {output}" if resume else ""
    click.echo(f"planner sweep: {counts['ok']} ok, {counts['infeasible']} infeasible, {counts['error']} error "
               f"({counts['rows']} rows in {output}{kept})", err=True)


def add_commands(group: click.Group) -> None:
    """Register `sweep` on the CLI group (planner.cli.main)."""
    group.add_command(sweep_command)


__all__ = ["COLUMNS", "FORMATS", "STATUSES", "Combination", "SweepInterrupted", "add_commands", "combinations",
           "parse_shard", "plan_file_name", "plan_file_names", "read_rows", "run_combination", "sweep",
           "sweep_command"]
