"""Fit the cost model's architecture and runtime parameters to the public measured runs.

    python benchmarks/fit_cost_params.py            # fit on every source, print the values
    python benchmarks/fit_cost_params.py --loso     # and leave-one-source-out (minutes)

Coordinate descent over a grid per parameter, minimising mean |log(predicted/published)|
plus a quarter of the largest over every priced run (fidelity.replay). Each parameter
belongs to a GPU architecture ("ARCH.field", planner.cost.architectures), a runtime
("RUNTIME.field", planner.cost.runtimes; "eager.field" is shared by torchtitan and fsdp1) or the
links ("link.field", planner.cost.formulas.CostParams), and is fitted on runs of at least two sources
(FREE). The fitted values are copied into planner/cost/architectures.py, planner/cost/runtimes/*.py and
planner/cost/formulas.py by hand from this command's output.

The command prints the fitted values and the loss of the fit beside the loss of the values in
use. Where they differ, the values in use are kept unless a refit moves a target of
benchmarks/fidelity.py: the eager pair (elementwise factor, per-layer overhead) and the Hopper
pair (bf16, fp8 GEMM efficiency) trade against each other along a flat valley of the loss.
Leave-one-source-out refits every fold from each grid's first value.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity import replay  # noqa: E402
from planner.cost.formulas import layer_time  # noqa: E402

# parameter -> (grid, the sources whose runs it prices)
FREE = {
    "deepspeed.layer_overhead_s": ((0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 2.5e-3, 3e-3, 4e-3, 6e-3),
                                   {"amp-t4", "sailor-mit", "sailor-gh200", "bloom"}),
    "hopper.gemm_efficiency": ((0.45, 0.5, 0.55, 0.6, 0.65, 0.72), {"sailor-gh200", "torchtitan"}),
    # fp8 GEMMs on Hopper: Transformer Engine (NeMo's DGX H100 runs) and torchao float8 (torchtitan's)
    "hopper.fp8_gemm_efficiency": ((0.45, 0.5, 0.55, 0.575, 0.6, 0.625, 0.65), {"nemo", "torchtitan"}),
    "eager.elementwise_traffic_factor": ((1.0, 1.5, 2.0, 3.0, 4.0), {"torchtitan", "llm-foundry"}),
    "eager.layer_overhead_s": ((0.0, 0.25e-3, 0.5e-3, 1e-3, 2e-3), {"torchtitan", "llm-foundry"}),
    # FSDP2 (torchtitan) and FSDP1 (llm-foundry) alike prefetch their all-gathers
    "eager.overlap_zero_comm": ((0.0, 0.25, 0.5, 0.75, 1.0), {"torchtitan", "llm-foundry"}),
    # Turing (T4 at its sustained clock, TITAN-RTX, RTX 2080 Ti) and the PCIe path inside their
    # nodes: both priced by AMP's and Sailor's MIT runs
    "turing.gemm_efficiency": ((0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9), {"amp-t4", "sailor-mit"}),
    "link.pcie_link_efficiency": ((0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.65, 0.8), {"amp-t4", "sailor-mit"}),
    "link.ethernet_link_efficiency": ((0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.65, 0.8), {"amp-t4", "sailor-mit"}),
}
SOURCES = {s for _, sources in FREE.values() for s in sources}

# a GEMM efficiency is fitted on the runs whose decoder GEMMs it prices: the fp8 one on the fp8
# runs, the other on the rest (planner.cost.fp8: under fp8 the decoder GEMMs leave the bf16 path)
DTYPE_OF = {"hopper.fp8_gemm_efficiency": lambda dtype: dtype == "fp8",
            "hopper.gemm_efficiency": lambda dtype: dtype != "fp8"}


def loss(rows: list[dict]) -> float:
    logs = [abs(math.log(r["predicted"] / r["published"])) for r in rows]
    return statistics.mean(logs) + 0.25 * max(logs)


def fit(exclude: str | None = None, rounds: int = 2, start: dict | None = None) -> dict:
    """Fitted values of FREE on every source but `exclude`."""
    values = dict(start or {k: grid[0] for k, (grid, _) in FREE.items()})
    sources = SOURCES - {exclude}
    for _ in range(rounds):
        for key, (grid, touched) in FREE.items():
            mine = touched - {exclude}
            if not mine:
                continue  # nothing left to fit it on: keep the start value
            best = None
            for value in grid:
                trial = {**values, key: value}
                layer_time.cache_clear()
                rows, _ = replay(trial, sources & mine)
                keep = DTYPE_OF.get(key, lambda dtype: True)
                score = loss([r for r in rows if keep(r.get("dtype", ""))])
                if best is None or score < best[0]:
                    best = (score, value)
            values[key] = best[1]
    return values


def leave_one_source_out(start: dict | None = None) -> dict:
    """Fit without each source, predict it: per source and over all its runs together."""
    out, every = {}, []
    for source in sorted(SOURCES):
        values = fit(exclude=source, start=start)
        rows, _ = replay(values, {source})
        errors = [abs(r["error"]) for r in rows]
        every += errors
        out[source] = {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
                       "fitted": values}
    return {"sources": out, "median_abs_error": statistics.median(every), "max_abs_error": max(every)}


def main() -> None:
    values = fit()
    for key, value in values.items():
        print(f"{key:38} {value:g}")
    for name, overrides in (("fit", values), ("values in use", {})):
        layer_time.cache_clear()
        rows, _ = replay(overrides, SOURCES)
        errors = sorted(abs(r["error"]) for r in rows)
        print(f"loss with the {name:14} {loss(rows):.4f} (median |error| {statistics.median(errors):.1%} "
              f"over {len(rows)} runs)")
    if "--loso" in sys.argv:
        result = leave_one_source_out()
        for source, e in result["sources"].items():
            print(f"without {source:14} median {e['median_abs_error']:6.1%} max {e['max_abs_error']:6.1%}")
        print(f"all held-out runs      median {result['median_abs_error']:6.1%} max {result['max_abs_error']:6.1%}")


if __name__ == "__main__":
    main()
