"""Heterogeneity past the stage: a published per-replica-TP plan priced beside this planner's plan.

    python benchmarks/hetero_space.py [--time-limit S] [--write]

Sailor's heterogeneous example (Strati et al., SOSP'25): 32 A100-40GB and 96 V100-16GB, 4 GPUs a node,
OPT-350M (benchmarks/inputs/opt-350m.json: its decoder shapes), global batch 1024 x 2048 tokens. Sailor's
plan for it puts 3 A100 replicas at TP 1 and 24 V100 replicas at TP 4 in one stage. Its batch split and
micro-batch are not published with it: each micro-batch of 1-8 is priced with the integer shares that
minimise the step for that layout (planner.search.pricing.shares.solve_shares_ilp over each replica's
time per micro-batch), and the fastest that fits is the row. Beside it, `planner plan --runtime any` on
the same inputs without and with per-replica TP, with two search processes as the CLI runs them. All
are priced by planner.cost.evaluate under runtime `any`, fp16 (the V100 has no bf16). Then the example
clusters of several GPU types, each planned under `--runtime any` without and with per-replica TP, with
the search's seconds. Then nodes that hold two GPU types (a workstation, a lab of four), planned as
described and as one node per type. `--write` writes docs/hetero-table.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import api  # noqa: E402
from planner.api import PlanRequest  # noqa: E402
from planner.cost.evaluate import evaluate  # noqa: E402
from planner.core.io import load_mapping  # noqa: E402
from planner.cost.replica_pricer import PlanPricer  # noqa: E402
from planner.inputs.hardware import load_cluster  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.plan import Plan, Replica, Stage, Training  # noqa: E402
from planner.plan.tp_shares import type_splits  # noqa: E402
from planner.search.pricing.shares import solve_shares_ilp  # noqa: E402

INPUTS = ROOT / "benchmarks" / "inputs"
TABLE = ROOT / "docs" / "hetero-table.md"
MODEL, CLUSTER = INPUTS / "opt-350m.json", INPUTS / "sailor-gcp-a100-v100.yaml"
GLOBAL_BATCH, SEQ_LEN, DTYPE = 1024, 2048, "fp16"
JOBS = 2  # search processes, as `planner plan` runs by default (--jobs 2; the library's default is 1)
# Sailor's layout: (node group, TP degree, replicas), one pipeline stage
SAILOR_LAYOUT = (("a100", 1, 3), ("v100", 4, 24))


def layout_replicas(cluster, layout) -> list[tuple[tuple[int, ...], int]]:
    """(ranks, tp) per replica: each group's replicas on its ranks in order, TP groups inside a node."""
    out = []
    for name, tp, count in layout:
        first = cluster.group(name).first_rank
        out += [(tuple(range(first + j * tp, first + (j + 1) * tp)), tp) for j in range(count)]
    return out


def one_stage_plan(model, cluster, training: Training, replicas, shares) -> Plan:
    """One pipeline stage over `replicas` ((ranks, tp) each) with batch `shares`; the stage's own tp
    is the first replica's."""
    stage_tp = replicas[0][1]
    stage = Stage(index=0, layers=(0, model.num_layers), tp=stage_tp, zero=0, recompute="none",
                  replicas=tuple(Replica(j, share, ranks, 0 if tp == stage_tp else tp)
                                 for j, ((ranks, tp), share) in enumerate(zip(replicas, shares))),
                  pipeline_rank=0)
    return Plan(model, cluster, training, (stage,))


