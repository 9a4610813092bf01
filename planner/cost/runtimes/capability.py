"""Capability: what a runtime can express, for a pinned version: the plan search's space under `--runtime`.

A plan is runnable by a runtime when `violations(plan, runtime)` is empty. The search
(planner.search.orchestration.driver) searches exactly the plans a runtime's Capability allows.
Each runtime's module (planner.cost.runtimes.<name>) declares its Capability in its RuntimeSpec,
with its pinned version and each field's source in a comment next to it; `any`
(any_runtime.py) is everything the search supports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...schedules import get_schedule
from ...inputs.devices import QUANTIZED_FORMATS
from ..fp8 import RECIPES
from .registry import runtime_spec
from .spec import Capability

if TYPE_CHECKING:  # the Plan type only (planner.plan sits below cost)
    from ...inputs.model import Model
    from ...plan import Plan, Training


def capability(runtime: str, model: "Model | None" = None) -> Capability:
    """The Capability of `runtime` (a planner.cost.runtimes name or `any`), for `model` where given:
    as the runtime's RuntimeSpec.model_capability narrows it for that model, and a hybrid model's Mamba
    stack pipelines as megatron-core's MambaStack does (ssm/mamba_block.py
    _select_layers_for_pipeline_parallel asserts no virtual pipeline stages and gives each rank
    num_layers / pp layers): one chunk per rank and every stage the same decoders."""
    spec = runtime_spec(runtime)
    cap = spec.capability
    if model is None or model.config is None:
        return cap
    if spec.model_capability is not None:  # e.g. torchtitan's model packages without pipelining
        cap = spec.model_capability(cap, model)
    if model.config.mamba is None:
        return cap
    one_chunk = tuple(name for name in cap.schedules if get_schedule(name).max_virtual_stages == 1)
    return replace(cap, schedules=one_chunk, layer_split="equal")


def fp8_all_gather_problem(training: "Training", runtime: str = "") -> str:
    """What a training that all-gathers its fp8 weights in fp8 (Training.fp8_all_gather) lacks under
    `runtime` ("": its own) ('' when nothing, or when it does not): dtype fp8, a recipe that can
    (Fp8Recipe.gathers_fp8; "": the runtime's), a runtime whose FSDP does (Capability.fp8_all_gather)."""
    if not training.fp8_all_gather:
        return ""
    if training.dtype != "fp8":
        return f"the fp8 all-gather needs dtype fp8, not {training.dtype}"
    spec = runtime_spec(runtime or training.runtime)
    if not spec.capability.fp8_all_gather:
        return f"{spec.capability.describe()} has no fp8 FSDP all-gather (torchtitan has)"
    recipe = training.fp8_recipe or spec.pricing.fp8_recipe
    if not recipe or not RECIPES[recipe].gathers_fp8:
        able = ", ".join(name for name, r in RECIPES.items() if r.gathers_fp8)
        return f"the fp8 all-gather needs an fp8 recipe that gathers fp8 weights ({able}), not {recipe or 'none'}"
    return ""


def bf16_layers_problem(training: "Training", runtime: str = "") -> str:
    """What a training that keeps decoders in bf16 (Training.bf16_layers) lacks under `runtime` ("": its own)
    ('' when nothing, or when it keeps none): a quantized dtype, a runtime that keeps them
    (Capability.bf16_layers), and under fp8 a recipe other than Transformer Engine's delayed scaling
    (megatron-core: 'Delayed scaling does not support first / last layer in BF16')."""
    if training.bf16_layers == (0, 0):
        return ""
    if training.dtype not in QUANTIZED_FORMATS:
        return f"keeping decoder layers in bf16 needs a quantized dtype (fp8, mxfp8, nvfp4), not {training.dtype}"
    spec = runtime_spec(runtime or training.runtime)
    if not spec.capability.bf16_layers:
        return f"{spec.capability.describe()} keeps no decoder layers in bf16 (megatron and any do)"
    if training.dtype == "fp8" and (training.fp8_recipe or spec.pricing.fp8_recipe) == "te-delayed":
        return "fp8 delayed scaling keeps no decoder layers in bf16 (megatron-core refuses it): use --fp8-recipe te-current"
    return ""


def model_problem(runtime: str, model: "Model") -> str:
    """Why `runtime` cannot build `model` at all, whatever the plan ('' when it can):
    Capability.mamba_layers for a hybrid model, Capability.mtp_layers for one with multi-token-prediction
    modules, then RuntimeSpec.model_problem (torchtitan builds only its named flavours)."""
    spec = runtime_spec(runtime)
    if model.config is not None and model.config.mamba is not None and not spec.capability.mamba_layers:
        return (f"{spec.capability.title} builds no Mamba-2 layers ({model.name} is a hybrid model): "
                "plan it with --runtime megatron")
    if model.config is not None and model.config.mtp_layers and not spec.capability.mtp_layers:
        return (f"{spec.capability.title} trains no multi-token-prediction modules ({model.name} has "
                f"{model.config.mtp_layers}: num_nextn_predict_layers): plan it with --runtime megatron, or "
                "from a config.json with num_nextn_predict_layers 0 to train the main model alone")
    return spec.model_problem(model) if spec.model_problem is not None else ""


def decoders_per_rank(plan: "Plan") -> int:
    """Megatron-core's bound on the decoders kept in bf16 at each end: num_layers // pp (transformer_config.py
    max_bf16_layers_per_pipeline_stage)."""
    return sum(1 for layer in plan.model.layers if layer.kind == "decoder") // plan.pp


def decoder_blocks(plan: "Plan") -> list[int]:
    """Decoder blocks of each stage (chunk), by stage order."""
    kinds = [layer.kind for layer in plan.model.layers]
    return [sum(1 for k in kinds[s.layers[0]:s.layers[1]] if k == "decoder") for s in plan.stages]


def violations(plan: "Plan", runtime: str) -> tuple[str, ...]:
    """Why `runtime` cannot run `plan`, one human reason each; () when it can."""
    cap = capability(runtime, plan.model)
    name = cap.describe()
    stages = plan.stages
    # the distinct degrees over the stages, ascending
    grid = (sorted({tp for s in stages for tp in s.tp_degrees}), sorted({s.cp for s in stages}), sorted({s.ep for s in stages}),
            sorted({s.dp for s in stages}))
    out = _parallelism_violations(plan, cap, name, *grid)
    out += _zero_violations(plan, cap, name)
    out += _recompute_violations(plan, cap, name)
    out += _optimizer_offload_violations(plan, cap, name)
    out += _precision_violations(plan, cap, name, *grid)
    out += activation_offload_violations(plan, cap)
    out += _sequence_parallel_violations(plan, cap, name)
    return tuple(out)


def _parallelism_violations(plan: "Plan", cap: Capability, name: str, tps: list[int], cps: list[int],
                            eps: list[int], dps: list[int]) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot lay out the plan's parallel grid (the distinct tp, cp, ep
    and dp degrees of its stages, ascending), layer split and schedule."""
    out: list[str] = []
    stages = plan.stages
    pp = plan.pp
    if pp > 1 and not cap.pipeline:
        out.append(f"{name} has no pipeline parallelism (the plan has {pp} stages)")
    if not cap.tensor_parallel and tps != [1]:
        out.append(f"{name} has no tensor parallelism (the plan uses tp {tps[-1]})")
    if not cap.per_stage_tp and len(tps) > 1:
        out.append(f"{name} runs one TP degree in every stage (the plan has {', '.join(map(str, tps))})")
    mixed = next((s for s in stages if s.mixed_tp), None)
    if mixed is not None and not cap.per_replica_tp:
        out.append(f"{name} runs one TP degree per stage (stage {mixed.index}'s replicas have tp {mixed.tp_label()})")
    uneven = next((s for s in stages if s.uneven_tp), None)
    if uneven is not None and not cap.uneven_tp_shares:
        out.append(f"{name} splits TP evenly (stage {uneven.index} gives its TP ranks "
                   f"{'/'.join(map(str, uneven.tp_heads))} heads)")
    if not cap.per_stage_tp and len(cps) > 1:  # one model-parallel grid (tp-cp-ep-dp-pp) for all stages
        out.append(f"{name} runs one CP degree in every stage (the plan has {', '.join(map(str, cps))})")
    if not cap.per_stage_tp and len(eps) > 1:
        out.append(f"{name} runs one EP degree in every stage (the plan has {', '.join(map(str, eps))})")
    both = next((s for s in stages if s.ep > 1 and s.cp > 1), None)
    if both is not None and not cap.expert_parallel_with_cp:
        out.append(f"{name} has no expert parallelism beside context parallelism (the plan has ep {both.ep} "
                   f"with cp {both.cp})")
    if not cap.per_stage_dp and len(dps) > 1:
        out.append(f"{name} runs one DP degree in every stage (the plan has {', '.join(map(str, dps))})")
    shares = sorted({r.batch_share for s in stages for r in s.replicas})
    if not cap.uneven_shares and len(shares) > 1:
        out.append(f"{name} gives every replica the same batch share (the plan has "
                   f"{', '.join(map(str, shares))} samples)")
    if cap.layer_split == "equal" and len(set(decoder_blocks(plan))) > 1:
        out.append(f"{name} splits the decoder blocks evenly over the stages (the plan has "
                   f"{', '.join(map(str, decoder_blocks(plan)))})")
    if pp > 1 and plan.training.schedule not in cap.schedules:
        out.append(f"{name} has no {plan.training.schedule} schedule (it has {', '.join(cap.schedules)})")
    if pp > 1 and plan.training.virtual_stages > 1 and cap.interleaved_microbatch_multiple \
            and plan.num_microbatches % pp:
        out.append(f"{name} interleaves only when each replica's micro-batches ({plan.num_microbatches}) are a "
                   f"multiple of the pipeline depth ({pp})")
    if pp > 1 and plan.training.virtual_stages > 1 and cap.interleaved_needs_pp_microbatches \
            and plan.num_microbatches < pp:
        out.append(f"{name} interleaves only when each replica runs at least the pipeline depth ({pp}) in "
                   f"micro-batches (the plan has {plan.num_microbatches})")
    return out


def _zero_violations(plan: "Plan", cap: Capability, name: str) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot run the plan's ZeRO stages."""
    out: list[str] = []
    pp = plan.pp
    allowed_zero = cap.zero_stages_with_pp if pp > 1 else cap.zero_stages
    zeros = sorted({s.zero for s in plan.stages if s.dp > 1})
    bad_zero = [z for z in zeros if z not in allowed_zero]
    if bad_zero:
        with_pp = " with pipeline parallelism" if pp > 1 else ""
        out.append(f"{name} cannot run ZeRO-{bad_zero[0]}{with_pp} "
                   f"(it has {', '.join(f'ZeRO-{z}' for z in allowed_zero) or 'none'})")
    if not cap.per_stage_zero and len(zeros) > 1:
        out.append(f"{name} runs one ZeRO stage in every stage (the plan has {', '.join(map(str, zeros))})")
    return out


