"""The requests of planner.api's workflows: `planner plan`'s (PlanRequest) and `planner evaluate`'s
(EvaluateRequest), flag by flag, as frozen dataclasses; planner.api checks and runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.clock import DEFAULT_TIME_LIMIT_S
from ..inputs.hardware import Cluster
from ..inputs.model import Model

# What `planner plan` plans without options.
DEFAULT_PLAN = {"model": "llama-3-8b", "cluster": "a100-v100-mix", "global_batch": 512, "seq_len": 4096}


@dataclass(frozen=True)
class PlanRequest:
    """One search: the inputs of `planner plan` (formats.md section 5), flag by flag.

    `dtype` None: bf16 where every GPU has it, else fp16. Empty `micro_batches` or
    `virtual_stages`: the defaults (1 2 4 8 and 1 2). `time_limit_s` None: no limit.
    `profiles` are `GPU=FILE` specs, `calibrations` calibration files."""
    model: str | Model = DEFAULT_PLAN["model"]
    cluster: str | Cluster = DEFAULT_PLAN["cluster"]
    global_batch: int = DEFAULT_PLAN["global_batch"]
    seq_len: int = DEFAULT_PLAN["seq_len"]
    dtype: str | None = None
    attention: str = "flash"
    optimizer: str = "adamw"  # planner.plan.OPTIMIZER_NAMES: a training choice, kept, not searched
    fp8_recipe: str = ""  # under fp8, planner.plan.FP8_RECIPE_NAMES; "": the runtime's default (kept, not searched)
    compile: bool = False  # the model under torch.compile (Training.compile; runtimes torchtitan and any)
    tf32: bool | None = None  # under fp32, GEMMs on TF32 (Training.tf32_matmul); None: the runtime's default
    micro_batches: tuple[int, ...] = ()
    recompute_modes: tuple[str, ...] = ()  # () : the search's default (SolverOptions.recompute_modes)
    offload: bool = True  # the search may offload a stage's optimizer to the host where memory binds
    activation_offload: bool = True  # ... and a one-stage plan's activations (SolverOptions.activation_offload)
    virtual_stages: tuple[int, ...] = ()
    zero_bubble: bool = True  # ZB-H1 and uniform ZB-V where the runtime runs them (SolverOptions.zero_bubble)
    cp_degrees: tuple[int, ...] = ()  # context-parallel degrees to search; () the default (1 2 4 8, long sequences)
    ep_degrees: tuple[int, ...] = ()  # expert-parallel degrees to search (only these); empty: SolverOptions' default
    # the tensor-, pipeline- and data-parallel degrees allowed (every stage's, `plan --tp/--pp/--dp`);
    # empty: the search's own (tp 1 2 4 8, any pp up to max_pp, any dp)
    tp_degrees: tuple[int, ...] = ()
    pp_degrees: tuple[int, ...] = ()
    dp_degrees: tuple[int, ...] = ()
    max_pp: int | None = None  # the most pipeline stages; None: 16 (SolverOptions.max_stages) or the largest pp
    top: int = 1  # `plan --top K`: the K fastest plans of distinct configurations (planner.api.ranked)
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    max_bundle_nodes: int = 4
    solver: str = "highs"
    profiles: tuple[str, ...] = ()
    calibrations: tuple[str, ...] = ()
    runtime: str = "megatron"  # planner.cost.runtimes
    # search once more under `--runtime any` for solver.any_runtime_step_s (what a freer runtime
    # would gain); off by default: it can take longer than the plan's own search
    compare_any: bool = False
    # search processes (SolverOptions.jobs): 1 in this one, 2 two searches at a time; the plan is the same
    jobs: int = 1


@dataclass(frozen=True)
class EvaluateRequest:
    """One uniform configuration: the flags of `planner evaluate`. Required: model, cluster,
    global_batch, seq_len, tp, pp, dp, micro_batch. `schedule` None: interleaved when
    virtual_stages > 1, else 1f1b."""
    model: str | Model | None = None
    cluster: str | Cluster | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    dtype: str | None = None
    attention: str = "flash"
    optimizer: str = "adamw"  # planner.plan.OPTIMIZER_NAMES
    fp8_recipe: str = ""  # under fp8, planner.plan.FP8_RECIPE_NAMES; "": the runtime's default
    compile: bool = False  # the model under torch.compile (Training.compile; runtimes torchtitan and any)
    tf32: bool | None = None  # under fp32, GEMMs on TF32 (Training.tf32_matmul); None: the runtime's default
    recompute: str = "none"
    recompute_layers: int = 0  # recompute "block": decoder blocks recomputed per chunk (its first)
    offload: bool = False  # ZeRO-Offload: optimizer states and master weights in host memory
    offload_activations: int = 0  # activation offload: decoder blocks per chunk (its first) in host memory
    zero: int = 0
    sequence_parallel: bool = False
    ep: int = 1  # expert parallelism (StageDims.ep)
    etp: int | None = None  # expert tensor parallelism; None: as tp
    schedule: str | None = None
    virtual_stages: int = 1
    profiles: tuple[str, ...] = ()
    calibrations: tuple[str, ...] = ()
    runtime: str = "megatron"  # planner.cost.runtimes
    cp: int = 1  # context parallelism (StageDims.cp)
    cp_kind: str = "ring"
