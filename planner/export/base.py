"""What every export target shares: the uniform form a runtime can express (one TP, one DP,
one set of options for every stage, each loss reported through `warn`), `#` comment lines,
decoder counts per stage (planner.export describes the targets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..core.dims import StageDims
from ..core.errors import BadInput
from ..cost.runtimes import RUNTIMES
from ..cost.runtimes.capability import activation_offload_violations, capability, fp8_all_gather_problem, one_block_count
from ..plan import Plan
from ..report.routes import stage_routes

RECOMPUTE_ORDER = {"none": 0, "selective": 1, "block": 2, "full": 3}

Warn = Callable[[str], None]


# --- writing -------------------------------------------------------------------------------


def comment_line(text: str) -> str:
    """`# text` on one line: every character that is not printable (new lines, carriage
    returns, other control and separator characters) written as its Python escape."""
    return "# " + "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def route_comments(plan: Plan) -> list[str]:
    """The network paths between consecutive stages (planner.report.routes), as comment texts; none
    without a `topology:` section in the cluster file."""
    return [f"network: {route.describe()}" for route in stage_routes(plan)]


def route_entries(plan: Plan) -> dict[str, list[dict]]:
    """{"stage_routes": [...]} for a JSON export when the cluster has a `topology:` section, else {}."""
    routes = stage_routes(plan)
    return {"stage_routes": [route.to_json() for route in routes]} if routes else {}


# --- shared analysis -----------------------------------------------------------------------


def decoder_counts(plan: Plan) -> list[int]:
    """Decoder layers per stage (the embedding and head entries do not count)."""
    kinds = [layer.kind for layer in plan.model.layers]
    every = "decoder" not in kinds  # a profile without marked decoder layers
    return [sum(1 for i in range(*s.layers) if every or kinds[i] == "decoder") for s in plan.stages]


@dataclass
class Uniform:
    """The closest form with one TP, one DP, one set of options for every stage."""

    tp: int
    pp: int
    dp: int
    v: int
    micro: int
    global_batch: int
    zero: int
    recompute: str
    sequence_parallel: bool
    schedule: str
    dtype: str
    decoders: list[int] = field(default_factory=list)  # per stage (chunk), planned
    cp: int = 1  # context parallelism (StageDims.cp)
    cp_kind: str = "ring"
    ep: int = 1  # expert parallelism (Megatron-core MoE parallel folding: carved from tp x dp)
    etp: int = 0  # expert tensor parallelism; 0: as tp
    # recompute "block": per stage (chunk), the decoder blocks planned to recompute (0 elsewhere)
    recompute_layers: list[int] = field(default_factory=list)
    offload: bool = False  # ZeRO-Offload of the optimizer (any stage's)
    offload_activations: int = 0  # activation offload: decoder blocks in host memory (the plan's one stage)

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def grad_accum(self) -> int:
        return self.global_batch // (self.micro * self.dp)


def _refuse_unpriced_stand_ins(plan: Plan, target: str) -> None:
    """BadInput where `target` cannot run what the plan is priced with and no lossy stand-in would
    keep its time and memory: its schedule, its MoE dispatcher, its fp8 all-gather."""
    t = plan.training
    refusals = RUNTIMES[target].schedule_refusals if target in RUNTIMES else {}
    if plan.pp > 1 and t.schedule in refusals:
        # a schedule the runtime lacks changes the step's time and memory: no lossy stand-in
        raise BadInput(f"cannot export: {target} has no {t.schedule} schedule ({refusals[t.schedule]})", "--to")
    if target in RUNTIMES and t.moe_dispatcher not in capability(target).moe_dispatchers:
        # another dispatcher moves other bytes over the inter-node links: no lossy stand-in
        raise BadInput(f"cannot export: {capability(target).describe()} has no {t.moe_dispatcher} MoE token "
                       "dispatcher (the plan is priced with it): export --to megatron or re-plan", "--to")
    gather = fp8_all_gather_problem(t, target) if target in RUNTIMES else ""
    if gather:
        # 16-bit weights gathered move twice the bytes the plan is priced with: no silent stand-in
        raise BadInput(f"cannot export: {gather} (the plan is priced with it): export --to torchtitan, "
                       "or --lossy", "--to")


def uniform_form(plan: Plan, target: str, warn: Warn, placed: bool = False) -> Uniform:
    """`placed`: the launch keeps the plan's placement (planner.export.launch.placeable), so mixed GPU
    types and the placement are kept, not reported."""
    t = plan.training
    _refuse_unpriced_stand_ins(plan, target)
    offloaded = activation_offload_blocks(plan, target)
    compile_dropped(plan, target, warn)
    stages = plan.stages
    tps = sorted({s.tp for s in stages})
    tp = tps[-1]
    if len(tps) > 1:
        warn(f"per-stage TP degrees differ ({', '.join(f'stage {s.index}: {s.tp}' for s in stages)}); "
             f"exported tp={tp} for every stage")
    gpus_by_prank: dict[int, int] = {}
    for s in stages:
        gpus_by_prank.setdefault(s.pipeline_rank, s.dims.gpus)
    fewest = min(gpus_by_prank.values())
    cps = sorted({s.cp for s in stages})
    cp = cps[-1]
    kinds = sorted({s.cp_kind for s in stages if s.cp > 1})
    cp_kind = kinds[0] if kinds else "ring"
    if tp * cp > fewest:  # the widest TP and CP of different stages together would not fit a rank's GPUs
        cp = max(1, StageDims(tp).replicas_on(fewest))
    if len(cps) > 1 or len(kinds) > 1:
        warn(f"per-stage context parallelism differs ({', '.join(f'stage {s.index}: cp {s.cp}' for s in stages)}); "
             f"exported cp={cp} ({cp_kind}) for every stage")
    dp = max(1, StageDims(tp, cp=cp).replicas_on(fewest))
    while dp > 1 and t.global_batch % (t.micro_batch * dp):
        dp -= 1
    dps = sorted({s.dp for s in stages})
    used = len(plan.used_ranks())
    world = tp * cp * plan.pp * dp
    if len(dps) > 1 or len(set(gpus_by_prank.values())) > 1 or world != used:
        shape = f"{tp} x {cp} x {plan.pp} x {dp}" if cp > 1 else f"{tp} x {plan.pp} x {dp}"
        warn(f"per-stage DP degrees / GPU counts differ "
             f"({', '.join(f'stage {s.index}: dp {s.dp} on {s.dims.gpus} GPUs' for s in stages)}); "
             f"exported dp={dp} everywhere: {shape} = {world} of the plan's {used} GPUs")
    uneven = [s for s in stages if len({r.batch_share for r in s.replicas}) > 1]
    if uneven or len(dps) > 1:
        detail = "; ".join(f"stage {s.index}: {[r.batch_share for r in s.replicas]}" for s in uneven[:4])
        warn(f"batch shares equalised to {t.global_batch // dp} samples per replica"
             + (f" (plan: {detail})" if detail else ""))
    gpu_types = sorted({plan.cluster.device(r).gpu for r in plan.used_ranks()})
    if len(gpu_types) > 1 and not placed:
        warn(f"mixed GPU types ({', '.join(gpu_types)}): {target} runs one layout on all of them; "
             "the plan's per-type sizing is kept only as stated above")
    # placement: TP innermost, then CP, then DP, then PP, from rank 0 (Megatron's tp-cp-ep-dp-pp)
    expected_ok = True
    group = tp * cp
    for s in stages:
        for d, r in enumerate(s.replicas):
            if s.tp != tp or s.cp != cp or s.dp != dp or list(r.ranks) != [s.pipeline_rank * group * dp + d * group + i
                                                                           for i in range(group)]:
                expected_ok = False
    if not expected_ok and not placed:
        warn(f"device placement not kept: {target} assigns ranks TP-innermost, then DP, then PP "
             "(see `--to rankmap` for the plan's placement)")
    zeros = sorted({s.zero for s in stages})
    if len(zeros) > 1:
        warn(f"per-stage ZeRO stages differ ({zeros}); exported ZeRO-{zeros[-1]}")
    modes = sorted({s.recompute for s in stages}, key=RECOMPUTE_ORDER.get)
    if len(modes) > 1:
        warn(f"per-stage recompute differs ({', '.join(modes)}); exported {modes[-1]} everywhere")
    recomputed = [s.recompute_layers if s.recompute == "block" else 0 for s in stages]
    offloads = {s.offload for s in stages}
    if len(offloads) > 1:
        warn("ZeRO-Offload on some stages only; exported on every stage (less GPU memory, slower steps)")
    sps = {s.sequence_parallel for s in stages if s.tp > 1}
    sp = tp > 1 and (any(sps) or (not sps and any(s.sequence_parallel for s in stages)))
    if len(sps) > 1:
        warn("sequence parallelism on some TP stages only; exported on")
    ep, etp = _expert_form(plan, tp, dp, warn, cp)
    return Uniform(tp=tp, pp=plan.pp, dp=dp, v=t.virtual_stages, micro=t.micro_batch,
                   global_batch=t.global_batch, zero=zeros[-1], recompute=modes[-1],
                   sequence_parallel=sp, schedule=t.schedule, dtype=t.dtype,
                   decoders=decoder_counts(plan), cp=cp, cp_kind=cp_kind, ep=ep, etp=etp,
                   recompute_layers=recomputed, offload=True in offloads, offload_activations=offloaded)


def activation_offload_blocks(plan: Plan, target: str) -> int:
    """The decoder blocks whose activations the export offloads (0: none); BadInput when the
    target's runtime cannot (capability.activation_offload_violations: no such option, or
    Megatron-core's limits)."""
    counts = [s.offload_activations for s in plan.stages]
    if not any(counts):
        return 0
    runtime = "torchtitan" if target.startswith("torchtitan") else target
    if runtime in RUNTIMES:
        reasons = activation_offload_violations(plan, capability(runtime))
        if reasons:
            raise BadInput(f"cannot export activation offload: {reasons[0]}; plan without it", "--to")
    return max(counts)


