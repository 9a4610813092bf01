"""The node probe for PyTorch's ring attention (benchmarks/cp_ring_probe.py) runs its collectives on
the CPU over gloo and prints them beside the planner's price; its CUDA pieces need a GPU node."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parent.parent / "benchmarks" / "cp_ring_probe.py"


@pytest.mark.slow
def test_probe_times_the_ring_collectives_on_cpu_beside_their_price():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, str(PROBE), "--cpu-world", "2", "--tokens", "64", "--iters", "1"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] == ["2"]]
    assert [row[1] for row in rows] == ["permute", "gather"]
    for _, _, measured, priced, ratio in rows:  # both figures positive, the ratio theirs
        assert float(measured) > 0 and float(priced) > 0
        assert float(ratio) == pytest.approx(float(measured) / float(priced), rel=0.01)
