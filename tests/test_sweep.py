"""`planner sweep`: rows and statuses, CSV/JSONL, --jobs determinism, --resume, --shard, --plans-dir,
and --executor ray (the same rows as the local executor)."""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from planner.cli import PlannerGroup
from planner.core.errors import BadInput
from planner.plan import plan_from_json
from planner.sweep import executors
from planner.cli.sweep import add_commands
from planner.sweep.run import COLUMNS, combinations, parse_shard, plan_combination

from .conftest import SMALL_CLUSTER_YAML, assert_bad_input, runner

CLUSTER = "consumer-3090-4090"
MODELS = ("gpt2", "nope", "llama-3.1-405b")  # ok, error (no such model), infeasible (fits nowhere)
BATCHES = (32, 64)
SEQ_LEN = 512
EXPECTED = [(m, b, {"gpt2": "ok", "nope": "error", "llama-3.1-405b": "infeasible"}[m])
            for m in MODELS for b in BATCHES]  # combination order: models outermost


def group(cls=click.Group) -> click.Group:
    g = cls()
    add_commands(g)
    return g


def sweep_args(*extra, models=MODELS, cluster=CLUSTER, batches=BATCHES) -> list[str]:
    args = ["sweep"]
    for m in models:
        args += ["--model", m]
    args += ["--cluster", str(cluster)]
    for b in batches:
        args += ["--global-batch", str(b)]
    return args + ["--seq-len", str(SEQ_LEN), *map(str, extra)]


