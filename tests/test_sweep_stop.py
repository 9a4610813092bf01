"""`planner sweep` stopped or raced: --resume never truncates the kept rows, one sweep per
output (a lock), Ctrl-C and SIGTERM keep the rows and exit 130 / 143, workers die with the
sweep (even on SIGKILL), and --plans-dir never follows a link nor gives two inputs one name."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from planner.sweep import executors
from planner.sweep import output as sweep_output
from planner.cli import PlannerGroup
from planner.core.outfile import exclusive_lock
from planner.cli.sweep import add_commands
from planner.sweep.run import COLUMNS, Combination, SweepInterrupted, plan_file_names, sweep

from .conftest import hf_config, runner

CLUSTER = "consumer-3090-4090"
ROOT = Path(__file__).resolve().parent.parent
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def group() -> click.Group:
    g = PlannerGroup()
    add_commands(g)
    return g


def sweep_args(out, *extra, models=("gpt2",), batches=(32,), seq_lens=(512,)) -> list[str]:
    args = ["sweep", "--cluster", CLUSTER]
    for m in models:
        args += ["--model", str(m)]
    for b in batches:
        args += ["--global-batch", str(b)]
    for s in seq_lens:
        args += ["--seq-len", str(s)]
    return args + ["-o", str(out), *map(str, extra)]


def error_row(batch: int) -> dict:
    return {c: "" for c in COLUMNS} | {"model": "nope", "cluster": CLUSTER, "global_batch": str(batch),
                                       "seq_len": "512", "status": "error", "reason": f"KEPT{batch}"}


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --- --resume -------------------------------------------------------------------------------


def test_resume_never_truncates_kept_rows(tmp_path, monkeypatch):
    """Killed while the kept rows are copied (here: the second row write raises), the output
    still holds every kept row, byte for byte, and no temporary file is left."""
    out = tmp_path / "r.csv"
    write_csv(out, [error_row(b) for b in (1, 2, 3)])
    before = out.read_bytes()
    calls = []
    real_write = sweep_output.RowWriter.write

    def write(self, row):
        calls.append(row)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the kill, halfway through the kept rows
        real_write(self, row)

    monkeypatch.setattr(sweep_output.RowWriter, "write", write)
    with pytest.raises(SweepInterrupted) as info:
        sweep(str(out), models=["nope"], clusters=[CLUSTER], batches=[1, 2, 3, 4], seq_lens=[512], jobs=1,
              resume=True)
    assert out.read_bytes() == before
    assert info.value.rows == 3 and info.value.exit_code == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


def test_resume_survives_a_failure_before_the_rename(tmp_path, monkeypatch):
    out = tmp_path / "r.jsonl"
    out.write_text("".join(json.dumps(error_row(b)) + "\n" for b in (1, 2)))
    before = out.read_bytes()

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("planner.core.outfile.os.replace", fail)
    result = runner().invoke(group(), sweep_args(out, "--resume", "--jobs", 1, models=("nope",), batches=(1, 2, 3)))
    assert result.exit_code == 2 and "No space left on device" in result.stderr, result.output
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_rows_are_flushed_per_row_and_fsynced_at_most_once_a_second(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(sweep_output.os, "fsync", lambda fd: synced.append(fd))
    with open(tmp_path / "r.csv", "w", newline="") as handle:
        writer = sweep_output.RowWriter(handle, ".csv")
        writer.write(error_row(1))
        writer.sync()
        assert (tmp_path / "r.csv").read_text().count("\n") == 1 and synced == []  # flushed, not yet fsynced
        writer.synced_at -= sweep_output.FSYNC_EVERY_S
        writer.sync()
        writer.sync()
        assert len(synced) == 1
        writer.sync(force=True)
        assert len(synced) == 2


# --- one sweep per output ---------------------------------------------------------------------


def test_second_sweep_on_the_same_output_exits_2(tmp_path):
    out = tmp_path / "r.csv"
    write_csv(out, [error_row(1)])
    before = out.read_bytes()
    with exclusive_lock(str(out), "another planner sweep"):  # what a running sweep holds
        result = runner().invoke(group(), sweep_args(out, "--jobs", 1, models=("nope",)))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "another planner sweep is writing this file" in lines[0]
    assert out.read_bytes() == before
    result = runner().invoke(group(), sweep_args(out, "--jobs", 1, models=("nope",)))
    assert result.exit_code == 0, result.output
    assert not Path(f"{out}.lock").exists()


def test_symlinked_output_is_refused(tmp_path):
    victim = tmp_path / "victim.csv"
    victim.write_text("keep me\n")
    out = tmp_path / "r.csv"
    out.symlink_to(victim)
    result = runner().invoke(group(), sweep_args(out, "--jobs", 1, models=("nope",)))
    assert result.exit_code == 2 and "symbolic link" in result.stderr, result.output
    assert victim.read_text() == "keep me\n" and out.is_symlink()


# --- signals (a real sweep in a subprocess) ---------------------------------------------------

SHORT = dict(batches=(8, 16, 32, 64, 128, 256))  # 6 rows of gpt2: still running when its first row is out
LONG = dict(models=("gpt2", "llama-3-8b"), batches=(8, 16, 32, 64, 128, 256), seq_lens=(512, 1024))  # 24 rows


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    out = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat_file.parent.name))
    return out


def alive(pids: list[int]) -> list[int]:
    live = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            live.append(pid)
    return live


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


def start_sweep(out: Path, spec: dict, jobs: int = 2) -> tuple[subprocess.Popen, list[int]]:
    """A sweep with `jobs` workers, in its own session (as a terminal's job is in its own
    process group); returns once a row is on disk, with the worker pids."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # Ctrl-C with its default action, as in a terminal: a test process may ignore SIGINT (a child
    # inherits SIG_IGN, and Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", *sweep_args(out, "--jobs", jobs, **spec)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = out.read_text().count("\n") - 1 if out.exists() else 0
        workers = children(proc.pid)
        if rows >= 1 and len(workers) >= jobs:
            return proc, workers
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the sweep did not start: {proc.communicate()}")


