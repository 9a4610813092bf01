"""The README's quoted figures, re-measured: each figure next to the `planner` command that made it.

    python benchmarks/readme_figures.py [--only NAME ...] [--list]     # 22 commands: 66 CPU s, 102 s wall here

Every claim names the README text it checks (`anchor`, which occurs verbatim in README.md once
whitespace is collapsed: tests/test_readme_figures.py checks that, so a README edit that orphans a
claim fails), the command (`COMMANDS`, run as `python -m planner.cli ARGS --json`, with the
README's own flags and nothing that changes results), what to read from its JSON (or its stderr,
for a plan that fits nowhere) and the figure as the README prints it. It prints a markdown table:
claim, README figure, measured now (formatted to the README's precision), relative difference and
OK / STALE. Tolerance: equal at the printed precision (the measured value, rounded the way the
README rounds it, is the same string). Exit 0 whether or not a figure is stale: this is a report.

Not covered here (each has its own script, which prints its own table): the fidelity table
(benchmarks/fidelity.py), the planning-time table and the 3+3+4 loss figures (planning_time.py),
plan quality and the memory-saver table (plan_quality.py), the runtime export table
(runtime_exports.py), `planner run`'s measured step (run_plan.py), and measurements of this
machine (profile-links busbw, wall-clock "priced in N s"), which no cost-model command reproduces.
The MFU-numerator ratios (1.07x / 1.70x) come from planner/cost/flops.py, not a command.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# The cluster of tests/test_explain.py (two_group_spec()): one node of 8 H100 and one of 8 V100,
# joined only by 10 GbE (1.25 GB/s, 50 us). Copied here so the README's evaluate can run.
TWO_10GBE = {"name": "two-10gbe", "node_groups": [
    {"name": name, "gpu": gpu, "nodes": 1, "gpus_per_node": 8,
     "intra_node": {"bandwidth_GBps": 150, "latency_us": 3},
     "inter_node": {"bandwidth_GBps": 50, "latency_us": 5}}
    for name, gpu in (("first", "H100-SXM5-80GB"), ("second", "V100-SXM2-32GB"))],
    "links": [{"between": ["first", "second"], "bandwidth_GBps": 1.25, "latency_us": 50.0}]}

H100X2 = "profiles/clusters/dgx-h100-2node.yaml"
A100 = "profiles/clusters/dgx-a100.yaml"
CP_8B = ["plan", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "16", "--seq-len", "131072"]
OFFLOAD_70B = ["evaluate", "--model", "llama-2-70b", "--cluster", "dgx-a100", "--global-batch", "128",
               "--seq-len", "16384", "--tp", "8", "--pp", "1", "--dp", "4", "--zero", "1",
               "--sequence-parallel", "--micro-batch", "1", "--dtype", "fp16"]
SCHED_8B = ["evaluate", "--model", "llama-3-8b", "--cluster", A100, "--global-batch", "64", "--seq-len", "4096",
            "--tp", "1", "--pp", "8", "--dp", "4", "--micro-batch", "1", "--runtime", "torchtitan", "--schedule"]
ZB_70B = ["plan", "--model", "llama-3-70b", "--cluster", A100, "--global-batch", "64", "--seq-len", "4096",
          "--runtime", "any"]
FP8_8B = ["plan", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "64", "--seq-len", "4096"]

# name -> planner arguments (without --json). "{two_10gbe}" is the path of TWO_10GBE written out.
COMPILE_8B = ["plan", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "256", "--seq-len", "8192",
              "--runtime", "torchtitan"]
QWEN_64K = ["plan", "--model", "qwen3-30b-a3b", "--cluster", H100X2, "--global-batch", "16", "--seq-len", "65536"]
COMMANDS: dict[str, list[str]] = {
    "default": ["plan"],
    "explain": ["evaluate", "--model", "llama-3-8b", "--cluster", "{two_10gbe}", "--global-batch", "64",
                "--seq-len", "4096", "--tp", "8", "--pp", "2", "--dp", "1", "--micro-batch", "1",
                "--dtype", "fp16"],
    "hetero70b": ["plan", "--model", "llama-3-70b", "--cluster", "h100-a100-v100", "--global-batch", "512",
                  "--seq-len", "4096", "--compare-any"],
    "deepseek": ["plan", "--model", "deepseek-v3", "--cluster", H100X2, "--global-batch", "16",
                 "--seq-len", "4096"],
    "cp": CP_8B,
    "cp1": CP_8B + ["--cp", "1"],
    "cp2m": ["plan", "--model", "llama-3-8b", "--cluster", H100X2, "--global-batch", "16",
             "--seq-len", "2097152"],
    "fp8": FP8_8B + ["--dtype", "fp8"],
    "eager": COMPILE_8B,
    "compiled": COMPILE_8B + ["--compile"],
    "bf16": FP8_8B + ["--dtype", "bf16"],
    "offload_none": OFFLOAD_70B,
    "offload_full": OFFLOAD_70B + ["--recompute", "full"],
    "offload_act": OFFLOAD_70B + ["--offload-activations", "41"],
    "sched_1f1b": SCHED_8B + ["1f1b"],
    "sched_zbh1": SCHED_8B + ["zb-h1"],
    "sched_il2": SCHED_8B + ["interleaved", "--virtual-stages", "2"],
    # the README writes `--schedule S`; zbv is two chunks per rank and needs --virtual-stages 2
    "sched_zbv": SCHED_8B + ["zbv", "--virtual-stages", "2"],
    "zb": ZB_70B + ["--virtual-stages", "1"],
    "zb_v": ZB_70B,
    "qwen": QWEN_64K,
    "qwen_ep1": QWEN_64K + ["--ep", "1"],
    "qwen_cp1": QWEN_64K + ["--cp", "1"],
    "zb_off": ZB_70B + ["--no-zero-bubble"],
    "zb_1f1b": ZB_70B + ["--no-zero-bubble", "--virtual-stages", "1"],
    "tt_zbv": ["plan", "--runtime", "torchtitan", "--model", "llama-3-8b", "--cluster", "dgx-a100",
               "--global-batch", "32", "--seq-len", "4096"],
    "tt_nozb": ["plan", "--runtime", "torchtitan", "--model", "llama-3-8b", "--cluster", "dgx-a100",
                "--global-batch", "32", "--seq-len", "4096", "--no-zero-bubble"],
    # tests/test_infeasible.py's command (the README quotes the message, not the command)
    "head4m": ["plan", "--cp", "1", "--model", "llama-3-8b", "--cluster", "a100-v100-mix",
               "--seq-len", "4194304"],
}


@dataclass(frozen=True)
class Result:
    """One command's outcome: its JSON (None when stdout was empty), stderr and exit code."""
    json: Any
    stderr: str
    rc: int


