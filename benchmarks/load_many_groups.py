"""Time to load a cluster file of many node groups (planner.inputs.hardware.load_cluster), with
and without a switch fabric, and to look up routes between its groups.

    python benchmarks/load_many_groups.py [--groups 100 300 1000] [--repeats 5]

Each cluster is written once as YAML to a temporary folder: one-node groups of 8 GPUs,
alternately H100 and A100 (no two neighbours alike, so nothing merges). `flat` has no
`topology:` section (every pair joined by the default edge); `fabric` puts every group behind
one of n/20 leaf switches, the leaves behind one spine. Columns: the median seconds of
`repeats` loads (file read and parse included), and of asking for the route of 10,000 random
pairs of groups on a freshly loaded cluster (each pair's search runs once, then is kept).
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs.hardware import load_cluster  # noqa: E402


def cluster_spec(groups: int, fabric: bool) -> dict:
    spec: dict = {"name": f"{'fabric' if fabric else 'flat'}-{groups}", "node_groups": [
        {"name": f"g{i}", "gpu": "H100-SXM5-80GB" if i % 2 else "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8}
        for i in range(groups)]}
    if fabric:
        leaves = max(1, groups // 20)
        spec["topology"] = {"switches": ["spine"] + [f"leaf{j}" for j in range(leaves)], "links": [
            *({"between": [f"g{i}", f"leaf{i % leaves}"], "bandwidth_GBps": 50, "latency_us": 2}
              for i in range(groups)),
            *({"between": [f"leaf{j}", "spine"], "bandwidth_GBps": 400, "latency_us": 3} for j in range(leaves))]}
    return spec


def timed(action) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| cluster | groups | load s (median) | 10,000 routes s (median) |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for fabric in (False, True):
            for groups in args.groups:
                path = Path(folder) / f"{groups}-{fabric}.yaml"
                path.write_text(yaml.safe_dump(cluster_spec(groups, fabric), sort_keys=False))
                loads, lookups = [], []
                for repeat in range(args.repeats):
                    seconds, cluster = timed(lambda: load_cluster(str(path)))
                    loads.append(seconds)
                    rng = random.Random(repeat)
                    pairs = [rng.sample(range(groups), 2) for _ in range(10_000)]
                    seconds, _ = timed(lambda: [cluster.group_link(f"g{a}", f"g{b}") for a, b in pairs])
                    lookups.append(seconds)
                print(f"| {'fabric' if fabric else 'flat'} | {groups:,} | {statistics.median(loads):.3f} | "
                      f"{statistics.median(lookups):.3f} |")


if __name__ == "__main__":
    main()
