"""Where the exact search's time goes, search by search: the CPU seconds of each search's skip
check and of its DP, and the best step time after it, for one row of planning_time.py, in one
process (the searches in turn, `--jobs 1`).

    python benchmarks/search_parts.py [--row "1:1:2 64"] [--runtime any] [--all]

Prints one line per search that ran its DP (every search with `--all`), then the totals.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import planning_time  # noqa: E402
import planner.search.lanes as lanes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", default="1:1:2 64", choices=list(planning_time.ROWS))
    parser.add_argument("--runtime", default="any")
    parser.add_argument("--all", action="store_true", help="also the searches the checks skipped")
    args = parser.parse_args()
    current: dict = {}
    log: list = []

    def timed(function, name):
        def run(*a, **k):
            started = time.process_time()
            try:
                return function(*a, **k)
            finally:
                current[name] = current.get(name, 0.0) + time.process_time() - started
        return run

    lanes.cannot_beat = timed(lanes.cannot_beat, "check")
    lanes.cannot_beat_any = timed(lanes.cannot_beat_any, "check")
    lanes.run_dp = timed(lanes.run_dp, "dp")
    run = lanes.Lane.run

    def run_logged(self, index, start):
        outcome = run(self, index, start)
        log.append((index, self.inputs.searches[index], dict(current), outcome))
        current.clear()
        return outcome
    lanes.Lane.run = run_logged
    row = planning_time.run_row(args.row, None, 4, args.runtime, False, 1)
    best = None
    for index, (b, v, ranks, _restriction, schedule), spent, outcome in log:
        if outcome.found is not None:
            best = outcome.found[0] if best is None else min(best, outcome.found[0])
        if args.all or "dp" in spent:
            print(f"{index:3d} b={b} V={v} ranks={ranks} {schedule:12s} check {spent.get('check', 0):6.2f} s  "
                  f"DP {spent.get('dp', 0):6.2f} s  best so far {best if best is not None else '-'}")
    checks = sum(spent.get("check", 0.0) for *_, spent, _ in log)
    dp = sum(spent.get("dp", 0.0) for *_, spent, _ in log)
    print(f"searches {len(log)}, DP run by {sum(1 for *_, s, _ in log if 'dp' in s)}; checks {checks:.2f} CPU s, "
          f"DP {dp:.2f} CPU s; the row {row['cpu_s']:.2f} CPU s, step {row['step_s']:.3f} s")


if __name__ == "__main__":
    main()