def compile_dropped(plan: Plan, target: str, warn: Warn) -> None:
    """Warn where the plan runs under torch.compile (Training.compile) and the target's runtime has no
    such setting (Megatron-LM, DeepSpeed): written without it. Their runtimes price elementwise
    kernels fused already (elementwise_traffic_factor 1), so the price is unchanged."""
    runtime = "torchtitan" if target.startswith("torchtitan") else target
    if plan.training.compile and runtime in RUNTIMES and not capability(runtime).compile:
        warn(f"the plan runs under torch.compile, which {capability(runtime).describe()} has no setting for: "
             "exported without it (its own fused kernels run the fused elementwise traffic the plan is priced with)")


def _expert_form(plan: Plan, tp: int, dp: int, warn: Warn, cp: int = 1) -> tuple[int, int]:
    """One expert-parallel degree (and expert TP) for every stage: the plan's largest that the
    exported tp x cp x dp grid and the experts allow (StageDims.expert_problem), each loss warned."""
    stages = plan.stages
    eps = sorted({s.ep for s in stages})
    etps = sorted({s.etp for s in stages})
    ep, etp = eps[-1], etps[-1]
    if len(eps) > 1 or len(etps) > 1:
        warn(f"per-stage expert parallelism differs ({', '.join(f'stage {s.index}: ep {s.ep}' for s in stages)}); "
             f"exported ep={ep}")
    experts = plan.model.config.num_experts if plan.model.config is not None else 1
    while ep > 1 and StageDims(tp, dp=dp, cp=cp, ep=ep, etp=etp).expert_problem(experts):
        ep -= 1
    if etp and StageDims(tp, dp=dp, cp=cp, ep=ep, etp=etp).expert_problem(experts):
        etp = 0
    if (ep, etp) != (eps[-1], etps[-1]):
        grid = f"tp {tp} x cp {cp} x dp {dp}" if cp > 1 else f"tp {tp} x dp {dp}"
        warn(f"expert parallelism ep={eps[-1]} does not fit the exported {grid}; exported ep={ep}")
    return ep, etp


