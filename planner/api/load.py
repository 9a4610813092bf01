"""The inputs every workflow shares, loaded and checked: flag ranges, the training dtype, the
sequence length against learned positions, and per-GPU cost parameters from measured layer
profiles (`--profile GPU=FILE`) and fitted calibrations (`--calibration FILE`).

Everything here raises BadInput on bad input and never prints: a warning goes to the `warn`
callback the caller passes (the CLI prints it on stderr).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from ..core import ranges
from ..core.errors import BadInput
from ..core.runtime_default import DEFAULT_RUNTIME
from ..inputs.devices import QUANTIZED_FORMATS
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Training, fp8_recipe_problem
from .flags import flag_figures
from .requests import EvaluateRequest, PlanRequest

Warn = Callable[[str], None]

# The documented range (planner.core.ranges) of each numeric flag, as its request field declares it.
FLAG_FIGURES = flag_figures(PlanRequest, EvaluateRequest)


def require(value: Any, flag: str) -> Any:
    """A given flag's value, checked against its documented range; None is BadInput (required)."""
    if value is None:
        raise BadInput("is required", flag)
    return ranges.check(value, FLAG_FIGURES[flag], flag) if flag in FLAG_FIGURES else value


def input_files(*names: str | Iterable[str] | None) -> list[str]:
    """A command's input names (files or catalog names) that an output must not overwrite;
    `--profile GPU=FILE` specs count as FILE."""
    from ..core.outfile import input_paths

    return [n.partition("=")[2] if "=" in n and not os.path.exists(n) else n for n in input_paths(*names)]


def resolve_dtype(cluster: Cluster, dtype: str | None, runtime: str | None = None) -> str:
    """bf16 where every GPU supports it, else fp16 (fp32 for a runtime without fp16: torchtitan,
    capability.dtypes); an explicit dtype some GPU or the runtime lacks is bad input. fp8, mxfp8 and
    nvfp4 need tensor cores for the format on every GPU and a `runtime` whose linears run it
    (planner.cost.fp8)."""
    from ..cost.runtimes.capability import capability

    dtypes = capability(runtime).dtypes if runtime is not None else ("fp32", "fp16", "bf16", *QUANTIZED_FORMATS)
    if dtype is None:
        common = cluster.common_dtype()
        return common if common in dtypes else "fp32"
    if dtype not in dtypes and dtype != "fp8":  # fp8: check_fp8 names the runtime's fp8 path
        raise BadInput(f"the {runtime} runtime has no {dtype} training (it has {', '.join(dtypes)})", "--dtype")
    if dtype in QUANTIZED_FORMATS:
        from ..cost.fp8 import check_fp8
        from ..cost.runtimes import get_runtime

        name = runtime or DEFAULT_RUNTIME
        check_fp8(cluster.gpu_types, name, get_runtime(name).fp8_recipe, dtype=dtype)
        return dtype
    missing = [g.name for g in cluster.gpu_types if not g.supports(dtype)]
    if missing:
        raise BadInput(f"{', '.join(missing)} has no {dtype} support", "--dtype")
    return dtype


def check_training_inputs(model: Model, training: Training) -> None:
    problem = fp8_recipe_problem(training.fp8_recipe, training.dtype)
    if problem:
        raise BadInput(problem, "--fp8-recipe")
    if training.compile:
        from ..cost.runtimes import compile_problem

        problem = compile_problem(training.runtime)
        if problem:
            raise BadInput(problem, "--compile")
    if training.moe_dispatcher != "alltoall":
        from ..cost.runtimes import RUNTIMES

        cap, wanted = RUNTIMES[training.runtime].capability, training.moe_dispatcher
        if wanted not in cap.moe_dispatchers:
            running = " or ".join(name for name, spec in RUNTIMES.items() if wanted in spec.capability.moe_dispatchers)
            raise BadInput(f"{cap.describe()} has no {wanted} MoE token dispatcher (it has "
                           f"{', '.join(cap.moe_dispatchers)}); --moe-dispatcher {wanted} needs --runtime {running}",
                           "--moe-dispatcher")
    if training.bf16_layers != (0, 0):
        from ..cost.runtimes.capability import bf16_layers_problem

        problem = bf16_layers_problem(training)
        if problem:
            raise BadInput(problem, "--bf16-layers")
    if training.fp8_all_gather:
        from ..cost.runtimes import fp8_all_gather_problem

        problem = fp8_all_gather_problem(training)
        if problem:
            raise BadInput(problem, "--fp8-all-gather")
    c = model.config
    if c is not None and c.learned_positions and training.seq_len > c.max_positions:
        raise BadInput(f"sequence length {training.seq_len} exceeds the model's {c.max_positions} "
                       "learned positions", "--seq-len")


