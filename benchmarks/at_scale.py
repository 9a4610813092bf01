"""The solver at the sizes people plan for: homogeneous H100/B200 clusters of 256-4,096 GPUs for
dense 70B-405B and MoE (DeepSeek-V3, Qwen3-235B-A22B) models, and mixed clusters of 128-1,024 GPUs
of 2-4 GPU types with 4- and 8-GPU nodes.

    python benchmarks/at_scale.py [--rows NAME ...] [--time-limit S] [--write]

With --rows, --write replaces those rows of the table and keeps the others.

Each row runs `planner plan` as a user does (the CLI in a child process, its default time limit
unless --time-limit, `--json`), and beside it scans every uniform configuration of the row's
runtime exhaustively: each (tp, cp, ep, pp, dp, micro-batch, V, schedule, recompute, ZeRO) that the
runtime runs (planner.cost.runtimes.capability.violations), with pipelines up to `--max-pp`'s
default, is built with planner.plan.uniform_plan and priced with `planner evaluate`'s pricing
(planner.api.reprice_plan, the runtime's own cost parameters); no bound prunes it. Columns: GPUs,
the runtime, the plan's wall seconds, whether it is proven optimal (else why not:
solver.not_proven), its gap to the lower bound, its step time, the scan's best step time and
configuration, how many configurations the scan priced, and whether the plan is at least as fast
as the scan's best ("ok") or beaten by it. `--write` writes docs/at-scale-table.md.

Targets (docs/solver.md, "At scale"): every row proven optimal or within 2 % of its lower bound
within the default time limit, and no plan beaten by its uniform scan.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import api  # noqa: E402
from planner.core.errors import BadInput  # noqa: E402
from planner.cost.runtimes.capability import capability, violations  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import load_model  # noqa: E402
from planner.plan import Training, structural_problems, uniform_plan  # noqa: E402
from planner.schedules import get_schedule  # noqa: E402
from planner.search.pricing.stage_types import SolverOptions  # noqa: E402

TABLE = ROOT / "docs" / "at-scale-table.md"
MAX_PP = SolverOptions().max_stages  # the deepest pipeline `plan` searches (`--max-pp`'s default)
# (GPU, GPUs per node, per-node inter-node bandwidth GB/s): DGX-class nodes on InfiniBand
# (NVIDIA DGX H100 / B200 datasheets: 8x 400 Gb/s ConnectX-7 = 400 GB/s; DGX A100: 8x 200 Gb/s
# HDR = 200 GB/s); 4-GPU nodes with one 200 Gb/s NIC each (25 GB/s).
KINDS = {
    "h100": ("H100-SXM5-80GB", 8, 400), "b200": ("B200", 8, 400), "a100": ("A100-SXM4-80GB", 8, 200),
    "a100-40g-x4": ("A100-SXM4-40GB", 4, 25), "v100-x4": ("V100-SXM2-32GB", 4, 25),
}


def cluster(name: str, *groups: tuple[str, int], nics: bool = True) -> dict:
    """A cluster file's content: node groups (kind, nodes) of KINDS, with their NICs, or (`nics`
    False) the GPU catalog's default link between nodes, as the rows first reported were planned."""
    out = []
    for kind, nodes in groups:
        gpu, per_node, nic = KINDS[kind]
        out.append({"name": kind, "gpu": gpu, "nodes": nodes, "gpus_per_node": per_node,
                    **({"inter_node": {"bandwidth_GBps": nic, "latency_us": 5}} if nics else {})})
    return {"name": name, "node_groups": out}


# the three problems first reported without a proof (issue rows), on the catalog's default links
H100_256 = cluster("h100x256", ("h100", 32), nics=False)
H100_1024 = cluster("h100x1024", ("h100", 128), nics=False)
A100_V100_128 = cluster("a100-40g-v100-x4", ("a100-40g-x4", 8), ("v100-x4", 24), nics=False)


