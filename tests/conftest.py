"""Shared helpers: small clusters and models, and running the CLI in-process."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from planner.cli import main
from planner.inputs.hardware import PROFILES_DIR, cluster_from_spec
from planner.inputs.model import load_model

MODELS_DIR = PROFILES_DIR / "models"
CLUSTERS_DIR = PROFILES_DIR / "clusters"

# formats.md, section 1
CATALOG_NAMES = ["V100-SXM2-32GB", "V100-PCIE-32GB", "T4", "A10", "A10G", "L4", "L40S", "A100-SXM4-40GB",
                 "A100-SXM4-80GB", "A100-PCIE-80GB", "H100-SXM5-80GB", "H100-PCIE-80GB", "H200-SXM-141GB",
                 "B200", "RTX-3090", "RTX-4090", "MI250X", "MI300X", "TITAN-RTX", "RTX-2080", "GH200-96GB",
                 "H100-SXM5-96GB"]

# One node of four A100-80GB: small enough that gpt2 prices in milliseconds.
SMALL_CLUSTER_YAML = """\
name: small
node_groups:
  - name: a100
    gpu: A100-SXM4-80GB
    nodes: 1
    gpus_per_node: 4
    intra_node: {bandwidth_GBps: 300, latency_us: 3}
    inter_node: {bandwidth_GBps: 200, latency_us: 5}
"""


def small_cluster_spec(nodes: int = 1, gpus_per_node: int = 4, gpu: str = "A100-SXM4-80GB") -> dict:
    return {"name": "small", "node_groups": [{
        "name": "g", "gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node,
        "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
        "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}


def hf_config(name: str) -> dict:
    """A catalog model's Hugging Face config as a fresh dict (safe to mutate)."""
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def require(module: str, env: str):
    """Import an optional package for a test: skip the test when it is missing, unless `env` is
    set (as `make test` sets it for the extras it installs), where a missing one is a failure."""
    if os.environ.get(env):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def runner(**kwargs) -> CliRunner:
    """A CliRunner that keeps stderr apart from stdout (always so from click 8.2 on)."""
    try:
        return CliRunner(mix_stderr=False, **kwargs)  # click < 8.2
    except TypeError:
        return CliRunner(**kwargs)


def invoke(*args: str, env: dict | None = None) -> Result:
    """Run `planner ARGS` in-process; `result.stdout` and `result.stderr` are separate."""
    return runner(env=env).invoke(main, [str(a) for a in args])


def evaluate_args(model: str = "gpt2", cluster: str = "small.yaml", *, global_batch: int = 8,
                  seq_len: int = 512, tp: int = 1, pp: int = 1, dp: int = 4, micro_batch: int = 1,
                  extra: tuple[str, ...] = ()) -> list[str]:
    return ["evaluate", "--model", model, "--cluster", cluster, "--global-batch", str(global_batch),
            "--seq-len", str(seq_len), "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
            "--micro-batch", str(micro_batch), "--json", *extra]


def assert_bad_input(result: Result, *needles: str) -> str:
    """Exit 2, exactly one line on stderr that contains every needle, nothing on stdout,
    and no traceback or internal error anywhere. Returns the stderr line."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert "internal error" not in line, line
    for needle in needles:
        assert needle in line, (needle, line)
    assert result.stdout == "", result.stdout
    return line


@pytest.fixture
def small_cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_CLUSTER_YAML)
    return path


@pytest.fixture
def small_cluster():
    return cluster_from_spec(small_cluster_spec())


@pytest.fixture
def titan_debug(tmp_path) -> str:
    """torchtitan's llama3 `debugmodel` flavour as a config file: a model torchtitan builds (gpt2 it cannot)."""
    config = hf_config("llama-3-8b")
    config.update(hidden_size=256, num_hidden_layers=6, num_attention_heads=16, num_key_value_heads=16,
                  intermediate_size=768, vocab_size=2048)
    path = tmp_path / "titan-debug.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="session")
def gpt2():
    return load_model("gpt2")
