"""`planner sweep`: plan every combination of models, clusters, global batches and sequence
lengths, in parallel, and write one row per combination (formats.md, section 4).

Rows are appended to the output file as they finish (flushed, one complete line each; fsynced
at least once a second), so an interrupted sweep leaves every finished row on disk for
`--resume`. The output is never truncated in place: the file a sweep starts from (the header,
and with --resume the rows kept) and the final file, sorted by combination index so that it
does not depend on `--jobs` or on the order in which workers finished, are each written to a
temporary file that replaces the output (planner.core.outfile). A sweep holds an exclusive lock
(`<output>.lock`) while it runs; a second sweep on the same output is refused. Ctrl-C or
SIGTERM stop the workers, keep every row written and raise SweepInterrupted.

The combinations, their order and one row's planning: planner.sweep.rows. How rows are run:
planner.sweep.executors (`local` processes or `ray` tasks); every executor plans each row with
sweep_rows.plan_combination, which runs planner.api.plan with the sweep's PlanRequest (so a row
equals `planner plan` for the same inputs).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..api import PlanRequest
from ..core.errors import BadInput
from ..cost.runtimes import get_runtime
from ..core.outfile import check_output, exclusive_lock, input_paths
from ..core.runtime_default import DEFAULT_RUNTIME
from ..plan import OPTIMIZER_NAMES
from .grid import AXES, sweep_keywords, template_request
from .output import COLUMNS, FORMATS, STATUSES, SweepInterrupted, needs_retry, rows_on_disk, sigterm_interrupts, \
    write_all, output_format, read_rows, start_output
from .rows import DEFAULT_OPTIMIZER, EXECUTORS, Combination, combinations, parse_shard, plan_combination, \
    plan_file_name, plan_file_names, row_key, run_combination


# --- the sweep --------------------------------------------------------------------------------


def _axes(runtime: str | Iterable[str], values: Mapping[str, Any]) -> dict[str, tuple]:
    """The sweep's axes by keyword (AXES, in Combination order), each value checked before any
    work (a dtype a row's cluster or runtime lacks is that row's error): runtimes (`runtime`
    when none), optimizers (empty: adamw), cp and ep degrees; another empty axis is the
    plan's default (None)."""
    axes = {s.keyword: tuple(values[s.keyword]) for s in AXES}
    axes["runtimes"] = axes["runtimes"] or ((runtime,) if isinstance(runtime, str) else tuple(runtime))
    for name in axes["runtimes"]:
        get_runtime(name)  # an unknown name is bad input before any work
    for name in axes["optimizers"]:
        if name not in OPTIMIZER_NAMES:
            raise BadInput(f"expected one of {', '.join(OPTIMIZER_NAMES)}, got {name!r}", "--optimizer")
    for flag, degrees in (("--cp", axes["cp_degrees"]), ("--ep", axes["ep_degrees"])):
        for degree in degrees:
            if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
                raise BadInput(f"must be a positive integer, got {degree!r}", flag)
    axes["optimizers"] = axes["optimizers"] or (DEFAULT_OPTIMIZER,)
    return axes


