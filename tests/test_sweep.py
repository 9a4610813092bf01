"""`planner sweep`: rows and statuses, CSV/JSONL, --jobs determinism, --resume, --shard, --plans-dir."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import click
import pytest

from planner.cli import PlannerGroup
from planner.errors import BadInput
from planner.plan import plan_from_json
from planner.sweep import COLUMNS, add_commands, combinations, parse_shard

from .conftest import runner

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


def run_sweep(*extra, models=MODELS, grp=None):
    args = ["sweep"]
    for m in models:
        args += ["--model", m]
    args += ["--cluster", CLUSTER]
    for b in BATCHES:
        args += ["--global-batch", str(b)]
    args += ["--seq-len", str(SEQ_LEN), *map(str, extra)]
    return runner().invoke(grp or group(), args)


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
    assert "nothing fits" in rows[4]["reason"]
    assert result.stdout == ""
    summary = result.stderr.strip().splitlines()
    assert len(summary) == 1 and "2 ok, 2 infeasible, 2 error" in summary[0], result.stderr


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


def test_csv_parallel_matches_sequential(base, tmp_path):
    _, _, csv_rows, _ = base
    out = tmp_path / "results.csv"
    result = run_sweep("--jobs", 2, "-o", out)
    assert result.exit_code == 0, (result.output, result.exception)
    header, rows = read_csv(out)
    assert header == list(COLUMNS)
    assert comparable(rows) == comparable(csv_rows)


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