Read = Callable[[dict[str, Result]], Any]


@dataclass(frozen=True)
class Claim:
    """A figure the README prints, the commands it needs and how to read it from their results."""
    what: str
    anchor: str        # verbatim README text (whitespace collapsed) at the figure
    quoted: str        # the figure as the README prints it: "19.352", "108,367", "zb-h1"
    commands: tuple[str, ...]
    read: Read         # value in the README's unit (a percent as 58.1, not 0.581)


def path(name: str, dotted: str, scale: float = 1.0) -> tuple[tuple[str, ...], Read]:
    """commands, reader for a dotted JSON path of one command ('predicted.step_time_s')."""
    def read(results: dict[str, Result]) -> Any:
        value: Any = results[name].json
        for key in dotted.split("."):
            value = value[int(key)] if isinstance(value, list) else value[key]
        return value * scale if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    return (name,), read


def step(name: str) -> tuple[tuple[str, ...], Read]:
    """A plan's predicted step or an evaluation's step_time_s."""
    def read(results: dict[str, Result]) -> float:
        doc = results[name].json
        return doc["predicted"]["step_time_s"] if "predicted" in doc else doc["step_time_s"]
    return (name,), read


def stage_peak_gib(name: str, stage: int) -> tuple[tuple[str, ...], Read]:
    """Largest peak memory (GiB) over the ranks of one stage of a plan."""
    def read(results: dict[str, Result]) -> float:
        doc = results[name].json
        ranks = [r for rep in doc["stages"][stage]["replicas"] for r in rep["ranks"]]
        return max(doc["predicted"]["peak_memory_GiB_by_rank"][str(r)] for r in ranks)
    return (name,), read


