"""The registry of runtimes (software stacks), one module each; `--runtime NAME` picks one.

The default is `megatron` (Megatron-LM with megatron-core). A runtime's cost parameters
are composed over the GPU architecture's (planner.cost.architectures): `stack_params`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..architectures import architecture_params
from ..formulas import DEFAULT_PARAMS, CostParams
from ..fp8 import runtime_recipe
from ...inputs.devices import GpuSpec
from ...core.errors import BadInput
from . import deepspeed, fsdp1, megatron, megatron_2021, torchtitan
from .base import Runtime
from .capability import ANY, Capability, capability, violations

RUNTIMES: dict[str, Runtime] = {m.RUNTIME.name: m.RUNTIME
                                for m in (megatron, megatron_2021, deepspeed, torchtitan, fsdp1)}
# `any`: the whole search space (capability.CAPABILITIES["any"]), priced with Megatron-LM's physics
RUNTIMES[ANY] = replace(megatron.RUNTIME, name=ANY, title="any runtime (priced as Megatron-LM)")
DEFAULT_RUNTIME = "megatron"


def get_runtime(name: str) -> Runtime:
    if name not in RUNTIMES:
        raise BadInput(f"unknown runtime {name!r}, expected one of {', '.join(RUNTIMES)}", "--runtime")
    return RUNTIMES[name]


def stack_params(gpu: GpuSpec, runtime: Runtime | str = DEFAULT_RUNTIME,
                 base: CostParams = DEFAULT_PARAMS, fp8_recipe: str = "") -> CostParams:
    """The cost parameters of `gpu` under `runtime`: the architecture's figures, then the software's;
    `fp8_recipe` (Training.fp8_recipe, "": the runtime's) one of the runtime's fp8 recipes."""
    if isinstance(runtime, str):
        runtime = get_runtime(runtime)
    params = runtime.params(base.with_updates(**architecture_params(gpu)))
    if fp8_recipe:
        params = params.with_updates(fp8_recipe=runtime_recipe(runtime.fp8_recipe, fp8_recipe, runtime.name))
    return params


def cluster_params(gpus: Iterable[GpuSpec], runtime: Runtime | str = DEFAULT_RUNTIME,
                   fp8_recipe: str = "") -> dict[str, CostParams]:
    """stack_params of each GPU type, by name: what planner.cost.evaluate takes."""
    return {gpu.name: stack_params(gpu, runtime, fp8_recipe=fp8_recipe) for gpu in gpus}


__all__ = ["ANY", "Capability", "DEFAULT_RUNTIME", "RUNTIMES", "Runtime", "capability", "violations", "cluster_params", "get_runtime", "stack_params"]
