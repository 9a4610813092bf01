"""`planner profile-links` under torchrun: 4 gloo processes on CPU split into two fake nodes
(--ranks-per-node 2) named as two node groups; the fragment loads and prices `evaluate`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from planner.inputs.linkcurve import OPS
from planner.inputs.links import load_fragment

from .conftest import evaluate_args, invoke
from .test_links import TWO_GROUPS

if os.environ.get("PLANNER_REQUIRE_TORCH"):  # `make test` installs torch: a missing one is a failure
    import torch  # noqa: F401
else:
    pytest.importorskip("torch")
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_profile_links_under_torchrun_writes_a_fragment_evaluate_takes(tmp_path):
    out = tmp_path / "links.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         "-m", "planner.cli", "profile-links", "--backend", "gloo", "--ranks-per-node", "2",
         "--node-groups", "a:1,b:1", "--sizes", "4K:64K:4", "--iters", "3", "--warmup", "1", "-o", str(out)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # rank 0 alone reports: one line per link, then where the file went
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "node_groups.a.intra_node", "node_groups.b.intra_node", "links a-b", "link fragment written to " + str(out)]
    fragment = load_fragment(str(out))  # the strict loader accepts what profile-links writes
    assert fragment["measured"]["backend"] == "gloo" and fragment["measured"]["ranks_per_node"] == [2, 2]
    for link in (fragment["node_groups"]["a"]["intra_node"], fragment["links"][0]):
        assert set(link["curve"]) == set(OPS)
        for op in OPS:
            entry = link["curve"][op]
            assert entry["ranks"] == 2 and entry["size_bytes"] == [4096, 16384, 65536]
            assert all(b > 0 for b in entry["busbw_GBps"]) and entry["bandwidth_GBps"] > 0
    assert fragment["links"][0]["between"] == ["a", "b"]

    cluster = tmp_path / "two.yaml"
    cluster.write_text(TWO_GROUPS)
    args = evaluate_args(cluster=str(cluster), global_batch=16, tp=2, dp=2)
    before, after = invoke(*args), invoke(*args, "--links", str(out))
    assert before.exit_code == 0 and after.exit_code == 0, after.output
    b, a = yaml.safe_load(before.stdout)["breakdown_s"], yaml.safe_load(after.stdout)["breakdown_s"]
    # gloo over loopback is far below the file's 300 GB/s NVLink: TP all-reduces take longer
    assert a["tp_comm"] > b["tp_comm"]
