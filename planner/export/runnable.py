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
from ..cost.runtimes.capability import activation_offload_violations, capability, every_nth, one_block_count, violations
from ..plan import Plan, Replica, Stage, uniform_plan
from .base import RECOMPUTE_ORDER, decoder_counts
from .launch import node_launches

# export target -> the runtime names (planner.cost.runtimes) whose plans it runs exactly
TARGET_RUNTIMES: dict[str, tuple[str, ...]] = {
    "megatron": ("megatron", "megatron-2021"), "torchtitan": ("torchtitan",),
    "torchtitan-cli": ("torchtitan",), "deepspeed": ("deepspeed",)}
# the runtime `--lossy` prices a target's plan under
PRICING_RUNTIME = {"megatron": "megatron", "torchtitan": "torchtitan", "torchtitan-cli": "torchtitan",
                   "deepspeed": "deepspeed"}


def _sp(stages: tuple[Stage, ...], tp: int) -> bool:
    """One sequence-parallel setting: on when any TP stage has it (uniform_form's rule)."""
    sps = {s.sequence_parallel for s in stages if s.tp > 1}
    return tp > 1 and (any(sps) or (not sps and any(s.sequence_parallel for s in stages)))


def capability_problems(plan: Plan, target: str) -> list[str]:
    """The freedoms of `plan` that `target` cannot express, one line each (empty: runnable).

    TODO(rtcap): replace with planner.cost.runtimes.capability.violations(plan, runtime) once that
    module lands; this local check covers uniform TP/DP, even shares and the per-target options."""
    stages = plan.stages
    t = plan.training
    out: list[str] = []
    tps = sorted({s.tp for s in stages})
    if len(tps) > 1:
        out.append("per-stage TP degrees differ (" + ", ".join(f"stage {s.index}: {s.tp}" for s in stages) + ")")
    dps = sorted({s.dp for s in stages})
    if len(dps) > 1:
        out.append("per-stage DP degrees differ (" + ", ".join(f"stage {s.index}: {s.dp}" for s in stages) + ")")
    uneven = [s.index for s in stages if len({r.batch_share for r in s.replicas}) > 1]
    if uneven:
        out.append(f"uneven batch shares (stages {uneven})")
    zeros = sorted({s.zero for s in stages})
    modes = sorted({s.recompute for s in stages}, key=RECOMPUTE_ORDER.get)
    if len(zeros) > 1:
        out.append(f"per-stage ZeRO stages differ ({zeros})")
    if len(modes) > 1:
        out.append(f"per-stage recompute differs ({', '.join(modes)})")
    if len({s.sequence_parallel for s in stages if s.tp > 1}) > 1:
        out.append("sequence parallelism on some TP stages only")
    blocks = decoder_counts(plan)
    block = [(s.recompute_layers, n) for s, n in zip(stages, blocks) if s.recompute == "block"]
    offloads = {s.offload for s in stages}
    if len(offloads) > 1:
        out.append("ZeRO-Offload on some stages only")
    zero, tp, dp = zeros[-1], tps[-1], dps[-1]
    if len(tps) == len(dps) == 1:
        try:
            node_launches(plan)
        except BadInput as exc:
            out.append(f"placement: {exc.message}")
    if target == "megatron" and zero >= 2:
        out.append(f"ZeRO-{zero}: Megatron's distributed optimizer shards optimizer states only (ZeRO-1)")
    if target == "megatron" and block and not one_block_count(block):
        # --recompute-num-layers: the first k layers of every stage's block (transformer_block.py)
        out.append("per-stage recomputed blocks differ (" + ", ".join(f"{k} of {n}" for k, n in block)
                   + "): Megatron's --recompute-num-layers is one count for every stage")
    if target in ("megatron", "deepspeed") and True in offloads and zero == 0 and dp > 1:
        # megatron arguments.py: --optimizer-cpu-offload needs --use-distributed-optimizer;
        # DeepSpeed offload_optimizer needs ZeRO >= 1
        out.append("ZeRO-Offload with ZeRO-0: the runtime offloads a sharded (ZeRO-1) optimizer")
    if target in PRICING_RUNTIME:  # activation offload: whether the target has it, within its limits
        out += activation_offload_violations(plan, capability(PRICING_RUNTIME[target]))
    c = plan.model.config
    if target == "megatron" and c is not None and c.num_kv_heads % tp:
        # megatron/core/transformer/attention.py divides the query groups over TP
        out.append(f"{c.num_kv_heads} query groups do not split over tp={tp}")
    if target == "deepspeed":
        if t.virtual_stages > 1:
            out.append("interleaved schedule: DeepSpeed's pipeline engine runs contiguous 1F1B stages")
        if plan.pp > 1 and zero >= 2:
            out.append(f"ZeRO-{zero} with pp={plan.pp}: DeepSpeed's pipeline engine allows ZeRO-1 at most")
        if "selective" in modes:
            out.append("selective recompute: DeepSpeed checkpoints whole layers")
        if "block" in modes:
            out.append("recompute block: DeepSpeed checkpoints every layer or none (activation_checkpoint_interval)")
    if target.startswith("torchtitan"):
        ddp = zero == 0 and (dp == 1 or (tp == 1 and plan.pp == 1))
        if not ddp and zero < 3 and dp > 1:
            out.append(f"ZeRO-{zero} on {dp} replicas: torchtitan shards with FSDP (ZeRO-3) or replicates "
                       "(DDP, alone)")
        if tp > 1 and not _sp(stages, tp):
            out.append("TP without sequence parallelism: torchtitan's TP always shards the sequence")
        if t.dtype == "fp16":
            out.append("fp16: torchtitan has bf16 or fp32 mixed precision only")
        if True in offloads:
            out.append("ZeRO-Offload: torchtitan has no optimizer-only offload")
        if block and every_nth(block) is None:
            # per-layer selective checkpointing wraps every N-th block (activation_checkpoint.py
            # _apply_layer_sac): exact when each stage's count is floor(blocks / N)
            out.append("recompute block (" + ", ".join(f"{k} of {n}" for k, n in block)
                       + "): torchtitan recomputes every N-th block, the same N in every stage")
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
    zero = max(s.zero for s in plan.stages)
    recompute = recompute or max((s.recompute for s in plan.stages), key=RECOMPUTE_ORDER.get)
    # sequence parallelism only where the runtime has it (DeepSpeed's pipeline engine has none)
    sp = _sp(plan.stages, tp) and capability(PRICING_RUNTIME[target]).sequence_parallel
    training = dataclasses.replace(t, runtime=PRICING_RUNTIME[target])
    if t.virtual_stages == 1 and t.schedule not in capability(PRICING_RUNTIME[target]).schedules:
        training = dataclasses.replace(training, schedule="1f1b")  # e.g. GPipe: the same layout under 1F1B
    layers = [s.layers for s in plan.stages]
    prank = [s.pipeline_rank for s in plan.stages]
    if target == "megatron":
        zero = min(zero, 1)
    elif target == "deepspeed":
        if plan.pp > 1:
            zero = min(zero, 1)
        recompute = "full" if recompute == "selective" else recompute
        if t.virtual_stages > 1:  # contiguous stages of each rank's layer total
            per_rank = [0] * plan.pp
            for s in plan.stages:
                per_rank[s.pipeline_rank] += s.layers[1] - s.layers[0]
            layers, start = [], 0
            for count in per_rank:
                layers.append((start, start + count))
                start += count
            prank = list(range(plan.pp))
            training = dataclasses.replace(training, schedule="1f1b", virtual_stages=1)
    else:  # torchtitan
        sp = tp > 1
        if not (zero == 0 and (dp == 1 or (tp == 1 and plan.pp == 1))) and zero < 3 and dp > 1:
            zero = 3
        if t.dtype == "fp16":
            gpus = {plan.cluster.device(r).gpu for r in plan.used_ranks()}
            bf16 = all(g.supports("bf16") for g in plan.cluster.gpu_types if g.name in gpus)
            training = dataclasses.replace(training, dtype="bf16" if bf16 else "fp32")
    share = t.global_batch // dp
    kinds = [layer.kind for layer in plan.model.layers]
    # recompute "block": the plan's largest count on every stage (a smaller stage recomputes all its
    # blocks); ZeRO-Offload on every stage where the plan has any and the target has it
    most = max((s.recompute_layers for s in plan.stages if s.recompute == "block"), default=0)
    offload = any(s.offload for s in plan.stages) and not target.startswith("torchtitan")
    # activation offload kept where Megatron runs it (one stage, no recomputation), dropped elsewhere
    offloaded = max(s.offload_activations for s in plan.stages) if (
        target == "megatron" and len(layers) == 1 and recompute == "none") else 0
    if offload and target in ("megatron", "deepspeed") and dp > 1:
        zero = max(zero, 1)
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
    return (f"tp {s0.tp} x pp {plan.pp} x dp {s0.dp} = {StageDims(s0.tp).group_gpus * s0.dp * plan.pp} GPUs, "
            f"decoder layers {decoder_counts(plan)}")
