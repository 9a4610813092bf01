"""`planner export --to torchtitan` and `--to torchtitan-cli`: torchtitan's job-config TOML
or the same settings as command-line overrides (planner.export)."""

from __future__ import annotations

import shlex
from typing import Any

import tomli_w

from ..core.errors import BadInput
from ..plan import Plan
from ..inputs.hf_extras import rope_and_norm
from ..inputs.titan_flavors import TITAN_LLAMA3_ROPE_SCALING, titan_family, titan_flavor, titan_model_problem
from ..schedules import get_schedule
from .base import Uniform, Warn, comment_line, layer_sac_frequency, route_comments, runtime_optimizer, uniform_form
from .launch import placeable, placement_comments


# planner.cost.fp8 recipe -> its [quantize.linear.float8] setting (torchtitan 0.2.2
# config/job_config.py Float8Linear.recipe_name: None = tensorwise, "rowwise", "rowwise_with_gw_hp")
TITAN_FP8_RECIPES: dict[str, dict[str, str]] = {"torchao-tensorwise": {}, "torchao-rowwise": {"recipe_name": "rowwise"}}
# planner.schedules name -> torch.distributed.pipelining.get_schedule_class's (torchtitan's
# parallelism.pipeline_parallel_schedule), for each schedule torchtitan runs (its Capability.schedules)
TITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zbv": "ZBVZeroBubble",
                   "looped-bfs": "LoopedBFS", "dualpipev": "DualPipeV"}


def titan_fqns(plan: Plan) -> list[list[str]]:
    layers = plan.model.layers
    first_decoder = next((l.index for l in layers if l.kind == "decoder"), 0)
    parts = []
    for s in plan.stages:
        names: list[str] = []
        for i in range(*s.layers):
            kind = layers[i].kind
            if kind == "embedding":
                names.append("tok_embeddings")
            elif kind == "head":
                names += ["norm", "output"]
            else:
                names.append(f"layers.{i - first_decoder}")
        parts.append(names)
    return parts


