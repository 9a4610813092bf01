"""`planner sweep` on a hostile disk: a results file that cannot be written (a full disk) stops
the sweep with exit 2 and only complete rows; rows that failed for a reason outside their inputs
are planned again by --resume; the lock file is never a followed link; --plans-dir names are
capped in length."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from planner.cli import PlannerGroup
from planner.cli.sweep import add_commands
from planner.core.errors import BadInput
from planner.sweep import rows as sweep_rows
from planner.sweep.run import COLUMNS, Combination, plan_file_name, plan_file_names

from .conftest import assert_bad_input, hf_config, runner

CLUSTER = "consumer-3090-4090"
ROOT = Path(__file__).resolve().parent.parent


def group() -> click.Group:
    g = PlannerGroup()
    add_commands(g)
    return g


def sweep_args(out, *extra, models=("gpt2",), batches=(32,)) -> list[str]:
    args = ["sweep", "--cluster", CLUSTER, "--seq-len", "512"]
    for m in models:
        args += ["--model", str(m)]
    for b in batches:
        args += ["--global-batch", str(b)]
    return args + ["-o", str(out), "--jobs", "1", *map(str, extra)]


def complete_rows(path: Path) -> list[dict]:
    """Every data line of a CSV results file, each checked to be a whole row."""
    text = path.read_text()
    assert text.endswith("\n"), repr(text[-80:])
    reader = csv.reader(text.splitlines())
    header = next(reader)
    rows = list(reader)
    for row in rows:
        assert len(row) == len(header), row
    return [dict(zip(header, row)) for row in rows]


# --- a full disk ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_full_disk_during_rows_exits_2_and_leaves_no_torn_row(tmp_path, monkeypatch):
    """The third row meets ENOSPC half-way through its write: exit 2 naming the file and
    --resume, the file ends with the two complete rows before it; --resume then finishes."""
    out = tmp_path / "r.csv"
    real_write = os.write
    appends = []

    def full_disk(fd, data):
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(out.resolve()):
            appends.append(bytes(data))
            if len(appends) == 3:
                real_write(fd, bytes(data)[:len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    result = runner().invoke(group(), sweep_args(out, batches=(8, 16, 32, 64)))
    monkeypatch.setattr(os, "write", real_write)
    line = assert_bad_input(result, str(out), "No space left on device", "--resume")
    assert "2 complete rows" in line, line
    assert [r["global_batch"] for r in complete_rows(out)] == ["8", "16"]

    result = runner().invoke(group(), sweep_args(out, "--resume", batches=(8, 16, 32, 64)))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = complete_rows(out)
    assert [(r["global_batch"], r["status"]) for r in rows] == [(b, "ok") for b in ("8", "16", "32", "64")]


@pytest.mark.slow
@pytest.mark.parametrize("limit", [100, 700])
def test_file_size_limit_mid_row_exits_2_with_complete_rows_only(tmp_path, limit):
    """A real short write (RLIMIT_FSIZE: the kernel writes up to the limit, then EFBIG), as a
    disk that fills mid-row (700 bytes) or before the header (100): exit 2, one line, no
    traceback, and only whole rows stay."""
    out = tmp_path / "r.csv"
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "from planner.cli import main; sys.argv[0] = 'planner'; main()")
    proc = subprocess.run([sys.executable, "-B", "-c", code, *sweep_args(out, batches=(8, 16, 32, 64, 128, 256))],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if limit == 100:  # not even the header: the output never appears, no temporary file stays
        assert "cannot write" in proc.stderr and sorted(p.name for p in tmp_path.iterdir()) == [], proc.stderr
        return
    assert "--resume" in proc.stderr, proc.stderr
    rows = complete_rows(out)
    assert len(rows) < 6 and all(r["status"] == "ok" for r in rows), rows


# --- --resume retries what the environment failed --------------------------------------------------


def test_resume_retries_rows_whose_plan_was_not_written(tmp_path, monkeypatch):
    """A plan file that cannot be written (ENOSPC in --plans-dir) makes a `failed` row, not a
    final one: --resume plans it again and writes its plan."""
    out, plans = tmp_path / "r.csv", tmp_path / "plans"

    def no_space(path, data, **kwargs):
        raise BadInput("cannot write: No space left on device", path)

    monkeypatch.setattr(sweep_rows, "write_output", no_space)
    result = runner().invoke(group(), sweep_args(out, "--plans-dir", plans))
    assert result.exit_code == 0, (result.output, result.exception)
    [row] = complete_rows(out)
    assert row["status"] == "failed" and "plan not written" in row["reason"], row
    assert "1 failed" in result.stderr
    monkeypatch.undo()

    result = runner().invoke(group(), sweep_args(out, "--plans-dir", plans, "--resume"))
    assert result.exit_code == 0, (result.output, result.exception)
    [row] = complete_rows(out)
    assert row["status"] == "ok", row
    assert json.loads((plans / f"gpt2__{CLUSTER}__32__512.json").read_text())["training"]["global_batch"] == 32


def test_resume_retries_environmental_errors_of_older_files_and_keeps_input_errors(tmp_path):
    """Rows an older version wrote as `error` for a plan not written or a dead worker are
    planned again; an input error (no such model) stays as it was."""
    out = tmp_path / "r.csv"
    old = ["model", "cluster", "global_batch", "seq_len", "status", "reason"]
    with open(out, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(old)
        writer.writerow(["gpt2", CLUSTER, 32, 512, "error", "plan not written: r: cannot write: No space left"])
        writer.writerow(["gpt2", CLUSTER, 64, 512, "error", "worker failed: BrokenProcessPool: killed"])
        writer.writerow(["nope", CLUSTER, 32, 512, "error", "KEPT"])
    result = runner().invoke(group(), sweep_args(out, "--resume", models=("gpt2", "nope"), batches=(32, 64)))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = complete_rows(out)
    assert [(r["model"], r["global_batch"], r["status"]) for r in rows] == [
        ("gpt2", "32", "ok"), ("gpt2", "64", "ok"), ("nope", "32", "error"), ("nope", "64", "error")]
    assert rows[2]["reason"] == "KEPT"


# --- the lock ------------------------------------------------------------------------------------


def test_lock_file_symlink_is_refused_and_not_followed(tmp_path):
    out = tmp_path / "r.csv"
    victim = tmp_path / "victim"
    Path(f"{out}.lock").symlink_to(victim)  # dangling: following it would create the victim
    result = runner().invoke(group(), sweep_args(out))
    assert_bad_input(result, f"{out}.lock", "symbolic link")
    assert not victim.exists() and not out.exists()


def test_lock_file_symlink_to_an_existing_file_is_refused(tmp_path):
    out = tmp_path / "r.csv"
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    Path(f"{out}.lock").symlink_to(victim)
    assert_bad_input(runner().invoke(group(), sweep_args(out)), "symbolic link")
    assert victim.read_text() == "keep me" and Path(f"{out}.lock").is_symlink()


# --- --plans-dir names ---------------------------------------------------------------------------


def test_plans_dir_names_are_capped_and_stay_distinct(tmp_path):
    """A model given by a long path: the plan is written under a name of at most 128
    characters (a hash keeps it distinct), the same name every time."""
    deep = tmp_path / ("a" * 120) / ("b" * 120)
    deep.mkdir(parents=True)
    config = deep / "cfg.json"
    config.write_text(json.dumps(hf_config("gpt2") | {"_name_or_path": "gpt2-copy"}))
    out, plans = tmp_path / "r.csv", tmp_path / "plans"
    result = runner().invoke(group(), sweep_args(out, "--plans-dir", plans, models=(config,)))
    assert result.exit_code == 0, (result.output, result.exception)
    [row] = complete_rows(out)
    assert row["status"] == "ok", row
    [written] = list(plans.iterdir())
    assert len(written.name) <= sweep_rows.MAX_PLAN_NAME and written.name.endswith(".json")
    assert written.name == plan_file_name(Combination(0, str(config), CLUSTER, 32, 512))

    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    named = plan_file_names([Combination(0, long_a, CLUSTER, 8, 512), Combination(1, long_b, CLUSTER, 8, 512)])
    names = [c.plan_name for c in named]
    assert len(set(names)) == 2 and all(len(n) <= sweep_rows.MAX_PLAN_NAME for n in names), names
    again = plan_file_names([Combination(0, long_a, CLUSTER, 8, 512), Combination(1, long_b, CLUSTER, 8, 512)])
    assert names == [c.plan_name for c in again]  # deterministic


def test_columns_of_earlier_files_keep_their_place():
    """New columns come after the ones scripts already read, in the same order."""
    assert COLUMNS[:16] == ("model", "cluster", "global_batch", "seq_len", "status", "reason", "step_time_s",
                            "tokens_per_s", "mfu", "pp", "tp", "dp", "num_gpus_used", "solver_seconds", "runtime",
                            "any_runtime_step_s")


def test_an_os_error_while_planning_is_failed_and_a_bad_input_is_error(tmp_path, monkeypatch):
    """EIO while reading a model is the machine's fault (failed: --resume retries it); a
    folder given as the model file is the input's (error: kept)."""
    out = tmp_path / "r.csv"
    folder = tmp_path / "folder.json"
    folder.mkdir()

    def io_error(name):
        if name == "gpt2":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_model(name)

    real_model = sweep_rows.cached_model
    monkeypatch.setattr(sweep_rows, "cached_model", io_error)
    result = runner().invoke(group(), sweep_args(out, models=("gpt2", folder)))
    assert result.exit_code == 0, (result.output, result.exception)
    assert [r["status"] for r in complete_rows(out)] == ["failed", "error"]
    monkeypatch.undo()
    result = runner().invoke(group(), sweep_args(out, "--resume", models=("gpt2", folder)))
    assert result.exit_code == 0, (result.output, result.exception)
    assert [r["status"] for r in complete_rows(out)] == ["ok", "error"]
