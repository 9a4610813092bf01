"""The wheel carries its data: the GPU catalog, the example clusters, the model configs.

The wheel is built from a copy of the sources (no stale build/ folder, nothing written into the
checkout) with the running interpreter's setuptools (no build isolation: no index needed), then
unpacked outside the checkout and run from there. `make wheel-check` does the same with a real
`pip install` into a fresh venv and the default `planner plan`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "profiles"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The built wheel and pip's build output."""
    pytest.importorskip("setuptools")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("planner", "profiles"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = (tmp / "dist").glob("planner-*.whl")
    return path, built.stdout + built.stderr


def test_wheel_ships_catalog_examples_and_model_configs(wheel):
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    expected = {f"planner/profiles/{p.relative_to(PROFILES).as_posix()}"
                for p in PROFILES.rglob("*") if p.is_file()}
    assert "planner/profiles/hardware/gpus.yaml" in expected
    assert "planner/profiles/clusters/a100-v100-mix.yaml" in expected
    assert "planner/profiles/models/llama-3-8b.json" in expected
    assert expected <= names, sorted(expected - names)
    assert {"planner/data/plan.schema.json", "planner/data/profile.schema.json"} <= names


def test_wheel_build_lists_its_data_folders_as_packages(wheel):
    """No setuptools "Package would be ignored" warning: each data folder is a listed package."""
    _, output = wheel
    assert "would be ignored" not in output, output


@pytest.mark.slow
def test_unpacked_wheel_runs_outside_the_checkout(wheel, tmp_path):
    path, _ = wheel
    site = tmp_path / "site"
    zipfile.ZipFile(path).extractall(site)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def planner(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=run_dir, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    module, profiles = subprocess.run(
        [sys.executable, "-c", "import planner.inputs.hardware as h; print(h.__file__); print(h.PROFILES_DIR)"],
        cwd=run_dir, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert Path(module).is_relative_to(site)
    assert Path(profiles) == site / "planner" / "profiles"
    gpus = json.loads(planner("gpus", "--json").stdout)
    assert "A100-SXM4-80GB" in json.dumps(gpus)
    assert "llama-3-8b" in planner("models", "--json").stdout
    plan = json.loads(planner("plan", "--model", "gpt2", "--cluster", "dgx-a100", "--seq-len", "1024",
                              "--json").stdout)
    assert plan["model"]["name"] == "gpt2"
