"""Exact exports end to end: `planner plan --runtime R ... -o p.json`, then `planner export --to R
p.json`, for each runtime, model and cluster of issue 13's "Done when".

    python benchmarks/runtime_exports.py [--runtime megatron --runtime torchtitan] [--case CLUSTER:MODEL]

Per case: the plan's step time, the same search under `--runtime any` (solver.any_runtime_step_s of
the plan file), the best uniform configuration the runtime can run (benchmarks/runtime_gap.py's
best_runnable_uniform, in the plan's dtype), the export's exit code and its warning lines
(`planner: warning:` on stderr). Global batch 512, sequence 4096 (the `planner plan` defaults),
the default dtype of the runtime (planner.api.load.resolve_dtype: bf16 where every GPU has it, else
fp16, or fp32 for torchtitan, which has no fp16), the default time limit. Exit 1 when an export
fails or warns, or a plan is slower than the best uniform configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from runtime_gap import CASES, best_runnable_uniform  # noqa: E402

from planner.inputs.hardware import load_cluster  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402

GLOBAL_BATCH, SEQ_LEN = 512, 4096
TARGET = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", default=None)
    parser.add_argument("--case", action="append", default=None, help="CLUSTER:MODEL")
    args = parser.parse_args()
    runtimes = args.runtime or ["megatron", "torchtitan", "deepspeed"]
    cases = [tuple(c.split(":")) for c in args.case] if args.case else CASES
    print(f"{'runtime':10} {'model':11} {'cluster':15} {'dtype':5} {'step s':>8} {'any s':>8} {'uniform s':>9} "
          f"{'optimal':>7} {'export':>6} {'warnings':>8}")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for cluster_name, model_name in cases:
            cluster, model = load_cluster(cluster_name), load_model(model_name)
            for runtime in runtimes:
                path = os.path.join(tmp, f"{runtime}-{cluster_name}-{model_name}.json")
                planned = cli("plan", "--model", model_name, "--cluster", cluster_name, "--global-batch",
                              str(GLOBAL_BATCH), "--seq-len", str(SEQ_LEN), "--runtime", runtime, "--compare-any", "-o", path)
                if planned.returncode:
                    print(f"{runtime:10} {model_name:11} {cluster_name:15} plan exit {planned.returncode}: "
                          f"{planned.stderr.strip().splitlines()[-1]}", flush=True)
                    continue
                data = json.loads(Path(path).read_text())
                step = data["predicted"]["step_time_s"]
                free = data["solver"].get("any_runtime_step_s")
                dtype = data["training"]["dtype"]
                uniform = best_runnable_uniform(model, cluster, dtype, runtime)
                u = uniform[1].step_time_s if uniform else float("nan")
                exported = cli("export", "--to", TARGET[runtime], path, "-o", path + ".out")
                warnings = sum("warning" in line for line in exported.stderr.splitlines())
                bad += bool(exported.returncode or warnings or (uniform and step > u * (1 + 1e-9)))
                print(f"{runtime:10} {model_name:11} {cluster_name:15} {dtype:5} {step:8.3f} "
                      f"{free if free is not None else float('nan'):8.3f} {u:9.3f} "
                      f"{str(data['solver'].get('optimal')):>7} {exported.returncode:6d} {warnings:8d}", flush=True)
                if exported.returncode or warnings:
                    print("    " + "\n    ".join(exported.stderr.strip().splitlines()), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
