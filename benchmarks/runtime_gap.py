"""What a runtime's capability costs: the plan for each runtime against `--runtime any` and the
best uniform configuration that runtime can run, per cluster.

    python benchmarks/runtime_gap.py [--runtime megatron --runtime torchtitan] [--case CLUSTER:MODEL]

For each case: the step time of `planner plan --runtime R` (global batch 512, sequence 4096),
of the same search under `--runtime any` (same physics, every stage free; SearchResult.any_runtime_step_s),
and of the fastest uniform configuration R can run (every tp, pp, micro-batch 1/2/4/8, recompute
none/full, the ZeRO stages R has, 1F1B or interleaved V=2, any node boundaries;
planner.search.uniform, filtered by capability.violations). The plan is never slower than the
uniform one (the search prices those off whole nodes first).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import api  # noqa: E402
from planner.cost.runtimes import cluster_params  # noqa: E402
from planner.cost.runtimes.capability import capability, violations  # noqa: E402
from planner.inputs.hardware import load_cluster  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.api.load import resolve_dtype  # noqa: E402
from planner.plan import Training  # noqa: E402
from planner.search.pricing.stage_types import SearchContext, SolverOptions  # noqa: E402
from planner.search.uniform import UniformSpace, improving_uniform  # noqa: E402

CASES = [(c, m) for m in ("llama-3-8b", "llama-3-70b") for c in ("dgx-a100", "a100-v100-mix", "h100-a100-v100")]
GLOBAL_BATCH, SEQ_LEN = 512, 4096


def best_runnable_uniform(model, cluster, dtype: str, runtime: str):
    cap = capability(runtime)
    zeros = tuple(sorted(set(cap.zero_stages) | set(cap.zero_stages_with_pp)))
    space = UniformSpace(recompute_modes=tuple(m for m in ("none", "full") if m in cap.recompute_modes),
                         zero_stages=zeros, virtual_stages=(1, 2) if "interleaved" in cap.schedules else (1,),
                         sequence_parallel=cap.sequence_parallel)
    best = None
    training = Training(GLOBAL_BATCH, SEQ_LEN, dtype, 1, runtime=runtime)
    for best in improving_uniform(SearchContext(model, cluster, training, SolverOptions()), space,
                                  cluster_params(cluster.gpu_types, runtime), accept=lambda p: not violations(p, runtime)):
        pass
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", default=None)
    parser.add_argument("--case", action="append", default=None, help="CLUSTER:MODEL")
    args = parser.parse_args()
    runtimes = args.runtime or ["megatron", "torchtitan"]
    cases = [tuple(c.split(":")) for c in args.case] if args.case else CASES
    print(f"{'cluster':15} {'model':11} {'runtime':10} {'plan s':>8} {'any s':>8} {'uniform s':>9} "
          f"{'any gain':>8} {'vs unif.':>8} {'pp':>3} {'tp':>6} {'dp':>6} {'optimal':>7} {'solve s':>7}")
    for cluster_name, model_name in cases:
        cluster, model = load_cluster(cluster_name), load_model(model_name)
        for runtime in runtimes:
            dtype = resolve_dtype(cluster, None, runtime)  # torchtitan has no fp16: fp32 on V100s
            started = time.perf_counter()
            result = api.plan(api.PlanRequest(model=model, cluster=cluster, global_batch=GLOBAL_BATCH,
                                              seq_len=SEQ_LEN, dtype=dtype, time_limit_s=None, runtime=runtime,
                                              compare_any=True))
            seconds = time.perf_counter() - started
            step = result.estimate.step_time_s
            free = result.any_runtime_step_s
            uniform = best_runnable_uniform(model, cluster, dtype, runtime)
            u = uniform[1].step_time_s if uniform else float("nan")
            stages = result.plan.stages
            tps = "/".join(str(t) for t in sorted({s.tp for s in stages}))
            dps = "/".join(str(d) for d in sorted({s.dp for s in stages}))
            print(f"{cluster_name:15} {model_name:11} {runtime:10} {step:8.3f} {free:8.3f} {u:9.3f} "
                  f"{1 - free / step:8.1%} {u / step:7.3f}x {result.plan.pp:>3} {tps:>6} {dps:>6} "
                  f"{str(result.optimal):>7} {seconds:7.1f}", flush=True)


if __name__ == "__main__":
    main()
