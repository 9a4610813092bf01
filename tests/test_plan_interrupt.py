"""Ctrl-C during `planner plan`: the best plan found so far is printed and written, exit 130."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from planner.core.errors import NoFeasiblePlan
from planner.plan import plan_from_json, structural_problems

from .conftest import invoke

# a search of about a minute here (three GPU types, per-stage freedom), with a plan within seconds
LONG_SEARCH = ["plan", "--model", "llama-3-70b", "--cluster", "h100-a100-v100", "--global-batch", "512",
               "--seq-len", "4096", "--runtime", "any", "--jobs", "2"]


def _read_until(fd: int, pattern: str, timeout_s: float) -> str:
    """What the terminal shows until `pattern` appears (the progress line drawn on a tty)."""
    seen, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline and not re.search(pattern, seen):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536).decode(errors="replace")
            except OSError:
                break
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="a terminal and process groups")
def test_ctrl_c_prints_and_writes_the_best_plan_so_far_and_exits_130(tmp_path):
    out = tmp_path / "plan.json"
    master, slave = pty.openpty()  # stderr on a terminal: the progress line shows the best step so far
    process = subprocess.Popen([sys.executable, "-m", "planner.cli", *LONG_SEARCH, "-o", str(out)],
                               stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                               start_new_session=True, env={**os.environ, "TERM": "xterm", "COLUMNS": "200"})
    os.close(slave)
    try:
        shown = _read_until(master, r"best step \d", 120)
        assert re.search(r"best step \d", shown), shown
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the parent and its lane processes
        stdout, _ = process.communicate(timeout=120)
        shown += _read_until(master, r"interrupted", 5)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert process.returncode == 130, shown
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown
    assert "interrupted: the plan above is the best found so far" in shown
    text = stdout.decode()
    assert "not proven optimal" in text and "plan written to" in text
    data = json.loads(out.read_text())
    assert data["solver"]["optimal"] is False
    assert not structural_problems(plan_from_json(data))


def test_ctrl_c_before_any_plan_exits_130_with_one_line(monkeypatch, tmp_path):
    from planner.cli import plan as plan_cli
    from planner.core.clock import request_stop

    def stopped(*_args, **_kwargs):
        request_stop()  # as the SIGINT handler would, before the search found anything
        raise NoFeasiblePlan("no plan found before the search was stopped")

    monkeypatch.setattr(plan_cli, "plan_top", stopped)
    result = invoke("plan", "--model", "gpt2", "--seq-len", "1024", "-o", tmp_path / "p.json")
    assert result.exit_code == 130
    assert result.stderr.strip().splitlines() == ["planner: interrupted before a plan was found"]
    assert not (tmp_path / "p.json").exists()
