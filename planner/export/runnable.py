"""What an export target can run as it is, and the nearest plan it can run (`export --lossy`).

`runtime_problems(plan, target)` lists why a target cannot run a plan exactly: it was priced for
another runtime (training.runtime), or it uses a freedom the runtime lacks (per-stage TP or DP,
uneven batch shares, ...). `runnable_form(plan, target)` is the nearest plan the target runs
exactly: same model, cluster, pipeline ranks and layer split, one TP and one DP on every stage
(each stage's TP groups taken from the GPUs the plan gave it, node by node), equal shares, and the
target's form of ZeRO / recompute / precision. The CLI prices it under the target's runtime.
"""

from __future__ import annotations

import dataclasses

from ..core.dims import StageDims
from ..core.errors import BadInput
from ..cost.fp8 import RECIPES
from ..cost.runtimes import get_runtime
from ..cost.runtimes.capability import Capability, capability, fp8_all_gather_problem, violations
from ..plan import Plan, Replica, Stage, Training, uniform_plan
from .base import RECOMPUTE_ORDER, decoder_counts
from .launch import node_launches
from .targets import EXPORT_TARGETS, TARGET_RUNTIMES


def _sp(stages: tuple[Stage, ...], tp: int) -> bool:
    """One sequence-parallel setting: on when any TP stage has it (uniform_form's rule)."""
    sps = {s.sequence_parallel for s in stages if s.tp > 1}
    return tp > 1 and (any(sps) or (not sps and any(s.sequence_parallel for s in stages)))


def capability_problems(plan: Plan, target: str) -> list[str]:
    """The freedoms of `plan` that `target` cannot express, one line each (empty: runnable): the
    capability model of the target's runtime (capability.violations, the search's own space),
    and a torchrun numbering of the nodes that gives the plan's placement (planner.export.launch)."""
    out = list(violations(plan, EXPORT_TARGETS[target].runtime))
    stages = plan.stages
    if len({s.tp for s in stages}) == len({s.dp for s in stages}) == 1:
        try:
            node_launches(plan)
        except BadInput as exc:
            out.append(f"placement: {exc.message}")
    return out


def runtime_problems(plan: Plan, target: str) -> list[str]:
    """Why `target` cannot run `plan` exactly: another runtime priced it, or capability_problems."""
    runtimes = TARGET_RUNTIMES.get(target)
    if runtimes is None:  # rankmap: the reference runtime runs any plan
        return []
    out = []
    if plan.training.runtime not in runtimes:
        out.append(f"the plan was made for runtime {plan.training.runtime!r}, not {runtimes[0]!r} "
                   f"(plan with --runtime {runtimes[0]})")
    return out + capability_problems(plan, target)


def _allowed_zero(cap: Capability, zero: int, pp: int, parallel: bool) -> int:
    """The ZeRO stage nearest `zero` that the runtime runs at `pp` stages (`parallel`: beside TP,
    CP or PP, where Capability.plain_dp_alone forbids ZeRO-0): the least one above, else the
    greatest below."""
    allowed = [z for z in (cap.zero_stages_with_pp if pp > 1 else cap.zero_stages)
               if not (z == 0 and cap.plain_dp_alone and parallel)]
    if not allowed:
        return zero
    above = [z for z in allowed if z >= zero]
    return min(above) if above else max(allowed)


def _tp_groups(plan: Plan, stage: Stage, tp: int) -> list[tuple[int, ...]]:
    """TP groups of `tp` GPUs inside one node each, from the GPUs `stage` uses (in the plan's order)."""
    by_node: dict[tuple[str, int], list[int]] = {}
    for r in stage.replicas:
        for rank in r.ranks:
            dev = plan.cluster.device(rank)
            by_node.setdefault((dev.group, dev.node), []).append(rank)
    groups = []
    for ranks in by_node.values():
        groups += [tuple(ranks[i:i + tp]) for i in range(0, len(ranks) - tp + 1, tp)]
    return groups


