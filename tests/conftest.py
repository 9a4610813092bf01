"""Shared helpers: small clusters and models, running the CLI in-process, reading its JSON, and
running the solver beside the brute-force oracle (planner.verify.oracle)."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from planner.cli import main
from planner.inputs.hardware import PROFILES_DIR, cluster_from_spec, load_cluster
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan

MODELS_DIR = PROFILES_DIR / "models"
CLUSTERS_DIR = PROFILES_DIR / "clusters"

# formats.md, section 1
CATALOG_NAMES = ["V100-SXM2-32GB", "V100-PCIE-32GB", "T4", "A10", "A10G", "L4", "L40S", "A100-SXM4-40GB",
                 "A100-SXM4-80GB", "A100-PCIE-80GB", "H100-SXM5-80GB", "H100-PCIE-80GB", "H200-SXM-141GB",
                 "B200", "B300", "GB200", "GB300", "RTX-3090", "RTX-4090", "MI250X", "MI300X", "TITAN-RTX",
                 "RTX-2080", "GH200-96GB", "H100-SXM5-96GB", "RTX-2080-Ti", "H20", "MI325X", "MI355X"]

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

BENCHMARKS_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_module(name: str):
    """benchmarks/NAME.py imported as its scripts import each other (benchmarks/ on sys.path)."""
    sys.path.insert(0, str(BENCHMARKS_DIR))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS_DIR))



@functools.cache
def mixed_any_result():
    """The search's result for llama-3-8b on a100-v100-mix, 512 x 4096 tokens in fp16 under --runtime any
    (per-stage TP and uneven shares: the widest tables and what the exports must reduce): one search per
    test process, shared by the modules that read it."""
    from planner.search.orchestration.driver import solve

    return solve(load_model("llama-3-8b"), load_cluster("a100-v100-mix"), Training(512, 4096, "fp16", 1, runtime="any"))


def small_cluster_spec(nodes: int = 1, gpus_per_node: int = 4, gpu: str = "A100-SXM4-80GB") -> dict:
    return {"name": "small", "node_groups": [{
        "name": "g", "gpu": gpu, "nodes": nodes, "gpus_per_node": gpus_per_node,
        "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
        "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}


def hf_config(name: str) -> dict:
    """A catalog model's Hugging Face config as a fresh dict (safe to mutate)."""
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def three_types(h100: int, a100: int, v100: int) -> dict:
    """A cluster spec of H100, A100 and V100 nodes of 8 GPUs, on 400, 200 and 50 GB/s NICs."""
    def group(name, gpu, nodes, nic):
        return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
                "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}
    return {"name": f"odd-{h100}-{a100}-{v100}", "node_groups": [
        group("h100", "H100-SXM5-80GB", h100, 400), group("a100", "A100-SXM4-80GB", a100, 200),
        group("v100", "V100-SXM2-32GB", v100, 50)]}


def synthetic_profile(path, seq_len=1024, scale=1.0, model_name="gpt2"):
    """A gpt2 layer profile whose 'measured' times are made up: forward 1 ms x micro-batch."""
    model = load_model(model_name)
    layers = []
    for layer in model.layers:
        fwd = [scale * 1e-3 * b for b in (1, 2, 4)]
        layers.append({"name": layer.name, "kind": layer.kind, "params": layer.params,
                       "fwd_flops_per_sample": layer.fwd_flops_per_sample(seq_len),
                       "act_bytes_per_sample": layer.act_bytes_per_sample(seq_len),
                       "out_bytes_per_sample": layer.out_bytes_per_sample(seq_len),
                       "measured": {"micro_batch": [1, 2, 4], "fwd_s": fwd, "bwd_s": [2 * x for x in fwd]}})
    path.write_text(json.dumps({"format": "planner.profile/v1", "model": model_name, "dtype": "bf16",
                                "seq_len": seq_len, "source": "measured", "device": "test", "layers": layers}))
    return model


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


def ok_json(result: Result, *, quiet: bool = True) -> dict | list:
    """The JSON on stdout of a command that exited 0; `quiet`: with nothing on stderr."""
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    if quiet:
        assert result.stderr == "", result.stderr
    return json.loads(result.stdout)


def strict_json(text: str):
    """Parse output JSON, failing on NaN or Infinity (which json.loads accepts by default)."""
    def refuse(name: str):
        raise AssertionError(f"non-finite number {name} in the output JSON: {text}")
    return json.loads(text, parse_constant=refuse)


