"""The registry of runtimes (software stacks), one module each; `--runtime NAME` picks one.

Each module declares one RuntimeSpec (registry.py): its pricing, capability, schedules, compile
support and export; adding a runtime is one module here, one line below, and its exporter
(planner.export.targets). The default is DEFAULT_RUNTIME (Megatron-LM with megatron-core). A
runtime's cost parameters are composed over the GPU architecture's
(planner.cost.architectures): `stack_params`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..architectures import architecture_params
from ..attention_kernels import FLASH2
from ..formulas import DEFAULT_PARAMS, CostParams
from ..fp8 import runtime_recipe
from ..p2p import P2P_MODES, P2PMode
from ...inputs.devices import GpuSpec
from ...core.runtime_default import DEFAULT_RUNTIME
from . import any_runtime, deepspeed, fsdp1, megatron, megatron_2021, torchtitan
from .base import Runtime
from .capability import capability, fp8_all_gather_problem, violations
from .registry import RUNTIMES, register_runtime, runtime_spec
from .spec import ANY, Capability, RuntimeSpec

if TYPE_CHECKING:  # the Training type only (planner.plan sits below cost)
    from ...plan import Training

for _module in (megatron, megatron_2021, deepspeed, torchtitan, fsdp1, any_runtime):
    register_runtime(_module.SPEC)


def get_runtime(name: str) -> Runtime:
    """What the cost model prices of runtime `name` (RuntimeSpec.pricing)."""
    return runtime_spec(name).pricing


def stack_params(gpu: GpuSpec, runtime: Runtime | str = DEFAULT_RUNTIME,
                 base: CostParams = DEFAULT_PARAMS, fp8_recipe: str = "", torch_compile: bool = False,
                 tf32_matmul: bool | None = None, moe_dispatcher: str = "",
                 fp8_all_gather: bool = False) -> CostParams:
    """The cost parameters of `gpu` under `runtime`: the architecture's figures, then the software's;
    `fp8_recipe` (Training.fp8_recipe, "": the runtime's) one of the runtime's fp8 recipes;
    `torch_compile` (Training.compile) the model under torch.compile (CostParams.torch_compile);
    `tf32_matmul` (Training.tf32_matmul) fp32 GEMMs on TF32, None: the runtime's (Runtime.tf32_matmul);
    `moe_dispatcher` (Training.moe_dispatcher) the MoE token dispatcher, "": CostParams' default;
    `fp8_all_gather` (Training.fp8_all_gather) FSDP all-gathers the fp8 weights in fp8."""
    if isinstance(runtime, str):
        runtime = get_runtime(runtime)
    params = runtime.params(base.with_updates(**architecture_params(gpu)), gpu.architecture)
    if fp8_recipe:
        params = params.with_updates(fp8_recipe=runtime_recipe(runtime.fp8_recipe, fp8_recipe, runtime.name))
    if torch_compile:
        params = params.with_updates(torch_compile=True)
    if tf32_matmul is not None:
        params = params.with_updates(tf32_matmul=tf32_matmul)
    if moe_dispatcher:
        params = params.with_updates(moe_dispatcher=moe_dispatcher)
    if fp8_all_gather:
        params = params.with_updates(fp8_all_gather=True)
    return params


def flash_kernel(gpu: GpuSpec, runtime: Runtime | str = DEFAULT_RUNTIME) -> str:
    """The kernel `attention: flash` runs on `gpu` under `runtime` (planner.cost.attention_kernels name;
    CostParams.fused_attention of stack_params): the architecture's, unless the runtime's record says
    otherwise (Runtime.flash_attention)."""
    return stack_params(gpu, runtime).fused_attention


def attention_kernels(gpus: Iterable[GpuSpec], training: "Training") -> dict[str, str]:
    """What `attention: flash` runs on each GPU type where it is not FlashAttention-2, by GPU name
    (flash_kernel under the training's runtime); {} when the training asks for standard attention."""
    if training.attention != "flash":
        return {}
    kernels = {gpu.name: flash_kernel(gpu, training.runtime) for gpu in gpus}
    return {name: kernel for name, kernel in sorted(kernels.items()) if kernel != FLASH2}


def tf32_setting(runtime: str, dtype: str, tf32: bool | None = None) -> bool | None:
    """A training's Training.tf32_matmul: under fp32 `tf32` (--tf32/--no-tf32) or, None, the runtime's
    stated default (Runtime.tf32_matmul); None under the other dtypes, whose GEMMs have no TF32 path."""
    if dtype != "fp32":
        return None
    return get_runtime(runtime).tf32_matmul if tf32 is None else tf32


def cluster_params(gpus: Iterable[GpuSpec], runtime: Runtime | str = DEFAULT_RUNTIME,
                   fp8_recipe: str = "", torch_compile: bool = False,
                   tf32_matmul: bool | None = None, moe_dispatcher: str = "",
                   fp8_all_gather: bool = False) -> dict[str, CostParams]:
    """stack_params of each GPU type, by name: what planner.cost.evaluate takes."""
    return {gpu.name: stack_params(gpu, runtime, fp8_recipe=fp8_recipe, torch_compile=torch_compile,
                                   tf32_matmul=tf32_matmul, moe_dispatcher=moe_dispatcher,
                                   fp8_all_gather=fp8_all_gather) for gpu in gpus}


def training_params(gpus: Iterable[GpuSpec], training: "Training", runtime: str | None = None) -> dict[str, CostParams]:
    """cluster_params under a plan's training choices (its runtime unless `runtime` is given, its fp8
    recipe, torch.compile, its TF32 setting, its MoE dispatcher, its fp8 all-gather): how every command
    prices a plan."""
    return cluster_params(gpus, runtime or training.runtime, training.fp8_recipe, training.compile,
                          training.tf32_matmul, training.moe_dispatcher, training.fp8_all_gather)


def p2p_mode(runtime: str, schedule: str) -> P2PMode:
    """How `runtime`'s pipeline sends run under `schedule` (Runtime.pipeline_p2p, planner.cost.p2p)."""
    return P2P_MODES[get_runtime(runtime).p2p_mode(schedule)]


def compile_problem(runtime: str) -> str:
    """Why `runtime` cannot run the model under torch.compile ('' when it can: Capability.compile)."""
    spec = runtime_spec(runtime)
    if spec.capability.compile:
        return ""
    reason = spec.no_compile or f"the {runtime} runtime has no torch.compile setting"
    compiling = " or ".join(name for name, s in RUNTIMES.items() if s.capability.compile and name != ANY)
    return f"{reason}; --compile needs --runtime {compiling} (or {ANY})"


__all__ = ["ANY", "Capability", "DEFAULT_RUNTIME", "RUNTIMES", "Runtime", "RuntimeSpec", "attention_kernels", "capability",
           "cluster_params", "compile_problem", "flash_kernel", "fp8_all_gather_problem", "get_runtime", "p2p_mode", "register_runtime", "runtime_spec", "stack_params",
           "tf32_setting", "training_params", "violations"]
