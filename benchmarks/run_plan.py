"""Run a heterogeneous plan on this machine's CPU with `planner run` and print its measured
step time next to the step time the plan predicts from a CPU layer profile.

    python benchmarks/run_plan.py                 # 3 ranks, 6 steps, in a temporary folder
    python benchmarks/run_plan.py --steps 10 --workdir /tmp/run-plan --json

What it does, each step a planner command (printed as it runs):

1. `planner profile --model tiny-llama.json --device cpu`: time the model's layers here;
2. a cluster file with one "GPU" type, CPU (one process each), and a plan built with the
   library: stage 0 (embedding + 2 blocks) on two replicas taking 6 and 2 of the 8 samples,
   stage 1 (2 blocks + head) on one rank, micro-batch 2, fp32;
3. `planner evaluate --plan plan.json --profile CPU=profile.json`: the predicted step time
   (the same price, from planner.api, goes into the plan's `predicted`);
4. `torchrun --standalone --nproc_per_node=3 -m planner.cli run plan.json`: measured.

The first step also opens gloo's connections, so the median is over the later steps. The
ranks share this machine's cores (the cost model assumes each its own device), so on a
machine with fewer free cores than ranks measured exceeds predicted.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from planner.api import evaluate_plan, predicted_json  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.plan import Plan, Replica, Stage, Training, plan_to_json  # noqa: E402

MODEL = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 256, "num_hidden_layers": 4, "vocab_size": 512, "max_position_embeddings": 256}
SEQ_LEN = 64
CLUSTER = {"name": "cpu-host",
           "gpus": {"CPU": {"memory_GiB": 4, "peak_tflops": {"fp32": 0.05}, "hbm_GBps": 10}},
           "node_groups": [{"name": "host", "gpu": "CPU", "nodes": 1, "gpus_per_node": 3,
                            "intra_node": {"bandwidth_GBps": 2, "latency_us": 50},
                            "inter_node": {"bandwidth_GBps": 1, "latency_us": 100}}]}


def planner(*args: str, env: dict, torchrun: int = 0) -> str:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}"] \
        if torchrun else [sys.executable]
    command = launcher + ["-m", "planner.cli", *args]
    shown = (f"torchrun --standalone --nproc_per_node={torchrun} -m planner.cli " if torchrun else "planner ") + \
        shlex.join(args)
    print(f"$ {shown}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {shown}\n{done.stderr[-2000:]}")
    return done.stdout


def hetero_plan(model_path: Path) -> Plan:
    model = load_model(str(model_path))
    training = Training(global_batch=8, seq_len=SEQ_LEN, dtype="fp32", micro_batch=2)
    stage0 = Stage(0, (0, 3), 1, 0, "none", (Replica(0, 6, (0,)), Replica(1, 2, (1,))), 0)
    stage1 = Stage(1, (3, 6), 1, 0, "none", (Replica(0, 8, (2,)),), 1)
    return Plan(model, cluster_from_spec(CLUSTER), training, (stage0, stage1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the files here [default: a temporary folder]")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="run-plan-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    Path("tiny-llama.json").write_text(json.dumps(MODEL))
    planner("profile", "--model", "tiny-llama.json", "--device", "cpu", "--seq-len", str(SEQ_LEN),
            "--micro-batch", "1,2", "--repeats", "5", "-o", "profile.json", env=env)
    plan = hetero_plan(Path("tiny-llama.json"))
    Path("plan.json").write_text(json.dumps(plan_to_json(plan)))
    planner("evaluate", "--plan", "plan.json", "--profile", "CPU=profile.json", env=env)  # shown to the reader
    estimate = evaluate_plan(plan, ("CPU=profile.json",)).estimate  # the same price, for the plan file
    Path("plan.json").write_text(json.dumps(plan_to_json(plan, predicted_json(estimate))))
    out = planner("run", "plan.json", "--steps", str(args.steps), "--log-file", "log.jsonl", env=env, torchrun=3)
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    later = [r["step_time_s"] for r in records[1:]] or [records[0]["step_time_s"]]
    result = {"workdir": str(work), "ranks": 3, "steps": len(records),
              "losses": [round(r["loss"], 4) for r in records],
              "measured_step_time_s": statistics.median(later),
              "predicted_step_time_s": records[0]["predicted_step_time_s"]}
    result["measured_over_predicted"] = result["measured_step_time_s"] / result["predicted_step_time_s"]
    if args.json:
        print(json.dumps(result))
        return
    print(f"plan: stage 0 on 2 replicas (shares 6:2), stage 1 on 1 rank; files in {work}")
    print(f"{'step':>4}  {'loss':>8}  {'measured s':>10}  {'predicted s':>11}")
    for r in records:
        print(f"{r['step']:>4}  {r['loss']:>8.4f}  {r['step_time_s']:>10.4f}  {r['predicted_step_time_s']:>11.4f}")
    print(f"median measured (steps 2-{len(records)}): {result['measured_step_time_s']:.4f} s; predicted "
          f"{result['predicted_step_time_s']:.4f} s; measured / predicted {result['measured_over_predicted']:.2f}")


if __name__ == "__main__":
    main()
