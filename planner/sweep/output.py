"""The output file of `planner sweep` (formats.md, section 4) and how a sweep stops.

Rows go to a .csv or .jsonl file. A sweep starts its file with start_output (the header, and
with --resume the rows kept, in a temporary file that replaces the output: the only copy of
the kept rows is never truncated), appends each row as one whole line in one write (fsynced at
least once every FSYNC_EVERY_S; a write that fails, as on a full disk, is cut back to the last
complete row), and ends with write_all (the sorted rows, again by temporary file and
rename). read_rows reads back the complete rows for --resume.

Ctrl-C raises KeyboardInterrupt; inside sigterm_interrupts SIGTERM raises _Terminated (a
KeyboardInterrupt too); the sweep turns either into SweepInterrupted, which the command
reports as `interrupted: N rows written; --resume continues`, exit 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..core.errors import BadInput
from ..core.io import json_text
from ..core.outfile import commit, discard, open_temp, replacing

COLUMNS = ("model", "cluster", "global_batch", "seq_len", "status", "reason", "step_time_s", "tokens_per_s",
           "mfu", "pp", "tp", "dp", "num_gpus_used", "solver_seconds", "runtime", "any_runtime_step_s",
           # the sweep's other axes (as given; empty: plan's default), then the plan's shape
           "dtype", "optimizer", "cp_degrees", "ep_degrees", "model_name", "micro_batch", "schedule",
           "virtual_stages", "cp", "ep", "zero", "recompute", "peak_memory_GiB", "stages",
           # the best published MFU the row's mfu is above (report.credibility; empty: not above)
           "mfu_above_published",
           # what the plan costs (planner.cost.energy; empty where a GPU has no price or power figures)
           "usd_per_hour", "usd_per_step", "usd_per_million_tokens", "energy_J_per_step", "energy_J_per_token",
           # what failures leave of it (planner.cost.reliability)
           "goodput_tokens_per_s", "checkpoint_interval_s")
# failed: the row could not be finished for a reason outside its inputs (a full disk, a plan
# file not written, a worker killed); --resume plans it again
STATUSES = ("ok", "infeasible", "error", "failed")
# `error` rows whose reason starts so failed for a reason outside their inputs (a sweep file may
# record these under `error` rather than `failed`), so --resume plans them again too
_RETRIED_ERRORS = ("plan not written:", "worker failed:")
FORMATS = (".csv", ".jsonl")
FSYNC_EVERY_S = 1.0  # appended rows reach the disk at least this often (and at every stop)


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT (Ctrl-C) or SIGTERM; `rows` complete rows are in the output."""

    def __init__(self, rows: int, signum: int):
        super().__init__(f"interrupted: {rows} rows written; --resume continues")
        self.rows = rows
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM


class _Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM while a sweep runs (handled like Ctrl-C)."""

    signum = signal.SIGTERM


# --- the file -------------------------------------------------------------------------------


def output_format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise BadInput(f"output must end in .csv or .jsonl, got {suffix or 'no extension'!r}", "-o")
    return suffix


def _csv_value(value: Any) -> Any:
    # as strict as the JSON rows (core.io.json_text): a NaN or an infinity is an internal error
    assert not (isinstance(value, float) and not math.isfinite(value)), f"a non-finite number in a sweep row: {value}"
    return "" if value is None else value


def needs_retry(row: dict) -> bool:
    """A row that --resume plans again: one that failed for a reason outside its inputs."""
    return row.get("status") == "failed" or (
        row.get("status") == "error" and str(row.get("reason") or "").startswith(_RETRIED_ERRORS))


def row_line(row: dict, fmt: str) -> str:
    """One complete line of the output file for `row` (COLUMNS, in order)."""
    if fmt != ".csv":
        return json_text({c: row.get(c) for c in COLUMNS}, indent=None) + "\n"
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow([_csv_value(row.get(c)) for c in COLUMNS])
    return text.getvalue()


class RowWriter:
    """Writes rows to an open file, one complete, flushed line per row; `sync` fsyncs.

    `write` goes through the handle (a temporary file, discarded if it fails); `append` adds a
    row to the committed output with one write of the whole line on the file descriptor and,
    when that fails (a full disk: ENOSPC, EDQUOT), cuts the file back to its last complete
    row before it raises, so the file never ends in a torn row."""

    def __init__(self, handle, fmt: str):
        self.handle = handle
        self.fmt = fmt
        self.synced_at = time.monotonic()

    def header(self) -> None:
        if self.fmt == ".csv":
            self.handle.write(",".join(COLUMNS) + "\n")

    def write(self, row: dict) -> None:
        self.handle.write(row_line(row, self.fmt))
        self.handle.flush()

    def append(self, row: dict) -> None:
        data = memoryview(row_line(row, self.fmt).encode("utf-8"))
        self.handle.flush()  # nothing of the handle's may follow the row
        fd = self.handle.fileno()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            try:
                os.ftruncate(fd, end)
                os.lseek(fd, end, os.SEEK_SET)
            except OSError:
                pass
            raise

    def sync(self, force: bool = False) -> None:
        """fsync the file: when `force`, else at most once every FSYNC_EVERY_S (a row is on
        disk for this process's death once flushed; fsync is for the machine's)."""
        now = time.monotonic()
        if force or now - self.synced_at >= FSYNC_EVERY_S:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.synced_at = now


def read_rows(path: str, fmt: str) -> list[dict]:
    """The complete rows of an existing output file (for --resume); a torn or malformed line
    (an interrupted write) and a row without a valid status are dropped, so they rerun."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror}", path) from None
    rows: list[dict] = []
    if fmt == ".csv":
        for row in csv.DictReader(text.splitlines()):
            if None in row or any(v is None for v in row.values()):
                continue  # too many or too few fields
            rows.append(row)
    else:
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return [r for r in rows if r.get("status") in STATUSES and all(k in r for k in COLUMNS[:4])]


def _write_rows(writer: RowWriter, rows: list[dict]) -> None:
    writer.header()
    for row in rows:
        writer.write(row)


def write_all(path: str, fmt: str, rows: list[dict]) -> None:
    """Replace `path` with exactly these rows (atomically: a temporary file, then rename)."""
    with replacing(path, newline="") as handle:
        _write_rows(RowWriter(handle, fmt), rows)


def start_output(path: str, fmt: str, kept: list[dict]) -> RowWriter:
    """The header and the kept rows in a temporary file that then replaces `path`; a writer
    that appends to it. Until the rename the old file is whole, so an interruption while the
    kept rows are copied loses none of them."""
    try:
        handle, tmp = open_temp(path, newline="")
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror}", path) from None
    try:
        writer = RowWriter(handle, fmt)
        _write_rows(writer, kept)
        commit(handle, tmp, path)
    except BaseException as exc:
        discard(handle, tmp)
        if isinstance(exc, OSError):
            raise BadInput(f"cannot write: {exc.strerror}", path) from None
        raise
    return writer


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises _Terminated in the main thread for the block (Ctrl-C raises
    KeyboardInterrupt anyway), so the sweep stops its workers and keeps its rows."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the stop itself must not be cut short
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def rows_on_disk(path: str, fmt: str) -> int:
    try:
        return len(read_rows(path, fmt))
    except BadInput:
        return 0


__all__ = ["COLUMNS", "FORMATS", "STATUSES", "RowWriter", "SweepInterrupted", "needs_retry", "output_format",
           "read_rows", "row_line", "start_output"]
