"""The requests of planner.api's workflows: `planner plan`'s (PlanRequest) and `planner evaluate`'s
(EvaluateRequest) as frozen dataclasses, each field with its flag declared once (planner.api.flags:
name, help, type, range, default); the CLI's options are built from these, planner.api checks and
runs the requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.clock import DEFAULT_TIME_LIMIT_S
from ..core.runtime_default import DEFAULT_RUNTIME
from ..inputs.hardware import Cluster
from ..inputs.model import ATTENTION_KINDS, Model
from ..plan import FP8_RECIPE_NAMES, MOE_DISPATCHERS, OPTIMIZER_NAMES, SCHEDULES, STAGE_RECOMPUTE_MODES
from ..plan.tp_shares import SPLIT_SPACES
from .flags import Flag, declare

# What `planner plan` plans without options.
DEFAULT_PLAN = {"model": "llama-3-8b", "cluster": "a100-v100-mix", "global_batch": 512, "seq_len": 4096}
SOLVERS = ("highs", "cbc")
TRAINING_DTYPES = ("bf16", "fp16", "fp32", "fp8", "mxfp8", "nvfp4")

# --- the flags plan and evaluate share (group "training", then "measurement") -------------------

MODEL = Flag("--model", "Catalog name, HF config.json or layer-profile file.", str, "training", plan_file=True)
CLUSTER = Flag("--cluster", "Cluster file (YAML/JSON) or built-in example name.", str, "training", plan_file=True)
GLOBAL_BATCH = Flag("--global-batch", "Sequences per optimizer step.", int, "training", figure="global_batch",
                    plan_file=True)
SEQ_LEN = Flag("--seq-len", "Tokens per sequence.", int, "training", figure="seq_len", plan_file=True)
DTYPE = Flag("--dtype", "Training dtype [default: bf16 if every GPU has it, else fp16]; fp8: the decoder "
             "GEMMs in fp8 (Ada, Hopper, Blackwell, MI300X; runtimes megatron, torchtitan); mxfp8, nvfp4: in MXFP8 "
             "or NVFP4 block scaling (Blackwell; Transformer Engine: runtimes megatron, any).", TRAINING_DTYPES,
             "training", plan_file=True)
FP8_RECIPE = Flag("--fp8-recipe", "With --dtype fp8: the scaling recipe [default: the runtime's; megatron "
                  "te-delayed, torchtitan torchao-tensorwise]; te-current: Transformer Engine's per-tensor current "
                  "scaling (megatron); torchao-rowwise: torchao's per-row scales (torchtitan).", FP8_RECIPE_NAMES,
                  "training", plan_file=True)
COMPILE = Flag("--compile", "Run the model under torch.compile (torchtitan's [compile] enable): priced with "
               "TorchInductor's fused elementwise kernels, recorded as training.compile. Runtimes torchtitan and "
               "any only (any is priced as megatron, whose fused kernels already price the same: no change in "
               "time); megatron, megatron-2021, deepspeed and fsdp1 exit 2.", None, "training", plan_file=True)
TF32 = Flag("--tf32/--no-tf32", "With --dtype fp32: run the fp32 GEMMs on TF32 tensor cores where the GPU has "
            "them (Ampere and later), priced at the TF32 peak, MFU relative to it; recorded as "
            "training.tf32_matmul [default: the runtime's: on for megatron, megatron-2021, deepspeed and any (NGC "
            "containers allow TF32), off for torchtitan and fsdp1 (PyTorch's allow_tf32 default)].", None,
            "training", plan_file=True)
MOE_DISPATCHER = Flag("--moe-dispatcher", "MoE models only: how expert parallelism moves the tokens, recorded as "
                      "training.moe_dispatcher (a training choice, not searched) [default: alltoall]. alltoall: "
                      "one copy per routed expert over every link (Megatron-core's alltoall dispatcher); flex: "
                      "a token crosses to another node once per node holding any of its experts, then fans out "
                      "over NVLink (Megatron-core's flex dispatcher over DeepEP/HybridEP; runtimes megatron and "
                      "any).", MOE_DISPATCHERS, "training", plan_file=True)
FP8_ALL_GATHER = Flag("--fp8-all-gather/--no-fp8-all-gather", "With --dtype fp8 under torchao tensorwise "
                      "scaling (runtime torchtitan): FSDP all-gathers the decoder GEMM weights in fp8, "
                      "1 byte each (torchtitan's enable_fsdp_float8_all_gather), recorded as "
                      "training.fp8_all_gather [default: off].", None, "training", plan_file=True)
BF16_LAYERS = Flag("--bf16-layers", "With a quantized --dtype (fp8, mxfp8, nvfp4): keep the first START and the "
                   "last END decoder layers in bf16, priced as bf16 layers (megatron-core's --first-last-layers-bf16 "
                   "with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16; NVIDIA's Nemotron 3 Super NVFP4 "
                   "recipe keeps 1,14), recorded as training.bf16_layers [default: 0,0]. Runtimes megatron and any; "
                   "not with fp8 delayed scaling.", str, "training", metavar="START,END", plan_file=True)
ATTENTION = Flag("--attention", "flash keeps no s^2 scores; standard keeps them (2021-22 kernels).",
                 ATTENTION_KINDS, "training", show_default=True)
OPTIMIZER = Flag("--optimizer", "Its states set the memory per parameter and its step time (a training choice, "
                 "not searched): adamw 12 B, adamw-8bit 6 B, adafactor 4 B, adamw-bf16 6 B, sgd (momentum) 8 B, "
                 "muon 8 B on the decoders' matrices (AdamW's 12 B on the rest) plus its Newton-Schulz matmuls.",
                 OPTIMIZER_NAMES, "training", show_default=True)
PROFILES = Flag("--profile", "Price this GPU type from a measured layer profile (planner profile); repeatable.",
                str, "measurement", metavar="GPU=FILE", repeatable=True)
CALIBRATIONS = Flag("--calibration", "Fitted efficiencies for a GPU type (planner calibrate); repeatable.", str,
                    "measurement", metavar="FILE", repeatable=True)
TOKENS = Flag("--tokens", "Also report a run of N tokens: its steps, wall time, dollars and MWh (predicted.run).",
              int, "objective", figure="tokens", metavar="N")
RUNTIME = Flag("--runtime", "Software stack the cost model prices and `plan` plans for (only what it can run: "
               "planner.cost.runtimes.capability): megatron (Megatron-LM, megatron-core), megatron-2021, "
               "deepspeed (pipeline engine), torchtitan (FSDP2), fsdp1 (llm-foundry), or any (per-stage TP and DP, "
               "uneven shares; priced as megatron). Default megatron; a plan file is re-priced under its own.",
               str, "measurement", metavar="NAME")


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """One search: the inputs of `planner plan` (formats.md section 5), flag by flag.

    `dtype` None: bf16 where every GPU has it, else fp16. Empty `micro_batches` or
    `virtual_stages`: the defaults (1 2 4 8 and 1 2). `time_limit_s` None: no limit.
    `profiles` are `GPU=FILE` specs, `calibrations` calibration files."""
    model: str | Model = field(default=DEFAULT_PLAN["model"], metadata=declare(MODEL))
    cluster: str | Cluster = field(default=DEFAULT_PLAN["cluster"], metadata=declare(CLUSTER))
    global_batch: int = field(default=DEFAULT_PLAN["global_batch"], metadata=declare(GLOBAL_BATCH))
    seq_len: int = field(default=DEFAULT_PLAN["seq_len"], metadata=declare(SEQ_LEN))
    dtype: str | None = field(default=None, metadata=declare(DTYPE))
    # under fp8, planner.plan.FP8_RECIPE_NAMES; "": the runtime's default (kept, not searched)
    fp8_recipe: str = field(default="", metadata=declare(FP8_RECIPE))
    # the model under torch.compile (Training.compile; runtimes torchtitan and any)
    compile: bool = field(default=False, metadata=declare(COMPILE))
    # under fp32, GEMMs on TF32 (Training.tf32_matmul); None: the runtime's default
    tf32: bool | None = field(default=None, metadata=declare(TF32))
    # an MoE model's token dispatcher (Training.moe_dispatcher), kept, not searched; None: not given (alltoall)
    moe_dispatcher: str | None = field(default=None, metadata=declare(MOE_DISPATCHER))
    # under fp8, FSDP all-gathers the fp8 weights in fp8 (Training.fp8_all_gather)
    fp8_all_gather: bool = field(default=False, metadata=declare(FP8_ALL_GATHER))
    # under a quantized dtype, the first and last decoders kept in bf16 (Training.bf16_layers): "START,END" or
    # (START, END); None: none
    bf16_layers: str | tuple[int, int] | None = field(default=None, metadata=declare(BF16_LAYERS))
    attention: str = field(default="flash", metadata=declare(ATTENTION))
    # planner.plan.OPTIMIZER_NAMES: a training choice, kept, not searched
    optimizer: str = field(default="adamw", metadata=declare(OPTIMIZER))
    micro_batches: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--micro-batch", "Micro-batch sizes to search (repeatable) [default: 1 2 4 8].", int, "search",
        repeatable=True, figure="micro_batch")))
    virtual_stages: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--virtual-stages", "Pipeline chunks per rank to search (repeatable): 1 is 1F1B, V > 1 the interleaved "
        "schedule with V chunks per rank [default: 1 2].", int, "search", repeatable=True, figure="virtual_stages")))
    # ZB-H1 and uniform ZB-V where the runtime runs them (SolverOptions.zero_bubble)
    zero_bubble: bool = field(default=True, metadata=declare(Flag(
        "--zero-bubble/--no-zero-bubble", "Search ZB-H1 (split backward, 1F1B's memory plus the deferred "
        "weight-gradient inputs) where the runtime runs it (--runtime any), and price uniform ZB-V plans (V = 2) "
        "where it runs that (torchtitan, any). Uniform looped-BFS plans are priced either way.", None, "search",
        show_default=True)))
    # per-replica TP under --runtime any (SolverOptions.per_replica_tp)
    per_replica_tp: bool = field(default=True, metadata=declare(Flag(
        "--per-replica-tp/--no-per-replica-tp", "Under --runtime any, let a stage over several node groups give "
        "each group's replicas a TP degree of its own (a replica's `tp` in the plan; docs/solver.md).", None,
        "search", show_default=True)))
    # TP groups across the GPU types of mixed nodes under --runtime any (SolverOptions.tp_across_types)
    tp_across_types: bool = field(default=True, metadata=declare(Flag(
        "--tp-across-types/--no-tp-across-types", "Under --runtime any, let a stage on mixed nodes form TP "
        "groups across their GPU types, the faster GPUs taking more heads and FFN columns (a stage's "
        "`tp_shares`; docs/solver.md).", None, "search", show_default=True)))
    # the splits of those TP groups (SolverOptions.tp_splits)
    tp_splits: str = field(default="ratio", metadata=declare(Flag(
        "--tp-splits", "Under --runtime any, the uneven splits of TP groups across GPU types: `ratio`, one "
        "ratio per GPU for heads and FFN columns alike (HAP's); `apart`, heads and columns each (wider, "
        "slower to search; docs/solver.md).", SPLIT_SPACES, "search", show_default=True)))
    # context-parallel degrees to search; () the default (1 2 4 8, long sequences)
    cp_degrees: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--cp", "Context-parallel degrees to search (repeatable; 1 is always searched) [default: 1 2 4 8 for "
        "sequences of 16,384 tokens or more; --cp 1: no context parallelism].", int, "search", repeatable=True)))
    # expert-parallel degrees to search (only these); empty: SolverOptions' default
    ep_degrees: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--ep", "Expert-parallel degrees an MoE model's stages may take, only these, across nodes too "
        "(repeatable; --ep 1: none) [default: 1 and the largest inside a node].", int, "search", repeatable=True)))
    # the tensor-, pipeline- and data-parallel degrees allowed (every stage's, `plan --tp/--pp/--dp`);
    # empty: the search's own (tp 1 2 4 8, any pp up to max_pp, any dp)
    tp_degrees: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--tp", "Tensor-parallel degrees every stage may take (repeatable) [default: 1 2 4 8].", int, "search",
        repeatable=True, figure="degree")))
    pp_degrees: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--pp", "Pipeline depths the plan may have (repeatable) [default: any up to --max-pp].", int, "search",
        repeatable=True, figure="degree")))
    dp_degrees: tuple[int, ...] = field(default=(), metadata=declare(Flag(
        "--dp", "Data-parallel degrees every stage may take (repeatable) [default: any].", int, "search",
        repeatable=True, figure="degree")))
    # the most pipeline stages; None: 64 (SolverOptions.max_stages) or the largest pp
    max_pp: int | None = field(default=None, metadata=declare(Flag(
        "--max-pp", "The most pipeline stages [default: 64, or the largest --pp].", int, "search")))
    # `plan --top K`: the K fastest plans of distinct configurations (planner.api.ranked)
    top: int = field(default=1, metadata=declare(Flag(
        "--top", "List the K fastest plans of distinct configurations (tp, pp, dp, cp, ep, micro-batch, "
        "virtual stages) and why each loses to the first; --json prints a list, -o writes the first.", int,
        "search", low=1, show_default=True, metavar="K")))
    time_limit_s: float | None = field(default=DEFAULT_TIME_LIMIT_S, metadata=declare(Flag(
        "--time-limit", "Return within S seconds with the best plan found so far and its gap (exit 1 if none).",
        float, "search", show_default=True, figure="time_limit_s")))
    max_bundle_nodes: int = field(default=4, metadata=declare(Flag(
        "--max-bundle-nodes", "Clusters of more than 16 nodes (8 under --runtime any) are searched on this many "
        "parts of nodes first (identical bundles where they divide), then, where its tables fit, whole, node by "
        "node, in the time left: proven optimal where that search ends.", int, "search", low=1, high=64,
        show_default=True)))
    solver: str = field(default="highs", metadata=declare(Flag(
        "--solver", "MILP solver for the batch shares.", SOLVERS, "search", show_default=True)))
    # search processes (SolverOptions.jobs): 1 in this one, 2 two searches at a time; the plan is the same
    jobs: int = field(default=1, metadata=declare(Flag(
        "--jobs", "Search processes: 2 runs two searches at a time, 1 runs them in turn. The plan is the same "
        "either way; solver.candidates counts the work done, which two processes partly repeat.", int, "search",
        low=1, high=2, default=2, show_default=True, metavar="N", alias="-j")))
    # search once more under `--runtime any` for solver.any_runtime_step_s (what a freer runtime
    # would gain); off by default: it can take longer than the plan's own search
    compare_any: bool = field(default=False, metadata=declare(Flag(
        "--compare-any", "Search once more under --runtime any, bounded by the plan found, and report what a "
        "runtime with uneven shares and per-stage TP would gain (solver.any_runtime_step_s); it can take longer "
        "than the plan's own search.", None, "search")))
    # what the plan minimises, over which whole nodes to rent (planner.api.objective)
    objective: str = field(default="time", metadata=declare(Flag(
        "--objective", "What the plan minimises: time (the step, on every node), cost (dollars per step), "
        "energy (joules per step), or goodput, which it maximises (tokens per second kept after interruptions, "
        "checkpoints and restarts); cost, energy and goodput choose which whole nodes to rent, the rest left idle.",
        ("time", "cost", "energy", "goodput"), "objective", show_default=True)))
    max_gpus: int | None = field(default=None, metadata=declare(Flag(
        "--max-gpus", "Rent at most N GPUs (whole nodes).", int, "objective", figure="degree", metavar="N")))
    max_cost_per_hour: float | None = field(default=None, metadata=declare(Flag(
        "--max-cost-per-hour", "Rent nodes of at most X dollars per hour.", float, "objective",
        figure="cost_per_hour", metavar="X")))
    max_step_time_s: float | None = field(default=None, metadata=declare(Flag(
        "--max-step-time", "Only plans whose step takes at most S seconds.", float, "objective",
        figure="step_time_s", metavar="S")))
    tokens: int | None = field(default=None, metadata=declare(TOKENS))
    # plans kept ready for lost nodes (planner.api.replan.make_templates), written beside -o's plan
    spares: int = field(default=0, metadata=declare(Flag(
        "--spares", "Also plan for losing 1..K of the last nodes of each group (templates), every search in the "
        "time limit together, written beside the plan file (-o PLAN: PLAN's name with .templates.json); "
        "`planner replan` uses them.", int, "objective", low=0, high=64, show_default=True, metavar="K")))
    # power caps per pipeline stage (planner.search.power_caps), chosen after the plan
    power_caps: bool = field(default=False, metadata=declare(Flag(
        "--power-caps", "Cap the power of the stages off the critical path (nvidia-smi -pl, in the launch files): "
        "each stage's lowest cap that keeps the step within --max-cap-slowdown and saves energy.", None,
        "objective")))
    max_cap_slowdown: float = field(default=0.005, metadata=declare(Flag(
        "--max-cap-slowdown", "With --power-caps: how much longer the step may grow, as a fraction (a stage's "
        "fill latency lies on the step's path, so any cap costs some time).", float, "objective",
        show_default=True, figure="slowdown", metavar="F")))
    profiles: tuple[str, ...] = field(default=(), metadata=declare(PROFILES))
    calibrations: tuple[str, ...] = field(default=(), metadata=declare(CALIBRATIONS))
    runtime: str = field(default=DEFAULT_RUNTIME, metadata=declare(RUNTIME))  # planner.cost.runtimes
    # what the search may use beyond the flags (no flag; planner.api.lossy sets them)
    recompute_modes: tuple[str, ...] = ()  # () : the search's default (SolverOptions.recompute_modes)
    offload: bool = True  # the search may offload a stage's optimizer to the host where memory binds
    activation_offload: bool = True  # ... and a one-stage plan's activations (SolverOptions.activation_offload)


@dataclass(frozen=True, kw_only=True)
class EvaluateRequest:
    """One uniform configuration: the flags of `planner evaluate`. Required: model, cluster,
    global_batch, seq_len, tp, pp, dp, micro_batch. `schedule` None: interleaved when
    virtual_stages > 1, else 1f1b."""
    model: str | Model | None = field(default=None, metadata=declare(MODEL))
    cluster: str | Cluster | None = field(default=None, metadata=declare(CLUSTER))
    global_batch: int | None = field(default=None, metadata=declare(GLOBAL_BATCH))
    seq_len: int | None = field(default=None, metadata=declare(SEQ_LEN))
    dtype: str | None = field(default=None, metadata=declare(DTYPE))
    # under fp8, planner.plan.FP8_RECIPE_NAMES; "": the runtime's default
    fp8_recipe: str = field(default="", metadata=declare(FP8_RECIPE))
    # the model under torch.compile (Training.compile; runtimes torchtitan and any)
    compile: bool = field(default=False, metadata=declare(COMPILE))
    # under fp32, GEMMs on TF32 (Training.tf32_matmul); None: the runtime's default
    tf32: bool | None = field(default=None, metadata=declare(TF32))
    # an MoE model's token dispatcher (Training.moe_dispatcher); None: not given (alltoall)
    moe_dispatcher: str | None = field(default=None, metadata=declare(MOE_DISPATCHER))
    # under fp8, FSDP all-gathers the fp8 weights in fp8 (Training.fp8_all_gather)
    fp8_all_gather: bool = field(default=False, metadata=declare(FP8_ALL_GATHER))
    # under a quantized dtype, the first and last decoders kept in bf16 (Training.bf16_layers): "START,END" or
    # (START, END); None: none
    bf16_layers: str | tuple[int, int] | None = field(default=None, metadata=declare(BF16_LAYERS))
    attention: str = field(default="flash", metadata=declare(ATTENTION))
    optimizer: str = field(default="adamw", metadata=declare(OPTIMIZER))  # planner.plan.OPTIMIZER_NAMES
    tp: int | None = field(default=None, metadata=declare(Flag(
        "--tp", "Tensor-parallel degree.", int, "configuration", figure="degree", plan_file=True)))
    pp: int | None = field(default=None, metadata=declare(Flag(
        "--pp", "Pipeline-parallel degree.", int, "configuration", figure="degree", plan_file=True)))
    dp: int | None = field(default=None, metadata=declare(Flag(
        "--dp", "Data-parallel degree.", int, "configuration", figure="degree", plan_file=True)))
    micro_batch: int | None = field(default=None, metadata=declare(Flag(
        "--micro-batch", "Sequences per micro-batch.", int, "configuration", figure="micro_batch", plan_file=True)))
    recompute: str = field(default="none", metadata=declare(Flag(
        "--recompute", "block: recompute only the first --recompute-layers decoder blocks of each chunk.",
        STAGE_RECOMPUTE_MODES, "configuration", show_default=True)))
    # recompute "block": decoder blocks recomputed per chunk (its first)
    recompute_layers: int = field(default=0, metadata=declare(Flag(
        "--recompute-layers", "With --recompute block: decoder blocks per chunk that recompute (Megatron "
        "--recompute-num-layers).", int, "configuration", low=0, show_default=True)))
    # ZeRO-Offload: optimizer states and master weights in host memory
    offload: bool = field(default=False, metadata=declare(Flag(
        "--offload", "ZeRO-Offload: optimizer states and fp32 master weights in host memory, the step on the CPU.",
        None, "configuration")))
    # activation offload: decoder blocks per chunk (its first) in host memory
    offload_activations: int = field(default=0, metadata=declare(Flag(
        "--offload-activations", "Activation offload: decoder blocks per chunk (its first) whose saved activations "
        "go to host memory over PCIe (Megatron --cpu-offloading-num-layers).", int, "configuration", low=0,
        show_default=True, plan_file=True)))
    zero: int = field(default=0, metadata=declare(Flag(
        "--zero", "ZeRO stage.", int, "configuration", low=0, high=3, show_default=True)))
    sequence_parallel: bool = field(default=False, metadata=declare(Flag(
        "--sequence-parallel", "Megatron sequence parallelism.", None, "configuration")))
    cp: int = field(default=1, metadata=declare(Flag(  # context parallelism (StageDims.cp)
        "--cp", "Context-parallel degree: GPUs sharing each sequence (each replica is tp x cp GPUs).", int,
        "configuration", show_default=True, plan_file=True)))
    cp_kind: str = field(default="ring", metadata=declare(Flag(
        "--cp-kind", "ring: Ring Attention (Megatron CP, torchtitan CP); all-to-all: DeepSpeed-Ulysses.",
        ("ring", "all-to-all"), "configuration", show_default=True)))
    ep: int = field(default=1, metadata=declare(Flag(  # expert parallelism (StageDims.ep)
        "--ep", "Expert-parallel degree (MoE): carved from the TP x CP x DP ranks; divides the experts.", int,
        "configuration", show_default=True, plan_file=True)))
    etp: int | None = field(default=None, metadata=declare(Flag(  # expert tensor parallelism; None: as tp
        "--etp", "Expert tensor-parallel degree [default: --tp].", int, "configuration", plan_file=True)))
    schedule: str | None = field(default=None, metadata=declare(Flag(
        "--schedule", "Pipeline schedule [default: interleaved if --virtual-stages > 1, else 1f1b].",
        tuple(SCHEDULES), "configuration")))
    virtual_stages: int = field(default=1, metadata=declare(Flag(
        "--virtual-stages", "Interleaved chunks per rank.", int, "configuration", show_default=True,
        figure="virtual_stages")))
    tokens: int | None = field(default=None, metadata=declare(TOKENS))
    profiles: tuple[str, ...] = field(default=(), metadata=declare(PROFILES))
    calibrations: tuple[str, ...] = field(default=(), metadata=declare(CALIBRATIONS))
    runtime: str = field(default=DEFAULT_RUNTIME, metadata=declare(RUNTIME))  # planner.cost.runtimes