def runnable_forms(plan: Plan, target: str) -> list[Plan]:
    """runnable_form with each TP degree of the plan and its halvings (smallest first) and each recompute mode from the
    plan's strongest up (a form may need more recompute to fit), each also as the uniform
    configuration of the whole cluster at the plan's pipeline depth; planner.api.lossy_form keeps
    the fastest that fits. BadInput when none exists."""
    out, first_error = [], None
    strongest = max(RECOMPUTE_ORDER[s.recompute] for s in plan.stages)
    modes = [m for m in RECOMPUTE_ORDER if RECOMPUTE_ORDER[m] >= strongest
             and (m != "block" or any(s.recompute == "block" for s in plan.stages))]
    tps = {s.tp for s in plan.stages}
    tps |= {t >> k for t in tps for k in range(t.bit_length()) if t % (t >> k) == 0}  # and their halvings
    for tp in sorted(tps):
        for mode in modes:
            try:
                form = runnable_form(plan, target, tp, mode)
            except BadInput as exc:
                first_error = first_error or exc
                continue
            # a form the target's capability model refuses (e.g. DeepSpeed's equal block split) is
            # left out: the runtime could not run it and the plan loader would refuse the file
            if form not in out and not violations(form, form.training.runtime):  # DeepSpeed's selective is its full
                out.append(form)
            # and the uniform configuration over the whole cluster with the plan's pipeline depth
            # (planner.plan.uniform_plan: ranks TP-innermost from rank 0, layers split evenly)
            try:
                form = runnable_form(uniform_plan(plan.model, plan.cluster, plan.training, tp=tp, pp=plan.pp,
                                                  dp=plan.cluster.num_gpus // (tp * plan.pp),
                                                  zero=max(s.zero for s in plan.stages), recompute=mode,
                                                  sequence_parallel=_sp(plan.stages, tp)), target)
            except BadInput:
                continue
            if form not in out and not violations(form, form.training.runtime):
                out.append(form)
    if not out:
        if first_error is None:  # every form broke a capability rule of the target
            reasons = violations(form, form.training.runtime)
            first_error = BadInput(f"no runnable form for {target}: {reasons[0]}", "--lossy")
        raise first_error
    return out


def _runnable_layers(plan: Plan, cap: Capability) -> tuple[list[tuple[int, int]], list[int], bool]:
    """Each stage's layer range and pipeline rank in the runnable form, and whether the plan's
    virtual stages were flattened into one contiguous stage per pipeline rank."""
    layers = [s.layers for s in plan.stages]
    prank = [s.pipeline_rank for s in plan.stages]
    flattened = plan.training.virtual_stages > 1 and "interleaved" not in cap.schedules
    if flattened:  # contiguous stages of each rank's layer total
        per_rank = [0] * plan.pp
        for s in plan.stages:
            per_rank[s.pipeline_rank] += s.layers[1] - s.layers[0]
        layers, start = [], 0
        for count in per_rank:
            layers.append((start, start + count))
            start += count
        prank = list(range(plan.pp))
    blocks = sum(1 for layer in plan.model.layers if layer.kind == "decoder")
    if cap.layer_split == "equal" and blocks % len(layers) == 0:
        # the same decoder blocks on every stage (DeepSpeed's type:transformer partition): the
        # embedding rides with the first stage, the head with the last
        each, stages_n, end = blocks // len(layers), len(layers), len(plan.model.layers)
        layers = [(0 if i == 0 else 1 + i * each, end if i == stages_n - 1 else 1 + (i + 1) * each)
                  for i in range(stages_n)]
    return layers, prank, flattened


def _runnable_training(plan: Plan, runtime: str, cap: Capability, tp: int, dp: int, flattened: bool) -> Training:
    """The plan's training settings as the target runtime runs them."""
    t = plan.training
    # an fp8 recipe of another library than the target's (torchao rowwise -> Megatron): its default
    target_recipe = get_runtime(runtime).fp8_recipe
    same_library = (t.fp8_recipe and target_recipe
                    and RECIPES[t.fp8_recipe].library == RECIPES[target_recipe].library)
    # torch.compile kept where the target compiles (torchtitan), else dropped (Megatron-LM, DeepSpeed);
    # the MoE dispatcher kept where the target runs it, else its alltoall
    training = dataclasses.replace(t, runtime=runtime, fp8_recipe=t.fp8_recipe if same_library else "",
                                   compile=t.compile and cap.compile,
                                   moe_dispatcher=t.moe_dispatcher if t.moe_dispatcher in cap.moe_dispatchers
                                   else "alltoall")
    if t.virtual_stages == 1 and t.schedule not in cap.schedules:
        training = dataclasses.replace(training, schedule="1f1b")  # e.g. GPipe: the same layout under 1F1B
    if flattened:
        training = dataclasses.replace(training, schedule="1f1b", virtual_stages=1)
    if t.dtype not in cap.dtypes:  # fp16 where the runtime has none (torchtitan): bf16 where every GPU has it
        gpus = {plan.cluster.device(r).gpu for r in plan.used_ranks()}
        bf16 = "bf16" in cap.dtypes and all(g.supports("bf16") for g in plan.cluster.gpu_types if g.name in gpus)
        training = dataclasses.replace(training, dtype="bf16" if bf16 else "fp32")
    if cap.mixed_precision_needs_sharding and dp == 1 and (plan.pp > 1 or tp > 1):
        training = dataclasses.replace(training, dtype="fp32")  # torchtitan: no mixed precision without FSDP
    # the fp8 all-gather kept where the target's FSDP runs it with the dtype and recipe kept, else dropped
    if training.fp8_all_gather and fp8_all_gather_problem(training, runtime):
        training = dataclasses.replace(training, fp8_all_gather=False)
    return training


