"""planner.core.outfile and every command's output file: written atomically (temporary file, fsync,
rename), never through a symbolic link, never onto one of the command's inputs; the lock."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from planner.core import outfile
from planner.core.errors import BadInput
from planner.core.outfile import check_output, exclusive_lock, write_output

from .conftest import assert_bad_input, hf_config, invoke, require


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- the helper ------------------------------------------------------------------------------


def test_write_output_replaces_the_file_and_keeps_its_mode(tmp_path):
    out = tmp_path / "o.json"
    out.write_text("old")
    out.chmod(0o640)
    write_output(str(out), "new\n")
    assert out.read_text() == "new\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.json"
    write_output(str(fresh), b"bytes")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.read_bytes() == b"bytes" and stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    assert leftovers(tmp_path) == []


def test_interrupted_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """A failure after the temporary file is written but before the rename: the old content
    stays, and the temporary file is removed."""
    out = tmp_path / "o.json"
    out.write_text("precious")

    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(outfile.os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        write_output(str(out), "x" * 100_000)
    assert out.read_text() == "precious"
    assert leftovers(tmp_path) == []


def test_a_symlinked_target_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    with pytest.raises(BadInput, match="symbolic link"):
        write_output(str(link), "overwritten")
    assert victim.read_text() == "keep me" and link.is_symlink()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(BadInput, match="symbolic link"):
        write_output(str(dangling), "x")
    assert not (tmp_path / "nowhere.json").exists()


def test_the_same_file_as_an_input_is_refused(tmp_path):
    data = tmp_path / "in.json"
    data.write_text("input")
    os.link(data, tmp_path / "hard.json")
    for target in (data, tmp_path / "hard.json", tmp_path / "sub" / ".." / "in.json"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(BadInput, match="is also an input"):
            write_output(str(target), "x", inputs=["gpt2", str(data)])
    assert data.read_text() == "input"
    check_output(str(tmp_path / "other.json"), [str(data)])  # a different file is fine


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_output(str(fifo), "streamed")
    reader.join(10)
    assert got == ["streamed"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_exclusive_lock_refuses_a_second_holder_and_cleans_up(tmp_path):
    out = str(tmp_path / "r.csv")
    with exclusive_lock(out, "another planner sweep"):
        with pytest.raises(BadInput, match="another planner sweep is writing this file"):
            with exclusive_lock(out, "another planner sweep"):
                pass
    assert not Path(out + ".lock").exists()
    Path(out + ".lock").write_text("")  # left by a killed holder: the kernel dropped its lock
    with exclusive_lock(out):
        pass


# --- every command that writes a file --------------------------------------------------------


def test_export_onto_its_own_plan_is_refused(plan_file):
    before = plan_file.read_bytes()
    assert_bad_input(invoke("export", plan_file, "--to", "megatron", "-o", plan_file), str(plan_file),
                     "is also an input")
    assert plan_file.read_bytes() == before


def test_export_to_a_symlink_is_refused(plan_file, tmp_path):
    victim = tmp_path / "victim.args"
    victim.write_text("keep")
    link = tmp_path / "megatron.args"
    link.symlink_to(victim)
    assert_bad_input(invoke("export", plan_file, "--to", "megatron", "-o", link), "symbolic link")
    assert victim.read_text() == "keep"
    out = tmp_path / "real.args"
    assert invoke("export", plan_file, "--to", "megatron", "-o", out).exit_code == 0 and out.read_text()


def test_evaluate_and_plan_refuse_to_overwrite_an_input(plan_file, tmp_path):
    before = plan_file.read_bytes()
    assert_bad_input(invoke("evaluate", "--plan", plan_file, "-o", plan_file), "is also an input")
    assert plan_file.read_bytes() == before
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps(hf_config("gpt2")))
    before = config.read_bytes()
    assert_bad_input(invoke("plan", "--model", config, "--cluster", "dgx-a100", "--global-batch", 8,
                            "--seq-len", 512, "-o", config), "is also an input")
    assert config.read_bytes() == before


def test_plan_output_to_a_symlink_is_refused(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    link = tmp_path / "plan.json"
    link.symlink_to(victim)
    assert_bad_input(invoke("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", 8,
                            "--seq-len", 512, "-o", link), "symbolic link")
    assert victim.read_text() == "keep"


def test_show_svg_onto_the_plan_is_refused(plan_file):
    require("matplotlib", "PLANNER_REQUIRE_TORCH")  # `make test` installs the viz extra with torch
    before = plan_file.read_bytes()
    assert_bad_input(invoke("show", plan_file, "--svg", plan_file), "is also an input")
    assert plan_file.read_bytes() == before


def test_calibrate_onto_its_profile_is_refused(tmp_path):
    profile = tmp_path / "prof.json"
    profile.write_text('{"format": "planner.profile/v1"}')
    before = profile.read_bytes()
    assert_bad_input(invoke("calibrate", profile, "--gpu", "A100-SXM4-80GB", "-o", profile), "is also an input")
    assert profile.read_bytes() == before


def test_yaml_output_refuses_a_non_finite_number_as_json_output_does():
    """The calibration report and the measured-links file go through core.io.yaml_text: a NaN or an
    infinity is an internal error naming where, never a `.nan` written as a figure."""
    from planner.core.io import yaml_text

    assert yaml_text({"a": [1.5, {"b": 2}]}, sort_keys=False) == "a:\n- 1.5\n- b: 2\n"
    for bad in (float("nan"), float("inf")):
        with pytest.raises(AssertionError, match=r"a\[1\]\.b"):
            yaml_text({"a": [1.5, {"b": bad}]})