def titan_settings(plan: Plan, warn: Warn) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """torchtitan sections -> {key: value}, and comment lines."""
    c = plan.model.config
    problem = titan_model_problem(plan.model)  # the check `plan --runtime torchtitan` makes
    if problem:
        raise BadInput(problem, "--to torchtitan")
    name, flavor = titan_flavor(c, plan.model.name)  # by dimensions
    model = {"name": name, "flavor": flavor}
    # torchtitan components/optimizer.py builds torch.optim Adam or AdamW by [optimizer] name
    runtime_optimizer(plan, "torchtitan", {"adamw": "AdamW"})
    extra = rope_and_norm(plan.model.raw, c.model_type, plan.model.name)
    scaling = dict(extra.rope_scaling or {})
    same_scaling = scaling.get("rope_type", scaling.get("type")) == "llama3" and all(
        float(scaling.get(k, -1)) == v for k, v in TITAN_LLAMA3_ROPE_SCALING.items() if k != "rope_type")
    form = uniform_form(plan, "torchtitan", warn, placeable(plan))
    if form.offload:
        raise BadInput("torchtitan has no optimizer-only offload (FSDP2's CPUOffloadPolicy moves the parameters "
                       "and gradients too, and steps on the CPU every layer); plan without offload to export "
                       "to torchtitan", "--to torchtitan")
    seq_len = plan.training.seq_len
    if seq_len % (2 * form.tp):
        # torchtitan's parallelize_llama asserts seq_len % ParallelDims.seq_len_divisor == 0
        raise BadInput(f"torchtitan needs the sequence length to divide by 2 x TP = {2 * form.tp} "
                       f"(its sequence-parallel rule); the plan's is {seq_len}", "--to torchtitan")
    comments = [f"planner export --to torchtitan: {plan.model.name} on {plan.cluster.name}, "
                f"tp {form.tp} x " + (f"cp {form.cp} x " if form.cp > 1 else "")
                + f"pp {form.pp} x dp {form.dp} = {form.world} GPUs",
                *(placement_comments(plan) if placeable(plan) else []), *route_comments(plan)]
    family = titan_family(c)
    if name == "deepseek_v3":  # its constants, which cost nothing, are the flavour's (DeepSeekV3ModelArgs)
        comments.append(f"torchtitan's deepseek_v3 flavour {flavor} fixes the rotary (YaRN), norm and routing "
                        "constants (the job config cannot set them); the model's own are in its config.json")
    elif family is not None:  # alike: what its ModelArgs fix beside the dimensions
        comments.append(f"torchtitan's {name} flavour {flavor} fixes {family[0].constants} (the job config cannot "
                        "set them); the model's own are in its config.json")
    elif not same_scaling:  # not priced (no parameters, no FLOPs): said in the file, not warned
        comments.append(f"rotary frequencies: torchtitan's llama3 flavours apply Llama 3.1 RoPE scaling (factor 8); "
                        f"the model's rope_scaling is {extra.rope_scaling} (the job config cannot set it)")
    training = {"local_batch_size": form.global_batch // form.dp if form.pp > 1 else form.micro,
                "global_batch_size": form.global_batch, "seq_len": seq_len,
                "mixed_precision_param": _titan_precision(plan, form, warn)}
    par, ddp = _titan_parallelism(plan, form, warn)
    ac = _titan_checkpointing(form, warn)
    job = {"dump_folder": "./outputs", "description": f"{plan.model.name} on {plan.cluster.name} (planner)"}
    sections = {"job": job, "model": model, "training": training, "parallelism": par, "activation_checkpoint": ac}
    if plan.training.compile:
        # torchtitan 0.2.2 config/job_config.py Compile: enable (default False), components
        # ["model", "loss"] by default: apply_compile wraps each TransformerBlock, the loss compiles too
        sections["compile"] = {"enable": True}
        comments.append("compile: torch.compile of each TransformerBlock and of the loss (torchtitan's default "
                        "components); the plan prices the blocks' fused elementwise kernels, the loss as eager")
    if form.dtype == "fp8":
        sections["quantize"] = _titan_fp8(plan, form, ddp)
        model["converters"] = ["quantize.linear.float8"]
    return sections, comments


def _titan_precision(plan: Plan, form: Uniform, warn: Warn) -> str:
    """torchtitan's mixed_precision_param for the plan's dtype (it has no fp16 mixed precision)."""
    if form.dtype == "fp16":
        gpus = {plan.cluster.device(r).gpu for r in plan.used_ranks()}
        bf16 = all(g.supports("bf16") for g in plan.cluster.gpu_types if g.name in gpus)
        precision = "bfloat16" if bf16 else "float32"
        warn(f"torchtitan has no fp16 mixed precision; exported {precision}"
             + ("" if bf16 else " (a GPU of the plan has no bf16: twice the activation memory)"))
        return precision
    return "bfloat16" if form.dtype in ("bf16", "fp8") else "float32"


