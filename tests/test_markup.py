"""Hardening, item 4: user text (names, file paths) is never read as rich markup or TeX, so a
name like `evil[/]` cannot crash the CLI (it used to exit 3 with a MarkupError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.core.markup import esc

from .conftest import assert_bad_input, evaluate_args, invoke, require, small_cluster_spec

EVIL = "evil[/]"


def cluster_file(tmp_path: Path, file: str = "c.json", **fields) -> Path:
    spec = small_cluster_spec() | fields
    path = tmp_path / file
    path.write_text(json.dumps(spec))
    return path


def shown_or_refused(result, text: str) -> None:
    """Never an internal error: printed literally (exit 0), or, where names are restricted,
    refused as bad input in one line that quotes it."""
    if result.exit_code == 0:
        assert text in result.stdout, result.stdout
    else:
        assert_bad_input(result, text)


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
def test_markup_in_cluster_name_never_crashes(tmp_path, command):
    cluster = cluster_file(tmp_path, name=EVIL)
    if command == "evaluate":
        args = evaluate_args(cluster=str(cluster))
        result = invoke(*args[:-1])  # without --json: the human view
    else:
        out = tmp_path / "plan.json"
        result = invoke("plan", "--model", "gpt2", "--cluster", cluster, "--global-batch", 8, "--seq-len", 512,
                        "-o", out)
        if command == "show" and result.exit_code == 0:
            result = invoke("show", out)
    shown_or_refused(result, EVIL)


def test_markup_in_custom_gpu_name_never_crashes(tmp_path):
    card = "My[/]Card"
    spec = small_cluster_spec(gpu=card)
    spec["gpus"] = {card: {"memory_GiB": 80, "peak_tflops": {"bf16": 300}, "hbm_GBps": 2000}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(spec))
    args = evaluate_args(cluster=str(path))
    shown_or_refused(invoke(*args[:-1]), card)


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


def test_tex_in_a_name_does_not_break_the_svg_timeline(tmp_path):
    require("matplotlib", "PLANNER_REQUIRE_TORCH")  # make test installs the viz extra with it
    cluster = cluster_file(tmp_path, name="a$^$b")
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gpt2", "--cluster", cluster, "--global-batch", 8, "--seq-len", 512, "-o", out)
    if result.exit_code == 0:
        svg = tmp_path / "t.svg"
        result = invoke("show", out, "--svg", svg)
        assert result.exit_code == 0, result.output
        assert svg.stat().st_size > 0
    else:  # names restricted: refused as bad input, never an internal error
        assert_bad_input(result, "a$^$b")
