"""How close the floor of each unrestricted search (planner.search.bounds.any_bound) comes to the best plan of
that search, on a planning_time.py row under `--runtime any`.

    python benchmarks/any_floors.py [--row "1:1:2 64"] [--cutoff S] [--optimum B,V,RANKS,SCHEDULE ...]

Prints one line per search (micro-batch b, chunks per rank V, pipeline ranks or "any", schedule) of
the row's space (planner.search.orchestration.space.subproblems) with its closed-form floor (any_bound) and
whether rank_floor rules it out against the cutoff S (default: the row's optimum on "1:1:2 64",
9.537 s, with the driver's margin). `--optimum` also solves the named
searches alone (no other search, no uniform seed; RANKS "any" for 1F1B), so the floor can be read
against the search's own optimum: the driver skips a search when its floor reaches the best plan
found so far (on "1:1:2 64": 9.537 s, ZB-H1 at b = 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import planning_time  # noqa: E402
import planner.api as api  # noqa: E402
from planner.api import PlanRequest  # noqa: E402
import planner.search.orchestration.driver as driver  # noqa: E402
import planner.search.orchestration.lanes as lanes  # noqa: E402
from planner.cost.runtimes.capability import capability  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.search.bounds.any_bound import ClosedFormBound  # noqa: E402
from planner.search.bounds.rank_floor import RankBound  # noqa: E402
from planner.search.bounds.search_bound import Subproblem  # noqa: E402
from planner.search.decompose import decompose  # noqa: E402
from planner.search.orchestration.space import subproblems, within  # noqa: E402
from planner.search.pricing.stage_types import SearchContext  # noqa: E402
from planner.search.uniform import UniformSeed  # noqa: E402


class _Captured(Exception):
    """Raised by the stand-in solve with the inputs planner.api.plan built."""


def _instance(row: str):
    """The row's model, cluster, training and solver options, as `planner plan --runtime any` builds
    them (planner.api.plan: the GPUs' measured cost parameters included; planning_time.run_row)."""
    cluster = cluster_from_spec(planning_time.ROWS[row], "benchmark")
    request = PlanRequest(model=load_model("llama-3-70b"), cluster=cluster, global_batch=cluster.num_gpus,
                          seq_len=4096, dtype="fp16", time_limit_s=None, max_bundle_nodes=4, runtime="any")

    def capture(model, cluster, base, options, on_progress=None):
        raise _Captured(model, cluster, base, options)
    real, driver.solve = driver.solve, capture
    try:
        api.plan(request)
    except _Captured as inputs:
        return inputs.args
    finally:
        driver.solve = real
    raise AssertionError("planner.api.plan did not reach solve")


def _alone(model, cluster, base, options, want) -> tuple[float | None, float]:
    """The optimum of the one search `want` = (b, v, ranks, schedule), and the CPU seconds it took."""
    real_subproblems, real_uniform = driver.runtime_subproblems, lanes.best_uniform_share
    driver.runtime_subproblems = lambda *a, **k: (s for s in real_subproblems(*a, **k)
                                                  if (s[0], s[1], s[2], s[4]) == want)
    lanes.best_uniform_share = lambda *a, **k: UniformSeed(None)
    started = time.process_time()
    try:
        step = driver.solve(model, cluster, base, options).estimate.step_time_s
    except driver.NoFeasiblePlan:
        step = None
    finally:
        driver.runtime_subproblems, lanes.best_uniform_share = real_subproblems, real_uniform
    return step, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="1:1:2 64", choices=list(planning_time.ROWS))
    parser.add_argument("--cutoff", type=float, default=9.53726668130556 * (1 + 2e-6))
    parser.add_argument("--optimum", nargs="*", default=[], metavar="B,V,RANKS,SCHEDULE")
    args = parser.parse_args()
    model, cluster, base, given = _instance(args.row)
    cap = capability("any")
    options = within(given, cap)  # as the driver sees them
    parts = decompose(cluster, options.exact_node_limit(cap.per_stage_dp), options.max_bundle_nodes)
    print("| b | V | ranks | schedule | closed-form floor s | ruled out by rank_floor |")
    print("|--:|--:|--:|---|--:|--:|")
    context = SearchContext(model, cluster, base, options)
    closed_form, rank_bound = ClosedFormBound(context), RankBound(context)
    for b, v, ranks, _, schedule in subproblems(context, sum(parts.counts), cap):
        search = Subproblem(b, v, ranks, schedule)
        floor = closed_form.floor_s(search)
        out = rank_bound.cannot_beat(search, args.cutoff)
        print(f"| {b} | {v} | {'any' if ranks is None else ranks} | {schedule} | {floor:.3f} | {'yes' if out else 'no'} |")
    for spec in args.optimum:
        b, v, ranks, schedule = spec.split(",")
        want = (int(b), int(v), None if ranks == "any" else int(ranks), schedule)
        step, cpu = _alone(model, cluster, base, given, want)
        floor = closed_form.floor_s(Subproblem(*want))
        print(f"{spec}: optimum {'none' if step is None else f'{step:.3f}'} s, floor {floor:.3f} s ({cpu:.1f} CPU s)")


if __name__ == "__main__":
    main()