def stop(proc: subprocess.Popen, sig: int, *, group: bool) -> tuple[str, str]:
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
@linux_only
def test_ctrl_c_exits_130_keeps_rows_and_resume_continues(tmp_path):
    out = tmp_path / "r.csv"
    proc, workers = start_sweep(out, SHORT)
    # a second sweep on the same output while this one runs
    second = runner().invoke(group(), sweep_args(out, "--jobs", 1, models=("nope",)))
    assert second.exit_code == 2 and "another planner sweep" in second.stderr, second.output
    _, stderr = stop(proc, signal.SIGINT, group=True)  # Ctrl-C: the whole process group
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr, stderr
    rows = read_csv(out)
    assert stderr.strip().splitlines()[-1] == f"planner: interrupted: {len(rows)} rows written; --resume continues"
    assert 1 <= len(rows) < 6 and all(r["status"] == "ok" for r in rows)
    assert wait_gone(workers, 5) == []
    # --jobs 1: a pool forked from this test process, which has run HiGHS solves (other
    # tests), can hang in HiGHS's scheduler (not fork-safe); the CLI never forks after a solve
    result = runner().invoke(group(), sweep_args(out, "--resume", "--jobs", 1, **SHORT))
    assert result.exit_code == 0, result.output
    assert f"{len(rows)} kept" in result.stderr
    final = read_csv(out)
    assert [int(r["global_batch"]) for r in final] == list(SHORT["batches"])
    assert all(r["status"] == "ok" for r in final)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


@linux_only
def test_sigterm_exits_143_keeps_rows_and_stops_workers(tmp_path):
    out = tmp_path / "r.jsonl"
    proc, workers = start_sweep(out, LONG)
    _, stderr = stop(proc, signal.SIGTERM, group=False)  # the main process only (as `kill PID`)
    assert proc.returncode == 143, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert stderr.strip().splitlines() == [f"planner: interrupted: {len(rows)} rows written; --resume continues"]
    assert wait_gone(workers, 5) == []