def best_shares(model, cluster, training: Training, replicas) -> Plan:
    """The layout's plan with the integer shares of least makespan over the replicas' times per
    micro-batch (one stage: a replica's memory does not grow with its share)."""
    micro = GLOBAL_BATCH // training.micro_batch
    even = [GLOBAL_BATCH // len(replicas)] * len(replicas)
    probe = one_stage_plan(model, cluster, replace(training, global_batch=sum(even)), replicas, even)
    pricer, stage = PlanPricer(probe), probe.stages[0]
    times = [pricer.replica([stage], rep).per_microbatch_s for rep in stage.replicas]
    shares = solve_shares_ilp(micro, times, [micro] * len(times)).shares
    return one_stage_plan(model, cluster, training, replicas, [s * training.micro_batch for s in shares])


def sailor_row() -> dict:
    model, cluster = load_model(str(MODEL)), load_cluster(str(CLUSTER))
    replicas = layout_replicas(cluster, SAILOR_LAYOUT)
    best = None
    for micro_batch in (1, 2, 4, 8):
        training = Training(GLOBAL_BATCH, SEQ_LEN, DTYPE, micro_batch, runtime="any")
        plan = best_shares(model, cluster, training, replicas)
        est = evaluate(plan)
        if est.fits and (best is None or est.step_time_s < best[1].step_time_s):
            best = (plan, est)
    plan, est = best
    return {"name": "Sailor's layout (3 A100 at TP 1, 24 V100 at TP 4, one stage)", "step_s": est.step_time_s,
            "gpus": est.num_gpus_used, "micro_batch": plan.training.micro_batch,
            "shape": f"pp 1, tp {plan.stages[0].tp_label()}", "search_s": None, "first": True}


def planner_row(name: str, request: PlanRequest) -> dict:
    """`planner plan` on `request`: its plan's step, GPUs, micro-batch and shape, and the search's seconds
    (and the plan itself, under "plan")."""
    started = time.perf_counter()
    result = api.plan(request)
    seconds = time.perf_counter() - started
    plan, est = result.plan, result.estimate
    shape = " / ".join(f"{st.tp_label()}" + (f", ffn {'/'.join(map(str, st.tp_ffn))}" if st.uneven_tp else "")
                       for st in plan.stages if st.index < plan.pp)
    return {"name": name, "step_s": est.step_time_s, "gpus": est.num_gpus_used,
            "micro_batch": plan.training.micro_batch, "shape": f"pp {plan.pp}, tp {shape}",
            "search_s": seconds, "optimal": result.optimal, "plan": plan}


def sailor_rows(time_limit_s: float) -> list[dict]:
    request = PlanRequest(model=str(MODEL), cluster=str(CLUSTER), global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN,
                          dtype=DTYPE, runtime="any", time_limit_s=time_limit_s, jobs=JOBS)
    return [sailor_row(),
            planner_row("planner plan --runtime any --no-per-replica-tp", replace(request, per_replica_tp=False)),
            planner_row("planner plan --runtime any", request)]


# (cluster, model, global batch, sequence length): the example clusters of several GPU types
EXAMPLES = (("a100-v100-mix", "llama-3-8b", 512, 4096), ("a100-v100-mix", "llama-3-70b", 512, 4096),
            ("h100-a100-v100", "llama-3-8b", 512, 4096), ("consumer-3090-4090", "llama-3-8b", 128, 2048))


def example_rows(time_limit_s: float) -> list[dict]:
    """Per example: the `--runtime any` plan without and with per-replica TP."""
    rows = []
    for cluster, model, batch, seq in EXAMPLES:
        request = PlanRequest(model=model, cluster=cluster, global_batch=batch, seq_len=seq, runtime="any",
                              time_limit_s=time_limit_s, jobs=JOBS)
        label = f"{model} on {cluster}, {batch} x {seq}"
        rows.append(planner_row(f"{label}: --no-per-replica-tp", replace(request, per_replica_tp=False)))
        rows.append(planner_row(f"{label}: per-replica TP", request))
    return rows


# (cluster file, model, global batch, sequence length): nodes that hold two GPU types
MIXED_NODES = ((ROOT / "profiles" / "clusters" / "workstation-4090-3090.yaml", "gpt2-xl", 64, 1024),
               (INPUTS / "lab-4090-3090.yaml", "llama-3-8b", 128, 2048))


def one_type_per_node(spec: dict) -> dict:
    """A cluster file whose mixed node groups are written as one node group per GPU type, each type's
    GPUs a node of their own joined by the node's inter_node: all the format allows without `gpu` lists."""
    groups = []
    for group in spec["node_groups"]:
        gpus = group["gpu"] if isinstance(group["gpu"], list) else [group["gpu"]]
        for gpu in dict.fromkeys(gpus):
            local = [j for j, other in enumerate(gpus) if other == gpu]
            bridges = [b for b in group.get("bridges", ()) if set(b["between"]) <= set(local)]
            groups.append({**{k: v for k, v in group.items() if k != "bridges"}, "name": f"{group['name']}/{gpu}",
                           "gpu": gpu, "gpus_per_node": len(local),
                           **({"bridges": [{**b, "between": [local.index(x) for x in b["between"]]} for b in bridges]}
                              if bridges else {})})
    return {**spec, "node_groups": groups}


def mixed_node_rows(time_limit_s: float) -> list[dict]:
    """Per cluster: the `--runtime any` plan when each type is described as nodes of its own (its price
    there, then the same plan priced on the real nodes), and the plan on the nodes as they are."""
    import json
    import tempfile

    rows = []
    for path, model, batch, seq in MIXED_NODES:
        request = PlanRequest(model=model, cluster=str(path), global_batch=batch, seq_len=seq, runtime="any",
                              time_limit_s=time_limit_s, jobs=JOBS)
        label = f"{model} on {path.stem}, {batch} x {seq}"
        with tempfile.TemporaryDirectory() as tmp:
            split = Path(tmp) / f"{path.stem}.yaml"
            split.write_text(json.dumps(one_type_per_node(load_mapping(path, "cluster file"))))
            apart = planner_row(f"{label}: types as nodes of their own", replace(request, cluster=str(split)))
        real = load_cluster(str(path))
        estimate = evaluate(replace(apart["plan"], cluster=real))
        rows.append({**apart, "first": True})
        rows.append({**apart, "name": f"{label}: that plan on the real nodes", "step_s": estimate.step_time_s,
                     "search_s": None})
        rows.append(planner_row(f"{label}: planned on the real nodes", request))
    return rows


# a HAP-like setting: TP groups over two GPU types inside one node (the workstation above), on a batch
# where a pipeline over the types wins and on a tiny one where its bubble costs more than TP's collectives
HAP_MODEL, HAP_BATCH, HAP_SMALL_BATCH, HAP_SEQ = "gpt2-xl", 64, 2, 1024


def hap_plan(model, cluster, micro_batch: int, zero: int, heads=(), ffn=()) -> Plan:
    """One stage, two TP-2 replicas, each an RTX-4090 (TP position 0) beside an RTX-3090 (position 1),
    the batch split evenly; `heads`, `ffn`: uneven shards (Stage.tp_heads, tp_ffn)."""
    fast, slow = (g.first_rank for g in cluster.groups)
    replicas = (Replica(0, HAP_BATCH // 2, (fast, slow)), Replica(1, HAP_BATCH // 2, (fast + 1, slow + 1)))
    stage = Stage(0, (0, model.num_layers), 2, zero, "none", replicas, 0, True, tp_heads=heads, tp_ffn=ffn)
    return Plan(model, cluster, Training(HAP_BATCH, HAP_SEQ, "bf16", micro_batch, runtime="any"), (stage,))


def hap_rows(time_limit_s: float) -> list[dict]:
    """On the workstation, per batch: `planner plan --runtime any` without and with TP groups across its
    types, their splits in one ratio per GPU and apart; on the larger batch, TP groups over both types with
    even shards, then with the fastest split of one ratio per GPU and of heads and columns apart (each rank
    whole heads and 64-column FFN units), each at its best micro-batch and ZeRO stage that fit."""
    path = ROOT / "profiles" / "clusters" / "workstation-4090-3090.yaml"
    cluster, model = load_cluster(str(path)), load_model(HAP_MODEL)
    heads, ffn = model.config.num_heads, model.config.ffn_hidden
    rows = []
    for batch in (HAP_BATCH, HAP_SMALL_BATCH):
        request = PlanRequest(model=HAP_MODEL, cluster=str(path), global_batch=batch, seq_len=HAP_SEQ,
                              runtime="any", time_limit_s=time_limit_s, jobs=JOBS)
        label = f"{HAP_MODEL} on {path.stem}, {batch} x {HAP_SEQ}"
        rows.append({**planner_row(f"{label}: planner plan --runtime any --no-tp-across-types",
                                   replace(request, tp_across_types=False)), "first": True})
        rows.append(planner_row(f"{label}: planner plan --runtime any", request))
        rows.append(planner_row(f"{label}: planner plan --runtime any --tp-splits apart",
                                replace(request, tp_splits="apart")))
    label = f"{HAP_MODEL} on {path.stem}, {HAP_BATCH} x {HAP_SEQ}"
    one_ratio = set(type_splits(model.config, (1, 1)))
    splits = [((), ())] + [((h, heads - h), (f, ffn - f)) for h in range(1, heads)
                           for f in range(64, ffn, 64)]
    best: dict[str, tuple] = {}  # "even", "one ratio" (the search's form), "any"
    for split in splits:
        kinds = ("even",) if not split[0] else ("one ratio", "any") if split in one_ratio else ("any",)
        for micro in (1, 2, 4):
            for zero in (0, 1):
                plan = hap_plan(model, cluster, micro, zero, *split)
                est = evaluate(plan)
                for kind in kinds:
                    if est.fits and (kind not in best or est.step_time_s < best[kind][1].step_time_s):
                        best[kind] = (plan, est)
    for kind, name in (("even", "TP 2 over an RTX-4090 and an RTX-3090, even shards"),
                       ("one ratio", "the same, the fastest split of one ratio per GPU (--tp-splits ratio)"),
                       ("any", "the same, the fastest split of heads and FFN columns apart (--tp-splits apart)")):
        plan, est = best[kind]
        stage = plan.stages[0]
        shards = f", ffn {'/'.join(map(str, stage.tp_ffn))}" if stage.uneven_tp else ""
        rows.append({"name": f"{label}: {name}", "step_s": est.step_time_s, "gpus": est.num_gpus_used,
                     "micro_batch": plan.training.micro_batch, "shape": f"pp 1, tp {stage.tp_label()}{shards}",
                     "search_s": None, "optimal": True, "first": kind == "even"})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| plan | step s | vs above | GPUs used | micro-batch | shape (tp: degree x replicas) | search s |",
             "|---|---:|---:|---:|---:|---|---:|"]
    above = None
    for row in rows:
        search = "" if row["search_s"] is None else f"{row['search_s']:.1f}" + ("" if row["optimal"] else " (not proven)")
        change = "" if above is None or row.get("first") else f"{row['step_s'] / above - 1:+.1%}"
        lines.append(f"| {row['name']} | {row['step_s']:.3f} | {change} | {row['gpus']} | {row['micro_batch']} | "
                     f"{row['shape']} | {search} |")
        above = row["step_s"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=300.0, help="the planner's search limit, seconds")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args()
    sailor = sailor_rows(args.time_limit)
    print(table(sailor), flush=True)
    examples = example_rows(args.time_limit)
    for row in examples[::2]:
        row["first"] = True
    print(table(examples), flush=True)
    mixed = mixed_node_rows(args.time_limit)
    print(table(mixed), flush=True)
    hap = hap_rows(args.time_limit)
    print(table(hap))
    if args.write:
        TABLE.write_text(
            "# Heterogeneity past the stage\n\n"
            "Written by `python benchmarks/hetero_space.py --write` (do not edit by hand).\n\n"
            "Sailor's heterogeneous example (32 A100-40GB + 96 V100-16GB, 4 GPUs a node, OPT-350M, global "
            "batch 1024 x 2048, fp16): its published layout, per-replica TP in one stage, priced by this "
            "planner's cost model with the best micro-batch and shares for it, beside this planner's "
            "`--runtime any` plan without and with per-replica TP (\"vs above\": the step against the row "
            "above).\n\n" + table(sailor) + "\n\n"
            "Per-replica TP on the example clusters of several GPU types: the `--runtime any` plan without "
            "it, then with it (\"vs above\": the change of the step; search seconds on this machine, "
            "under the default time limit).\n\n" + table(examples) + "\n\n"
            "Nodes that hold two GPU types (a workstation of 2x RTX-4090 and 2x RTX-3090 with the 3090s "
            "NVLink-bridged; a lab of four such, on 10 GbE): the `--runtime any` plan when each type is "
            "described as nodes of its own joined by the NIC, all the cluster format allowed without "
            "`gpu` lists, then that plan priced on the nodes as they are, then the plan found on them "
            "(\"vs above\": the change of the step).\n\n" + table(mixed) + "\n\n"
            "A HAP-like setting: TP groups over two GPU types of one node (the workstation). Per batch, the "
            "`planner plan --runtime any` plan without TP groups across the types, then with them in its "
            "space (uneven heads and FFN columns, one ratio per GPU: docs/solver.md), then with heads and "
            "columns split apart (`--tp-splits apart`). Then, on the larger "
            "batch, TP groups each of an RTX-4090 and an RTX-3090 with even shards, with the fastest split "
            "of one ratio per GPU and with the fastest split of heads and FFN columns apart (every split "
            "of each form priced, as the search prices them), each at its best micro-batch and ZeRO stage "
            "(\"vs above\": the change of the step).\n\n"
            + table(hap) + "\n")


if __name__ == "__main__":
    main()