def _recompute_violations(plan: "Plan", cap: Capability, name: str) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot recompute activations as the plan does."""
    out: list[str] = []
    stages = plan.stages
    modes = sorted({s.recompute for s in stages})
    bad_modes = [m for m in modes if m not in cap.recompute_modes]
    if bad_modes:
        out.append(f"{name} has no {bad_modes[0]} recomputation (it has {', '.join(cap.recompute_modes)})")
    if not cap.per_stage_recompute and len(modes) > 1:
        out.append(f"{name} recomputes alike in every stage (the plan has {', '.join(modes)})")
    block = [(s.recompute_layers, n) for s, n in zip(stages, decoder_blocks(plan)) if s.recompute == "block"]
    if block and not runs_block_counts(block, cap.recompute_layers):
        rule = "every N-th block, one N" if cap.recompute_layers == "every-nth" else "the same number of blocks"
        out.append(f"{name} recomputes {rule} in every stage (the plan recomputes "
                   f"{', '.join(f'{k} of {n}' for k, n in block)})")
    if plan.pp > 1 and plan.training.schedule in cap.ep_without_recompute_schedules \
            and any(s.ep > 1 for s in stages) and modes != ["none"]:
        out.append(f"{name} runs expert parallelism under {plan.training.schedule} only without recomputation "
                   f"(the plan recomputes {', '.join(m for m in modes if m != 'none')})")
    return out


def _optimizer_offload_violations(plan: "Plan", cap: Capability, name: str) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot offload the optimizer as the plan does (ZeRO-Offload)."""
    stages = plan.stages
    offloads = sorted({s.offload for s in stages})
    if True in offloads and not cap.offload:
        return [f"{name} has no ZeRO-Offload of the optimizer alone"]
    if len(offloads) > 1 and not cap.per_stage_offload:
        return [f"{name} offloads the optimizer of every stage or of none (the plan offloads some)"]
    if True in offloads and any(s.zero < cap.offload_min_zero for s in stages if s.dp > 1):
        return [f"{name} offloads the optimizer only with ZeRO-{cap.offload_min_zero} or above "
                "(a distributed optimizer)"]
    return []