def _titan_data_parallel(form: Uniform, warn: Warn) -> tuple[dict[str, Any], bool]:
    """The [parallelism] data-parallel keys, and whether they ask for DDP (replicate only)."""
    par: dict[str, Any] = {}
    # torchtitan's DDP (replicate only) refuses any other parallelism ("DDP has not supported
    # > 1D parallelism"): with TP or PP, ZeRO-0 can only be FSDP (capability: plain_dp_alone)
    ddp = form.zero == 0 and (form.dp == 1 or (form.tp == 1 and form.pp == 1))
    if ddp:
        par["data_parallel_replicate_degree"] = form.dp
        par["data_parallel_shard_degree"] = 1
        if form.dp == 1 and (form.tp > 1 or form.pp > 1) and form.dtype != "fp32":
            # distributed/utils.py maybe_enable_amp: mixed precision with TP or PP only through fully_shard
            warn(f"torchtitan applies {form.dtype} mixed precision with TP or PP only through FSDP (dp > 1): "
                 "this layout trains in fp32")
        return par, ddp
    par["data_parallel_replicate_degree"] = 1
    par["data_parallel_shard_degree"] = form.dp
    # FSDP2 under torch.distributed.pipelining gathers the weights once and reduce-scatters the
    # gradients once per step with "never" (capability: ZeRO-1 with PP); without PP, "always"
    # is ZeRO-3 (planner.cost.runtimes.capability, torchtitan's entry)
    par["fsdp_reshard_after_forward"] = "always" if form.zero == 3 and form.pp == 1 else "never"
    exact = (form.zero == 3 and form.pp == 1) or (form.zero == 1 and form.pp > 1)
    if form.dp > 1 and not exact:
        if form.zero == 0:
            warn(f"torchtitan's DDP does not combine with TP or PP: ZeRO-0 exported as FSDP "
                 f"(shard degree {form.dp}) without resharding after forward, which shards parameters, "
                 "gradients and optimizer states")
        elif form.pp > 1:
            warn(f"torchtitan under pipelining syncs gradients once per step: ZeRO-{form.zero} exported as "
                 f"FSDP (shard degree {form.dp}) without resharding after forward (ZeRO-1's memory and traffic)")
        else:
            warn(f"torchtitan has no ZeRO-{form.zero} without pipelining: exported FSDP (shard degree {form.dp}) "
                 "without resharding after forward, which gathers the weights every micro-batch")
    return par, ddp


def _titan_parallelism(plan: Plan, form: Uniform, warn: Warn) -> tuple[dict[str, Any], bool]:
    """The [parallelism] section, and whether its data parallelism is DDP."""
    seq_len = plan.training.seq_len
    par, ddp = _titan_data_parallel(form, warn)
    par["tensor_parallel_degree"] = form.tp
    if form.cp > 1:
        if form.cp_kind != "ring":
            raise BadInput(f"torchtitan's context parallelism is ring attention; the plan uses {form.cp_kind} "
                           "(export it --to megatron, or plan with --runtime torchtitan)", "--to torchtitan")
        if seq_len % (2 * form.cp * form.tp):
            raise BadInput(f"torchtitan needs the sequence length to divide by 2 x TP x CP = {2 * form.cp * form.tp}; "
                           f"the plan's is {seq_len}", "--to torchtitan")
        par["context_parallel_degree"] = form.cp  # torchtitan ParallelDims.cp (ring attention, load-balanced)
    if form.tp > 1 and not form.sequence_parallel:
        warn("torchtitan's tensor parallelism always shards the sequence (sequence parallel on)")
    par["pipeline_parallel_degree"] = form.pp
    # torchtitan's MoE models (ParallelismConfig.expert_parallel_degree, carved from dp_shard x cp x tp)
    if form.ep > 1:
        par["expert_parallel_degree"] = form.ep
        par["expert_tensor_parallel_degree"] = form.etp or form.tp
    if form.pp > 1:
        par["pipeline_parallel_schedule"] = TITAN_SCHEDULES[form.schedule]
        if form.ep > 1 and get_schedule(form.schedule).overlaps_ep_comm:
            # the dispatch and combine under the partner pass's compute, as priced (its default, written:
            # config/job_config.py pipeline_parallel_expert_parallel_overlap, distributed/dual_pipe_v.py)
            par["pipeline_parallel_expert_parallel_overlap"] = True
        par["pipeline_parallel_microbatch_size"] = form.micro
        par["module_fqns_per_model_part"] = titan_fqns(plan)
    return par, ddp


