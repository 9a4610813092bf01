"""Measured layer times from a layer-profile file (`planner profile`), for pricing a GPU type
from measurements instead of the analytic model (`--profile GPU=FILE`).

Times are interpolated linearly between measured micro-batch sizes and TP degrees, and
extrapolated linearly beyond them from the two nearest points (with one point, in
proportion to the micro-batch, and inversely to the TP degree).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..core import ranges
from ..core.errors import BadInput
from ..core.io import check_keys

KINDS = ("embedding", "decoder", "head")
# The keys of a layer-profile file's mappings (formats.md section 3, planner/data/profile.schema.json).
PROFILE_KEYS = ("format", "model", "dtype", "seq_len", "source", "device", "date", "torch_version", "warmup",
                "repeats", "layers")
LAYER_KEYS = ("name", "kind", "params", "fwd_flops_per_sample", "act_bytes_per_sample", "out_bytes_per_sample",
              "measured")
TIMES_KEYS = ("fwd_s", "bwd_s", "saved_bytes_per_sample", "peak_memory_bytes")  # one tp degree's
MEASURED_KEYS = ("micro_batch", "tp", *TIMES_KEYS, "by_tp")
MIN_FRACTION = 0.05  # an extrapolation never drops below this share of the nearest measurement


def _interpolate(xs: Sequence[float], ys: Sequence[float], point: float, single: str) -> float:
    """Piecewise-linear through (xs, ys), extended linearly past both ends."""
    if len(xs) == 1:
        return ys[0] * (point / xs[0] if single == "proportional" else xs[0] / point)
    i = min(max(bisect_left(xs, point), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    y = y0 + (y1 - y0) * (point - x0) / (x1 - x0)
    nearest = ys[0] if point < xs[0] else ys[-1] if point > xs[-1] else min(y0, y1)
    return max(y, MIN_FRACTION * nearest)


@dataclass(frozen=True)
class KindTimes:
    micro_batch: tuple[int, ...]
    tp: tuple[int, ...]
    fwd_s: tuple[tuple[float, ...], ...]  # [tp index][micro-batch index]
    bwd_s: tuple[tuple[float, ...], ...]

    def at(self, micro_batch: int, tp: int) -> tuple[float, float]:
        """(forward, backward) seconds of one micro-batch on one rank of a TP group."""
        out = []
        for table in (self.fwd_s, self.bwd_s):
            per_tp = [_interpolate(self.micro_batch, row, micro_batch, "proportional") for row in table]
            out.append(_interpolate(self.tp, per_tp, tp, "inverse"))
        return out[0], out[1]


@dataclass(frozen=True)
class MeasuredTimes:
    """Measured times of one GPU type, per layer kind (hashable: it rides in CostParams)."""

    gpu: str
    source: str
    model: str
    seq_len: int
    dtype: str
    kinds: tuple[tuple[str, KindTimes], ...]

    def times(self, kind: str) -> KindTimes | None:
        for name, value in self.kinds:
            if name == kind:
                return value
        return None


def _numbers(value: Any, where: str, field: str, figure: str) -> tuple[float, ...]:
    """A non-empty list of numbers, each in RANGES[figure]."""
    if not isinstance(value, list) or not value:
        raise BadInput("must be a non-empty list of numbers", where, field)
    return tuple(float(ranges.check(x, figure, where, f"{field}[{i}]")) for i, x in enumerate(value))


def check_profile_keys(data: Mapping[str, Any], where: str) -> None:
    """BadInput naming the first key of a layer-profile file that its format does not have."""
    check_keys(data, PROFILE_KEYS, where)
    layers = data.get("layers")
    for i, layer in enumerate(layers if isinstance(layers, list) else []):
        if not isinstance(layer, dict):
            continue
        check_keys(layer, LAYER_KEYS, where, f"layers[{i}]")
        measured = layer.get("measured")
        if isinstance(measured, dict):
            check_keys(measured, MEASURED_KEYS, where, f"layers[{i}].measured")
            by_tp = measured.get("by_tp")
            for tp, times in (by_tp.items() if isinstance(by_tp, dict) else ()):
                if isinstance(times, dict):
                    check_keys(times, TIMES_KEYS, where, f"layers[{i}].measured.by_tp.{tp}")


def measured_from_profile(data: Mapping[str, Any], gpu: str, where: str) -> MeasuredTimes:
    """Read the `measured` entries of a layer-profile file (formats.md section 3)."""
    if data.get("format") != "planner.profile/v1":
        raise BadInput("not a layer profile (format must be planner.profile/v1)", where, "format")
    check_profile_keys(data, where)
    layers = data.get("layers")
    if not isinstance(layers, list) or not layers:
        raise BadInput("must be a non-empty list", where, "layers")
    kinds: dict[str, KindTimes] = {}
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise BadInput("must be a mapping", where, f"layers[{i}]")
        kind, measured = layer.get("kind"), layer.get("measured")
        if kind not in KINDS or kind in kinds:
            continue
        if not isinstance(measured, dict):
            raise BadInput("has no measured times (profile it with `planner profile`)", where,
                           f"layers[{i}].measured")
        path = f"layers[{i}].measured"
        micro = _numbers(measured.get("micro_batch"), where, f"{path}.micro_batch", "micro_batch")
        tps = _numbers(measured.get("tp", [1]), where, f"{path}.tp", "degree")
        fwd, bwd = measured.get("fwd_s"), measured.get("bwd_s")
        if len(tps) == 1 and isinstance(fwd, list) and fwd and not isinstance(fwd[0], list):
            fwd, bwd = [fwd], [bwd]
        if not isinstance(fwd, list) or not isinstance(bwd, list) or len(fwd) != len(tps) or len(bwd) != len(tps):
            raise BadInput("needs one row of times per TP degree", where, f"{path}.fwd_s")
        fwd_rows = tuple(_numbers(row, where, f"{path}.fwd_s", "layer_time_s") for row in fwd)
        bwd_rows = tuple(_numbers(row, where, f"{path}.bwd_s", "layer_time_s") for row in bwd)
        if any(len(row) != len(micro) for row in fwd_rows + bwd_rows):
            raise BadInput("needs one time per micro-batch size", where, f"{path}.fwd_s")
        if list(micro) != sorted(set(micro)) or list(tps) != sorted(set(tps)):
            raise BadInput("micro-batch sizes and TP degrees must be increasing", where, path)
        kinds[kind] = KindTimes(tuple(int(x) for x in micro), tuple(int(x) for x in tps), fwd_rows, bwd_rows)
    if "decoder" not in kinds:
        raise BadInput("has no measured decoder block", where, "layers")
    seq_len = ranges.get(data, "seq_len", "seq_len", where, "seq_len")
    return MeasuredTimes(gpu, where, str(data.get("model", "")), seq_len, str(data.get("dtype", "")),
                         tuple(sorted(kinds.items())))