def run_sweep(*extra, models=MODELS, grp=None, **kwargs):
    return runner().invoke(grp or group(), sweep_args(*extra, models=models, **kwargs))


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def comparable(rows: list[dict]) -> list[dict]:
    """Every column but solver_seconds, as CSV text (None -> '')."""
    return [{c: "" if r[c] is None else str(r[c]) for c in COLUMNS if c != "solver_seconds"} for r in rows]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One sequential CSV sweep with --plans-dir, shared by several tests."""
    tmp = tmp_path_factory.mktemp("sweep")
    out, plans = tmp / "results.csv", tmp / "plans"
    result = run_sweep("--jobs", 1, "--plans-dir", plans, "-o", out)
    assert result.exit_code == 0, (result.output, result.exception)
    header, rows = read_csv(out)
    return result, header, rows, plans


@pytest.mark.slow
def test_csv_rows_columns_and_statuses(base):
    result, header, rows, _ = base
    assert header == list(COLUMNS)
    assert [(r["model"], int(r["global_batch"]), r["status"]) for r in rows] == EXPECTED
    for r in rows:
        assert r["cluster"] == CLUSTER and r["seq_len"] == str(SEQ_LEN)
        if r["status"] == "ok":
            assert r["reason"] == ""
            assert float(r["step_time_s"]) > 0 and float(r["tokens_per_s"]) > 0 and 0 < float(r["mfu"]) < 1
            pp, tp, dp, used = (int(r[c]) for c in ("pp", "tp", "dp", "num_gpus_used"))
            assert pp >= 1 and tp >= 1 and dp >= 1 and 1 <= used <= 16
            assert float(r["solver_seconds"]) >= 0
        else:
            assert r["reason"] and "\n" not in r["reason"]
            assert all(r[c] == "" for c in ("step_time_s", "tokens_per_s", "mfu", "pp", "tp", "dp", "num_gpus_used"))
    assert "nope" in rows[2]["reason"]
    assert "no configuration fits" in rows[4]["reason"] and "GiB" in rows[4]["reason"]
    assert result.stdout == ""
    summary = result.stderr.strip().splitlines()
    assert len(summary) == 1 and "2 ok, 2 infeasible, 2 error" in summary[0], result.stderr


@pytest.mark.slow
def test_plans_dir_one_loadable_json_per_ok_row(base):
    _, _, rows, plans = base
    ok = [r for r in rows if r["status"] == "ok"]
    files = sorted(p.name for p in plans.iterdir())
    assert files == sorted(f"gpt2__{CLUSTER}__{r['global_batch']}__{SEQ_LEN}.json" for r in ok)
    for r in ok:
        data = json.loads((plans / f"gpt2__{CLUSTER}__{r['global_batch']}__{SEQ_LEN}.json").read_text())
        plan = plan_from_json(data)
        assert plan.training.global_batch == int(r["global_batch"])
        assert plan.pp == int(r["pp"])
        assert data["predicted"]["step_time_s"] == pytest.approx(float(r["step_time_s"]))


@pytest.mark.slow
def test_jsonl_parallel_matches_sequential(base, tmp_path):
    _, _, csv_rows, _ = base
    out = tmp_path / "results.jsonl"
    result = run_sweep("--jobs", 2, "-o", out)
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read_jsonl(out)
    assert all(list(r) == list(COLUMNS) for r in rows)
    assert [r["status"] for r in rows] == [s for _, _, s in EXPECTED]
    assert all(isinstance(r["global_batch"], int) for r in rows)
    assert comparable(rows) == comparable(csv_rows)


@pytest.mark.slow
def test_csv_parallel_matches_sequential(base, tmp_path):
    _, _, csv_rows, _ = base
    out = tmp_path / "results.csv"
    result = run_sweep("--jobs", 2, "-o", out)
    assert result.exit_code == 0, (result.output, result.exception)
    header, rows = read_csv(out)
    assert header == list(COLUMNS)
    assert comparable(rows) == comparable(csv_rows)


@pytest.mark.slow
def test_resume_keeps_existing_rows(base, tmp_path):
    _, _, csv_rows, _ = base
    out = tmp_path / "results.csv"
    marker = dict(csv_rows[1], tokens_per_s="12345", reason="MARKER")  # gpt2, batch 64
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerow(marker)
        f.write("gpt2,consumer-3090-4090,32,512,o")  # a row torn by an interruption: recomputed
    result = run_sweep("--resume", "--jobs", 1, "-o", out)
    assert result.exit_code == 0, (result.output, result.exception)
    _, rows = read_csv(out)
    assert [(r["model"], int(r["global_batch"]), r["status"]) for r in rows] == EXPECTED
    assert rows[1]["tokens_per_s"] == "12345" and rows[1]["reason"] == "MARKER"  # not recomputed
    assert comparable([rows[0]]) == comparable([csv_rows[0]])
    assert "1 kept" in result.stderr


def test_resume_jsonl_all_done_computes_nothing(tmp_path):
    out = tmp_path / "r.jsonl"
    rows = [{c: None for c in COLUMNS} | {"model": "nope", "cluster": CLUSTER, "global_batch": b,
                                         "seq_len": SEQ_LEN, "status": "error", "reason": f"MARK{b}"}
            for b in BATCHES]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_sweep("--resume", "-o", out, models=("nope",))
    assert result.exit_code == 0, (result.output, result.exception)
    assert [r["reason"] for r in read_jsonl(out)] == ["MARK32", "MARK64"]


@pytest.mark.slow
def test_shards_cover_every_combination_once(base, tmp_path):
    _, _, csv_rows, _ = base
    keys = []
    for i in range(2):
        out = tmp_path / f"shard{i}.csv"
        result = run_sweep("--shard", f"{i}/2", "--jobs", 1, "-o", out)
        assert result.exit_code == 0, (result.output, result.exception)
        _, rows = read_csv(out)
        expected = [e for k, e in enumerate(EXPECTED) if k % 2 == i]
        assert [(r["model"], int(r["global_batch"]), r["status"]) for r in rows] == expected
        keys += [(r["model"], r["global_batch"]) for r in rows]
    assert sorted(keys) == sorted((r["model"], r["global_batch"]) for r in csv_rows)
    assert len(keys) == len(set(keys)) == len(EXPECTED)


def test_bad_output_extension_is_bad_input(tmp_path):
    out = tmp_path / "results.txt"
    result = run_sweep("-o", out, models=("gpt2",), grp=group(PlannerGroup))
    assert result.exit_code == 2, (result.output, result.exception)
    assert "-o" in result.stderr and "Traceback" not in result.output
    assert not out.exists()
    plain = run_sweep("-o", out, models=("gpt2",))
    assert isinstance(plain.exception, BadInput) and plain.exception.where == "-o"


@pytest.mark.parametrize("shard", ["2/2", "1", "a/b", "0/0"])
def test_bad_shard_is_usage_error(tmp_path, shard):
    result = run_sweep("--shard", shard, "-o", tmp_path / "r.csv", models=("gpt2",), grp=group(PlannerGroup))
    assert result.exit_code == 2
    assert "--shard" in result.stderr


def test_combination_order_and_shard_parsing():
    combos = combinations(["a", "b", "a"], ["x"], [1, 2], [7])
    assert [(c.index, c.model, c.global_batch) for c in combos] == [(0, "a", 1), (1, "a", 2), (2, "b", 1), (3, "b", 2)]
    assert parse_shard("1/4") == (1, 4)
    assert parse_shard(None) is None
    with pytest.raises(BadInput):
        parse_shard("4/4")


def test_help_documents_slurm_sharding():
    result = runner().invoke(group(), ["sweep", "--help"])
    assert result.exit_code == 0
    assert "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" in result.output
    assert "--executor [local|ray]" in result.output and "RAY_ADDRESS=" in result.output


# --- --executor ray ------------------------------------------------------------------------------
# Small and fast: a one-node cluster file, one batch, three models (ok, error, infeasible).

RAY_MODELS = ("gpt2", "nope", "llama-3.1-405b")
RAY_STATUSES = ["ok", "error", "infeasible"]


@pytest.fixture(scope="module")
def ray():
    """`make test` installs the ray extra and sets PLANNER_REQUIRE_RAY=1: a missing ray fails there."""
    if os.environ.get("PLANNER_REQUIRE_RAY"):
        return importlib.import_module("ray")
    return pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_inputs(tmp_path_factory):
    """The cluster file, and the local executor's rows and plans to compare with."""
    tmp = tmp_path_factory.mktemp("ray")
    cluster = tmp / "small.yaml"
    cluster.write_text(SMALL_CLUSTER_YAML)
    out, plans = tmp / "local.csv", tmp / "local-plans"
    result = run_sweep("--executor", "local", "--jobs", 1, "--plans-dir", plans, "-o", out, models=RAY_MODELS,
                       cluster=cluster, batches=(8,))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read_csv(out)[1]
    assert [r["status"] for r in rows] == RAY_STATUSES
    return cluster, rows, plans