def link_exposed(name: str, role: str) -> tuple[tuple[str, ...], Read]:
    def read(results: dict[str, Result]) -> float:
        doc = results[name].json
        critical = doc["predicted"]["critical"] if "predicted" in doc else doc["critical"]
        return next(link["exposed_s"] for link in critical["links"] if link["role"] == role)
    return (name,), read


def mesh(name: str, keys: tuple[str, ...]) -> tuple[tuple[str, ...], Read]:
    """'tp 4 x cp 4'-style description of a one-mesh plan from its first stage's keys."""
    def read(results: dict[str, Result]) -> str:
        stage0 = results[name].json["stages"][0]
        return " x ".join(f"{k} {stage0.get(k, 1)}" for k in keys)
    return (name,), read


def stderr_number(name: str, pattern: str) -> tuple[tuple[str, ...], Read]:
    """A figure from the one-line message of a command that fits nowhere (exit 1)."""
    def read(results: dict[str, Result]) -> str:
        match = re.search(pattern, results[name].stderr)
        return match.group(1) if match else f"(no match; rc {results[name].rc}: {results[name].stderr.strip()[:120]})"
    return (name,), read


def ratio(fast: Read, slow: Read, how: str) -> Read:
    """A speed-up as the README words it: 'faster1' = (1 - fast/slow) %, 'faster2' = (slow/fast - 1) %."""
    def read(results: dict[str, Result]) -> float:
        f, s = fast(results), slow(results)
        return 100 * (1 - f / s) if how == "faster1" else 100 * (s / f - 1)
    return read


def claim(what: str, anchor: str, quoted: str, spec: tuple[tuple[str, ...], Read]) -> Claim:
    return Claim(what, anchor, quoted, spec[0], spec[1])


def derived(what: str, anchor: str, quoted: str, fast: tuple[tuple[str, ...], Read],
            slow: tuple[tuple[str, ...], Read], how: str) -> Claim:
    return Claim(what, anchor, quoted, fast[0] + slow[0], ratio(fast[1], slow[1], how))


def _any(name: str) -> tuple[tuple[str, ...], Read]:
    return path(name, "solver.any_runtime_step_s")


