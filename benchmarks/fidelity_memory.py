"""Peak memory against the published peak of the runs that publish one (fidelity.py --memory):
the max_mem a measured run logged, or the figure its source printed beside its throughput."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Callable

import yaml

from fidelity_runs import Case
from planner.cost.evaluate import evaluate

PUBLISHED_MEMORY = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "published-memory.yaml"
GIB = 2 ** 30


def published_peak_bytes(cases: list[Case]) -> dict[str, float]:
    """Run id -> the peak memory per GPU its source published: the max_mem a run logged
    (measured-runs.yaml) or the figure published beside its throughput (published-memory.yaml:
    torchtitan's benchmark tables, its allocator's reserved peak)."""
    out = {c.id: c.max_mem_bytes for c in cases if c.max_mem_bytes}
    for run, entry in yaml.safe_load(PUBLISHED_MEMORY.read_text())["runs"].items():
        out.setdefault(run, float(entry["gib"]) * GIB)
    return out


def _peak_bytes(c: Case, plan, params_for: Callable, overrides: dict | None, settings: bool) -> tuple[float, bool]:
    extra = dict(c.settings) if settings else {}
    est = evaluate(plan, {g.name: params_for(g, c.runtime, overrides).with_updates(**extra)
                          for g in plan.cluster.gpu_types})
    return max(est.peak_memory_by_gpu().values()), est.fits


def memory_table(cases: list[Case], params_for: Callable, overrides: dict | None = None) -> list[dict]:
    """Per source of `cases` with published peak memory (published_peak_bytes), each run priced
    with `params_for` (fidelity.params_for) and `overrides`: the median and max
    |predicted / published - 1| of the peak memory of a replica's GPUs, and the runs
    predicted not to fit, for the plans as replayed ("stated": the run's own recompute setting
    and settings, with each run's figures under "rows") and under each recompute setting for
    every stage (for sources that do not state it; fidelity_runs.SAILOR_MIT_RECOMPUTE)."""
    from planner.inputs.model import RECOMPUTE_MODES

    published = published_peak_bytes(cases)
    with_memory = [c for c in cases if c.id in published and c.plan is not None]
    out = []
    for source in sorted({c.source for c in with_memory}):
        mine = [c for c in with_memory if c.source == source]
        entry = {"source": source, "runs": len(mine)}
        for mode in ("stated",) + RECOMPUTE_MODES:
            errors, unfit, rows = [], 0, []
            for c in mine:
                plan = c.plan if mode == "stated" else \
                    replace(c.plan, stages=tuple(replace(st, recompute=mode) for st in c.plan.stages))
                peak, fits = _peak_bytes(c, plan, params_for, overrides, settings=mode == "stated")
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