def sweep(output: str, *, jobs: int | None = 1, plans_dir: str | None = None, resume: bool = False,
          shard: tuple[int, int] | None = None, progress: Callable[[int, int], Any] | None = None,
          executor: str = "local", runtime: str = DEFAULT_RUNTIME, **grid: Any) -> dict[str, int]:
    """Run the sweep and write `output`; returns the count of each status in the final file.

    `grid`: the sweep's flags by their keyword, as planner.sweep.grid.SWEEP_FLAGS declares them
    (KEYWORDS): each axis a list of values, one row per combination (`models`, `clusters`,
    `batches` and `seq_lens` required; `runtimes`, `dtypes`, `optimizers`, `cp_degrees`,
    `ep_degrees` empty or left out: plan's default, the runtime `runtime`), and every row's
    `time_limit` (None: none), `micro_batches`, `virtual_stages` (empty: plan's defaults) and
    `compare_any` (`any_runtime_step_s` is what `--runtime any` would reach, as
    `plan --compare-any` reports). A keyword not declared there is a TypeError.
    Every row is planned as `planner plan` would with these.

    `executor` is "local" (`jobs` processes; None: one per CPU) or "ray" (at most `jobs` Ray
    tasks at a time; None: the cluster's CPUs), see planner.sweep.executors.
    `progress(done, total)` is called once before the first row and after every row.
    Ctrl-C or SIGTERM: the workers stop, every row written stays, SweepInterrupted is raised.
    A second sweep on the same output while one runs is BadInput (see exclusive_lock), and so
    is a results file that cannot be written (a full disk): the file keeps its complete rows."""
    values = sweep_keywords(grid)
    fmt = output_format(output)
    request = template_request(values)
    axes = _axes(runtime, values)
    models, clusters = list(axes["models"]), list(axes["clusters"])
    combos = combinations(*axes.values())
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
                                 request=request, progress=progress, executor=executor)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (_Terminated)
            raise SweepInterrupted(rows_on_disk(output, fmt), getattr(exc, "signum", signal.SIGINT)) from None


def _not_written(exc: OSError | BadInput, output: str, rows: int) -> BadInput:
    """The bad input of a results file that cannot be written (a full disk, a quota)."""
    reason = exc.message if isinstance(exc, BadInput) else f"cannot write: {exc.strerror or exc}"
    return BadInput(f"{reason}; the {rows} complete rows written stay in the file: make room and rerun "
                    "with --resume", output)


def _sweep_locked(combos: list[Combination], output: str, fmt: str, *, jobs: int | None, plans_dir: str | None,
                  resume: bool, request: PlanRequest, progress: Callable[[int, int], Any] | None,
                  executor: str) -> dict[str, int]:
    """The sweep, with the output locked. With --resume, the rows of this sweep's combinations
    that failed for a reason outside their inputs (needs_retry) are planned again."""
    from .executors import start_executor

    ours = {c.key for c in combos}
    kept = [r for r in (read_rows(output, fmt) if resume else [])
            if not (needs_retry(r) and row_key(r) in ours)]
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
                try:
                    writer.append(row)  # whole, or not at all
                except OSError as exc:  # stops the sweep: its workers end, its rows stay
                    raise _not_written(exc, output, len(kept) + len(new_rows)) from None
                new_rows[index] = row
                try:
                    writer.sync()
                except OSError as exc:
                    raise _not_written(exc, output, len(kept) + len(new_rows)) from None
                done_count += 1
                if progress:
                    progress(done_count, total)

            try:
                execute(todo, request, plans_dir, on_row)
            finally:
                try:
                    writer.sync(force=True)
                except OSError:
                    pass  # the final file below is written and synced anew, or reports why not

    # Deterministic final file: rows of this sweep's combinations by index; kept rows of
    # other combinations (e.g. an earlier sweep over other values) after them, as they were.
    by_key = {row_key(r): r for r in kept}
    final = []
    for combo in combos:
        row = new_rows.get(combo.index) or by_key.pop(combo.key, None)
        if row is not None:
            final.append(row)
    final.extend(r for r in kept if row_key(r) in by_key)
    try:
        write_all(output, fmt, final)
    except BadInput as exc:
        raise _not_written(exc, output, len(kept) + len(new_rows)) from None
    counts = {s: 0 for s in STATUSES}
    for row in final:
        counts[row["status"]] += 1
    counts["kept"] = len(kept)
    counts["rows"] = len(final)
    return counts


__all__ = ["COLUMNS", "EXECUTORS", "FORMATS", "STATUSES", "Combination", "SweepInterrupted", "combinations",
           "parse_shard", "plan_combination", "plan_file_name", "plan_file_names", "read_rows", "run_combination",
           "sweep"]