def plan_files(folder: Path) -> dict[str, dict]:
    """The plans in a folder, by file name, without the solver's wall time."""
    plans = {}
    for path in sorted(folder.iterdir()):
        data = json.loads(path.read_text())
        data["solver"].pop("seconds")
        plans[path.name] = data
    return plans


@pytest.mark.slow
def test_ray_rows_equal_local_rows(ray, ray_inputs, tmp_path, monkeypatch):
    """No RAY_ADDRESS: a local Ray is started for the run (--jobs 2), then shut down."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized(), "this test starts its own Ray: run it before the ray_cluster fixture"
    cluster, local_rows, local_plans = ray_inputs
    out, plans = tmp_path / "ray.jsonl", tmp_path / "plans"
    result = run_sweep("--executor", "ray", "--jobs", 2, "--plans-dir", plans, "-o", out, models=RAY_MODELS,
                       cluster=cluster, batches=(8,))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read_jsonl(out)
    assert all(list(r) == list(COLUMNS) for r in rows)
    assert comparable(rows) == comparable(local_rows)
    assert plan_files(plans) == plan_files(local_plans) and len(plan_files(plans)) == 1
    assert result.stderr.strip().splitlines() == ["planner sweep: 1 ok, 1 infeasible, 1 error "
                                                  f"(3 rows in {out})"]
    assert not ray.is_initialized()  # the Ray it started is shut down


@pytest.mark.slow
def test_ray_address_unreachable_is_bad_input(ray, ray_inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nobody listens: fails at once, not after minutes
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    out = tmp_path / "r.csv"
    result = run_sweep("--executor", "ray", "-o", out, models=("gpt2",), cluster=ray_inputs[0], batches=(8,),
                       grp=group(PlannerGroup))
    assert_bad_input(result, "RAY_ADDRESS=127.0.0.1:1", "cannot connect to Ray")
    assert not out.exists()


@pytest.fixture(scope="module")
def ray_cluster(ray):
    """A Ray started by this process (2 CPUs), shared by the tests below; its address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.mark.slow
def test_ray_resume_and_shard(ray, ray_cluster, ray_inputs, tmp_path):
    """A Ray the caller initialized is used and left running; --resume and --shard work."""
    cluster, local_rows, _ = ray_inputs
    out = tmp_path / "ray.csv"
    marker = dict(local_rows[1], reason="MARKER")  # nope: kept, not recomputed
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerow(marker)
    result = run_sweep("--executor", "ray", "--resume", "-o", out, models=RAY_MODELS, cluster=cluster,
                       batches=(8,))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read_csv(out)[1]
    assert comparable(rows) == comparable([local_rows[0], marker, local_rows[2]])
    assert "1 kept" in result.stderr
    for i in range(2):
        out = tmp_path / f"shard{i}.csv"
        result = run_sweep("--executor", "ray", "--shard", f"{i}/2", "-o", out, models=RAY_MODELS, cluster=cluster,
                           batches=(8,))
        assert result.exit_code == 0, (result.output, result.exception)
        assert comparable(read_csv(out)[1]) == comparable(local_rows[i::2])
    assert ray.is_initialized()


@pytest.mark.slow
def test_ray_failed_task_is_a_failed_row(ray, ray_cluster, ray_inputs, tmp_path, monkeypatch):
    cluster, local_rows, _ = ray_inputs

    def task(combo, time_limit, want_plan, model, cluster):  # pickled by value: runs on the workers
        if combo.model == "gpt2":
            raise ValueError("boom")
        return plan_combination(combo, time_limit, want_plan, model, cluster)

    monkeypatch.setattr(executors, "_ray_task", task)
    out = tmp_path / "ray.csv"
    result = run_sweep("--executor", "ray", "--jobs", 1, "-o", out, models=RAY_MODELS, cluster=cluster,
                       batches=(8,))
    assert result.exit_code == 0, (result.output, result.exception)
    rows = read_csv(out)[1]
    assert [r["status"] for r in rows] == ["failed", "error", "infeasible"]
    assert rows[0]["reason"] == "worker failed: ValueError: boom"
    assert comparable(rows[1:]) == comparable(local_rows[1:])


