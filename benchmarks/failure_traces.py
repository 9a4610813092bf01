"""Goodput over a long run with failures: replan with templates, replan from scratch, or wait for the node.

    python benchmarks/failure_traces.py [--rows NAME ...] [--days D] [--seeds N] [--trace FILE] [--write]

With --rows, --write replaces those rows of the table and keeps the others (run with the same --days,
--seeds and --repair-hours).

Each row plans a model on a cluster, then replays failure traces over a run of `--days` days:
Poisson failures per node at the planner's rates (planner.cost.reliability: each GPU at the default
interruption rate, each node's spot preemptions where the row sets them), each failed node back after
an exponential repair of mean `--repair-hours` (an assumption: no source states one for these clusters),
or the events of a CSV (`--trace FILE`: hours,group,node,event with event fail|return). The strategies:

- wait: the job stops until the node is back, then restarts from its last checkpoint;
- scratch: the job restarts at once on the nodes left, with a plan searched from scratch (`planner
  replan`: the search's measured wall seconds are lost too), and again when the node is back;
- templates: as scratch, with the plans `plan --spares 1` prepared for losing one node of each group
  (`planner replan` then needs no search; a shape without a template is searched).

Between events the job checkpoints every Young/Daly interval of its current plan and loses the work
since its last checkpoint at each failure; every restart costs the plan's restart time (the default
restart plus reading the checkpoint back) and the move `planner replan` reports. Goodput: tokens
trained over wall time, the median over the seeds. `--write` writes docs/failure-table.md.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner import api  # noqa: E402
from planner.api import PlanRequest  # noqa: E402
from planner.api.replan import Change, changed_cluster, make_templates, matching_template  # noqa: E402
from planner.cost.move import move_of  # noqa: E402
from planner.search.relabel import relabeled  # noqa: E402
from planner.core.errors import NoFeasiblePlan  # noqa: E402
from planner.cost.energy import rented_nodes  # noqa: E402
from planner.cost.reliability import node_failures_per_h, reliability  # noqa: E402
from planner.inputs.hardware import cluster_from_spec, load_cluster  # noqa: E402

from at_scale import ROWS as AT_SCALE  # noqa: E402

TABLE = ROOT / "docs" / "failure-table.md"
# name: (model, cluster name or spec, global batch, sequence length, spot preemptions per node-hour by group)
ROWS = {
    "8b-a100-v100": ("llama-3-8b", "a100-v100-mix", 512, 4096, {}),
    "8b-a100-v100-spot": ("llama-3-8b", "a100-v100-mix", 512, 4096, {"v100": 0.02}),
    "70b-h100-a100-v100": ("llama-3-70b", "h100-a100-v100", 512, 4096, {}),
    "70b-h100-a100-256": ("llama-3-70b", {"name": "h100-a100-256", "node_groups": [
        {"name": "h100", "gpu": "H100-SXM5-80GB", "nodes": 16, "gpus_per_node": 8,
         "inter_node": {"bandwidth_GBps": 400, "latency_us": 5}},
        {"name": "a100", "gpu": "A100-SXM4-80GB", "nodes": 16, "gpus_per_node": 8,
         "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}, 1024, 4096, {}),
    # benchmarks/at_scale.py's 1,024 GPUs of four types (4- and 8-GPU nodes)
    "405b-4types-1024": (AT_SCALE["405b-4types-1024"][0], AT_SCALE["405b-4types-1024"][1], 1024, 4096, {}),
}


@dataclass
class Shape:
    """The plan of one set of live nodes: its step, tokens per step, checkpoint interval and restart."""
    step_s: float
    tokens: int
    interval_s: float
    write_s: float
    restart_s: float
    search_s: float  # the search's wall seconds (0 where a template stood in)
    move_s: float


def spec_with_spot(cluster_arg, spot: dict) -> dict:
    spec = dict(load_cluster(cluster_arg).spec) if isinstance(cluster_arg, str) else dict(cluster_arg)
    spec["node_groups"] = [{**g, **({"preemptions_per_hour": spot[g["name"]]} if g["name"] in spot else {})}
                           for g in spec["node_groups"]]
    return spec


class Planner:
    """The plans of the live node sets met, each searched once (or taken from the templates)."""

    def __init__(self, name: str):
        model, cluster_arg, batch, seq, spot = ROWS[name]
        self.cluster = cluster_from_spec(spec_with_spot(cluster_arg, spot))
        self.request = PlanRequest(model=model, cluster=self.cluster, global_batch=batch, seq_len=seq)
        self.full = api.plan(self.request)
        self.templates = make_templates(self.full.plan, self.request, 1, self.request.time_limit_s)
        self.shapes: dict[tuple, Shape | None] = {}

    def shape(self, lost: frozenset, use_templates: bool) -> Shape | None:
        key = (lost, use_templates)
        if key not in self.shapes:
            self.shapes[key] = self._plan(lost, use_templates)
        return self.shapes[key]

    def _plan(self, lost: frozenset, use_templates: bool) -> Shape | None:
        if not lost:
            plan, estimate, search_s, move_s = self.full.plan, self.full.estimate, 0.0, 0.0
        else:
            by_group: dict[str, list[int]] = {}
            for group, node in sorted(lost):
                by_group.setdefault(group, []).append(node)
            change = Change({g: tuple(n) for g, n in by_group.items()}, {})
            cluster, survivors = changed_cluster(self.cluster, change)
            started = time.perf_counter()
            plan = matching_template(self.templates, cluster, "templates") if use_templates else None
            try:
                if plan is None:
                    found = api.plan(replace(self.request, cluster=cluster))
                    plan, estimate = found.plan, found.estimate
                else:
                    estimate = api.reprice_plan(plan)
            except NoFeasiblePlan:
                return None
            plan = relabeled(self.full.plan, plan, survivors)
            search_s = time.perf_counter() - started
            move_s = move_of(self.full.plan, plan, survivors).seconds
        failures = reliability(plan, estimate, rented_nodes(plan))
        t = plan.training
        return Shape(estimate.step_time_s, t.global_batch * t.seq_len, failures.checkpoint_interval_s,
                     failures.checkpoint_write_s, failures.restart_s, search_s, move_s)


def poisson_trace(cluster, days: float, repair_h: float, rng: random.Random) -> list[tuple[float, str, int, str]]:
    """(hours, group, node, fail|return) events: each node fails at its rate, is back after a repair."""
    events = []
    horizon = days * 24
    for group in cluster.groups:
        rate = node_failures_per_h(group)
        for node in range(group.nodes):
            clock = 0.0
            while True:
                clock += rng.expovariate(rate)
                if clock >= horizon:
                    break
                back = clock + rng.expovariate(1 / repair_h)
                events += [(clock, group.name, node, "fail"), (min(back, horizon), group.name, node, "return")]
                clock = back
    return sorted(events)


def read_trace(path: str) -> list[tuple[float, str, int, str]]:
    with open(path, newline="") as handle:
        return sorted((float(r["hours"]), r["group"], int(r["node"]), r["event"]) for r in csv.DictReader(handle))


def replay(planner: Planner, events, days: float, strategy: str) -> float:
    """Tokens per second over the run under `strategy` (wait, scratch, templates)."""
    end = days * 86400.0
    now, tokens, down, lost = 0.0, 0.0, set(), frozenset()
    shape = planner.shape(lost, strategy == "templates")
    since_checkpoint = 0.0
    queue = [(h * 3600.0, g, n, e) for h, g, n, e in events]
    index = 0

    def run_until(limit: float) -> None:
        nonlocal now, tokens, since_checkpoint
        while now < limit and shape is not None:
            chunk = min(limit - now, shape.interval_s - since_checkpoint)
            tokens_rate = shape.tokens / shape.step_s
            tokens += chunk * tokens_rate
            now += chunk
            since_checkpoint += chunk
            if since_checkpoint >= shape.interval_s - 1e-9:
                now += shape.write_s
                since_checkpoint = 0.0
        now = max(now, limit)

    while now < end:
        next_event = queue[index][0] if index < len(queue) else end
        if strategy == "wait" and down:
            now = max(now, min(next_event, end))  # stopped until the node is back
        else:
            run_until(min(next_event, end))
        if index >= len(queue) or now >= end:
            break
        _, group, node, event = queue[index]
        index += 1
        if shape is not None and event == "fail" and not (strategy == "wait" and down):
            tokens -= since_checkpoint * shape.tokens / shape.step_s  # the work since the last checkpoint
            since_checkpoint = 0.0
        (down.add if event == "fail" else down.discard)((group, node))
        if strategy == "wait":
            if not down and event == "return":
                now += shape.restart_s
            continue
        lost = frozenset(down)
        shape = planner.shape(lost, strategy == "templates")
        if shape is not None:
            now += shape.restart_s + shape.search_s + shape.move_s
    return max(tokens, 0.0) / end


def run_row(name: str, days: float, seeds: int, repair_h: float, trace: str | None) -> dict:
    started = time.perf_counter()
    planner = Planner(name)
    traces = [read_trace(trace)] if trace else [poisson_trace(planner.cluster, days, repair_h, random.Random(s))
                                                 for s in range(seeds)]
    result = {"name": name, "gpus": planner.cluster.num_gpus,
              "failures": statistics.median(sum(e[3] == "fail" for e in t) for t in traces),
              "ideal": planner.full.estimate.tokens_per_s}
    for strategy in ("templates", "scratch", "wait"):
        result[strategy] = statistics.median(replay(planner, t, days, strategy) for t in traces)
    searched = [s.search_s for (lost, tpl), s in planner.shapes.items() if s is not None and lost and not tpl]
    templated = [s.search_s for (lost, tpl), s in planner.shapes.items() if s is not None and lost and tpl]
    result["search_s"] = statistics.median(searched) if searched else 0.0
    result["template_s"] = statistics.median(templated) if templated else 0.0
    result["seconds"] = time.perf_counter() - started
    return result


def table(rows: list[dict], days: float, seeds: int, repair_h: float) -> str:
    head = ["row", "GPUs", "failures", "tokens/s without failures", "templates", "scratch", "wait",
            "replan s: search", "with templates", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["name"], str(r["gpus"]), f"{r['failures']:g}", f"{r['ideal']:,.0f}",
            *(f"{r[s]:,.0f} ({r[s] / r['ideal']:.1%})" for s in ("templates", "scratch", "wait")),
            f"{r['search_s']:.2f}", f"{r['template_s']:.3f}", f"{r['seconds']:.0f}"]) + " |")
    return (f"Runs of {days:g} days, {seeds} Poisson traces per row (the median shown), repairs of mean "
            f"{repair_h:g} h.\n\n" + "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--repair-hours", type=float, default=12.0)
    parser.add_argument("--trace", default=None, help="a CSV of events (hours,group,node,event) for every row")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args()
    rows = []
    for name in args.rows:
        rows.append(run_row(name, args.days, args.seeds, args.repair_hours, args.trace))
        print(f"{name}: {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    text = table(rows, args.days, args.seeds, args.repair_hours)
    print(text)
    if args.write and set(args.rows) != set(ROWS):  # a subset: its rows replace theirs in the table, the others stay
        def name(line: str) -> str:
            return line.split(" | ", 1)[0][2:]
        kept = {name(line): line for line in TABLE.read_text().splitlines()
                if line.startswith("| ") and name(line) in ROWS}
        kept.update({name(line): line for line in text.splitlines() if line.startswith("| ") and name(line) in ROWS})
        head = [line for line in text.splitlines() if not (line.startswith("| ") and name(line) in ROWS)]
        text = "\n".join(head) + "\n" + "\n".join(kept[row] for row in ROWS if row in kept) + "\n"
    if args.write:
        TABLE.write_text("<!-- generated by `python benchmarks/failure_traces.py --write`; do not edit -->\n\n"
                         "Goodput (tokens trained per second of wall time) over a run with failures, per "
                         "strategy (benchmarks/failure_traces.py); in brackets, of the run without failures. "
                         "`replan s`: the median wall seconds of a replan by search, and with templates (a search "
                         "where no template matches: two nodes down at once), on one machine (2 cores).\n\n" + text)


if __name__ == "__main__":
    main()
