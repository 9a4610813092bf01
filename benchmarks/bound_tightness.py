"""How far the lower bound (planner.search.bounds.bound) sits below proven optima.

    python benchmarks/bound_tightness.py [--runtimes megatron deepspeed ...] [--seeds 50]

Part 1, llama-3-70b on the H100 + A100 + V100 clusters of benchmarks/planning_time.py under
megatron: the busy-time bound (busy_bound_s, without pipeline_bound_s) and the full bound
(compute_lower_bound_s), with the CPU seconds of each. Part 2, the oracle instances of
planner/verify/oracle.py (tiny_instance seeds 0..S-1, pipeline_instance 0..11) under each runtime:
the brute-force optimum (brute_force there) against both bounds; any bound above an optimum is
printed as a violation. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner.cost.runtimes import cluster_params  # noqa: E402
from planner.cost.runtimes.capability import capability  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.plan import Training  # noqa: E402
from planner.search.bounds.bound import busy_bound_s, compute_lower_bound_s  # noqa: E402
from planner.search.orchestration.space import within  # noqa: E402
from planner.search.pricing.stage_types import SolverOptions  # noqa: E402
from planner.search.pricing.stage_types import SearchContext  # noqa: E402
from planning_time import ROWS  # noqa: E402

LLAMA_ROWS = ("1:1:2 64", "1:1:2 256", "1:1:2 1024", "1:1:2 4096", "3+3+4", "4+4+5", "31+47+50", "16 one-node groups")


def llama_rows(runtime: str = "megatron") -> None:
    model = load_model("llama-3-70b")
    print("| cluster | busy bound s | CPU s | bound s | CPU s |")
    print("|---|--:|--:|--:|--:|")
    for name in LLAMA_ROWS:
        cluster = cluster_from_spec(ROWS[name], "benchmark")
        base = Training(cluster.num_gpus, 4096, "fp16", 1, runtime=runtime)  # as planning_time.py plans it
        options = within(SolverOptions(gpu_params=tuple(sorted(cluster_params(cluster.gpu_types, runtime).items()))),
                         capability(runtime))
        t = time.process_time()
        busy = busy_bound_s(SearchContext(model, cluster, base, options))
        busy_cpu, t = time.process_time() - t, time.process_time()
        bound = compute_lower_bound_s(SearchContext(model, cluster, base, options))
        print(f"| {name} | {busy:.3f} | {busy_cpu:.2f} | {bound:.3f} | {time.process_time() - t:.2f} |", flush=True)


def oracle_rows(runtimes: list[str], seeds: int) -> None:
    from planner.api.load import resolve_dtype
    from planner.verify.oracle import brute_force
    from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance

    print("| runtime | instances with a plan | bound above the busy bound | busy bound / optimum (mean, max) "
          "| bound / optimum (mean, max) | violations |")
    print("|---|--:|--:|--:|--:|--:|")
    for runtime in runtimes:
        ratios, higher, violations = [], 0, 0
        for make, count in ((tiny_instance, seeds), (pipeline_instance, 12)):
            for seed in range(count):
                model, cluster, base = make(seed)
                # in a dtype the runtime has, as `planner plan --runtime R` picks it
                dtype = base.dtype if base.dtype in capability(runtime).dtypes else resolve_dtype(cluster, None, runtime)
                base = replace(base, runtime=runtime, dtype=dtype)
                options = within(SolverOptions(**TINY_OPTIONS), capability(runtime))
                optimum, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"],
                                            TINY_OPTIONS["tp_degrees"], TINY_OPTIONS["recompute_modes"],
                                            zero_stages=(0, 1, 2, 3), virtual_stages=TINY_OPTIONS["virtual_stages"],
                                            runtime=runtime)
                if optimum == float("inf"):
                    continue
                busy, bound = busy_bound_s(SearchContext(model, cluster, base, options)), compute_lower_bound_s(SearchContext(model, cluster, base, options))
                higher += bound > busy * 1.001
                if bound > optimum * (1 + 1e-9):
                    violations += 1
                    print(f"violation: {runtime} {make.__name__} {seed}: bound {bound} > optimum {optimum}", flush=True)
                ratios.append((busy / optimum, bound / optimum))
        old, new = [r[0] for r in ratios], [r[1] for r in ratios]
        print(f"| {runtime} | {len(ratios)} | {higher} | {sum(old) / len(old):.3f}, {max(old):.3f} "
              f"| {sum(new) / len(new):.3f}, {max(new):.3f} | {violations} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", nargs="+", default=["megatron", "deepspeed", "torchtitan", "megatron-2021", "fsdp1"])
    parser.add_argument("--seeds", type=int, default=50, help="tiny_instance seeds (0..S-1)")
    args = parser.parse_args()
    llama_rows()
    print()
    oracle_rows(args.runtimes, args.seeds)


if __name__ == "__main__":
    main()