# name: (model, cluster file content, global batch, sequence length, runtime)
ROWS = {
    "405b-h100-256": ("llama-3.1-405b", H100_256, 2048, 8192, "megatron"),
    "405b-h100-256-any": ("llama-3.1-405b", H100_256, 2048, 8192, "any"),
    "dsv3-h100-1024": ("deepseek-v3", H100_1024, 2048, 4096, "megatron"),
    "dsv3-h100-1024-any": ("deepseek-v3", H100_1024, 2048, 4096, "any"),
    "70b-a100-v100-128": ("llama-3-70b", A100_V100_128, 512, 4096, "megatron"),
    "70b-a100-v100-128-any": ("llama-3-70b", A100_V100_128, 512, 4096, "any"),
    "70b-h100-512": ("llama-3-70b", cluster("h100x512", ("h100", 64)), 1024, 8192, "megatron"),
    "405b-b200-4096": ("llama-3.1-405b", cluster("b200x4096", ("b200", 512)), 4096, 8192, "megatron"),
    "qwen3-235b-h100-256": ("qwen3-235b-a22b", cluster("h100x256", ("h100", 32)), 1024, 4096, "megatron"),
    "qwen3-235b-b200-2048": ("qwen3-235b-a22b", cluster("b200x2048", ("b200", 256)), 2048, 4096, "megatron"),
    "70b-h100-a100-256": ("llama-3-70b", cluster("h100-a100", ("h100", 16), ("a100", 16)), 1024, 4096, "megatron"),
    "70b-h100-a100-v100-320": ("llama-3-70b", cluster("h100-a100-v100x4", ("h100", 8), ("a100", 16), ("v100-x4", 32)),
                               512, 4096, "megatron"),
    "405b-4types-1024": ("llama-3.1-405b", cluster("four-types", ("h100", 32), ("a100", 32), ("a100-40g-x4", 64),
                                                   ("v100-x4", 64)), 1024, 4096, "megatron"),
    "70b-h100-a100-192-any": ("llama-3-70b", cluster("h100-a100-192", ("h100", 8), ("a100", 16)), 512, 4096, "any"),
}


def plan_row(name: str, time_limit: float | None) -> dict:
    """`planner plan` of a row as the CLI runs it: its JSON and wall seconds."""
    model, spec, batch, seq, runtime = ROWS[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec))
        out = Path(tmp) / "plan.json"
        command = [str(Path(sys.executable).with_name("planner")), "plan", "--model", model, "--cluster", str(path),
                   "--global-batch", str(batch), "--seq-len", str(seq), "--runtime", runtime, "--json", "-o", str(out)]
        if time_limit is not None:
            command += ["--time-limit", str(time_limit)]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"})
        wall = time.perf_counter() - started
        if done.returncode != 0:
            return {"wall_s": wall, "error": (done.stderr or done.stdout).strip().splitlines()[-1]}
        return {"wall_s": wall, "plan": json.loads(out.read_text())}


def uniform_scan(name: str, workers: int = 2) -> dict:
    """The fastest uniform configuration of the row's runtime that fits, every one priced, the
    candidates dealt out to `workers` processes (by candidate index; ties to the smaller index)."""
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        shares = pool.starmap(_scan_share, [(name, k, workers) for k in range(workers)])
    found = [share["best"] for share in shares if share["best"] is not None]
    best = min(found) if found else None
    return {"best_s": best[0] if best else None, "config": best[2] if best else "none fits",
            "priced": sum(share["priced"] for share in shares), "seconds": time.perf_counter() - started}