CLAIMS: tuple[Claim, ...] = (
    # "Two commands": the `make plan` output
    claim("default plan: step s", "step 19.543 s tokens/s 107,307", "19.543", step("default")),
    claim("default plan: tokens/s", "tokens/s 107,307 MFU 57.6%", "107,307", path("default", "predicted.tokens_per_s")),
    claim("default plan: MFU %", "MFU 57.6% bubble 2.7%", "57.6", path("default", "predicted.mfu", 100)),
    claim("default plan: bubble %", "bubble 2.7% compute 18.124s", "2.7",
          path("default", "predicted.bubble_fraction", 100)),
    claim("default plan: compute s", "compute 18.124s", "18.124", path("default", "predicted.breakdown_s.compute")),
    claim("default plan: tp_comm s", "tp_comm 0.453s", "0.453", path("default", "predicted.breakdown_s.tp_comm")),
    claim("default plan: pp_comm s", "pp_comm 0.437s", "0.437", path("default", "predicted.breakdown_s.pp_comm")),
    claim("default plan: bubble s", "dp_comm 0.000s bubble 0.525s", "0.525",
          path("default", "predicted.breakdown_s.bubble")),
    claim("default plan: optimizer s", "optimizer 0.005s", "0.005", path("default", "predicted.breakdown_s.optimizer")),
    claim("default plan: stage 0 peak GiB", "12.8/32", "12.8", stage_peak_gib("default", 0)),
    claim("default plan: stage 1 peak GiB", "10.7/32", "10.7", stage_peak_gib("default", 1)),
    claim("default plan: stage 2 peak GiB", "18.4/80", "18.4", stage_peak_gib("default", 2)),
    claim("default plan: critical ms per micro-batch", "64 micro-batches × 296.8 ms", "296.8",
          path("default", "predicted.critical.per_microbatch_s", 1000)),
    claim("default plan: critical model TFLOP/s per GPU", "76 of 125 peak TFLOP/s per GPU", "76",
          path("default", "predicted.critical.model_tflops_per_gpu")),
    claim("default plan: tp link exposed s", "3 us; 0.439 s exposed", "0.439", link_exposed("default", "tp")),
    claim("default plan: pp link exposed s", "5 us; 0.430 s exposed", "0.430", link_exposed("default", "pp")),
    claim("default plan: stage configurations priced", "818 stage configurations", "818",
          path("default", "solver.candidates")),
    # "What sets the step time"
    claim("two-10gbe evaluate: step s", "(11.798 s of 13.615 s)", "13.615", step("explain")),
    claim("two-10gbe evaluate: compute s", "(11.798 s of 13.615 s)", "11.798",
          path("explain", "breakdown_s.compute")),
    claim("two-10gbe evaluate: ms per micro-batch", "64 micro-batches × 210.4 ms", "210.4",
          path("explain", "critical.per_microbatch_s", 1000)),
    claim("two-10gbe evaluate: critical model TFLOP/s per GPU", "62 of 125 peak TFLOP/s per GPU", "62",
          path("explain", "critical.model_tflops_per_gpu")),
    claim("two-10gbe evaluate: tp exposed s", "3 us; 1.666 s exposed", "1.666", link_exposed("explain", "tp")),
    claim("two-10gbe evaluate: pp exposed s", "50 us; 0.067 s exposed", "0.067", link_exposed("explain", "pp")),
    claim("two-10gbe evaluate: pp overlapped s", "4.234 s overlapped", "4.234",
          path("explain", "pp_comm_overlapped_s")),
    # Exports: the heterogeneous Megatron launch
    claim("70b h100-a100-v100: step s", "step 80.939 s tokens/s 25,910", "80.939", step("hetero70b")),
    claim("70b h100-a100-v100: tokens/s", "tokens/s 25,910 MFU 49.2%", "25,910",
          path("hetero70b", "predicted.tokens_per_s")),
    claim("70b h100-a100-v100: MFU %", "MFU 49.2% ...", "49.2", path("hetero70b", "predicted.mfu", 100)),
    claim("70b h100-a100-v100: --runtime any s", "2.9% faster (78.572 s", "78.572", _any("hetero70b")),
    derived("70b h100-a100-v100: --runtime any % faster", "would be 2.9% faster", "2.9",
            _any("hetero70b"), step("hetero70b"), "faster1"),
    claim("70b h100-a100-v100: mesh", "tp 4 x pp 6 x dp 2 = 48 GPUs", "tp 4 x dp 2",
          mesh("hetero70b", ("tp", "dp"))),
    claim("70b h100-a100-v100: pp", "tp 4 x pp 6 x dp 2 = 48 GPUs", "6",
          (("hetero70b",), lambda r: len(r["hetero70b"].json["stages"]))),
    claim("70b h100-a100-v100: stage configurations priced", "2118 stage configurations", "2118",
          path("hetero70b", "solver.candidates")),
    # Models
    claim("deepseek-v3 on dgx-h100-2node: shortfall GiB", "the smallest shortfall is 171.6 GiB per GPU", "171.6",
          stderr_number("deepseek", r"([0-9][0-9,]*\.[0-9]) GiB")),
    # Context parallelism
    claim("8b 131k on 2x H100: mesh", "gives tp 4 x cp 4 over both nodes", "tp 4 x cp 4",
          mesh("cp", ("tp", "cp"))),
    claim("8b 131k on 2x H100: step s", "64.628 s per step", "64.628", step("cp")),
    claim("8b 131k on 2x H100, --cp 1: step s", "67.955 s for the best plan without CP", "67.955", step("cp1")),
    claim("8b 131k, --cp 1: mesh", "(`--cp 1`: tp 8 x dp 2", "tp 8 x dp 2", mesh("cp1", ("tp", "dp"))),
    claim("8b 131k, --cp 1: blocks offloaded", "with the activations of 7 blocks offloaded", "7",
          (("cp1",), lambda r: r["cp1"].json["stages"][0].get("offload_activations", 0))),
    claim("8b 2M tokens: activations GiB", "needs 113.6 GiB of activations per GPU", "113.6",
          stderr_number("cp2m", r"needs ([0-9.,]+) GiB of activations")),
    claim("8b 2M tokens: fits at seq-len", "--seq-len <= 1,403,904", "1,403,904",
          stderr_number("cp2m", r"--seq-len <= ([0-9,]+)")),
    claim("8b 2M tokens: cp needed", "context parallelism cp >= 4", "4",
          stderr_number("cp2m", r"cp >= ([0-9]+)")),
    # fp8
    claim("8b torchtitan 8k eager: step s", "gives 16.586 s eager", "16.586", step("eager")),
    claim("8b torchtitan 8k --compile: step s", "15.966 s with `--compile`", "15.966", step("compiled")),
    claim("8b torchtitan 8k --compile: schedule", "interleaved layout, pp 2 x V 2", "interleaved",
          path("compiled", "training.schedule")),
    claim("8b fp8 on 2x H100: step s", "1.172 s per step in fp8", "1.172", step("fp8")),
    claim("8b bf16 on 2x H100: step s", "against 1.713 s in bf16", "1.713", step("bf16")),
    # Memory savers: activation offload
    claim("70b 16k dgx-a100 evaluate: peak GiB", "100.4 of 80 GiB, does not fit", "100.4",
          path("offload_none", "peak_memory_GiB.A100-SXM4-80GB")),
    claim("... --recompute full: step s", "`--recompute full` 230.950 s at 61.5 GiB", "230.950",
          step("offload_full")),
    claim("... --recompute full: peak GiB", "230.950 s at 61.5 GiB", "61.5",
          path("offload_full", "peak_memory_GiB.A100-SXM4-80GB")),
    claim("... --offload-activations 41: step s", "`--offload-activations 41` 170.928 s", "170.928",
          step("offload_act")),
    claim("... --offload-activations 41: peak GiB", "170.928 s at 80.0 GiB", "80.0",
          path("offload_act", "peak_memory_GiB.A100-SXM4-80GB")),
    # Schedules
    claim("8b pp 8 torchtitan 1f1b: step s", "1f1b 3.974 s", "3.974", step("sched_1f1b")),
    claim("... 1f1b: bubble %", "(bubble 20.9 %)", "20.9", path("sched_1f1b", "bubble_fraction", 100)),
    claim("... zb-h1: step s", "zb-h1 3.522 s (10.7 %)", "3.522", step("sched_zbh1")),
    claim("... zb-h1: bubble %", "zb-h1 3.522 s (10.7 %)", "10.7", path("sched_zbh1", "bubble_fraction", 100)),
    claim("... interleaved V=2: step s", "interleaved V=2 3.613 s (11.5 %)", "3.613", step("sched_il2")),
    claim("... interleaved V=2: bubble %", "interleaved V=2 3.613 s (11.5 %)", "11.5",
          path("sched_il2", "bubble_fraction", 100)),
    claim("... zbv: step s", "zbv 3.300 s (4.2 %)", "3.300", step("sched_zbv")),
    claim("... zbv: bubble %", "zbv 3.300 s (4.2 %)", "4.2", path("sched_zbv", "bubble_fraction", 100)),
    # ZB-H1 in the search
    claim("70b dgx-a100 any: schedule", "picks ZB-H1 with pp 4 and tp 4", "zb-h1", path("zb", "training.schedule")),
    claim("70b dgx-a100 any: pp", "picks ZB-H1 with pp 4 and tp 4", "4",
          (("zb",), lambda r: len(r["zb"].json["stages"]))),
    claim("70b dgx-a100 any: tp", "picks ZB-H1 with pp 4 and tp 4", "4", path("zb", "stages.0.tp")),
    claim("70b dgx-a100 any: step s", "tp 4 at 18.992 s", "18.992", step("zb")),
    claim("... --no-zero-bubble: schedule", "the best plan is interleaved at 19.176 s", "interleaved",
          path("zb_off", "training.schedule")),
    claim("... --no-zero-bubble: step s", "the best plan is interleaved at 19.176 s", "19.176", step("zb_off")),
    claim("... --no-zero-bubble --virtual-stages 1: step s", "--virtual-stages 1`) is 19.747 s", "19.747",
          step("zb_1f1b")),
    derived("70b dgx-a100 any: ZB-H1 % faster than 1F1B", "ZB-H1 is 4.0 % faster", "4.0",
            step("zb"), step("zb_1f1b"), "faster2"),
    claim("70b dgx-a100 any, ZB-V allowed: schedule", "the uniform ZB-V candidate wins", "zbv",
          path("zb_v", "training.schedule")),
    claim("70b dgx-a100 any, ZB-V allowed: step s", "(pp 8, tp 4) at 18.866 s", "18.866", step("zb_v")),
    # EP beside CP
    claim("qwen3 EP x CP: step s", "65,536 tokens: 24.131 s per step", "24.131", step("qwen")),
    claim("qwen3 EP x CP, --ep 1: step s", "against 29.378 s for the best plan without EP", "29.378", step("qwen_ep1")),
    claim("qwen3 EP x CP, --cp 1: step s", "29.378 s for the best plan without EP (`--ep 1`) and without CP", "29.378", step("qwen_cp1")),
    # torchtitan ZB-V
    claim("8b torchtitan dgx-a100 b32: schedule", "gives ZB-V with pp 2, dp 16", "zbv",
          path("tt_zbv", "training.schedule")),
    claim("8b torchtitan dgx-a100 b32: step s", "ZeRO-1 at 1.192 s", "1.192", step("tt_zbv")),
    claim("... --no-zero-bubble: step s", "against 1.247 s for the best plan without it", "1.247", step("tt_nozb")),
    claim("... --no-zero-bubble: schedule", "(interleaved, pp 2 x V 2, tp 2, dp 8)", "interleaved",
          path("tt_nozb", "training.schedule")),
    # When nothing fits
    claim("8b 4M tokens --cp 1: head activations GiB", "need 258.5 GiB on A100-SXM4-80GB", "258.5",
          stderr_number("head4m", r"need ([0-9.,]+) GiB on")),
    claim("8b 4M tokens --cp 1: GiB left", "more than the 77.8 GiB left there", "77.8",
          stderr_number("head4m", r"the ([0-9.,]+) GiB left")),
)


