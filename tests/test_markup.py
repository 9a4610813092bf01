"""Hardening, item 4: user text (names, file paths) is never read as rich markup or TeX, so a
name like `evil[/]` cannot crash the CLI (it used to exit 3 with a MarkupError)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from planner.core.markup import esc
from planner.cost.evaluate import evaluate
from planner.plan import Training, uniform_plan

from .conftest import assert_bad_input, evaluate_args, invoke, require, small_cluster_spec, write_json

EVIL = "evil[/]"


def cluster_file(tmp_path: Path, file: str = "c.json", **fields) -> Path:
    spec = small_cluster_spec() | fields
    path = tmp_path / file
    path.write_text(json.dumps(spec))
    return path


def test_esc_makes_markup_literal():
    from rich.console import Console

    console = Console(record=True, width=200)
    for text in (EVIL, "[bold]x", "a[/bold]", "x\\", "[link=file:///]y"):
        console.print(f"[bold]{esc(text)}[/]")
    assert console.export_text().splitlines() == [EVIL, "[bold]x", "a[/bold]", "x\\", "[link=file:///]y"]


def test_markup_in_output_path_is_printed_literally(tmp_path):
    cluster = cluster_file(tmp_path)
    (tmp_path / "plan[").mkdir()
    out = tmp_path / "plan[" / "bold].json"  # the path holds `[/bold]`
    result = invoke("plan", "--model", "gpt2", "--cluster", cluster, "--global-batch", 8, "--seq-len", 512, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"plan written to {out}" in result.stdout.replace("\n", "")
    assert json.loads(out.read_text())["format"] == "planner.plan/v1"


@pytest.mark.parametrize("command", ["plan", "evaluate", "show"])
def test_markup_in_a_cluster_name_is_refused_in_one_line_that_quotes_it(tmp_path, command, plan_json):
    """Names hold no brackets (planner.core.names): each command refuses the name as bad input
    and quotes it literally, in a cluster file and in a plan file alike."""
    if command == "show":
        plan_json["cluster"]["name"] = EVIL
        result = invoke("show", write_json(tmp_path, plan_json))
    elif command == "evaluate":
        result = invoke(*evaluate_args(cluster=str(cluster_file(tmp_path, name=EVIL)))[:-1])  # the human view
    else:
        result = invoke("plan", "--model", "gpt2", "--cluster", cluster_file(tmp_path, name=EVIL),
                        "--global-batch", 8, "--seq-len", 512)
    assert_bad_input(result, EVIL)


def test_markup_in_a_custom_gpu_name_is_refused_in_one_line_that_quotes_it(tmp_path):
    card = "My[/]Card"
    spec = small_cluster_spec(gpu=card)
    spec["gpus"] = {card: {"memory_GiB": 80, "peak_tflops": {"bf16": 300}, "hbm_GBps": 2000}}
    path = write_json(tmp_path, spec, "c.json")
    assert_bad_input(invoke(*evaluate_args(cluster=str(path))[:-1]), "c.json", card)


def test_markup_in_a_missing_file_path_is_one_plain_error_line(tmp_path):
    missing = tmp_path / "cfg[1]" / "evil[/bold].yaml"
    assert_bad_input(invoke(*evaluate_args(cluster=str(missing))), str(missing), "not found")


def test_markup_in_a_bad_file_path_is_one_plain_error_line(tmp_path):
    (tmp_path / "cfg[").mkdir()
    path = tmp_path / "cfg[" / "].json"
    path.write_text('{"node_groups": [}')
    assert_bad_input(invoke(*evaluate_args(cluster=str(path))), "cfg[/].json", "invalid JSON")


def test_markup_in_a_name_reaching_an_error_message_is_literal(tmp_path):
    path = cluster_file(tmp_path, links=[{"between": ["g", EVIL], "bandwidth_GBps": 1}])
    assert_bad_input(invoke(*evaluate_args(cluster=str(path))), "c.json", EVIL)


def test_tex_in_a_name_is_refused_and_does_not_break_the_svg_timeline(tmp_path, small_cluster, gpt2):
    """The CLI refuses a `$` in a name; a plan built in code may still carry one, and the
    timeline's title draws it as text, not TeX (where `$^$` fails to parse)."""
    require("matplotlib", "PLANNER_REQUIRE_TORCH")  # make test installs the viz extra with it
    from planner.report.show import rank_timings, write_timeline_svg

    tex = "a$^$b"
    plan_args = ("--model", "gpt2", "--global-batch", 8, "--seq-len", 512)
    assert_bad_input(invoke("plan", *plan_args, "--cluster", cluster_file(tmp_path, name=tex)), tex)
    model = dataclasses.replace(gpt2, name=tex)
    plan = uniform_plan(model, small_cluster, Training(8, 512, "bf16", 1), tp=1, pp=2, dp=2)
    svg = tmp_path / "t.svg"
    assert write_timeline_svg(plan, evaluate(plan), rank_timings(plan), str(svg)) > 0
    assert svg.stat().st_size > 0
