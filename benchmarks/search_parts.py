"""Where the exact search's time goes, search by search: the CPU seconds of each search's skip
check and of its DP, and the best step time after it, for one row of planning_time.py, in one
process (the searches in turn, `--jobs 1`).

    python benchmarks/search_parts.py [--row "1:1:2 64"] [--runtime any] [--all] [--passes]

Prints one line per search that ran its DP (every search with `--all`), then the totals; `--passes`
adds each search's DP passes (the first, which prices the stage families it meets, and the others
of the descent on the bottleneck bound, which find them priced).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import planning_time  # noqa: E402
import planner.search.orchestration.lanes as lanes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="1:1:2 64", choices=list(planning_time.ROWS))
    parser.add_argument("--runtime", default="any")
    parser.add_argument("--all", action="store_true", help="also the searches the checks skipped")
    parser.add_argument("--passes", action="store_true",
                        help="each DP pass too: the bound on X it ran under, its CPU s, the plans it ended with")
    args = parser.parse_args()
    current: dict = {}
    log: list = []
    passes: list = []  # per search run: (bound, CPU s, final states) of each DP pass

    def timed(function, name):
        def run(*a, **k):
            started = time.process_time()
            try:
                return function(*a, **k)
            finally:
                current[name] = current.get(name, 0.0) + time.process_time() - started
        return run

    for bound in (lanes.RestrictionBound, lanes.AnyRuntimeBound):
        bound.cannot_beat = timed(bound.cannot_beat, "check")
    run_dp = timed(lanes.run_dp, "dp")

    def dp_pass(problem, bound, *rest):
        started = time.process_time()
        out = run_dp(problem, bound, *rest)
        passes.append((bound, time.process_time() - started, len(out[0])))
        return out
    lanes.run_dp = dp_pass
    run = lanes.Lane.run

    def run_logged(self, index, start):
        outcome = run(self, index, start)
        log.append((index, self.inputs.searches[index], dict(current), outcome, list(passes)))
        current.clear()
        passes.clear()
        return outcome
    lanes.Lane.run = run_logged
    row = planning_time.run_row(args.row, None, 4, args.runtime, False, 1)
    best = None
    for index, (b, v, ranks, _restriction, schedule), spent, outcome, dp_passes in log:
        if outcome.found is not None:
            best = outcome.found[0] if best is None else min(best, outcome.found[0])
        if args.all or "dp" in spent:
            print(f"{index:3d} b={b} V={v} ranks={ranks} {schedule:12s} check {spent.get('check', 0):6.2f} s  "
                  f"DP {spent.get('dp', 0):6.2f} s  best so far {best if best is not None else '-'}")
            if args.passes and dp_passes:
                first, *later = dp_passes
                print(f"      {len(dp_passes)} DP passes: the first (bound {first[0]:.3f} s) {first[1]:.2f} CPU s, "
                      f"the others {sum(p[1] for p in later):.2f} CPU s in all"
                      + (f" ({min(p[1] for p in later):.3f}-{max(p[1] for p in later):.3f} each, bounds "
                         f"{later[0][0]:.3f} down to {later[-1][0]:.3f} s)" if later else ""))
    checks = sum(entry[2].get("check", 0.0) for entry in log)
    dp = sum(entry[2].get("dp", 0.0) for entry in log)
    print(f"searches {len(log)}, DP run by {sum(1 for entry in log if 'dp' in entry[2])}; checks {checks:.2f} CPU s, "
          f"DP {dp:.2f} CPU s; the row {row['cpu_s']:.2f} CPU s, step {row['step_s']:.3f} s")


if __name__ == "__main__":
    main()