def _scan_share(name: str, part: int, parts: int) -> dict:
    """uniform_scan over the candidates whose index is `part` modulo `parts`: the best as
    (step s, candidate index, configuration) and how many were priced."""
    model_name, spec, batch, seq, runtime = ROWS[name]
    model, cl = load_model(model_name), cluster_from_spec(spec)
    cap = capability(runtime)
    dtype = api.resolve_dtype(cl, None, runtime)
    config = model.config
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    experts = config.num_experts if config is not None else 1
    gpus = cl.num_gpus
    cp_degrees = (1, 2, 4, 8) if seq >= 16384 else (1,)
    ep_degrees = tuple(e for e in (1, 2, 4, 8, 16, 32, 64, 128, 256) if experts % e == 0) if experts > 1 else (1,)
    best, priced, index = None, 0, -1
    for tp, cp, ep, b, recompute, zero in product((1, 2, 4, 8), cp_degrees, ep_degrees, (1, 2, 4, 8),
                                                  ("none", "selective", "full"), (1, 2, 3)):
        if gpus % (tp * cp) or any(g.gpus_per_node % tp for g in cl.groups) or config.num_heads % tp:
            continue
        for pp in range(1, min(blocks, gpus // (tp * cp), MAX_PP) + 1):
            if (gpus // (tp * cp)) % pp:
                continue
            dp = gpus // (tp * cp * pp)
            if batch % (dp * b) or (dp == 1 and zero > 1):
                continue
            for schedule in sorted(cap.schedules):
                sched = get_schedule(schedule)
                for v in (1, 2):
                    if not sched.accepts_virtual_stages(v) or pp < sched.min_pp or pp * v > blocks:
                        continue
                    index += 1
                    if index % parts != part:
                        continue
                    training = Training(batch, seq, dtype, b, schedule, v, "flash", runtime)
                    try:
                        plan = uniform_plan(model, cl, training, tp=tp, pp=pp, dp=dp, zero=zero if dp > 1 else 0,
                                            recompute=recompute, sequence_parallel=tp > 1, cp=cp, ep=ep)
                    except BadInput:
                        continue
                    # what the runtime runs, and what the schedule runs with (combined 1F1B: EP, planner.plan.structure)
                    if violations(plan, runtime) or structural_problems(plan):
                        continue
                    estimate = api.reprice_plan(plan)
                    priced += 1
                    if estimate.fits and (best is None or estimate.step_time_s < best[0]):
                        best = (estimate.step_time_s, index, f"tp{tp} cp{cp} ep{ep} pp{pp} dp{dp} mb{b} {schedule} "
                                                             f"V{v} {recompute} ZeRO-{zero if dp > 1 else 0}")
    return {"best": best, "priced": priced}


def row_line(name: str, planned: dict, scan: dict) -> str:
    model, spec, batch, seq, runtime = ROWS[name]
    gpus = sum(g["nodes"] * g["gpus_per_node"] for g in spec["node_groups"])
    scan_s = "-" if scan["best_s"] is None else f"{scan['best_s']:.3f}"
    if "error" in planned:
        return (f"| {name} | {gpus} | {runtime} | {planned['wall_s']:.0f} | error: {planned['error']} | | | "
                f"{scan_s} | {scan['config']} | {scan['priced']} | |")
    solver, step = planned["plan"]["solver"], planned["plan"]["predicted"]["step_time_s"]
    verdict = "ok" if scan["best_s"] is None or step <= scan["best_s"] * (1 + 1e-9) else "BEATEN"
    proven = "yes" if solver["optimal"] else f"no: {solver.get('not_proven', '')}"
    return (f"| {name} | {gpus} | {runtime} | {planned['wall_s']:.1f} | {proven} | "
            f"{100 * solver['gap']:.1f} % | {step:.3f} | {scan_s} | {scan['config']} | {scan['priced']} | {verdict} |")


HEADER = ("| row | GPUs | runtime | wall s | proven | gap | step s | uniform scan s | its configuration | "
          "configurations priced | plan vs scan |\n|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--time-limit", type=float, default=None, help="plan's --time-limit [default: the CLI's]")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    args = parser.parse_args()
    lines = [HEADER]
    print(HEADER, flush=True)
    for name in args.rows:
        line = row_line(name, plan_row(name, args.time_limit), uniform_scan(name))
        lines.append(line)
        print(line, flush=True)
    if args.write:
        if set(args.rows) != set(ROWS):  # a subset: its rows replace theirs in the table, the others stay
            kept = {line.split(" | ", 1)[0][2:]: line for line in TABLE.read_text().splitlines()
                    if line.startswith("| ") and line.split(" | ", 1)[0][2:] in ROWS}
            kept.update({line.split(" | ", 1)[0][2:]: line for line in lines[1:]})
            lines = [HEADER] + [kept[name] for name in ROWS if name in kept]
        limit = "the CLI's default time limit" if args.time_limit is None else f"--time-limit {args.time_limit:g}"
        TABLE.write_text("<!-- generated by `python benchmarks/at_scale.py --write`; do not edit -->\n\n"
                         f"`planner plan` with {limit}, one row after another on one machine "
                         f"({os.cpu_count()} cores); wall seconds depend on the machine. The rows 405b-h100-256, "
                         "dsv3-h100-1024 and 70b-a100-v100-128 link their nodes with the GPU catalog's default "
                         "inter-node link, the others with DGX-class NICs (`KINDS` in the script).\n\n"
                         + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