@pytest.mark.slow
def test_ray_address_connects_and_leaves_the_cluster_running(ray, ray_cluster, ray_inputs, tmp_path):
    """RAY_ADDRESS names a running cluster: the sweep connects to it and does not stop it."""
    cluster, local_rows, _ = ray_inputs
    out = tmp_path / "ray.csv"
    code = "import sys; from planner.cli import main; main(sys.argv[1:])"
    args = sweep_args("--executor", "ray", "-o", out, models=RAY_MODELS, cluster=cluster, batches=(8,))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_ADDRESS": ray_cluster})
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert comparable(read_csv(out)[1]) == comparable(local_rows)
    assert ray.get(ray.remote(lambda: 42).remote()) == 42  # still running


def test_ray_missing_exit_2_with_an_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "r.csv"
    result = run_sweep("--executor", "ray", "-o", out, models=("gpt2",), grp=group(PlannerGroup))
    line = assert_bad_input(result, "--executor ray", "pip install 'planner[ray]'")
    assert "Traceback" not in result.stderr, line
    assert not out.exists()


def test_core_imports_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import planner.cli, planner.sweep.run, planner.sweep.executors\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


class FakeRay:
    """Just enough of ray for run_ray: tasks run at once, and finish newest first, one per wait."""

    def __init__(self):
        self.results, self.most, self.cancelled = {}, 0, []

    def put(self, value):
        return value

    def remote(self, **options):
        def wrap(fn):
            def submit(*args):
                ref = object()
                self.results[ref] = fn(*args)
                self.most = max(self.most, len(self.results))
                return ref
            return type("Task", (), {"remote": staticmethod(submit)})
        return wrap

    def wait(self, refs, num_returns):
        return [refs[-1]], refs[:-1]

    def get(self, ref):
        return self.results.pop(ref)

    def cancel(self, ref):
        self.cancelled.append(ref)


def test_run_ray_keeps_at_most_jobs_tasks_in_flight(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(executors, "_ray_task", lambda combo, *args: ({"i": combo.index}, None))
    todo = combinations(["nope"], ["nope"], [1, 2, 3, 4, 5], [7])
    rows = []
    executors.run_ray(fake, 2, todo, None, None, lambda index, row: rows.append((index, row["i"])))
    assert fake.most == 2 and not fake.results and not fake.cancelled
    assert sorted(rows) == [(i, i) for i in range(5)]


def test_run_ray_interrupted_cancels_what_is_in_flight(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(executors, "_ray_task", lambda combo, *args: ({}, None))

    def on_row(index, row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        executors.run_ray(fake, 3, combinations(["nope"], ["nope"], [1, 2, 3, 4, 5], [7]), None, None, on_row)
    assert len(fake.cancelled) == 2 and set(fake.cancelled) == set(fake.results)


@pytest.mark.slow
def test_rows_name_their_runtime_and_what_any_would_reach(base, tmp_path):
    _, _, rows, _ = base
    for r in rows:
        assert r["runtime"] == "megatron"  # the default, as `planner plan`
        assert r["any_runtime_step_s"] == ""  # not searched without --compare-any
    out = tmp_path / "compare.csv"
    result = run_sweep("--compare-any", "-o", out, models=("gpt2",), batches=(32,))
    assert result.exit_code == 0, (result.output, result.exception)
    _, compared = read_csv(out)
    assert compared[0]["status"] == "ok"
    assert 0 < float(compared[0]["any_runtime_step_s"]) <= float(compared[0]["step_time_s"])


def test_runtime_option_plans_for_that_runtime(tmp_path):
    out = tmp_path / "any.csv"
    result = run_sweep("--runtime", "any", "-o", out, models=("gpt2",), batches=(32,))
    assert result.exit_code == 0, (result.output, result.exception)
    _, rows = read_csv(out)
    assert rows[0]["status"] == "ok" and rows[0]["runtime"] == "any" and rows[0]["any_runtime_step_s"] == ""
    bad = run_sweep("--runtime", "colossalai", "-o", tmp_path / "bad.csv", models=("gpt2",), batches=(32,),
                    grp=group(PlannerGroup))
    assert bad.exit_code == 2 and "--runtime" in bad.stderr and not (tmp_path / "bad.csv").exists()