def runtime_optimizer(plan: Plan, target: str, names: dict[str, str]) -> str:
    """The runtime's name of the plan's optimizer (`names`, by planner name); a typed refusal,
    with the reason, where the runtime has none."""
    name = plan.training.optimizer
    if name not in names:
        raise BadInput(f"{target} has no {name} optimizer (it offers {', '.join(names)}); plan with "
                       f"--optimizer {' or '.join(names)} to export to {target}", f"--to {target}")
    return names[name]


def block_recompute_layers(form: Uniform, warn: Warn) -> int:
    """Recompute "block" as one count for every stage (Megatron's --recompute-num-layers applies
    to each pipeline stage, a stage with fewer blocks recomputing all of its own): the largest
    any stage plans (where that is not every stage's plan, the others recompute more than
    planned: more time, less memory)."""
    k = max(form.recompute_layers)
    block = [(r, n) for r, n in zip(form.recompute_layers, form.decoders) if r > 0]
    if len(set(form.recompute_layers)) > 1 and not (len(block) == len(form.decoders) and one_block_count(block)):
        warn(f"per-stage recomputed blocks differ ({form.recompute_layers}); exported {k} for every stage")
    return k


def layer_sac_frequency(form: Uniform, warn: Warn) -> int:
    """Recompute "block" as torchtitan's per-layer selective checkpointing, which wraps every
    N-th decoder block (torchtitan distributed/activation_checkpoint.py _apply_layer_sac):
    N = min over stages of floor(blocks / recomputed), so every stage recomputes at least its
    planned count (floor(blocks / N) >= recomputed)."""
    planned = [(n, k) for n, k in zip(form.decoders, form.recompute_layers) if k > 0]
    if not planned:
        return 0
    freq = min(n // k for n, k in planned)
    exact = all(n // freq == k for n, k in zip(form.decoders, form.recompute_layers))
    if not exact:
        warn(f"recompute block ({form.recompute_layers} of {form.decoders} blocks per stage) exported as "
             f"selective_ac_option {freq!r}: every {freq}-th block recomputes "
             f"({[n // freq for n in form.decoders]} per stage)")
    return freq