def load_profiles(specs: Iterable[str], cluster: Cluster, model: Model, training: Training,
                  warn: Warn | None = None, base: dict | None = None) -> dict:
    """`--profile GPU=FILE` (repeatable) -> {GPU name: CostParams pricing it from measurements}."""
    from ..cost.formulas import DEFAULT_PARAMS
    from ..core.io import parse_structured, read_text
    from ..inputs.measured import measured_from_profile

    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"expected GPU=FILE, got {spec!r}", "--profile")
        gpu = next((g for g in cluster.gpu_types if g.name.lower() == name.lower()), None)
        if gpu is None:
            raise BadInput(f"{name} is not a GPU type of cluster {cluster.name} "
                           f"({', '.join(g.name for g in cluster.gpu_types)})", "--profile")
        data = parse_structured(read_text(path, "profile file"), path)
        measured = measured_from_profile(data, gpu.name, path)
        if measured.seq_len != training.seq_len:
            raise BadInput(f"measured at sequence length {measured.seq_len}, the plan uses {training.seq_len}",
                           path, "seq_len")
        decoder = next((l for l in data["layers"] if isinstance(l, dict) and l.get("kind") == "decoder"), {})
        blocks = [l for l in model.layers if l.kind == "decoder"]
        if blocks and decoder.get("params") != blocks[0].params:
            raise BadInput(f"profiles a decoder block of {decoder.get('params')} parameters, but "
                           f"{model.name}'s has {blocks[0].params}", path, "layers")
        if measured.dtype != training.dtype and warn is not None:
            warn(f"{path} was measured in {measured.dtype}, the plan trains in {training.dtype}; "
                 "its times are used as measured")
        out[gpu.name] = (base or {}).get(gpu.name, DEFAULT_PARAMS).with_updates(measured=measured)
    return out


def load_calibrations(files: Iterable[str], cluster: Cluster, base: dict) -> dict:
    """`--calibration FILE` (repeatable): per GPU type, the fitted efficiencies over `base`."""
    from ..calibrate.fit import params_from_calibration
    from ..cost.formulas import DEFAULT_PARAMS
    from ..core.io import load_mapping

    out = dict(base)
    for path in files:
        name, overrides = params_from_calibration(load_mapping(path, "calibration file"), path)
        gpu = next((g for g in cluster.gpu_types if g.name.lower() == name.lower()), None)
        if gpu is None:
            raise BadInput(f"calibrates {name}, which is not a GPU type of cluster {cluster.name}", path, "gpu")
        out[gpu.name] = out.get(gpu.name, DEFAULT_PARAMS).with_updates(**overrides)
    return out


def per_gpu_params(profiles: Iterable[str], calibrations: Iterable[str], cluster: Cluster, model: Model,
                   training: Training, warn: Warn | None = None, runtime: str = DEFAULT_RUNTIME) -> dict:
    """Cost parameters per GPU type: its architecture's under `runtime` (planner.cost.runtimes), with
    `--profile` measurements and `--calibration` efficiencies over them."""
    from ..cost.runtimes import training_params

    base = training_params(cluster.gpu_types, training, runtime)
    return load_calibrations(calibrations, cluster, {**base, **load_profiles(profiles, cluster, model, training, warn,
                                                                              base)})


__all__ = ["FLAG_FIGURES", "Warn", "check_training_inputs", "input_files", "load_calibrations", "load_profiles",
           "per_gpu_params", "require", "resolve_dtype"]