def run_command(name: str, two_10gbe: str) -> Result:
    args = [a.replace("{two_10gbe}", two_10gbe) for a in COMMANDS[name]] + ["--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    done = subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    return Result(json.loads(done.stdout) if done.stdout.strip() else None, done.stderr, done.returncode)


def as_quoted(value: Any, quoted: str) -> str:
    """`value` written the way the README writes `quoted`: same decimals, thousands commas."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return f"{value:,.{decimals}f}" if "," in quoted else f"{value:.{decimals}f}"


def relative(measured: Any, quoted: str) -> str:
    try:
        old = float(quoted.replace(",", ""))
        new = float(str(measured).replace(",", ""))
    except ValueError:
        return ""
    return f"{(new - old) / old:+.2%}" if old else ""


def collapse(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="command names (see --list) to run; claims on others skipped")
    parser.add_argument("--list", action="store_true", help="print each command's planner arguments and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, cmd in COMMANDS.items():
            print(f"{name}: planner {' '.join(cmd)}")
        return 0
    readme = collapse(README.read_text())
    wanted = [n for n in COMMANDS if not args.only or n in args.only]
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Path(tmp) / "two-10gbe.yaml"
        cluster.write_text(json.dumps(TWO_10GBE))  # YAML is a superset of JSON
        for name in wanted:
            print(f"running {name}: planner {' '.join(COMMANDS[name])}", file=sys.stderr, flush=True)
            results[name] = run_command(name, str(cluster))
    print("| claim | README | measured now | rel. diff | status |")
    print("|---|--:|--:|--:|---|")
    stale = 0
    for c in CLAIMS:
        if not all(n in results for n in c.commands):
            continue
        orphan = "" if collapse(c.anchor) in readme else " (anchor not in README)"
        try:
            measured = as_quoted(c.read(results), c.quoted)
        except (KeyError, TypeError, IndexError, StopIteration) as exc:
            first = results[c.commands[0]]
            measured = f"(unreadable: {type(exc).__name__} {exc}; rc {first.rc} {first.stderr.strip()[:80]})"
        status = "OK" if measured == c.quoted else "STALE"
        stale += status == "STALE"
        print(f"| {c.what} | {c.quoted} | {measured} | {relative(measured, c.quoted)} | {status}{orphan} |")
    print(f"\n{stale} of {sum(all(n in results for n in c.commands) for c in CLAIMS)} figures stale. Commands:")
    for name in wanted:
        print(f"- {name}: `planner {' '.join(COMMANDS[name])}` (exit {results[name].rc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
