"""Fit the analytic model's efficiency parameters for one GPU type to a measured profile.

`planner calibrate profile.json --gpu NAME -o calib.yaml` searches GEMM efficiency, HBM
efficiency and attention-kernel efficiency on a coarse-to-fine grid for the smallest mean
squared log error between the analytic forward + backward time of each measured layer
(tp and micro-batch as measured) and its measured time. `--calibration calib.yaml` then
prices that GPU type with the fitted values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Any, Mapping

from ..cost.formulas import DEFAULT_PARAMS, CostParams, layer_time
from ..core.dims import StageDims
from ..core import ranges
from ..core.errors import BadInput
from ..core.io import check_keys
from ..inputs.hardware import GpuSpec
from ..inputs.measured import MeasuredTimes
from ..inputs.model import Model
from ..cost.sharding import Sharding

FITTED = ("gemm_efficiency", "hbm_efficiency", "attention_efficiency")
GRID = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
CALIBRATION_FORMAT = "planner.calibration/v1"
CALIBRATION_KEYS = ("format", "gpu", "source", "params", "rms_log_error_before", "rms_log_error_after", "points")


@dataclass(frozen=True)
class Calibration:
    gpu: str
    params: CostParams
    error_before: float  # root mean squared log error with the default parameters
    error_after: float
    points: int

    def to_json(self, source: str) -> dict:
        return {"format": CALIBRATION_FORMAT, "gpu": self.gpu, "source": source,
                "params": {name: getattr(self.params, name) for name in FITTED},
                "rms_log_error_before": self.error_before, "rms_log_error_after": self.error_after,
                "points": self.points}


def _error(model: Model, gpu: GpuSpec, measured: MeasuredTimes, dtype: str, attention: str,
           params: CostParams) -> tuple[float, int]:
    total, points = 0.0, 0
    layers = {layer.kind: layer for layer in model.layers}
    for kind, times in measured.kinds:
        layer = layers.get(kind)
        if layer is None:
            continue
        for tp_index, tp in enumerate(times.tp):
            for b_index, b in enumerate(times.micro_batch):
                lt = layer_time(layer, gpu, Sharding(dtype, b, measured.seq_len, attention, StageDims(tp), "none"),
                                gpu.intra_node, params)
                predicted = lt.fwd_s + lt.bwd_s
                actual = times.fwd_s[tp_index][b_index] + times.bwd_s[tp_index][b_index]
                total += math.log(predicted / actual) ** 2
                points += 1
    if not points:
        raise BadInput("the profile measures no layer of this model", measured.source, "layers")
    return math.sqrt(total / points), points


def fit(model: Model, gpu: GpuSpec, measured: MeasuredTimes, dtype: str, attention: str = "standard",
        base: CostParams = DEFAULT_PARAMS) -> Calibration:
    """Coarse grid, then a finer grid around the best point."""
    if not gpu.supports(dtype):
        raise BadInput(f"{gpu.name} has no {dtype} support", measured.source, "dtype")
    before, points = _error(model, gpu, measured, dtype, attention, base)
    best = (before, base)
    grids = [GRID] * len(FITTED)
    for _round in range(2):
        for values in product(*grids):
            params = base.with_updates(**dict(zip(FITTED, values)))
            error, _ = _error(model, gpu, measured, dtype, attention, params)
            if error < best[0] - 1e-12:
                best = (error, params)
        centre = [getattr(best[1], name) for name in FITTED]
        grids = [tuple(sorted({min(1.0, max(0.01, round(c * f, 4))) for f in (0.8, 0.9, 1.0, 1.1, 1.25)}))
                 for c in centre]
    return Calibration(gpu.name, best[1], before, best[0], points)


def params_from_calibration(data: Mapping[str, Any], where: str) -> tuple[str, dict]:
    """(GPU name, parameter overrides) from a calibration file."""
    if data.get("format") != CALIBRATION_FORMAT:
        raise BadInput(f"not a calibration file (format must be {CALIBRATION_FORMAT})", where, "format")
    check_keys(data, CALIBRATION_KEYS, where)
    gpu = data.get("gpu")
    if not isinstance(gpu, str) or not gpu:
        raise BadInput("missing GPU name", where, "gpu")
    params = data.get("params")
    if not isinstance(params, dict):
        raise BadInput("must be a mapping", where, "params")
    check_keys(params, FITTED, where, "params")
    out = {}
    for name in FITTED:
        out[name] = float(ranges.get(params, name, "efficiency", where, f"params.{name}"))
    return gpu, out


def calibrate_file(profile_file: str, gpu_name: str, model_name: str | None = None,
                   attention: str = "standard") -> tuple[dict, Calibration]:
    """`planner calibrate`: fit `gpu_name` (a catalog name, any case) to the layer profile in
    `profile_file` of `model_name` (default: the profile's own `model`); the calibration file's
    content and the fit."""
    from ..inputs.hardware import load_catalog
    from ..core.io import parse_structured, read_text
    from ..inputs.measured import measured_from_profile
    from ..inputs.model import load_model

    data = parse_structured(read_text(profile_file, "profile file"), profile_file)
    catalog = {name.lower(): gpu for name, gpu in load_catalog().items()}
    gpu = catalog.get(gpu_name.lower())
    if gpu is None:
        raise BadInput(f"unknown GPU {gpu_name!r} (see `planner gpus`)", "--gpu")
    measured = measured_from_profile(data, gpu.name, profile_file)
    model = load_model(model_name or measured.model)
    dtype = measured.dtype if measured.dtype in ("fp32", "fp16", "bf16") else "bf16"
    result = fit(model, gpu, measured, dtype, attention)
    return result.to_json(profile_file), result
