"""Grid-search the cost model's physical parameters against the published runs.

    python benchmarks/fit_cost_params.py

Prints the parameter sets with the lowest median + max |error| over every measurement
in profiles/reference/published-runs.yaml (the same replay as fidelity.py). The defaults
in planner/cost.py:CostParams were chosen from this table: one set for all runs, no
per-run factor. Takes a few minutes on 2 cores.
"""

from __future__ import annotations

import itertools
import statistics

from fidelity import REFERENCE, replay_source_a, replay_source_b, yaml
from planner.cost import CostParams, layer_time

GRID = {
    "gemm_efficiency": (0.70, 0.72, 0.74, 0.76, 0.78),
    "hbm_efficiency": (0.6, 0.7, 0.8),
    "gemm_half_dim": (32.0, 64.0, 128.0),
    "inter_link_efficiency": (0.6, 0.8),
}


def main() -> None:
    ref = yaml.safe_load(REFERENCE.read_text())
    results = []
    for values in itertools.product(*GRID.values()):
        params = CostParams(**dict(zip(GRID, values)))
        layer_time.cache_clear()
        rows = (replay_source_b(ref["source_b_korthikanti_table4_one_layer_22b"], params)
                + replay_source_a(ref["source_a_megatron_sc21_table1"], params))
        errors = [abs(r["predicted"] / r["published"] - 1) for r in rows]
        results.append((statistics.median(errors), max(errors), values))
    results.sort(key=lambda r: r[0] + r[1])
    print("  ".join(f"{k:>22}" for k in GRID) + "   median     max")
    for median, worst, values in results[:10]:
        print("  ".join(f"{v:>22}" for v in values) + f"   {median:6.1%}  {worst:6.1%}")


if __name__ == "__main__":
    main()
