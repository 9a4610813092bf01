"""`planner show`: the terminal view of a plan file and its pipeline timeline (SVG)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import os

import pytest
from click.testing import CliRunner

from planner.cost.runtimes import training_params
from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.verify.plan_checks import load_plan_file as load_plan
from planner.cli.show import add_commands
from planner.report.show import rank_timings, simulate

SPEC = {"name": "four", "node_groups": [{
    "name": "g", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 4,
    "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
    "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}



def _need_matplotlib() -> None:
    """`make test` installs the viz extra (PLANNER_REQUIRE_TORCH is its marker): fail there."""
    if os.environ.get("PLANNER_REQUIRE_TORCH"):
        __import__("matplotlib")
    else:
        pytest.importorskip("matplotlib")

def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


def show(*args: str, env: dict | None = None):
    group = click.Group()
    add_commands(group)
    return _runner().invoke(group, ["show", *map(str, args)], env=env)


def _uniform(schedule: str = "1f1b", virtual_stages: int = 1, global_batch: int = 16):
    training = Training(global_batch, 512, "bf16", 2, schedule, virtual_stages)
    return uniform_plan(load_model("gpt2"), cluster_from_spec(SPEC), training, tp=1, pp=2, dp=2)


@pytest.fixture(scope="module")
def uniform_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("show") / "uniform.json"
    path.write_text(json.dumps(plan_to_json(_uniform())))
    return path


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory) -> Path:
    # a 1F1B plan with uneven replicas (interleaving, which the solver now prefers here, has
    # its own test below)
    # runtime: any (uneven replicas); 1F1B only (ZB-H1, which wins here under any, has its own tests)
    result = solve(load_model("gpt2-xl"), load_cluster("a100-v100-mix"), Training(64, 1024, "fp16", 1, runtime="any"),
                   SolverOptions(virtual_stages=(1,), zero_bubble=False))
    path = tmp_path_factory.mktemp("show") / "mixed.json"
    path.write_text(json.dumps(plan_to_json(result.plan)))
    return path


# --- terminal view -------------------------------------------------------------------------


def test_show_uniform_plan_prints_stages_memory_and_time(uniform_file):
    result = show(uniform_file, env={"NO_COLOR": "1"})
    assert result.exit_code == 0, (result.output, result.exception)
    out = result.stdout
    assert "gpt2 on four" in out
    assert "Stages on devices" in out and "embed..block.5" in out and "block.6..head" in out
    assert "2× A100-80G" in out and "2 × 8 samples" in out and "A100-80G = A100-SXM4-80GB" in out
    assert "Memory per device" in out and "/80 (" in out and "·" in out
    for part in ("compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer"):
        assert part in out
    assert "tokens/s" in out and "MFU" in out and "bubble" in out
    assert "\x1b[" not in out


def test_show_mixed_plan_lists_both_gpu_types(mixed_file):
    result = show(mixed_file)
    assert result.exit_code == 0, (result.output, result.exception)
    out = result.stdout
    assert "gpt2-xl on a100-v100-mix" in out
    assert "V100-SXM2-32GB" in out and "A100-SXM4-80GB" in out
    assert "/32 (" in out and "/80 (" in out  # memory against each type's capacity
    plan = load_plan(str(mixed_file))  # priced as `planner evaluate --plan` prices it
    estimate = evaluate(plan, training_params(plan.cluster.gpu_types, plan.training))
    assert f"step {estimate.step_time_s:.3f} s" in out


def test_no_color_drops_colours(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    from planner.report.show import terminal_console

    assert terminal_console().no_color


# --- timeline model ------------------------------------------------------------------------


def test_rank_times_match_evaluate():
    """The bottleneck rank's micro-batches x (fwd + bwd) is evaluate's busy time."""
    plan = _uniform()
    estimate = evaluate(plan)
    timings = rank_timings(plan)
    busy = estimate.critical.micro_batches * estimate.critical.per_microbatch_s
    assert any(t.busy_s == pytest.approx(busy, rel=1e-9) for t in timings)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_simulated_step_matches_evaluate_for_uniform_pipeline(schedule):
    plan = _uniform(schedule, global_batch=32)
    estimate = evaluate(plan)
    ops = simulate(rank_timings(plan), schedule)
    without_tail = estimate.step_time_s - estimate.breakdown_s["dp_comm"] - estimate.breakdown_s["optimizer"]
    assert max(op.end_s for op in ops) == pytest.approx(without_tail, rel=1e-9)


def test_schedule_respects_dependencies_and_order(mixed_file):
    timings = rank_timings(load_plan(str(mixed_file)))
    ops = simulate(timings, "1f1b")
    counts = [t.num_microbatches for t in timings]
    assert counts[0] != counts[1]  # uneven replicas: 2 and 4 micro-batches per step
    end = {(op.pipeline_rank, op.kind, op.microbatch): op.end_s for op in ops}
    start = {(op.pipeline_rank, op.kind, op.microbatch): op.start_s for op in ops}
    assert len(ops) == 2 * sum(counts)
    for k, n in enumerate(counts):
        rank_ops = sorted((op for op in ops if op.pipeline_rank == k), key=lambda op: op.start_s)
        assert all(a.end_s <= b.start_s + 1e-15 for a, b in zip(rank_ops, rank_ops[1:]))  # one at a time
        for j in range(n):
            assert start[(k, "B", j)] >= end[(k, "F", j)]
            if k > 0:
                assert start[(k, "F", j)] >= end[(k - 1, "F", j * counts[k - 1] // n)]
            if k + 1 < len(counts):
                assert start[(k, "B", j)] >= end[(k + 1, "B", j * counts[k + 1] // n)]


# --- SVG -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["uniform_file", "mixed_file"])
def test_svg_is_well_formed(which, request, tmp_path):
    _need_matplotlib()
    svg = tmp_path / "timeline.svg"
    result = show(request.getfixturevalue(which), "--svg", svg)
    assert result.exit_code == 0, (result.output, result.exception)
    assert f"timeline written to {svg}" in result.stdout
    root = ET.parse(svg).getroot()
    assert root.tag in ("svg", "{http://www.w3.org/2000/svg}svg")
    assert len(list(root.iter())) > 50


def test_svg_of_long_and_interleaved_pipelines(tmp_path):
    _need_matplotlib()
    from planner.report.show import write_timeline_svg

    plan = _uniform(global_batch=400)  # 100 micro-batches per replica: the first 64 are drawn
    drawn = write_timeline_svg(plan, evaluate(plan), rank_timings(plan), str(tmp_path / "long.svg"))
    assert drawn == 2 * 2 * 64
    assert "first 64 of 100 micro-batches drawn" in (tmp_path / "long.svg").read_text()
    interleaved = uniform_plan(load_model("gpt2"), cluster_from_spec(SPEC),
                               Training(16, 512, "bf16", 2, "interleaved", 2), tp=1, pp=2, dp=2)
    write_timeline_svg(interleaved, evaluate(interleaved), rank_timings(interleaved), str(tmp_path / "i.svg"))
    assert ET.parse(tmp_path / "i.svg").getroot().tag.endswith("svg")


def test_svg_without_matplotlib_exits_2_with_install_hint(uniform_file, tmp_path):
    svg = tmp_path / "timeline.svg"
    script = textwrap.dedent(f"""
        import sys
        sys.modules["matplotlib"] = None
        import click
        from planner.cli.show import add_commands
        group = click.Group()
        add_commands(group)
        group(["show", {str(uniform_file)!r}, "--svg", {str(svg)!r}])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "pip install" in lines[0], proc.stderr
    assert proc.stdout == ""
    assert not svg.exists()


# --- bad input -----------------------------------------------------------------------------


def _assert_exit_2(result, *needles):
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("planner: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]


def test_bad_plan_files_exit_2(tmp_path, uniform_file):
    _assert_exit_2(show(tmp_path / "missing.json"), "not found")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    _assert_exit_2(show(broken), "invalid JSON")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something/v1"}))
    _assert_exit_2(show(other), "not a plan file")
    data = json.loads(uniform_file.read_text())
    data["stages"][0]["replicas"][0]["batch_share"] = 6
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps(data))
    _assert_exit_2(show(invalid), "invalid plan", "stages[0].replicas", "global batch")


def test_svg_into_missing_folder_exits_2(uniform_file, tmp_path):
    _need_matplotlib()
    _assert_exit_2(show(uniform_file, "--svg", tmp_path / "nowhere" / "t.svg"), "does not exist")