def _precision_violations(plan: "Plan", cap: Capability, name: str, tps: list[int], cps: list[int],
                          eps: list[int], dps: list[int]) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot train the plan's dtype, compile it, or shard its heads and
    its data-parallel ranks as planned (tps, cps, eps, dps: as _parallelism_violations)."""
    out: list[str] = []
    stages = plan.stages
    pp = plan.pp
    dtype = plan.training.dtype
    if dtype not in cap.dtypes:
        out.append(f"{name} has no {dtype} training (it has {', '.join(cap.dtypes)})")
    if cap.plain_dp_alone and any(s.zero == 0 and s.dp > 1 for s in stages) \
            and (pp > 1 or tps[-1] > 1 or cps[-1] > 1 or eps[-1] > 1):
        out.append(f"{name} replicates data-parallel ranks (ZeRO-0) only when data parallelism is the only "
                   f"parallelism (the plan has pp {pp}, tp {tps[-1]}" + (f", cp {cps[-1]}" if cps[-1] > 1 else "") + ")")
    if cap.mixed_precision_needs_sharding and dtype != "fp32" and (pp > 1 or tps[-1] > 1) \
            and dps[-1] == 1 and cps[-1] == 1:
        out.append(f"{name} trains in {dtype} with TP or PP only where FSDP shards over dp > 1 or CP > 1 "
                   "(the plan has dp 1: it would train in fp32)")
    if plan.training.compile and not cap.compile:
        out.append(f"{name} does not run the model under torch.compile (training.compile)")
    elif plan.training.compile and pp > 1 and plan.training.schedule in cap.uncompiled_schedules:
        out.append(f"{name} runs no {plan.training.schedule} schedule under torch.compile (training.compile)")
    if plan.training.moe_dispatcher not in cap.moe_dispatchers:
        out.append(f"{name} has no {plan.training.moe_dispatcher} MoE token dispatcher (it has "
                   f"{', '.join(cap.moe_dispatchers)}; training.moe_dispatcher)")
    gather = fp8_all_gather_problem(plan.training, cap.runtime)
    if gather:
        out.append(f"{gather} (training.fp8_all_gather)")
    kept = bf16_layers_problem(plan.training, cap.runtime)
    if kept:
        out.append(f"{kept} (training.bf16_layers)")
    elif cap.runtime != "any" and max(plan.training.bf16_layers) > decoders_per_rank(plan):
        out.append(f"{name} keeps at most one pipeline rank's {decoders_per_rank(plan)} decoder layers in bf16 at "
                   f"each end (training.bf16_layers {list(plan.training.bf16_layers)})")
    c = plan.model.config
    if cap.kv_heads_over_tp and c is not None and c.num_kv_heads % tps[-1]:
        out.append(f"{name} splits the {c.num_kv_heads} query groups over TP (the plan has tp {tps[-1]})")
    return out


def _sequence_parallel_violations(plan: "Plan", cap: Capability, name: str) -> list[str]:
    """Why `cap`'s runtime (`name`) cannot run the plan's sequence parallelism."""
    sps = {s.sequence_parallel for s in plan.stages if s.tp > 1}
    out: list[str] = []
    if cap.sequence_parallel_always and False in sps:
        out.append(f"{name}'s tensor parallelism always shards the sequence (the plan has TP without "
                   "sequence parallelism)")
    if True in sps and not cap.sequence_parallel:
        out.append(f"{name} has no Megatron-style sequence parallelism")
    elif len(sps) > 1 and not cap.per_stage_tp:
        out.append(f"{name} turns sequence parallelism on or off for every stage at once")
    return out


def activation_offload_violations(plan: "Plan", cap: Capability) -> list[str]:
    """Why `cap`'s runtime cannot offload the plan's activations as planned (Capability.activation_offload)."""
    name = cap.describe()
    counts = [(s.offload_activations, n) for s, n in zip(plan.stages, decoder_blocks(plan))]
    if not any(k for k, _ in counts):
        return []
    if not cap.activation_offload:
        return [f"{name} has no activation offload to host memory"]
    if not cap.activation_offload_alone:
        return []
    out = []
    if len(plan.stages) > 1:
        out.append(f"{name} offloads activations only without pipeline parallelism (the plan has "
                   f"{len(plan.stages)} stages)")
    recomputing = sorted({s.recompute for s in plan.stages} - {"none"})
    if recomputing:
        out.append(f"{name} offloads activations only without recomputation (the plan recomputes {recomputing[0]})")
    if any(k >= n for k, n in counts):
        out.append(f"{name} offloads fewer blocks than the stage holds (the plan offloads "
                   f"{', '.join(f'{k} of {n}' for k, n in counts)})")
    return out


def one_block_count(block: list[tuple[int, int]]) -> bool:
    """Whether one count K of recomputed blocks (each stage the first min(K, its blocks)) gives
    every stage's (recomputed, blocks) in `block`: Megatron's --recompute-num-layers."""
    most = max(k for k, _ in block)
    return all(k == min(most, n) for k, n in block)


def every_nth(block: list[tuple[int, int]]) -> int | None:
    """The N with which recomputing every N-th block gives every stage's (recomputed, blocks)
    in `block` (floor(blocks / N) each; torchtitan's per-layer selective checkpointing), else None."""
    counted = [(k, n) for k, n in block if k > 0]
    if not counted:
        return None
    freq = min(n // k for k, n in counted)
    return freq if all(n // freq == k for k, n in block) else None


def runs_block_counts(block: list[tuple[int, int]], rule: str) -> bool:
    """Whether (recomputed, blocks) per "block" stage follow Capability.recompute_layers `rule`."""
    if rule == "per-stage":
        return True
    return one_block_count(block) if rule == "first" else every_nth(block) is not None


__all__ = ["Capability", "capability", "decoder_blocks", "every_nth", "model_problem", "one_block_count",
           "runs_block_counts", "violations"]
