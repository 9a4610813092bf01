"""Plan quality: the solver's predicted throughput against three baselines, per cluster.

    python benchmarks/plan_quality.py [--runtime any|megatron|torchtitan|...] [--memory]

--runtime (default any): the space the solver searches (planner.cost.runtimes.capability);
every runtime is priced with its own physics, `any` as Megatron-LM. The baselines stay the same.

(a) uniform: the best heterogeneity-blind configuration a Megatron-LM user would launch:
    the same tp/pp/dp everywhere over all GPUs, even layers, even batch (every tp, pp,
    micro-batch 1/2/4/8, recompute none/full, ZeRO 0/1, 1F1B or interleaved V=2);
(b) fastest-only: the solver's plan on the nodes of the fastest GPU type alone;
(c) proportional: a Metis-style heuristic: one pipeline stage per node group (both
    orders: fastest first and slowest first), layers split in proportion to each group's
    peak FLOP/s, even batch inside a stage, every per-stage tp, micro-batch and recompute.
Every candidate is priced by planner.cost.evaluate and must fit in memory. Prints tokens/s and
the solver's speed-up over each baseline; targets: >= 1.3x over (a) on the A100 + V100
cluster and >= 1.0x over (b) and (c) everywhere.

Memory-bound cases (MEMORY_CASES, `--memory` prints only these): the solver's plan without and
with the searched memory savers, recompute "block" (a stage recomputes only some of its
blocks), ZeRO-Offload (a stage's optimizer on the host) and activation offload (a one-stage
plan's blocks' activations on the host, +act K), then with the ZB-H1 schedule
searched too (where the runtime runs it), under AdamW and, as the user's choice, 8-bit AdamW.
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner import api  # noqa: E402
from planner.core.errors import NoFeasiblePlan  # noqa: E402
from planner.cost.evaluate import evaluate  # noqa: E402
from planner.cost.runtimes import cluster_params  # noqa: E402
from planner.inputs.hardware import Cluster, cluster_from_spec, load_cluster  # noqa: E402
from planner.inputs.model import Model, load_model  # noqa: E402
from planner.plan import Plan, Replica, Stage, Training  # noqa: E402
from planner.search.pricing.stage_types import SearchContext, SolverOptions  # noqa: E402
from planner.search.uniform import UniformSpace, best_uniform  # noqa: E402

CASES = [  # cluster, model, global batch, sequence length
    ("a100-v100-mix", "llama-3-8b", 512, 4096),
    ("h100-a100-v100", "llama-3-8b", 512, 4096),
    ("consumer-3090-4090", "llama-2-7b", 128, 2048),
    ("two-region-a100", "llama-3-8b", 512, 4096),
]
# cluster, model, global batch, sequence length: where activations and optimizer states bind
MEMORY_CASES = [
    ("consumer-3090-4090", "llama-3-8b", 32, 16384),
    ("consumer-3090-4090", "llama-3-70b", 64, 4096),
    ("dgx-a100", "llama-3-70b", 64, 4096),  # 70B on 32 A100-80GB: a pipeline whose last stage is full
    ("box-4090", "phi-3-mini", 32, 8192),  # one workstation: a one-stage plan with activations offloaded
]
# clusters of MEMORY_CASES not among profiles/clusters
INLINE_CLUSTERS = {"box-4090": {"name": "box-4090", "node_groups": [
    {"name": "a", "gpu": "RTX-4090", "nodes": 1, "gpus_per_node": 4}]}}
WITHOUT_BLOCK = ("none", "selective", "full")
MICRO_BATCHES = (1, 2, 4, 8)
TP = (1, 2, 4, 8)
RECOMPUTE = ("none", "full")


RUNTIME = "any"  # set by --runtime


def _request(model: Model, cluster: Cluster, global_batch: int, seq_len: int, dtype: str) -> api.PlanRequest:
    """What `planner plan --runtime RUNTIME` searches for these inputs, without a time limit."""
    return api.PlanRequest(model=model, cluster=cluster, global_batch=global_batch, seq_len=seq_len, dtype=dtype,
                       time_limit_s=None, runtime=RUNTIME)


def best_uniform_tokens_per_s(model: Model, cluster: Cluster, global_batch: int, seq_len: int, dtype: str) -> float:
    best = best_uniform(SearchContext(model, cluster, Training(global_batch, seq_len, dtype, 1, runtime=RUNTIME),
                                      SolverOptions()),
                        UniformSpace(tp_degrees=TP, micro_batches=MICRO_BATCHES, recompute_modes=RECOMPUTE),
                        cluster_params(cluster.gpu_types, RUNTIME))
    return 0.0 if best is None else best[1].tokens_per_s


def fastest_only(model: Model, cluster: Cluster, global_batch: int, seq_len: int, dtype: str) -> float:
    fastest = max(cluster.gpu_types, key=lambda g: g.peak(dtype)).name
    spec = dict(cluster.spec)
    spec["node_groups"] = [g for g in cluster.spec["node_groups"]
                           if cluster.group(g["name"]).gpu.name == fastest]
    spec["links"] = [l for l in cluster.spec.get("links") or []
                     if all(x in {g["name"] for g in spec["node_groups"]} for x in l["between"])]
    sub = cluster_from_spec(spec, "fastest-only")
    try:
        return api.plan(_request(model, sub, global_batch, seq_len, dtype)).estimate.tokens_per_s
    except NoFeasiblePlan:
        return 0.0


def proportional(model: Model, cluster: Cluster, global_batch: int, seq_len: int, dtype: str) -> float:
    best = 0.0
    blocks = model.num_layers - 2
    by_speed = sorted(cluster.groups, key=lambda g: -g.gpu.peak(dtype))
    for order in (by_speed, by_speed[::-1]):
        power = [g.num_gpus * g.gpu.peak(dtype) for g in order]
        counts = [max(1, round(blocks * p / sum(power))) for p in power]
        counts[-1] = blocks - sum(counts[:-1])
        if counts[-1] < 1:
            continue
        bounds, first = [], 0
        for k, c in enumerate(counts):
            end = first + c + (1 if k == 0 else 0) + (1 if k == len(counts) - 1 else 0)
            bounds.append((first, end))
            first = end
        for tps, b, rc in product(product(TP, repeat=len(order)), MICRO_BATCHES, RECOMPUTE):
            if any(g.gpus_per_node % tp or model.config.num_heads % tp for g, tp in zip(order, tps)):
                continue
            stages, ok = [], True
            for k, (g, tp, layers) in enumerate(zip(order, tps, bounds)):
                dp = g.num_gpus // tp
                if global_batch % (dp * b):
                    ok = False
                    break
                share = global_batch // dp
                replicas = tuple(Replica(d, share, tuple(range(g.first_rank + d * tp, g.first_rank + (d + 1) * tp)))
                                 for d in range(dp))
                stages.append(Stage(k, layers, tp, 1 if dp > 1 else 0, rc, replicas, k, tp > 1))
            if not ok:
                continue
            plan = Plan(model, cluster, Training(global_batch, seq_len, dtype, b), tuple(stages))
            est = evaluate(plan, cluster_params(cluster.gpu_types, RUNTIME))  # as the solver prices its plan
            if est.fits:
                best = max(best, est.tokens_per_s)
    return best


def memory_bound() -> None:
    """The solver's tokens/s on MEMORY_CASES without and with recompute "block" and both offloads, and
    with ZB-H1 searched too, under AdamW and 8-bit AdamW (0: the search proves no plan fits)."""
    print(f"{'cluster':20} {'model':11} {'seq':>6} {'optimizer':10} {'without':>10} {'with':>10} {'gain':>6} "
          f"{'+zb-h1':>10} {'gain':>6}  schedule: stages (block: recomputed/blocks, +off: offloaded)")
    for cluster_name, model_name, global_batch, seq_len in MEMORY_CASES:
        cluster = (cluster_from_spec(INLINE_CLUSTERS[cluster_name]) if cluster_name in INLINE_CLUSTERS
                   else load_cluster(cluster_name))
        model = load_model(model_name)
        dtype = cluster.common_dtype()
        for optimizer in ("adamw", "adamw-8bit"):
            runs = [_solve(api.PlanRequest(model=model, cluster=cluster, global_batch=global_batch, seq_len=seq_len,
                                           dtype=dtype, optimizer=optimizer, recompute_modes=modes, offload=offload,
                                           activation_offload=offload, time_limit_s=None, runtime=RUNTIME,
                                           zero_bubble=zb))
                    for modes, offload, zb in ((WITHOUT_BLOCK, False, False), (WITHOUT_BLOCK + ("block",), True, False),
                                               (WITHOUT_BLOCK + ("block",), True, True))]
            without, with_savers, with_zb = (0.0 if r is None else r.estimate.tokens_per_s for r in runs)
            best = runs[2]
            stages = [("block " + f"{s.recompute_layers}/{s.decoder_blocks(model)}" if s.recompute == "block"
                       else s.recompute) + (" +off" if s.offload else "")
                      + (f" +act {s.offload_activations}" if s.offload_activations else "") for s in best.plan.stages
                      if s.index < best.plan.pp] if best else []
            gain = f"{with_savers / without:5.3f}x" if without else "   new"
            gain_zb = f"{with_zb / with_savers:5.3f}x" if with_savers else ("   new" if with_zb else "     -")
            print(f"{cluster_name:20} {model_name:11} {seq_len:>6} {optimizer:10} {without:10,.0f} {with_savers:10,.0f} "
                  f"{gain:>6} {with_zb:10,.0f} {gain_zb:>6}  "
                  f"{best.plan.training.schedule if best else '-'}: {', '.join(stages) or '-'}")


def _solve(request: api.PlanRequest):
    try:
        return api.plan(request)
    except NoFeasiblePlan:
        return None


def main() -> None:
    global RUNTIME
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="any", help="the solver's runtime (default any)")
    parser.add_argument("--memory", action="store_true", help="print only the memory-bound cases")
    args = parser.parse_args()
    RUNTIME = args.runtime
    print(f"runtime {RUNTIME}")
    if args.memory:
        memory_bound()
        return
    print(f"{'cluster':20} {'model':11} {'solver tok/s':>12} {'(a) uniform':>12} {'(b) fastest':>12} "
          f"{'(c) propor.':>12} {'vs a':>6} {'vs b':>6} {'vs c':>6} {'pp':>3} {'V':>2} {'optimal':>7} {'solve s':>7}")
    for cluster_name, model_name, global_batch, seq_len in CASES:
        cluster, model = load_cluster(cluster_name), load_model(model_name)
        dtype = cluster.common_dtype()
        started = time.perf_counter()
        result = api.plan(_request(model, cluster, global_batch, seq_len, dtype))
        seconds = time.perf_counter() - started
        ours = result.estimate.tokens_per_s
        a = best_uniform_tokens_per_s(model, cluster, global_batch, seq_len, dtype)
        b = fastest_only(model, cluster, global_batch, seq_len, dtype)
        c = proportional(model, cluster, global_batch, seq_len, dtype)

        def ratio(x: float) -> str:
            return f"{ours / x:.2f}x" if x else "n/a"

        print(f"{cluster_name:20} {model_name:11} {ours:12,.0f} {a:12,.0f} {b:12,.0f} {c:12,.0f} "
              f"{ratio(a):>6} {ratio(b):>6} {ratio(c):>6} {result.plan.pp:>3} {result.plan.training.virtual_stages:>2} "
              f"{str(result.optimal):>7} {seconds:7.1f}")
    print()
    memory_bound()


if __name__ == "__main__":
    main()