@linux_only
def test_workers_die_with_the_sweep_on_sigkill(tmp_path):
    out = tmp_path / "r.csv"
    proc, workers = start_sweep(out, LONG)
    stop(proc, signal.SIGKILL, group=False)
    assert wait_gone(workers, 5) == [], "workers outlived a killed sweep"
    assert read_csv(out)  # the rows written before the kill are there
    # the killed sweep's lock died with it
    result = runner().invoke(group(), sweep_args(out, "--resume", "--jobs", 1, models=("nope",)))
    assert result.exit_code == 0, result.output


@linux_only
def test_worker_sets_its_parent_death_signal():
    assert executors.die_with_parent(os.getppid()) == "prctl"  # in this test process: harmless,
    # pytest's parent outlives it; prctl(PR_GET_PDEATHSIG) reads it back
    import ctypes

    value = ctypes.c_int()
    assert ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0) == 0 and value.value == signal.SIGKILL
    ctypes.CDLL(None).prctl(executors.PR_SET_PDEATHSIG, 0, 0, 0, 0)  # undo


def test_interrupt_of_any_command_exits_130():
    g = PlannerGroup()

    @g.command("slow")
    def slow():
        raise KeyboardInterrupt

    result = runner().invoke(g, ["slow"])
    assert result.exit_code == 130 and result.stderr.strip() == "planner: interrupted", result.output


# --- --plans-dir --------------------------------------------------------------------------------


def test_plans_dir_symlink_is_refused_not_followed(tmp_path):
    plans = tmp_path / "plans"
    plans.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("keep me")
    (plans / f"gpt2__{CLUSTER}__32__512.json").symlink_to(victim)
    out = tmp_path / "r.csv"
    result = runner().invoke(group(), sweep_args(out, "--jobs", 1, "--plans-dir", plans, batches=(32, 64)))
    assert result.exit_code == 0, result.output
    rows = read_csv(out)
    assert rows[0]["status"] == "failed" and "symbolic link" in rows[0]["reason"], rows[0]
    assert rows[1]["status"] == "ok"
    assert victim.read_text() == "keep me"
    assert json.loads((plans / f"gpt2__{CLUSTER}__64__512.json").read_text())["training"]["global_batch"] == 64


def test_plans_dir_names_distinct_inputs_apart(tmp_path, monkeypatch):
    """`../cfg.json` and `./cfg.json` are different models with the same safe name: each gets
    its own plan file (a hash of the resolved path added), deterministically."""
    work = tmp_path / "work"
    work.mkdir()
    for folder, layers in ((tmp_path, 2), (work, 4)):
        config = hf_config("gpt2") | {"n_layer": layers}
        (folder / "cfg.json").write_text(json.dumps(config))
    monkeypatch.chdir(work)
    result = runner().invoke(group(), sweep_args("r.csv", "--jobs", 1, "--plans-dir", "plans",
                                                 models=("../cfg.json", "./cfg.json"), batches=(8,)))
    assert result.exit_code == 0, result.output
    rows = read_csv(work / "r.csv")
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    files = sorted((work / "plans").iterdir())
    assert len(files) == 2, files
    combos = plan_file_names([Combination(0, "../cfg.json", CLUSTER, 8, 512),
                              Combination(1, "./cfg.json", CLUSTER, 8, 512)])
    assert [f.name for f in files] == sorted(c.plan_name for c in combos)
    for combo, layers in zip(combos, (2, 4)):
        assert combo.plan_name.startswith(f"_cfg.json__{CLUSTER}__8__512-")
        plan = json.loads((work / "plans" / combo.plan_name).read_text())
        assert plan["model"]["config"]["n_layer"] == layers
    plain = plan_file_names([Combination(0, "gpt2", CLUSTER, 8, 512), Combination(1, "./cfg.json", CLUSTER, 8, 512)])
    assert [c.plan_name for c in plain] == [f"gpt2__{CLUSTER}__8__512.json", f"_cfg.json__{CLUSTER}__8__512.json"]