def write_json(tmp_path: Path, data, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


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


@pytest.fixture(scope="session")
def llama2_decoder():
    """llama-2-7b's decoder layer (32 heads of 128, MHA): the attention kernels' test layer."""
    return next(layer for layer in load_model("llama-2-7b").layers if layer.kind == "decoder")


@pytest.fixture
def plan_json(small_cluster, gpt2) -> dict:
    """A plan file's JSON (a fresh dict): gpt2 on the small cluster, two stages of a TP pair."""
    return plan_to_json(uniform_plan(gpt2, small_cluster, Training(8, 512, "bf16", 1), tp=2, pp=2, dp=1))


@pytest.fixture
def plan_file(tmp_path, plan_json) -> Path:
    """plan_json as the file plan.json in the test's temporary folder."""
    return write_json(tmp_path, plan_json)


# 2 nodes of 8 H100-SXM5-80GB, catalog links
H100 = {"name": "h100-2x8", "node_groups": [{"name": "h100", "gpu": "H100-SXM5-80GB", "nodes": 2,
                                             "gpus_per_node": 8}]}


@pytest.fixture
def h100(tmp_path, monkeypatch):
    """H100 as h100.yaml in the working directory (a temporary one)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100.yaml").write_text(json.dumps(H100))


@pytest.fixture
def one_thread():
    """One intra-op torch thread (as torchrun gives each rank): on a small shared machine, spinning
    OpenMP threads that wait for a busy core make toy timings jump by milliseconds."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- the solver beside the oracle ----------------------------------------------------------------


def runtime_base(cluster, base, runtime):
    """`base` under `runtime`, in a dtype it has (fp16 instances: bf16 or fp32 for torchtitan,
    as `planner plan --runtime torchtitan` picks; planner.api.load.resolve_dtype)."""
    from planner.api.load import resolve_dtype
    from planner.cost.runtimes.capability import capability

    dtype = base.dtype if base.dtype in capability(runtime).dtypes else resolve_dtype(cluster, None, runtime)
    return replace(base, runtime=runtime, dtype=dtype)


def assert_solves_to_the_optimum(expected: float, model, cluster, base, options, proven: bool = True):
    """The solver finds the oracle's optimum step time `expected` (`proven`: and says it is optimal),
    or no plan where the oracle found none (`expected` inf). Returns the result, None for no plan."""
    from planner.core.errors import NoFeasiblePlan
    from planner.search.orchestration.driver import solve

    try:
        result = solve(model, cluster, base, options)
    except NoFeasiblePlan:
        assert expected == float("inf")
        return None
    assert result.optimal or not proven
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)
    return result


def oracle_optimum(model, cluster, base, options: dict, **space) -> float:
    """The brute force's least step time over `options`' micro-batches, TP degrees, recompute modes and
    virtual stages (and `space`, more of brute_force's arguments); inf where no plan fits."""
    from planner.core.errors import NoFeasiblePlan
    from planner.verify.oracle import brute_force

    try:
        return brute_force(model, cluster, base, options["micro_batches"], options["tp_degrees"],
                           options["recompute_modes"], virtual_stages=options["virtual_stages"], **space)[0]
    except NoFeasiblePlan:
        return float("inf")


def solved_plans(instance, seeds, options) -> list:
    """The solver's plan of each seeded instance (`instance(seed)` -> model, cluster, training) that has one."""
    from planner.core.errors import NoFeasiblePlan
    from planner.search.orchestration.driver import solve

    plans = []
    for seed in seeds:
        model, cluster, base = instance(seed)
        try:
            plans.append(solve(model, cluster, base, options).plan)
        except NoFeasiblePlan:
            continue
    return plans


def solve_with_and_without_skips(monkeypatch, bound: type, model, cluster, base, options) -> tuple:
    """driver.solve as it is, then with the skip test of `bound` (RestrictionBound, AnyRuntimeBound:
    the bounds planner.search.orchestration.lanes skips searches by) never skipping: (pruned
    result, full result, whether it skipped a search)."""
    import planner.search.orchestration.driver as driver

    skipped = []
    real = bound.cannot_beat

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        skipped.append(out)
        return out
    monkeypatch.setattr(bound, "cannot_beat", counted)
    pruned = driver.solve(model, cluster, base, options)
    monkeypatch.setattr(bound, "cannot_beat", lambda *args, **kwargs: False)
    return pruned, driver.solve(model, cluster, base, options), any(skipped)


class TickingClock:
    """A clock that moves `tick_s` forward each time it is read: a search given it (SolverOptions.clock)
    meets its time limit after a set number of clock checks, whatever the machine's speed."""

    def __init__(self, tick_s: float):
        self.now_s, self.tick_s = 0.0, tick_s

    def __call__(self) -> float:
        self.now_s += self.tick_s
        return self.now_s
