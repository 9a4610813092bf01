"""Replay published, measured training runs through the cost model; print predicted vs
published per source: runs, evaluated, skipped by reason, median and max |error|, the share
predicted too fast, and the leave-one-source-out error.

    python benchmarks/fidelity.py                       # the per-source table
    python benchmarks/fidelity.py --runs                # and every run
    python benchmarks/fidelity.py --json                # machine-readable rows and summary
    python benchmarks/fidelity.py --plot docs/fidelity.svg   # predicted vs measured, log-log
    python benchmarks/fidelity.py --loso                # refit without each source (minutes)
    python benchmarks/fidelity.py --memory              # peak memory vs published, stated and per recompute setting
    python benchmarks/fidelity.py --memory --runs       # and every run's, as stated
    python benchmarks/fidelity.py --write-expected      # pin: benchmarks/fidelity-expected.json

Runs: profiles/reference/published-runs.yaml (sources A and B below) and
profiles/reference/measured-runs.yaml (fidelity_runs.py maps them to plans; the assumptions
made for each source's unstated facts are printed with --assumptions). Every run is priced
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
from fidelity_moe import ASSUMPTION as MOE_ASSUMPTION, RUNTIME as MOE_RUNTIME, SOURCE as MOE_SOURCE, moe_cases  # noqa: E402,E501
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
                     "fits": est.fits, "run": name,
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
    return rt.params(DEFAULT_PARAMS.with_updates(**arch))


def price(c: Case, overrides: dict | None = None) -> dict:
    per_gpu = {g.name: params_for(g, c.runtime, overrides).with_updates(**dict(c.settings))
               for g in c.plan.cluster.gpu_types}
    est = evaluate(c.plan, per_gpu)
    predicted = c.read(est)
    return {"source": c.source, "runtime": c.runtime, "run": c.id, "metric": c.metric,
            "metric_kind": "time" if c.metric == "iteration_time" else "throughput",
            "published": c.published, "predicted": predicted, "fits": est.fits, "chosen": "",
            "dtype": c.plan.training.dtype}


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
            skipped.append({"source": c.source, "run": c.id, "reason": c.skip})
        else:
            rows.append(price(c, overrides))
    for row in rows:
        row["error"] = row["predicted"] / row["published"] - 1
        row["too_fast"] = row["error"] > 0 if row["metric_kind"] == "throughput" else row["error"] < 0
    return rows, skipped


def summary(rows: list[dict]) -> tuple[float, float]:
    errors = [abs(r["error"]) for r in rows]
    return statistics.median(errors), max(errors)


def source_table(rows: list[dict], skipped: list[dict]) -> list[dict]:
    """Per source and in all: runs, evaluated, skipped by reason, median/max |error|, share too fast."""
    names = sorted({r["source"] for r in rows} | {s["source"] for s in skipped})
    out = []
    for name in names + ["all"]:
        mine = [r for r in rows if name in ("all", r["source"])]
        skips = [s for s in skipped if name in ("all", s["source"])]
        reasons: dict[str, int] = {}
        for s in skips:
            reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
        entry = {"source": name, "runs": len(mine) + len(skips), "evaluated": len(mine),
                 "skipped": dict(sorted(reasons.items())), "predicted_not_to_fit": sum(not r["fits"] for r in mine)}
        if mine:
            med, worst = summary(mine)
            entry.update(median_abs_error=med, max_abs_error=worst,
                         too_fast_share=sum(r["too_fast"] for r in mine) / len(mine))
        out.append(entry)
    return out


def print_table(table: list[dict]) -> None:
    print(f"{'source':15} {'runs':>4} {'eval':>4} {'median':>7} {'max':>7} {'fast':>5} {'nofit':>5}  skipped")
    for e in table:
        if "median_abs_error" in e:
            figures = f"{e['median_abs_error']:7.1%} {e['max_abs_error']:7.1%} {e['too_fast_share']:5.0%}"
        else:
            figures = f"{'-':>7} {'-':>7} {'-':>5}"
        skipped = ", ".join(f"{n} {r}" for r, n in e["skipped"].items())
        print(f"{e['source']:15} {e['runs']:4} {e['evaluated']:4} {figures} {e['predicted_not_to_fit']:5}  {skipped}")


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


PUBLISHED_MEMORY = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "published-memory.yaml"
GIB = 2 ** 30


def published_peak_bytes() -> dict[str, float]:
    """Run id -> the peak memory per GPU its source published: the max_mem a run logged
    (measured-runs.yaml) or the figure published beside its throughput (published-memory.yaml:
    torchtitan's benchmark tables, its allocator's reserved peak)."""
    out = {c.id: c.max_mem_bytes for c in cases() if c.max_mem_bytes}
    for run, entry in yaml.safe_load(PUBLISHED_MEMORY.read_text())["runs"].items():
        out.setdefault(run, float(entry["gib"]) * GIB)
    return out


def _peak_bytes(c: Case, plan, overrides: dict | None, settings: bool) -> tuple[float, bool]:
    extra = dict(c.settings) if settings else {}
    est = evaluate(plan, {g.name: params_for(g, c.runtime, overrides).with_updates(**extra)
                          for g in plan.cluster.gpu_types})
    return max(est.peak_memory_by_gpu().values()), est.fits


def memory_table(overrides: dict | None = None) -> list[dict]:
    """Per source with published peak memory (published_peak_bytes): the median and max
    |predicted / published - 1| of the peak memory of a replica's GPUs, and the runs
    predicted not to fit, for the plans as replayed ("stated": the run's own recompute setting
    and settings, with each run's figures under "rows") and under each recompute setting for
    every stage (for sources that do not state it; fidelity_runs.SAILOR_MIT_RECOMPUTE)."""
    from planner.inputs.model import RECOMPUTE_MODES

    published = published_peak_bytes()
    with_memory = [c for c in cases() if c.id in published and c.plan is not None]
    out = []
    for source in sorted({c.source for c in with_memory}):
        mine = [c for c in with_memory if c.source == source]
        entry = {"source": source, "runs": len(mine)}
        for mode in ("stated",) + RECOMPUTE_MODES:
            errors, unfit, rows = [], 0, []
            for c in mine:
                plan = c.plan if mode == "stated" else \
                    replace(c.plan, stages=tuple(replace(st, recompute=mode) for st in c.plan.stages))
                peak, fits = _peak_bytes(c, plan, overrides, settings=mode == "stated")
                errors.append(abs(peak / published[c.id] - 1))
                unfit += not fits
                rows.append({"run": c.id, "published_bytes": published[c.id], "predicted_bytes": peak, "fits": fits})
            entry[mode] = {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
                           "predicted_not_to_fit": unfit}
            if mode == "stated":
                entry[mode]["rows"] = rows
        out.append(entry)
    return out


def print_memory_table(table: list[dict], runs: bool = False) -> None:
    print("peak memory vs the published peak, as stated and per recompute setting "
          "(median / max |error|, runs not fitting):")
    for e in table:
        figures = "  ".join(f"{mode} {f['median_abs_error']:5.1%} / {f['max_abs_error']:5.1%} ({f['predicted_not_to_fit']})"
                            for mode, f in e.items() if isinstance(f, dict))
        print(f"  {e['source']:14} {e['runs']:3} runs  {figures}")
    if runs:
        print(f"\n  {'run (as stated)':48} {'GiB published':>13} {'predicted':>9} {'error':>7}")
        for e in table:
            for r in e["stated"]["rows"]:
                print(f"  {r['run'][:48]:48} {r['published_bytes'] / GIB:13.1f} {r['predicted_bytes'] / GIB:9.1f} "
                      f"{r['predicted_bytes'] / r['published_bytes'] - 1:+7.1%} {'' if r['fits'] else 'NOFIT'}")


EXPECTED = Path(__file__).resolve().parent / "fidelity-expected.json"


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
    args = parser.parse_args()
    rows, skipped = replay()
    table = source_table(rows, skipped)
    loso = None
    if args.loso:
        from fit_cost_params import leave_one_source_out
        loso = leave_one_source_out()
    memory = memory_table() if args.memory else None
    if args.write_expected:
        EXPECTED.write_text(json.dumps({"predicted": {r["run"]: r["predicted"] for r in rows},
                                        "chosen": {r["run"]: r["chosen"] for r in rows if r["chosen"]}},
                                       indent=1, sort_keys=True) + "\n")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skipped, "sources": table, "loso": loso, "memory": memory},
                         indent=1))
        return
    if args.assumptions:
        for source, (runtime, text) in {**ASSUMPTIONS, MOE_SOURCE: (MOE_RUNTIME, MOE_ASSUMPTION)}.items():
            print(f"{source} (runtime {runtime}): {text}\n")
    if args.runs:
        for r in rows:
            print(f"{r['source']:14} {r['run'][:48]:48} {r['published']:10.4g} {r['predicted']:10.4g} "
                  f"{r['error']:+7.1%} {'' if r['fits'] else 'NOFIT'} {r['chosen']}")
        print()
    print_table(table)
    if memory:
        print()
        print_memory_table(memory, args.runs)
    if loso:
        print("\nleave-one-source-out (fit without the source, predict it):")
        for name, e in loso["sources"].items():
            print(f"  {name:15} median {e['median_abs_error']:6.1%}  max {e['max_abs_error']:6.1%}")
        print(f"  {'all':15} median {loso['median_abs_error']:6.1%}  max {loso['max_abs_error']:6.1%}")


if __name__ == "__main__":
    main()
