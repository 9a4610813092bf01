"""The documented physical range of every figure a user gives (file or flag), in one table.

A value outside its range is bad input (exit 2) naming the file or flag and the field; NaN and
infinity are outside every range. The bounds are generous (well past any real machine or
model) but finite, so every time, byte count and rate the cost model derives stays a finite
float and the batch-share ILP keeps coefficients a MILP solver can handle. Units are those of
the files and flags (GB/s, us, GiB, TFLOP/s, seconds, counts).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import BadInput

MAX_CLUSTER_GPUS = 1_048_576  # formats.md section 1


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    unit: str = ""
    integer: bool = False
    low_open: bool = False  # (low, high] instead of [low, high]

    def __contains__(self, value: float) -> bool:
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low = f"above {_bound(self.low)}" if self.low_open else f"from {_bound(self.low)}"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} {low} to {_bound(self.high)}{unit}"


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e9 else f"{value:g}"


RANGES: dict[str, Range] = {
    # --- cluster file and GPU catalog ---
    # 1 MB/s (a congested WAN) to 1 PB/s (500x NVLink 5's 1.8 TB/s per GPU, room for what-ifs);
    # below 1 MB/s step times reach 1e12 s and the share ILP loses precision (1e-16 broke PuLP).
    "bandwidth_GBps": Range(1e-3, 1e6, "GB/s"),
    # 0 (same chip) to 10 s (a satellite hop is 0.6 s).
    "latency_us": Range(0, 1e7, "us"),
    # 1 MiB to 4 TiB per GPU (B200 has 180 GiB; 4 TiB covers CPU-memory "GPUs").
    "memory_GiB": Range(2**-10, 4096, "GiB"),
    # 1 GFLOP/s (a phone) to 100 PFLOP/s per GPU (B200 dense FP8 is 4.5 PFLOP/s).
    "peak_tflops": Range(1e-3, 1e5, "TFLOP/s"),
    # 1 GB/s to 100 TB/s of memory bandwidth (H200 HBM3e is 4.8 TB/s).
    "hbm_GBps": Range(1, 1e5, "GB/s"),
    # board power of one GPU: 1 W to 10 kW (GB300's superchip share is ~1.4 kW); idle and cap alike
    "power_W": Range(1, 1e4, "W"),
    # a node's power besides its GPUs (CPUs, memory, NICs, fans): 0 to 100 kW (a DGX B200 draws 14.3 kW)
    "node_power_W": Range(0, 1e5, "W"),
    # dollars per GPU-hour: 0 (owned, paid for) to $1,000 (100x today's dearest on-demand price)
    "price_per_gpu_hour": Range(0, 1e3, "USD"),
    # power usage effectiveness: facility energy / IT energy, 1 (none lost) to 3 (a poor machine room)
    "pue": Range(1, 3),
    # mean time between interruptions of one GPU or node: 1 minute to 100,000 years
    "mtbf_hours": Range(1 / 60, 1e9, "h"),
    # spot preemptions of one node: 0 to one a minute
    "preemptions_per_hour": Range(0, 60),
    # the storage's checkpoint bandwidth, all nodes together: 1 MB/s to 1 PB/s
    "checkpoint_write_GBps": Range(1e-3, 1e6, "GB/s"),
    # a restart after an interruption (detect, reschedule, relaunch): 0 to a month
    "restart_s": Range(0, 3e6, "s"),
    # Nodes of one group and GPUs in one node (an NVL576 NVLink domain counts as one node);
    # the whole cluster is also capped at MAX_CLUSTER_GPUS.
    "nodes": Range(1, MAX_CLUSTER_GPUS, integer=True),
    "gpus_per_node": Range(1, 1024, integer=True),
    # --- training (flags and plan files) ---
    # 16M sequences per step, 16M tokens per sequence (16x the longest published contexts).
    "global_batch": Range(1, 2**24, integer=True),
    "seq_len": Range(1, 2**24, integer=True),
    "micro_batch": Range(1, 2**24, integer=True),
    # Chunks per pipeline rank (a model of at most 4096 layers never needs more).
    "virtual_stages": Range(1, 4096, integer=True),
    # Parallel degrees: at most the largest cluster.
    "degree": Range(1, MAX_CLUSTER_GPUS, integer=True),
    # A search's time limit: 1 ms to about 4 months.
    "time_limit_s": Range(1e-3, 1e7, "s"),
    # `plan --tokens`: 1 to 1e16 tokens per run (100x the largest published pre-training runs)
    "tokens": Range(1, 1e16, integer=True),
    # `plan --max-step-time`: a step's seconds, as the time limit's range
    "step_time_s": Range(1e-6, 1e7, "s"),
    # `plan --max-cost-per-hour`: dollars per hour of the GPUs a plan rents
    "cost_per_hour": Range(0, 1e9, "USD", low_open=True),
    # `plan --max-cap-slowdown`: how much longer a step may grow under power caps, as a fraction
    "slowdown": Range(0, 1),
    # --- model configuration (Hugging Face config.json) ---
    # Ten times or more past the largest published dense and MoE models.
    "hidden": Range(1, 2**20, integer=True),
    "num_layers": Range(1, 4096, integer=True),
    "num_heads": Range(1, 2**16, integer=True),
    "ffn_hidden": Range(1, 2**22, integer=True),
    "vocab": Range(1, 2**24, integer=True),
    "max_positions": Range(1, 2**24, integer=True),
    "num_experts": Range(1, 4096, integer=True),
    "shared_experts": Range(0, 4096, integer=True),
    "layer_index": Range(0, 4096, integer=True),  # a count of leading layers (DeepSeek's dense ones)
    "mtp_layers": Range(0, 8, integer=True),  # multi-token-prediction modules (DeepSeek-V3 trains 1)
    # --- measured profiles and calibrations ---
    # One layer's forward or backward on one micro-batch: 1 ns to about 11 days.
    "layer_time_s": Range(1e-9, 1e6, "s"),
    # A measured message size (planner profile-links): 1 byte to 1 PiB.
    "message_bytes": Range(1, 2**50, "bytes", integer=True),
    # Bus bandwidth measured at one size: a small message is mostly latency (4 KiB in 4 ms is
    # 0.001 GB/s), so down to 1 kB/s; the link's own (fitted) figure keeps bandwidth_GBps.
    "curve_GBps": Range(1e-6, 1e6, "GB/s"),
    # The time measured for one message: above 0 to about 11 days.
    "curve_time_us": Range(0, 1e12, "us", low_open=True),
    # Fitted efficiencies: a share of the data-sheet peak.
    "efficiency": Range(0, 1, low_open=True),
}


_BASE60 = re.compile(r"([-+]?)([0-9]+(?::[0-5]?[0-9])+)(\.[0-9]*)?")


def _show(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    base60 = _BASE60.fullmatch(value) if isinstance(value, str) else None
    if base60:  # YAML 1.1 reads `12:30` as 750; planner.core.io reads it as the string it is
        sign, digits, fraction = base60.groups()
        number = 0.0
        for part in digits.split(":"):
            number = number * 60 + int(part)
        number = (number + float(fraction or "0")) * (-1 if sign == "-" else 1)
        text += f" (base-60 numbers are not read: write {number:g} if that is meant)"
    return text


def check(value: Any, figure: str, where: str | None, field: str | None = None) -> Any:
    """`value` if it is a number in RANGES[figure], else BadInput naming `where` and `field`."""
    r = RANGES[figure]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (r.integer and not isinstance(value, int)):
        raise BadInput(f"must be {r.describe()}, got {_show(value)}", where, field)
    if isinstance(value, float) and not math.isfinite(value):
        raise BadInput(f"must be a finite number ({r.describe()}), got {_show(value)}", where, field)
    if value not in r:
        raise BadInput(f"must be {r.describe()}, got {_show(value)}", where, field)
    return value


def get(data: Mapping[str, Any], key: str, figure: str, where: str, field: str, *,
        required: bool = True, default: Any = None) -> Any:
    """data[key] checked against RANGES[figure]; absent or null is `default` unless required."""
    value = data.get(key)
    if value is None:
        if required:
            raise BadInput("missing required field", where, field)
        return default
    return check(value, figure, where, field)