def runnable_form(plan: Plan, target: str, tp: int | None = None, recompute: str | None = None) -> Plan:
    """The nearest plan `target` runs exactly with TP `tp` (default: the plan's largest) and
    `recompute` (default: the plan's strongest) on every stage (module docstring); BadInput when
    there is none."""
    t = plan.training
    firsts = {s.pipeline_rank: s for s in sorted(plan.stages, key=lambda s: s.index, reverse=True)}
    tp = tp or max(s.tp for s in plan.stages)
    groups = {k: _tp_groups(plan, s, tp) for k, s in firsts.items()}
    dp = min(len(g) for g in groups.values())
    while dp > 1 and t.global_batch % (t.micro_batch * dp):
        dp -= 1  # whole micro-batches per replica (uniform_plan's rule)
    if dp < 1:
        raise BadInput(f"no runnable form for {target}: a pipeline rank has no node with {tp} GPUs of the plan "
                       "for one TP group", "--lossy")
    runtime = EXPORT_TARGETS[target].runtime
    cap = capability(runtime)
    zero = max(s.zero for s in plan.stages)
    recompute = recompute or max((s.recompute for s in plan.stages), key=RECOMPUTE_ORDER.get)
    # a recompute mode the runtime lacks: the next stronger it has (DeepSpeed: selective -> full)
    recompute = next((m for m in RECOMPUTE_ORDER if RECOMPUTE_ORDER[m] >= RECOMPUTE_ORDER[recompute]
                      and m in cap.recompute_modes), recompute)
    # sequence parallelism only where the runtime has it (DeepSpeed's pipeline engine has none)
    sp = (_sp(plan.stages, tp) or (cap.sequence_parallel_always and tp > 1)) and cap.sequence_parallel
    layers, prank, flattened = _runnable_layers(plan, cap)
    training = _runnable_training(plan, runtime, cap, tp, dp, flattened)
    share = t.global_batch // dp
    kinds = [layer.kind for layer in plan.model.layers]
    # recompute "block": the plan's largest count on every stage (a smaller stage recomputes all its
    # blocks); ZeRO-Offload on every stage where the plan has any and the target has it
    most = max((s.recompute_layers for s in plan.stages if s.recompute == "block"), default=0)
    offload = any(s.offload for s in plan.stages) and cap.offload
    if offload and dp > 1:
        zero = max(zero, cap.offload_min_zero)
    zero = _allowed_zero(cap, zero, plan.pp, plan.pp > 1 or tp > 1)
    # activation offload kept where the target runs it (Megatron: one stage, no recomputation)
    offloaded = max(s.offload_activations for s in plan.stages) if cap.activation_offload and (
        not cap.activation_offload_alone or (len(layers) == 1 and recompute == "none")) else 0
    stages = tuple(
        Stage(i, rng, tp, zero, recompute,
              tuple(Replica(d, share, groups[k][d]) for d in range(dp)), k, sp,
              recompute_layers=min(most, sum(1 for kind in kinds[rng[0]:rng[1]] if kind == "decoder"))
              if recompute == "block" else 0, offload=offload,
              offload_activations=min(offloaded, max(0, sum(1 for kind in kinds[rng[0]:rng[1]] if kind == "decoder") - 1)))
        for i, (rng, k) in enumerate(zip(layers, prank)))
    out = Plan(plan.model, plan.cluster, training, stages)
    problems = capability_problems(out, target)
    if problems:  # what a uniform form can still lack: a torchrun numbering of its nodes, query groups over TP
        raise BadInput(f"no runnable form for {target} with tp={tp} keeps the plan's stage GPUs: {problems[0]}",
                       "--lossy")
    return out


def describe_form(plan: Plan) -> str:
    """`tp 4 x pp 3 x dp 2 = 24 GPUs, layers [20, 40, 20]`."""
    s0 = plan.stages[0]
    return (f"tp {s0.tp} x " + (f"cp {s0.cp} x " if s0.cp > 1 else "")
            + f"pp {plan.pp} x dp {s0.dp} = {StageDims(s0.tp, cp=s0.cp).group_gpus * s0.dp * plan.pp} GPUs, "
            f"decoder layers {decoder_counts(plan)}")
