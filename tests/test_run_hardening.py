"""`planner run` on bad input and a bad launch environment: exit 2 with one line naming the
flag, variable or file (never an internal error, never a hang); a diverging run stops with
exit 1 and never prints a non-finite number; --save-params never writes through a link.
Tiny llama (4 blocks, hidden 32, seq 16) on the CPU, a step or two each."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.core.errors import BadInput
from planner.plan import Plan, Replica, Stage, Training

from .conftest import assert_bad_input, invoke, require, strict_json
from .test_runtime import CLUSTER, LLAMA, MODELS, TRAINING, write_plan

torch = require("torch", "PLANNER_REQUIRE_TORCH")
pytestmark = pytest.mark.torch

from planner.inputs.model import model_from_dict  # noqa: E402
from planner.runner.launch import Launch, RunOptions, load_run_plan, run_plan  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NO_LAUNCH = {name: None for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}


def one_rank(model=MODELS["llama"], training: Training = TRAINING) -> Plan:
    return Plan(model, CLUSTER, training, (Stage(0, (0, 6), 1, 0, "none", (Replica(0, 8, (0,)),), 0),))


def two_ranks() -> Plan:
    """Two pipeline stages, one rank each."""
    return Plan(MODELS["llama"], CLUSTER, TRAINING,
                (Stage(0, (0, 3), 1, 0, "none", (Replica(0, 8, (0,)),), 0),
                 Stage(1, (3, 6), 1, 0, "none", (Replica(0, 8, (1,)),), 1)))


@pytest.fixture
def one_rank_file(tmp_path) -> Path:
    return write_plan(one_rank(), tmp_path / "plan.json")


def run_cli(*args, env: dict | None = None):
    return invoke("run", *args, env={**NO_LAUNCH, **(env or {})})


def run_process(plan: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """`planner run PLAN` as its own process with `env` added: a hang fails the test (timeout)."""
    full = {k: v for k, v in os.environ.items() if k not in NO_LAUNCH}
    full.update(env, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "planner.cli", "run", str(plan), "--steps", "1"],
                          capture_output=True, text=True, env=full, timeout=120, cwd=cwd)


def assert_one_line_exit_2(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.startswith("planner:")]
    assert len(lines) == 1 and "internal error" not in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --- flags and files ------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"\x01\x00" * 16], ids=["empty", "16 tokens"])
def test_a_token_file_shorter_than_one_sample_is_bad_input(one_rank_file, tmp_path, content):
    tokens = tmp_path / "tokens.bin"
    tokens.write_bytes(content)
    assert_bad_input(run_cli(one_rank_file, "--data", tokens), str(tokens), f"{len(content) // 2} tokens",
                     "seq_len + 1 = 17")


@pytest.mark.parametrize("lr", ["1e300", "inf", "nan", "11"])
def test_a_learning_rate_past_sane_is_bad_input(one_rank_file, lr):
    assert_bad_input(run_cli(one_rank_file, "--lr", lr), "--lr", "0 < LR <= 10")


def test_a_seed_past_64_bits_is_bad_input(one_rank_file):
    assert_bad_input(run_cli(one_rank_file, "--seed", str(2**63)), "--seed", "0..2**63-1")
    assert_bad_input(run_cli(one_rank_file, "--seed", "99999999999999999999999"), "--seed")


@pytest.mark.slow
def test_the_largest_seed_trains(one_rank_file):
    result = run_cli(one_rank_file, "--seed", str(2**63 - 1), "--steps", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["step"] == 1


@pytest.mark.parametrize("head_dim", [7, 1])
def test_an_odd_rotary_head_dim_is_bad_input(tmp_path, head_dim):
    model = model_from_dict({**LLAMA, "head_dim": head_dim}, "tiny-llama")
    path = write_plan(one_rank(model), tmp_path / "plan.json")
    assert_bad_input(run_cli(path), "model.config.head_dim", f"even head_dim, this model's is {head_dim}")


def test_save_params_refuses_a_link_before_training(one_rank_file, tmp_path):
    folder = tmp_path / "params"
    folder.mkdir()
    victim = tmp_path / "victim.pt"
    (folder / "rank0.pt").symlink_to(victim)
    assert_bad_input(run_cli(one_rank_file, "--steps", "1", "--save-params", folder), "rank0.pt", "symbolic link")
    assert not victim.exists() and (folder / "rank0.pt").is_symlink()


@pytest.mark.slow
def test_save_params_writes_a_loadable_file(one_rank_file, tmp_path):
    folder = tmp_path / "params"
    folder.mkdir()
    result = run_cli(one_rank_file, "--steps", "1", "--save-params", folder)
    assert result.exit_code == 0, result.output
    saved = torch.load(folder / "rank0.pt")
    assert saved["plan_rank"] == 0 and sorted(saved["layers"]) == list(range(6))
    assert [p.name for p in folder.iterdir()] == ["rank0.pt"]  # no temporary file left


# --- divergence -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_diverging_run_stops_with_exit_1_and_no_nan(tmp_path):
    """fp16 at lr 10: the first update overflows fp16 activations, the loss turns NaN."""
    path = write_plan(one_rank(training=replace(TRAINING, dtype="fp16")), tmp_path / "plan.json")
    log = tmp_path / "log.jsonl"
    result = run_cli(path, "--steps", "4", "--lr", "10", "--log-file", log)
    assert result.exit_code == 1, result.output
    records = [strict_json(line) for line in result.stdout.splitlines()]
    assert 1 <= len(records) < 4
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "training diverged" in lines[0] and f"step {len(records) + 1}" in lines[0], lines
    assert "internal error" not in lines[0]
    assert log.read_text() == result.stdout


# --- the launch environment -----------------------------------------------------------------------


@pytest.mark.parametrize("env,where", [
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, "MASTER_ADDR"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http"}, "MASTER_PORT"),
    ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK"),
    ({"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK"),
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK"),
    ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE"),
    ({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "-1"}, "LOCAL_RANK"),
])
def test_a_bad_launch_environment_is_bad_input_naming_the_variable(env, where):
    with pytest.raises(BadInput) as caught:
        Launch.from_env(env)
    assert str(caught.value).startswith(f"{where}: "), str(caught.value)


def test_torchrun_environment_is_read():
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"}
    assert Launch.from_env(env) == Launch(3, 4, "env://", 1)
    assert Launch.from_env({}) == Launch()


def test_world_size_without_master_addr_exits_2(tmp_path):
    path = write_plan(two_ranks(), tmp_path / "plan.json")
    assert_bad_input(run_cli(path, env={"WORLD_SIZE": "2", "RANK": "0"}), "MASTER_ADDR", "WORLD_SIZE=2")


@pytest.mark.slow
def test_a_rank_outside_the_world_exits_2_at_once(tmp_path):
    path = write_plan(two_ranks(), tmp_path / "plan.json")
    env = {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert_one_line_exit_2(run_process(path, env, tmp_path), "RANK", "outside the world")


@pytest.mark.slow
def test_a_master_port_in_use_exits_2(tmp_path):
    path = write_plan(two_ranks(), tmp_path / "plan.json")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        done = run_process(path, env, tmp_path)
    assert_one_line_exit_2(done, "MASTER_PORT", f"127.0.0.1:{port}", "in use")


def test_a_rendezvous_without_peers_times_out_as_bad_input(tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    plan, predicted = load_run_plan(str(write_plan(two_ranks(), tmp_path / "plan.json")))
    launch = Launch(1, 2, f"tcp://127.0.0.1:{port}")  # rank 1 of 2; rank 0 never starts
    with pytest.raises(BadInput, match="could not meet"):
        list(run_plan(plan, RunOptions(steps=1, timeout_s=1), predicted, launch))
