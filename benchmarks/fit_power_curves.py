"""Fit the power-cap curves of planner/cost/power.py to the published per-cap training measurements.

    python benchmarks/fit_power_curves.py            # print the fit and the model's error per sweep
    python benchmarks/fit_power_curves.py --write    # ... and write docs/power-curves.md

Per architecture: d is the median uncapped draw over the board power of its sweeps; (b, alpha) the
least-squares fit of speed = ((P_cap - b P_board) / (d P_board - b P_board))^(1/alpha) over every cap at
or above 40 % of the board power (a grid: b in 0.01 steps, alpha in 0.05 steps). The table beside it
gives the error of the curves the planner uses (POWER_CURVES), which the fit's figures were rounded into.
Data: profiles/reference/power-caps.yaml (the Zeus NSDI'23 trace; its header names the files).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.cost.power import POWER_CURVES, PowerCurve  # noqa: E402

DATA = ROOT / "profiles" / "reference" / "power-caps.yaml"
OUT = ROOT / "docs" / "power-curves.md"
LOWEST_CAP_FRACTION = 0.4  # below it the trace's GPUs crawl (A40 at 100 W: a quarter of its speed)


def points(sweeps: list[dict]) -> list[tuple[float, float, float]]:
    """(board W, cap W, measured speed) of every cap at or above LOWEST_CAP_FRACTION."""
    return [(s["board_W"], cap, measured) for s in sweeps for cap, measured, _ in s["caps"]
            if cap >= LOWEST_CAP_FRACTION * s["board_W"]]


def errors(curve: PowerCurve, pts) -> list[float]:
    return [curve.speed(board, cap) - measured for board, cap, measured in pts]


def fit(sweeps: list[dict]) -> tuple[PowerCurve, float]:
    draw = statistics.median(s["uncapped_draw_W"] / s["board_W"] for s in sweeps)
    pts = points(sweeps)
    best = None
    for b100 in range(0, 40):
        for a20 in range(10, 80):
            curve = PowerCurve(draw, b100 / 100, a20 / 20, "fit")
            sse = sum(e * e for e in errors(curve, pts))
            if best is None or sse < best[1]:
                best = (curve, sse)
    return best


def rms(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    data = yaml.safe_load(DATA.read_text())
    by_arch: dict[str, list[dict]] = {}
    for sweep in data["sweeps"]:
        by_arch.setdefault(sweep["architecture"], []).append(sweep)
    lines = ["# Power-cap curves", "",
             "Written by `python benchmarks/fit_power_curves.py --write` from "
             "`profiles/reference/power-caps.yaml` (the Zeus NSDI'23 trace: one epoch's time per power limit).",
             "Speed under a cap `P`: `((P - b P_board) / (d P_board - b P_board))^(1/alpha)` below the uncapped "
             "draw `d P_board`, else 1 ([cost-and-energy.md](cost-and-energy.md)). Caps from 40 % of the board "
             "power up.", "",
             "| architecture | sweeps | caps | d | b | alpha | rms error | largest error | fit: b | fit: alpha |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arch, sweeps in sorted(by_arch.items()):
        curve = POWER_CURVES[arch]
        found, _ = fit(sweeps)
        errs = errors(curve, points(sweeps))
        lines.append(f"| {arch} | {len(sweeps)} | {len(errs)} | {curve.draw_fraction:.3f} | {curve.floor_fraction:.2f} | "
                     f"{curve.exponent:.2f} | {100 * rms(errs):.1f} % | {100 * max(map(abs, errs)):.1f} % | "
                     f"{found.floor_fraction:.2f} | {found.exponent:.2f} |")
    lines += ["", "Per sweep, measured speed / the curve's at each cap (fraction of the board power):", ""]
    for arch, sweeps in sorted(by_arch.items()):
        for sweep in sweeps:
            cells = ", ".join(f"{cap / sweep['board_W']:.2f}: {measured:.3f}/"
                              f"{POWER_CURVES[arch].speed(sweep['board_W'], cap):.3f}"
                              for cap, measured, _ in sweep["caps"] if cap >= LOWEST_CAP_FRACTION * sweep["board_W"])
            lines.append(f"- {arch}, {sweep['gpu']}, {sweep['workload']}: {cells}")
    lines += ["", "Single published points, not fitted (the `checks` of the data file):", ""]
    for check in data.get("checks", []):
        got = POWER_CURVES[check["architecture"]].speed(check["board_W"], check["cap_W"])
        lines.append(f"- {check['gpu']} at {check['cap_W']} of {check['board_W']} W: published at least "
                     f"{check['throughput_fraction_at_least']:.2f}, the {check['architecture']} curve {got:.3f}")
    unmeasured = sorted(a for a, c in POWER_CURVES.items() if a not in by_arch)
    lines += ["", f"No published per-cap training sweep for {', '.join(unmeasured)}: they take Ampere's curve."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