def _titan_checkpointing(form: Uniform, warn: Warn) -> dict[str, Any]:
    """The [activation_checkpoint] section for the plan's recompute mode."""
    ac: dict[str, Any] = {"mode": form.recompute}
    if form.recompute == "selective":
        ac["selective_ac_option"] = "op"
    elif form.recompute == "block":
        freq = layer_sac_frequency(form, warn)
        # per-layer selective checkpointing: every freq-th block (1: all, as "full")
        ac = {"mode": "selective", "selective_ac_option": str(freq)} if freq else {"mode": "none"}
    return ac


def _titan_fp8(plan: Plan, form: Uniform, ddp: bool) -> dict[str, Any]:
    """The [quantize] section of an fp8 plan.

    torchao float8 linears (torchtitan 0.2: config/job_config.py Float8Linear under
    quantize.linear.float8; the converter "quantize.linear.float8") in the plan's recipe as
    planner.cost.fp8 prices it; the LM head ("output") stays bf16. Tensorwise leaves
    recipe_name unset: components/quantization/float8.py refuses the float8 FSDP all-gather
    with any recipe_name and builds the tensorwise config itself; rowwise is recipe_name
    "rowwise" (Float8LinearConfig.from_recipe_name), its weights all-gathered in bf16. A plan
    priced with the fp8 all-gather (Training.fp8_all_gather) turns on enable_fsdp_float8_all_gather
    and, as torchtitan's docs/float8.md pairs them, precompute_float8_dynamic_scale_for_fsdp (one
    all-reduce of the scales for all parameters).
    """
    recipe = plan.training.fp8_recipe or "torchao-tensorwise"
    if recipe not in TITAN_FP8_RECIPES:
        raise BadInput(f"torchtitan runs fp8 through torchao ({', '.join(TITAN_FP8_RECIPES)}); the plan is "
                       f"priced with {recipe}: re-plan with --runtime torchtitan", "--to")
    fp8_gather = plan.training.fp8_all_gather and form.dp > 1 and not ddp
    return {"linear": {"float8": {
        "enable_fsdp_float8_all_gather": fp8_gather, "precompute_float8_dynamic_scale_for_fsdp": fp8_gather,
        **TITAN_FP8_RECIPES[recipe], "filter_fqns": ["output"]}}}


def export_torchtitan(plan: Plan, warn: Warn) -> str:
    sections, comments = titan_settings(plan, warn)
    return "".join(comment_line(c) + "\n" for c in comments) + "\n" + tomli_w.dumps(sections)


def titan_cli_args(name: str, key: str, value: Any) -> list[str]:
    """One setting as torchtitan's ConfigManager (tyro) parses it on the command line."""
    if isinstance(value, bool):  # tyro flags: --s.key / --s.no_key, no value
        return [f"--{name}.{key}" if value else f"--{name}.no_{key}"]
    if isinstance(value, list):
        # list[str] is one comma-separated word (torchtitan's registered rule); list[list[str]]
        # is one such word per inner list
        if value and all(isinstance(x, list) for x in value):
            return [f"--{name}.{key}", *(",".join(map(str, x)) for x in value)]
        return [f"--{name}.{key}", ",".join(map(str, value))]
    text = str(value)
    # a value word that starts with "-" would read as a flag; "--s.key=-x" cannot
    return [f"--{name}.{key}={text}"] if text.startswith("-") else [f"--{name}.{key}", text]


def _flat_sections(sections: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(dotted section name, its plain settings) for each section, nested ones included
    ([quantize.linear.float8] -> "quantize.linear.float8", as tyro names its flags)."""
    out = []
    for name, values in sections.items():
        dotted = f"{prefix}{name}"
        plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
        if plain:
            out.append((dotted, plain))
        out += _flat_sections({k: v for k, v in values.items() if isinstance(v, dict)}, dotted + ".")
    return out


def export_torchtitan_cli(plan: Plan, warn: Warn) -> str:
    sections, _ = titan_settings(plan, warn)
    args = []
    for name, values in _flat_sections(sections):
        for k, v in values.items():
            args += titan_cli_args(name, k, v)
    return " ".join(map(shlex.quote, args)) + "\n"
