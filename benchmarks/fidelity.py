"""Replay published, measured training runs through the cost model; print predicted vs
published per source and per GPU architecture (runs, evaluated, skipped by reason, median and
max |error|, the share predicted too fast, the runs predicted not to fit), the targets on the
public set, and the leave-one-source-out error.

    python benchmarks/fidelity.py                       # per source, per architecture, targets
    python benchmarks/fidelity.py --runs                # and every run
    python benchmarks/fidelity.py --json                # machine-readable rows, tables and targets
    python benchmarks/fidelity.py --markdown docs/fidelity-table.md   # the tables as Markdown
    python benchmarks/fidelity.py --plot docs/fidelity.svg   # predicted vs measured, log-log
    python benchmarks/fidelity.py --loso                # refit without each source (minutes)
    python benchmarks/fidelity.py --memory              # peak memory vs published, stated and per recompute setting
    python benchmarks/fidelity.py --memory --runs       # and every run's, as stated
    python benchmarks/fidelity.py --write-expected      # pin: benchmarks/fidelity-expected.json
    python benchmarks/fidelity.py --write-expected --markdown docs/fidelity-table.md   # both, after a cost change

Runs: profiles/reference/published-runs.yaml (sources A and B below, the calibration runs),
profiles/reference/measured-runs.yaml (fidelity_runs.py maps them to plans) and
profiles/reference/moe-runs.yaml (fidelity_moe.py); the assumptions made for each source's
unstated facts are printed with --assumptions. The targets (fidelity_tables.TARGETS) are
measured on the measured and MoE runs together. Every run is priced
with the cost parameters of its GPU's architecture (planner.cost.architectures) under its
runtime (planner.cost.runtimes): no per-run or per-source factor. Errors are predicted /
published - 1 in the published metric; "too fast" means a shorter predicted time or a
higher predicted throughput than measured.

Source A (Narayanan et al. SC'21, Table 1) does not print the micro-batch size or the
number of virtual stages; the authors tuned both per run, so we replay each run with
the micro-batch (1, 2, 4, 8) and virtual stages (1..8, dividing the layers per pipeline
rank) that the model predicts best and that fit in memory: the same tuning, done by
our model. Source B (Korthikanti et al. 2022, Table 4) times one 22B layer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataclasses import replace  # noqa: E402

from fidelity_runs import ASSUMPTIONS, Case, measured_cases  # noqa: E402
from fidelity_memory import memory_table, print_memory_table  # noqa: E402
from fidelity_tables import (architecture_of, architecture_table, markdown, print_loso, print_table,  # noqa: E402
                             print_targets, source_table, targets)
from fidelity_moe import ASSUMPTION as MOE_ASSUMPTION, RUNTIME as MOE_RUNTIME  # noqa: E402
from fidelity_moe import SOURCE as MOE_SOURCE, moe_cases  # noqa: E402
from planner.cost.architectures import architecture_params  # noqa: E402
from planner.cost.formulas import DEFAULT_PARAMS, CostParams, layer_time  # noqa: E402
from planner.core.dims import StageDims  # noqa: E402
from planner.cost.sharding import Sharding  # noqa: E402
from planner.cost.evaluate import evaluate  # noqa: E402
from planner.inputs.hardware import cluster_from_spec  # noqa: E402
from planner.inputs.model import Layer, build_layers, config_from_hf, Model  # noqa: E402
from planner.plan import Training, uniform_plan  # noqa: E402
from planner.cost.runtimes import RUNTIMES  # noqa: E402

REFERENCE = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "published-runs.yaml"


def gpt_model(hidden: int, heads: int, layers: int, vocab: int, seq_len: int) -> Model:
    config = {"model_type": "gpt2", "n_embd": hidden, "n_head": heads, "n_layer": layers,
              "vocab_size": vocab, "n_positions": seq_len, "resid_pdrop": 0.1, "attn_pdrop": 0.1,
              "embd_pdrop": 0.1}
    c = config_from_hf(config, f"gpt-{hidden}x{layers}", "reference")
    return Model(c.name, c, build_layers(c), raw=config)


def dgx_a100_cluster(gpus: int, gpu: str) -> dict:
    return {"name": f"dgx-a100-{gpus}", "node_groups": [{
        "name": "dgx", "gpu": gpu, "nodes": gpus // 8, "gpus_per_node": 8,
        "intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
        "inter_node": {"bandwidth_GBps": 200, "latency_us": 5}}]}


def replay_source_a(ref: dict, params: CostParams, chosen: dict | None = None) -> list[dict]:
    """`params`: the A100's under runtime megatron-2021 (Megatron-LM as of SC'21 reduced
    gradients after the backward and ran TP all-reduces synchronously). `chosen` (run ->
    "b=B v=V", as recorded in the pin table) replays those settings instead of tuning them."""
    rows = []
    s, vocab = ref["seq_len"], ref["vocab"]
    for run in ref["runs"]:
        model = gpt_model(run["hidden"], run["heads"], run["layers"], vocab, s)
        cluster = cluster_from_spec(dgx_a100_cluster(run["gpus"], ref["gpu"]), "reference")
        tp, pp = run["tp"], run["pp"]
        dp = run["gpus"] // (tp * pp)
        best = None
        per_replica = run["global_batch"] // dp
        name = f"{run['params_B']}B tp{tp} pp{pp} dp{dp} ({run['gpus']} GPUs)"
        settings = [(b, v) for b in (1, 2, 4, 8) if per_replica % b == 0
                    for v in range(1, 9) if not (pp == 1 and v > 1 or run["layers"] % (pp * v))]
        if chosen and name in chosen:
            b_v = dict(part.split("=") for part in chosen[name].split())
            settings = [(int(b_v["b"]), int(b_v["v"]))]
        for b, v in settings:
            training = Training(run["global_batch"], s, "fp16", b,
                                schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v,
                                attention="standard")
            plan = uniform_plan(model, cluster, training, tp=tp, pp=pp, dp=dp, recompute="full")
            est = evaluate(plan, params)
            if est.fits and (best is None or est.step_time_s < best[0].step_time_s):
                best = (est, b, v)
        est, b, v = best
        # Narayanan et al.'s FLOP count (their eq. 3): hardware FLOPs with recomputation
        h, l, V, B = run["hidden"], run["layers"], vocab, run["global_batch"]
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        predicted = flops / est.step_time_s / run["gpus"] / 1e12
        rows.append({"source": "megatron-sc21", "runtime": "megatron-2021", "metric_kind": "throughput",
                     "fits": est.fits, "run": name, "architecture": architecture_of(cluster.gpu_types),
                     "metric": "TFLOP/s/GPU", "published": run["tflops_per_gpu"], "predicted": predicted,
                     "chosen": f"b={b} v={v}"})
    return rows


def replay_source_b(ref: dict, params: CostParams) -> list[dict]:
    model = gpt_model(ref["hidden"], ref["heads"], 1, 51200, ref["seq_len"])
    layer: Layer = model.layers[1]
    cluster = cluster_from_spec(dgx_a100_cluster(8, ref["gpu"]), "reference")
    gpu = cluster.groups[0].gpu
    link = cluster.groups[0].intra_node
    cases = {"baseline": ("none", False), "sequence_parallel": ("none", True),
             "full_recompute": ("full", False), "selective_recompute": ("selective", False),
             "selective_plus_sp": ("selective", True)}
    rows = []
    for name, (recompute, sp) in cases.items():
        sharding = Sharding("fp16", ref["micro_batch"], ref["seq_len"], "standard", StageDims(ref["tp"], sp), recompute)
        lt = layer_time(layer, gpu, sharding, link, params)
        fwd_ms = (lt.fwd_s + lt.tp_comm_fwd_s) * 1e3
        bwd_ms = (lt.bwd_s + lt.recompute_s + lt.tp_comm_bwd_s) * 1e3
        for phase, predicted in (("fwd", fwd_ms), ("bwd", bwd_ms)):
            rows.append({"source": "korthikanti-22", "runtime": "megatron", "metric_kind": "time",
                         "fits": True, "run": f"22B layer {name} {phase}", "metric": "ms",
                         "architecture": architecture_of([gpu]),
                         "published": ref["ms"][name][phase], "predicted": predicted, "chosen": ""})
    return rows




# --- the cost parameters of a run: architecture, then runtime, with fitted overrides -----------

# runtimes that run PyTorch modules eagerly (no fused kernels, no torch.compile): the fitter
# gives them one elementwise-traffic factor and one per-layer overhead, key "eager.FIELD"
EAGER_RUNTIMES = ("torchtitan", "fsdp1")


def params_for(gpu, runtime: str, overrides: dict | None = None) -> CostParams:
    """The parameters `gpu` runs at under `runtime`. `overrides` (the fitter's trial values)
    are keyed "ARCH.field" (an architecture key of planner.cost.architectures), "RUNTIME.field"
    or "link.field" (a CostParams field of the links, every GPU alike)."""
    overrides = overrides or {}
    arch = architecture_params(gpu, overrides)
    arch.update({k.partition(".")[2]: v for k, v in overrides.items() if k.partition(".")[0] == "link"})
    rt = RUNTIMES[runtime].pricing
    owners = (runtime, "eager") if runtime in EAGER_RUNTIMES else (runtime,)
    rt = replace(rt, **{k.partition(".")[2]: v for k, v in overrides.items() if k.partition(".")[0] in owners})
    return rt.params(DEFAULT_PARAMS.with_updates(**arch), gpu.architecture)


def price(c: Case, overrides: dict | None = None) -> dict:
    per_gpu = {g.name: params_for(g, c.runtime, overrides).with_updates(**dict(c.settings))
               for g in c.plan.cluster.gpu_types}
    est = evaluate(c.plan, per_gpu)
    for mode in () if est.fits else c.unstated_recompute:
        saved = evaluate(replace(c.plan, stages=tuple(replace(st, recompute=mode) for st in c.plan.stages)), per_gpu)
        if saved.fits:
            est = saved
            break
    predicted = c.read(est)
    return {"source": c.source, "runtime": c.runtime, "run": c.id, "metric": c.metric,
            "metric_kind": "time" if c.metric == "iteration_time" else "throughput",
            "published": c.published, "predicted": predicted, "fits": est.fits, "chosen": "",
            "dtype": c.plan.training.dtype, "architecture": architecture_of(c.plan.cluster.gpu_types)}


_CASES: list[Case] = []


def cases() -> list[Case]:
    """The measured runs (fidelity_runs) and the MoE runs (fidelity_moe), built once."""
    if not _CASES:
        _CASES.extend(measured_cases() + moe_cases())
    return _CASES


def replay(overrides: dict | None = None, sources: set[str] | None = None,
           chosen: dict | None = None) -> tuple[list[dict], list[dict]]:
    """(priced rows, skipped rows) of every public run, or of `sources` only; `chosen`: the
    SC'21 runs' micro-batch and virtual stages as recorded (no tuning search)."""
    ref = yaml.safe_load(REFERENCE.read_text())
    gpu = cluster_from_spec(dgx_a100_cluster(8, "A100-SXM4-80GB"), "reference").groups[0].gpu
    sc21 = params_for(gpu, "megatron-2021", overrides)
    # Korthikanti et al. 2022 time the software their paper describes, with the TP overlap (sec 4.2.2)
    core = params_for(gpu, "megatron", overrides)
    rows = []
    if sources is None or "megatron-sc21" in sources:
        rows += replay_source_a(ref["source_a_megatron_sc21_table1"], sc21, chosen)
    if sources is None or "korthikanti-22" in sources:
        rows += replay_source_b(ref["source_b_korthikanti_table4_one_layer_22b"], core)
    skipped = []
    for c in cases():
        if sources is not None and c.source not in sources:
            continue
        if c.skip:
            skipped.append({"source": c.source, "run": c.id, "reason": c.skip, "architecture": architecture_of(c.gpus)})
        else:
            rows.append(price(c, overrides))
    for row in rows:
        row["error"] = row["predicted"] / row["published"] - 1
        row["too_fast"] = row["error"] > 0 if row["metric_kind"] == "throughput" else row["error"] < 0
    return rows, skipped


def plot(rows: list[dict], path: str) -> None:
    import matplotlib  # the optional `viz` extra, imported only here

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "planner-fidelity"  # fixed element ids: the same runs, the same file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        # one axis for every metric: the measured value against the prediction, both scaled by
        # the measured one's order of magnitude would hide the spread; plot them as published
        ax.scatter([r["published"] for r in mine], [r["predicted"] for r in mine], s=14, label=source, alpha=0.8)
    low = min(min(r["published"], r["predicted"]) for r in rows) / 1.5
    high = max(max(r["published"], r["predicted"]) for r in rows) * 1.5
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    for k in (1.4, 1 / 1.4):
        ax.plot([low, high], [low * k, high * k], color="grey", linewidth=0.5, linestyle="--")
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel="measured (as published)",
           ylabel="predicted", title="planner cost model vs published runs (dashed: ±40 %)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp in the file


EXPECTED = Path(__file__).resolve().parent / "fidelity-expected.json"
TABLES = "docs/fidelity-table.md"  # --markdown's usual file, linked from docs/fidelity.md


def public_sources() -> set[str]:
    """The sources of the public set the targets are measured on: measured-runs.yaml and
    moe-runs.yaml (published-runs.yaml's calibration runs excluded)."""
    return {c.source for c in cases()}


def leave_one_source_out(sources: set[str]) -> dict:
    """Per source of `sources` with priced runs, its runs predicted with the parameters fitted
    without it (fit_cost_params.leave_one_source_out's folds; a source that prices no fitted
    parameter is predicted with the fit on every source), and over all their runs together."""
    from fit_cost_params import fit, leave_one_source_out as folds

    fitted = {name: e["fitted"] for name, e in folds()["sources"].items()}
    out, every = {}, []
    for source in sorted(sources):
        if source not in fitted and "" not in fitted:
            fitted[""] = fit()
        layer_time.cache_clear()
        rows, _ = replay(fitted.get(source, fitted.get("")), {source})
        if not rows:
            continue
        errors = [abs(r["error"]) for r in rows]
        every += errors
        out[source] = {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
                       "fitted": fitted.get(source, fitted.get(""))}
    return {"sources": out, "median_abs_error": statistics.median(every), "max_abs_error": max(every)}


def expected(rows: list[dict], skipped: list[dict], architectures: list[dict]) -> dict:
    """What the pin (tests/test_fidelity_pin.py) holds: every priced run's prediction and, for
    the SC'21 runs, its tuned settings; every skipped run's reason; the per-architecture table."""
    return {"predicted": {r["run"]: r["predicted"] for r in rows},
            "chosen": {r["run"]: r["chosen"] for r in rows if r["chosen"]},
            "skipped": {s["run"]: s["reason"] for s in skipped},
            "architectures": architectures}


def _print(args, rows: list[dict], result: dict) -> None:
    if args.assumptions:
        for source, (runtime, text) in {**ASSUMPTIONS, MOE_SOURCE: (MOE_RUNTIME, MOE_ASSUMPTION)}.items():
            print(f"{source} (runtime {runtime}): {text}\n")
    if args.runs:
        for r in rows:
            print(f"{r['source']:19} {r['run'][:48]:48} {r['published']:10.4g} {r['predicted']:10.4g} "
                  f"{r['error']:+7.1%} {'' if r['fits'] else 'NOFIT'} {r['chosen']}")
        print()
    print_table(result["sources"])
    print()
    print_table(result["architectures"], "architecture")
    print()
    print_targets(result["targets"])
    if result["memory"]:
        print()
        print_memory_table(result["memory"], args.runs)
    if result["loso"]:
        print()
        print_loso(result["loso"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", action="store_true", help="print every run")
    parser.add_argument("--assumptions", action="store_true", help="print each source's stated assumptions")
    parser.add_argument("--plot", metavar="FILE", help="draw predicted vs measured (.svg or .png)")
    parser.add_argument("--loso", action="store_true", help="leave-one-source-out: refit without each source")
    parser.add_argument("--memory", action="store_true",
                        help="peak memory vs the runs' logged max_mem under each recompute setting")
    parser.add_argument("--write-expected", action="store_true", help=f"write {EXPECTED.name}")
    parser.add_argument("--markdown", metavar="FILE", help=f"write the tables as Markdown (the docs' {TABLES})")
    args = parser.parse_args()
    rows, skipped = replay()
    public = public_sources()
    loso = leave_one_source_out(public) if args.loso else None
    result = {"sources": source_table(rows, skipped, public), "architectures": architecture_table(rows, skipped),
              "targets": targets(rows, public, loso), "loso": loso,
              "memory": memory_table(cases(), params_for) if args.memory else None}
    if args.write_expected:
        EXPECTED.write_text(json.dumps(expected(rows, skipped, result["architectures"]), indent=1,
                                       sort_keys=True) + "\n")
    if args.markdown:
        command = "python benchmarks/fidelity.py" + (" --loso" if args.loso else "") + f" --markdown {args.markdown}"
        Path(args.markdown).write_text(markdown(result["sources"], result["architectures"], result["targets"],
                                                loso, command))
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skipped, **result}, indent=1))
        return
    _print(args, rows, result)


if __name__ == "__main__":
    main()
