"""Planning time, peak memory and plan quality of `planner plan` for llama-3-70b on H100 + A100
+ V100 clusters of many shapes.

    python benchmarks/planning_time.py [--rows NAME ...] [--time-limit 300] [--loss-limit 0] [--runtime megatron]
                                       [--compare-any]

Rows (8 GPUs a node, one IB fabric: 400, 200 and 50 GB/s per node; the global batch is one
4096-token sequence per GPU):
  * 1:1:2 at 64, 256, 1,024 and 4,096 GPUs (node counts with a common divisor);
  * odd node counts: 3+3+4, 4+4+5, 5+6+6, 31+47+50 (1,024 GPUs), 124+188+200 (4,096 GPUs);
  * a node failure: 31+47+49 and 32+32+63 (a V100 node lost);
  * 16 one-node groups (6 H100, 5 A100, 5 V100, each its own group).
Each row runs in its own child process (`--row NAME`), which reports its wall and CPU
seconds and its peak resident memory (resource.getrusage ru_maxrss). `plan` runs as the CLI
does, with the time limit (default: the CLI's, 300 s) and the runtime (default: the CLI's,
megatron; `--runtime any` times the unconstrained search; `--compare-any` adds plan's comparison
search under `--runtime any` to each row's time, as `planner plan --compare-any`). Columns: the decomposition the
search used (planner.search.decompose), the predicted step time, pipeline ranks and virtual stages,
whether the plan is proven optimal, its gap to the lower bound (planner.search.bounds.bound) and, with
`--loss-limit S` on the rows of 10-16 nodes (LOSS_ROWS), its true loss against the exact search of the
whole cluster node by node given S seconds (a lower figure than the exact optimum's when
that search is cut short: the true loss is then at least that, marked '>=').
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.api import PlanRequest, plan  # noqa: E402
from planner.core.clock import DEFAULT_TIME_LIMIT_S  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402

GPUS = {"h100": ("H100-SXM5-80GB", 400), "a100": ("A100-SXM4-80GB", 200), "v100": ("V100-SXM2-32GB", 50)}


def _group(name: str, kind: str, nodes: int) -> dict:
    gpu, nic = GPUS[kind]
    return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
            "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}


def three_types(h100: int, a100: int, v100: int) -> dict:
    return {"name": f"h100-a100-v100-{h100}-{a100}-{v100}", "node_groups": [
        _group("h100", "h100", h100), _group("a100", "a100", a100), _group("v100", "v100", v100)]}


def one_node_groups(h100: int, a100: int, v100: int) -> dict:
    kinds = ["h100"] * h100 + ["a100"] * a100 + ["v100"] * v100
    return {"name": f"one-node-groups-{len(kinds)}",
            "node_groups": [_group(f"{kind}-{i}", kind, 1) for i, kind in enumerate(kinds)]}


ROWS = {  # name: cluster spec
    "1:1:2 64": three_types(2, 2, 4),
    "1:1:2 256": three_types(8, 8, 16),
    "1:1:2 1024": three_types(32, 32, 64),
    "1:1:2 4096": three_types(128, 128, 256),
    "3+3+4": three_types(3, 3, 4),
    "4+4+5": three_types(4, 4, 5),
    "5+6+6": three_types(5, 6, 6),
    "31+47+50": three_types(31, 47, 50),
    "124+188+200": three_types(124, 188, 200),
    "31+47+49 (failed node)": three_types(31, 47, 49),
    "32+32+63 (failed node)": three_types(32, 32, 63),
    "16 one-node groups": one_node_groups(6, 5, 5),
}


LOSS_ROWS = ("3+3+4", "4+4+5")  # 10-16 nodes: the exact search of the whole cluster is within reach


def run_row(name: str, time_limit_s: float | None, max_parts: int, runtime: str = "megatron",
            compare_any: bool = False, jobs: int = 1) -> dict:
    """One row, in this process: what the parent prints."""
    cluster = cluster_from_spec(ROWS[name], "benchmark")
    request = PlanRequest(model=load_model("llama-3-70b"), cluster=cluster, global_batch=cluster.num_gpus,
                          seq_len=4096, dtype="fp16", time_limit_s=time_limit_s, max_bundle_nodes=max_parts,
                          runtime=runtime, compare_any=compare_any, jobs=jobs)
    started, cpu = time.perf_counter(), time.process_time()
    result = plan(request)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # the search processes (jobs 2, planner.search.orchestration.parallel) have ended: their CPU time, and their
    # peak counted once per process (an upper bound: a forked process shares its parent's pages)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"gpus": cluster.num_gpus, "nodes": sum(g.nodes for g in cluster.groups),
            "wall_s": time.perf_counter() - started,
            "cpu_s": time.process_time() - cpu + children.ru_utime + children.ru_stime,
            "peak_mib": (usage.ru_maxrss + (jobs if jobs > 1 else 0) * children.ru_maxrss) / 1024, "step_s": result.estimate.step_time_s,
            "pp": result.plan.pp, "v": result.plan.training.virtual_stages, "optimal": result.optimal,
            "gap": result.gap, "decomposition": result.decomposition}


def in_child(name: str, time_limit_s: float | None, max_parts: int = 4, runtime: str = "megatron",
             compare_any: bool = False, jobs: int = 1) -> dict:
    args = [sys.executable, __file__, "--row", name, "--max-parts", str(max_parts), "--runtime", runtime,
            "--jobs", str(jobs)]
    args += ["--compare-any"] if compare_any else []
    args += ["--time-limit", "none" if time_limit_s is None else str(time_limit_s)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:  # no plan (NoFeasiblePlan): the row says why instead of ending the table
        lines = done.stderr.strip().splitlines() or ["exit status %d" % done.returncode]
        return {"error": lines[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), metavar="NAME")
    parser.add_argument("--time-limit", default=str(DEFAULT_TIME_LIMIT_S), help="seconds, or 'none'")
    parser.add_argument("--loss-limit", type=float, default=0.0,
                        help="seconds for the exact search of the LOSS_ROWS (0: skip)")
    parser.add_argument("--runtime", default="megatron", help="the runtime whose space is searched (the CLI's default)")
    parser.add_argument("--compare-any", action="store_true",
                        help="include plan's --compare-any search (the same search under --runtime any)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="search processes, as `planner plan --jobs` (1: one; the plans are the same)")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--max-parts", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    limit = None if args.time_limit == "none" else float(args.time_limit)
    if args.row:
        print(json.dumps(run_row(args.row, limit, args.max_parts, args.runtime, args.compare_any, args.jobs)))
        return
    print("| cluster | GPUs | nodes | searched as | wall s | CPU s | peak MiB | step s | pp | V | optimal "
          "| gap vs bound | loss vs exact |")
    print("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|---|--:|--:|")
    for name in args.rows:
        row = in_child(name, limit, runtime=args.runtime, compare_any=args.compare_any, jobs=args.jobs)
        if "error" in row:
            print(f"| {name} | no plan: {row['error']} |", flush=True)
            continue
        loss = "-"
        if args.loss_limit > 0 and name in LOSS_ROWS and not row["optimal"]:
            exact = in_child(name, args.loss_limit, max_parts=16, runtime=args.runtime, jobs=args.jobs)
            mark = "" if exact.get("optimal") else ">="  # the optimum may lie lower still
            loss = (f"exact: no plan ({exact['error']})" if "error" in exact else
                    f"{mark}{(row['step_s'] - exact['step_s']) / exact['step_s']:.1%} (exact {exact['step_s']:.3f} s)")
        print(f"| {name} | {row['gpus']:,} | {row['nodes']} | {row['decomposition']} | {row['wall_s']:.1f} "
              f"| {row['cpu_s']:.1f} | {row['peak_mib']:.0f} | {row['step_s']:.3f} | {row['pp']} | {row['v']} "
              f"| {row['optimal']} | {row['gap']:.1%} | {loss} |", flush=True)


if __name__ == "__main__":
    main()
