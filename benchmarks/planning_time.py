"""Planning time of `planner plan` for llama-3-70b on H100 + A100 + V100 clusters.

    python benchmarks/planning_time.py [--repeats 3] [--sizes 64 256 1024 4096]

Each cluster has H100, A100 and V100 nodes in the ratio 1:1:2 (8 GPUs a node, one IB
fabric: 400, 200 and 50 GB/s per node). The global batch is one sequence per GPU
(4096 tokens each). Prints the median wall time of `planner.api.plan` (what `planner plan`
runs, without a time limit) over the repeats, the
growth factor from the previous size, the predicted step time, the pipeline ranks and
virtual stages per rank (V = 2: interleaved), whether the plan is proven
optimal and the gap to the lower bound otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.api import PlanRequest, plan  # noqa: E402
from planner.hardware import cluster_from_spec  # noqa: E402
from planner.model import load_model  # noqa: E402


def three_tier(num_gpus: int) -> dict:
    unit = num_gpus // 32  # nodes of H100 (and of A100); V100 has twice as many
    def group(name, gpu, nodes, nic):
        return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
                "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}
    return {"name": f"h100-a100-v100-{num_gpus}", "node_groups": [
        group("h100", "H100-SXM5-80GB", unit, 400), group("a100", "A100-SXM4-80GB", unit, 200),
        group("v100", "V100-SXM2-32GB", 2 * unit, 50)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    args = parser.parse_args()
    model = load_model("llama-3-70b")
    print(f"{'GPUs':>6} {'median s':>9} {'growth':>7} {'step s':>8} {'MFU':>6} {'pp':>6} "
          f"{'V':>2} {'bundles':>7} {'optimal':>7} {'gap':>6}")
    previous = None
    for size in args.sizes:
        cluster = cluster_from_spec(three_tier(size), "benchmark")
        request = PlanRequest(model=model, cluster=cluster, global_batch=size, seq_len=4096, dtype="fp16",
                              time_limit_s=None)
        times, result = [], None
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = plan(request)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        growth = f"{median / previous:.2f}x" if previous else "-"
        previous = median
        est = result.estimate
        print(f"{size:>6} {median:>9.2f} {growth:>7} {est.step_time_s:>8.2f} {est.mfu:>6.1%} "
              f"{result.plan.pp:>6} {result.plan.training.virtual_stages:>2} {result.bundles:>7} {str(result.optimal):>7} {result.gap:>6.1%}")


if __name__ == "__main__":
    main()
