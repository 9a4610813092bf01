"""The Plan type (any plan: uniform or heterogeneous), its JSON form and its validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .core.dims import CP_KINDS, StageDims, context_parallel_problem as dims_cp_problem
from .core.errors import BadInput
from .inputs.hardware import Cluster, cluster_from_spec
from .core import ranges
from . import schedules
from .core.io import MAX_NUMBER, get_str
from .inputs.model import RECOMPUTE_MODES, Model, model_from_dict
from .core.names import check_name

PLAN_FORMAT = "planner.plan/v1"
# a stage's recompute: a layer's (model.RECOMPUTE_MODES) for all its layers, or "block" (Stage.recompute_layers)
STAGE_RECOMPUTE_MODES = RECOMPUTE_MODES + ("block",)
# a training's optimizer (Training.optimizer): planner.cost.states.OPTIMIZERS prices each
OPTIMIZER_NAMES = ("adamw", "adamw-8bit", "adafactor", "sgd")
# a training's fp8 scaling recipe (Training.fp8_recipe): planner.cost.fp8.RECIPES prices each
FP8_RECIPE_NAMES = ("te-delayed", "torchao-tensorwise", "torchao-rowwise")
SCHEDULES = schedules.SCHEDULES  # by name; planner.schedules registers them


@dataclass(frozen=True)
class Replica:
    dp_rank: int
    batch_share: int  # samples per step
    ranks: tuple[int, ...]  # the model-parallel group: cp groups of tp ranks, TP innermost (Megatron's tp-cp order)


@dataclass(frozen=True)
class Stage:
    index: int
    layers: tuple[int, int]  # [first, end) over the model's layer list
    tp: int
    zero: int
    recompute: str
    replicas: tuple[Replica, ...]
    pipeline_rank: int
    sequence_parallel: bool = False
    cp: int = 1  # context parallelism (StageDims.cp)
    cp_kind: str = "ring"
    ep: int = 1  # expert parallelism (StageDims.ep)
    etp: int = 0  # expert tensor parallelism; 0: as tp
    # recompute "block": the first recompute_layers decoder blocks of the stage recompute their
    # whole forward, the rest save their activations (Megatron --recompute-method block)
    recompute_layers: int = 0
    # ZeRO-Offload (Ren et al. 2021): fp32 master weights and optimizer states in host memory,
    # the optimizer step on the CPU
    offload: bool = False
    # activation offload (Megatron --cpu-offloading --cpu-offloading-num-layers K): the saved
    # activations of the stage's first K decoder blocks go to host memory (pricing.activation_offload)
    offload_activations: int = 0

    def decoder_blocks(self, model: Model) -> int:
        return sum(1 for layer in model.layers[self.layers[0]:self.layers[1]] if layer.kind == "decoder")

    @property
    def dp(self) -> int:
        return len(self.replicas)

    @property
    def dims(self) -> StageDims:
        return StageDims(self.tp, self.sequence_parallel, self.dp, self.zero, cp=self.cp, cp_kind=self.cp_kind,
                         ep=self.ep, etp=self.etp)


@dataclass(frozen=True)
class Training:
    global_batch: int
    seq_len: int
    dtype: str
    micro_batch: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    attention: str = "flash"
    runtime: str = "megatron"  # the software stack it is priced for (planner.cost.runtimes)
    optimizer: str = "adamw"  # OPTIMIZER_NAMES, priced by planner.cost.states.OPTIMIZERS
    # under fp8: FP8_RECIPE_NAMES, the scaling recipe the runtime runs; "": the runtime's default
    fp8_recipe: str = ""


@dataclass(frozen=True)
class Plan:
    model: Model
    cluster: Cluster
    training: Training
    stages: tuple[Stage, ...]

    @property
    def pp(self) -> int:
        return 1 + max(s.pipeline_rank for s in self.stages)

    @property
    def num_microbatches(self) -> int:
        """Pipeline length: micro-batches of the busiest replica."""
        return max(r.batch_share for s in self.stages for r in s.replicas) // self.training.micro_batch

    def used_ranks(self) -> list[int]:
        ranks: set[int] = set()
        for stage in self.stages:
            for replica in stage.replicas:
                ranks.update(replica.ranks)
        return sorted(ranks)


def even_split(num_items: int, parts: int) -> list[int]:
    """Sizes of `parts` contiguous chunks as even as possible; extra items go to the middle
    chunks first (the first chunk also carries the embedding, the last the head)."""
    if parts <= 0 or num_items < parts:
        raise BadInput(f"cannot split {num_items} decoder layers into {parts} pipeline chunks",
                       field="--pp")
    sizes = [num_items // parts] * parts
    order = list(range(1, parts - 1)) + [0, parts - 1] if parts > 2 else list(range(parts))
    for i in range(num_items % parts):
        sizes[order[i]] += 1
    return sizes


def uniform_plan(model: Model, cluster: Cluster, training: Training, *, tp: int, pp: int, dp: int,
                 zero: int = 0, recompute: str = "none", sequence_parallel: bool = False, cp: int = 1,
                 cp_kind: str = "ring", ep: int = 1, etp: int = 0, recompute_layers: int = 0,
                 offload: bool = False, offload_activations: int = 0) -> Plan:
    """The configuration a Megatron-LM user would launch (formats.md section 4):
    TP x CP x PP x DP ranks laid out TP-innermost, then CP, then DP, then PP (Megatron-core's
    order tp-cp-ep-dp-pp); decoder layers split as evenly as possible over PP x V chunks;
    equal batch shares. Expert parallelism `ep` (and expert TP `etp`) is carved from the
    TP x CP x DP ranks (Megatron-core MoE parallel folding: the experts' grid etp-ep-edp). Recompute
    "block" recomputes the first `recompute_layers` decoder blocks of every chunk (all of a
    smaller chunk's). Activation offload moves the first `offload_activations` decoder blocks'
    saved activations of every chunk (all of a smaller chunk's) to host memory."""
    problem = StageDims(tp, dp=dp, cp=cp, ep=ep, etp=etp).expert_problem(
        model.config.num_experts if model.config else 1)
    if problem:
        raise BadInput(problem, field="--ep/--etp")
    if tp * cp * pp * dp != cluster.num_gpus:
        shown = f"tp x cp x pp x dp = {tp}x{cp}x{pp}x{dp}" if cp > 1 else f"tp x pp x dp = {tp}x{pp}x{dp}"
        raise BadInput(f"{shown} = {tp * cp * pp * dp}, but the cluster has "
                       f"{cluster.num_gpus} GPUs", field="--tp/--pp/--dp" + ("/--cp" if cp > 1 else ""))
    cp_problem = context_parallel_problem(model, training, tp, cp, cp_kind)
    if cp_problem:
        raise BadInput(cp_problem, field="--cp")
    if training.global_batch % dp:
        raise BadInput(f"global batch {training.global_batch} does not divide over dp={dp} replicas",
                       field="--global-batch")
    share = training.global_batch // dp
    if share % training.micro_batch:
        raise BadInput(f"micro-batch {training.micro_batch} does not divide a replica's batch of {share}",
                       field="--micro-batch")
    v = training.virtual_stages
    chunks = pp * v
    decoder = [layer for layer in model.layers if layer.kind == "decoder"]
    if not decoder:  # a profile without marked decoder layers: split all layers
        sizes = even_split(model.num_layers, chunks)
        starts = [0]
    else:
        sizes = even_split(len(decoder), chunks)
        starts = [decoder[0].index]
    bounds = []
    position = starts[0]
    for c, size in enumerate(sizes):
        first = 0 if c == 0 else position
        position += size
        end = model.num_layers if c == chunks - 1 else position
        bounds.append((first, end))
    stages = []
    group = tp * cp
    schedule = SCHEDULES.get(training.schedule)
    for c, (first, end) in enumerate(bounds):
        p_rank = schedule.chunk_rank(c, pp, v) if schedule is not None else c % pp
        replicas = tuple(
            Replica(d, share, tuple(p_rank * group * dp + d * group + i for i in range(group)))
            for d in range(dp))
        blocks = sum(1 for layer in model.layers[first:end] if layer.kind == "decoder")
        k = min(recompute_layers, blocks) if recompute == "block" else 0
        stages.append(Stage(c, (first, end), tp, zero, recompute, replicas, p_rank, sequence_parallel, cp, cp_kind,
                            ep, etp, k, offload, min(offload_activations, blocks)))
    return Plan(model, cluster, training, tuple(stages))


def context_parallel_problem(model: Model, training: Training, tp: int, cp: int, cp_kind: str) -> str:
    """Why `cp` ranks of kind `cp_kind` cannot share this training's sequences ('' when they can):
    dims.context_parallel_problem on the model's heads and the training's shape."""
    heads = model.config.num_heads if model.config is not None else None
    return dims_cp_problem(training.seq_len, training.attention, heads, tp, cp, cp_kind)


# --- JSON ----------------------------------------------------------------------------------


def fp8_recipe_problem(recipe: object, dtype: str) -> str:
    """Why `recipe` cannot be a training's fp8_recipe under `dtype` ('' when it can): one of
    FP8_RECIPE_NAMES, and only under fp8 ("" is always fine: the runtime's default)."""
    if recipe == "":
        return ""
    if recipe not in FP8_RECIPE_NAMES:
        return f"unknown fp8 recipe {recipe!r}, expected one of {', '.join(FP8_RECIPE_NAMES)}"
    if dtype != "fp8":
        return f"an fp8 recipe ({recipe}) needs dtype fp8, not {dtype}"
    return ""


def plan_to_json(plan: Plan, predicted: Mapping[str, Any] | None = None,
                 solver: Mapping[str, Any] | None = None) -> dict:
    t = plan.training
    out = {
        "format": PLAN_FORMAT,
        "model": {"name": plan.model.name, "num_layers": plan.model.num_layers,
                  "params": plan.model.params, "config": dict(plan.model.raw)},
        "cluster": {"name": plan.cluster.name, "num_gpus": plan.cluster.num_gpus,
                    "spec": dict(plan.cluster.spec)},
        "training": {"global_batch": t.global_batch, "seq_len": t.seq_len, "dtype": t.dtype,
                     "micro_batch": t.micro_batch, "num_microbatches": plan.num_microbatches,
                     "schedule": t.schedule, "virtual_stages": t.virtual_stages,
                     "attention": t.attention, "runtime": t.runtime,
                     **({"optimizer": t.optimizer} if t.optimizer != "adamw" else {}),
                     **({"fp8_recipe": t.fp8_recipe} if t.fp8_recipe else {})},
        "stages": [
            {"index": s.index, "layers": list(s.layers), "tp": s.tp, "dp": s.dp, "zero": s.zero,
             "recompute": s.recompute, "sequence_parallel": s.sequence_parallel,
             **({"cp": s.cp, "cp_kind": s.cp_kind} if s.cp > 1 else {}),
             "pipeline_rank": s.pipeline_rank, **_expert_keys(s),
             **({"recompute_layers": s.recompute_layers} if s.recompute == "block" else {}),
             **({"offload": True} if s.offload else {}),
             **({"offload_activations": s.offload_activations} if s.offload_activations else {}),
             "replicas": [{"dp_rank": r.dp_rank, "batch_share": r.batch_share, "ranks": list(r.ranks)}
                          for r in s.replicas]}
            for s in plan.stages],
        "devices": [plan.cluster.device(rank).to_json() for rank in plan.used_ranks()],
    }
    if predicted is not None:
        out["predicted"] = dict(predicted)
    if solver is not None:
        out["solver"] = dict(solver)
    return out


def _expert_keys(s: Stage) -> dict:
    """A stage's `ep` and `etp` (formats.md section 6: written when used): etp as it runs."""
    if s.ep == 1 and not s.etp:
        return {}
    return {"ep": s.ep, "etp": s.dims.expert_tp}


def _int(data: Mapping[str, Any], key: str, where: str, path: str, minimum: int = 1) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadInput(f"must be an integer >= {minimum}, got {value!r}", where, f"{path}.{key}")
    if value > MAX_NUMBER:
        raise BadInput(f"must be at most {MAX_NUMBER:.0e}", where, f"{path}.{key}")
    return value


def _bool(data: Mapping[str, Any], key: str, where: str, path: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):  # "false" is not false
        raise BadInput(f"must be true or false, got {value!r}", where, f"{path}.{key}")
    return value


def plan_from_json(data: Mapping[str, Any], where: str = "plan") -> Plan:
    """Rebuild a Plan from its JSON form (self-contained: model config and cluster spec inside)."""
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise BadInput(f"not a plan file (format must be {PLAN_FORMAT!r})", where, "format")
    for key in ("model", "cluster", "training", "stages"):
        if not isinstance(data.get(key), (dict if key != "stages" else list)):
            raise BadInput("missing or malformed", where, key)
    config = data["model"].get("config")
    if not isinstance(config, dict) or not config:
        raise BadInput("missing the model's config", where, "model.config")
    model = model_from_dict(config, check_name(data["model"].get("name", "model"), where, "model.name"),
                            f"{where}: model.config")
    spec = data["cluster"].get("spec")
    if not isinstance(spec, dict) or not spec:
        raise BadInput("missing the cluster spec", where, "cluster.spec")
    if "name" in data["cluster"]:
        cluster_name = check_name(data["cluster"]["name"], where, "cluster.name")
        if not spec.get("name"):  # the spec of a cluster file without `name:` (named by its file)
            spec = {**spec, "name": cluster_name}
    cluster = cluster_from_spec(spec, f"{where}: cluster.spec")
    tr = data["training"]
    dtype = tr.get("dtype")
    if dtype not in ("fp32", "fp16", "bf16", "fp8"):
        raise BadInput(f"unknown dtype {dtype!r}", where, "training.dtype")
    lacking = [g.name for g in cluster.gpu_types if not g.supports(dtype)]
    if lacking:
        raise BadInput(f"{', '.join(lacking)} has no {dtype} support", where, "training.dtype")
    schedule = tr.get("schedule", "1f1b")
    if not isinstance(schedule, str) or schedule not in SCHEDULES:
        raise BadInput(f"unknown schedule {schedule!r}", where, "training.schedule")
    attention = tr.get("attention", "flash")
    if attention not in ("flash", "standard"):
        raise BadInput(f"unknown attention {attention!r}", where, "training.attention")
    optimizer = tr.get("optimizer", "adamw")
    if optimizer not in OPTIMIZER_NAMES:
        raise BadInput(f"unknown optimizer {optimizer!r}", where, "training.optimizer")
    fp8_recipe = tr.get("fp8_recipe", "")
    problem = fp8_recipe_problem(fp8_recipe, dtype)
    if problem:
        raise BadInput(problem, where, "training.fp8_recipe")
    training = Training(
        global_batch=ranges.get(tr, "global_batch", "global_batch", where, "training.global_batch"),
        seq_len=ranges.get(tr, "seq_len", "seq_len", where, "training.seq_len"),
        dtype=dtype, micro_batch=ranges.get(tr, "micro_batch", "micro_batch", where, "training.micro_batch"),
        schedule=schedule, virtual_stages=ranges.get(tr, "virtual_stages", "virtual_stages", where,
                                                     "training.virtual_stages", required=False, default=1),
        attention=attention, runtime=get_str(tr, "runtime", where, "training.runtime", required=False, default="megatron"),
        optimizer=optimizer, fp8_recipe=fp8_recipe)
    stages = []
    for i, st in enumerate(data["stages"]):
        path = f"stages[{i}]"
        if not isinstance(st, dict):
            raise BadInput("must be a mapping", where, path)
        layers = st.get("layers")
        if (not isinstance(layers, list) or len(layers) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in layers)):
            raise BadInput("must be [first, end)", where, f"{path}.layers")
        recompute = st.get("recompute", "none")
        if recompute not in STAGE_RECOMPUTE_MODES:
            raise BadInput(f"unknown recompute {recompute!r}", where, f"{path}.recompute")
        recompute_layers = _int(st, "recompute_layers", where, path, 0) if recompute == "block" else 0
        zero = st.get("zero", 0)
        if zero not in (0, 1, 2, 3):
            raise BadInput(f"must be 0-3, got {zero!r}", where, f"{path}.zero")
        replicas = []
        raw_replicas = st.get("replicas")
        if not isinstance(raw_replicas, list) or not raw_replicas:
            raise BadInput("must be a non-empty list", where, f"{path}.replicas")
        for j, rep in enumerate(raw_replicas):
            rpath = f"{path}.replicas[{j}]"
            if not isinstance(rep, dict):
                raise BadInput("must be a mapping", where, rpath)
            ranks = rep.get("ranks")
            if (not isinstance(ranks, list) or not ranks
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in ranks)):
                raise BadInput("must be a non-empty list of ranks", where, f"{rpath}.ranks")
            replicas.append(Replica(_int(rep, "dp_rank", where, rpath, 0),
                                    _int(rep, "batch_share", where, rpath, 0), tuple(ranks)))
        cp = _int(st, "cp", where, path) if "cp" in st else 1
        cp_kind = st.get("cp_kind", "ring")
        if cp_kind not in CP_KINDS:
            raise BadInput(f"unknown context-parallel kind {cp_kind!r} (known: {', '.join(CP_KINDS)})", where,
                           f"{path}.cp_kind")
        stages.append(Stage(
            index=_int(st, "index", where, path, 0), layers=(layers[0], layers[1]),
            tp=ranges.get(st, "tp", "degree", where, f"{path}.tp"), zero=zero, recompute=recompute,
            replicas=tuple(replicas),
            pipeline_rank=_int(st, "pipeline_rank", where, path, 0) if "pipeline_rank" in st else i,
            sequence_parallel=_bool(st, "sequence_parallel", where, path), cp=cp, cp_kind=cp_kind,
            ep=ranges.get(st, "ep", "degree", where, f"{path}.ep") if "ep" in st else 1,
            etp=ranges.get(st, "etp", "degree", where, f"{path}.etp") if "etp" in st else 0,
            recompute_layers=recompute_layers, offload=_bool(st, "offload", where, path),
            offload_activations=_int(st, "offload_activations", where, path, 0) if "offload_activations" in st else 0))
    if not stages:
        raise BadInput("a plan needs at least one stage", where, "stages")
    return Plan(model, cluster, training, tuple(stages))


# --- structural validation ---------------------------------------------------------------


def _expert_problems(plan: Plan, s: Stage, path: str) -> list[tuple[str, str]]:
    """Expert parallelism: its degrees fit the model and the stage (StageDims.expert_problem),
    and the replicas of one EP group take equal batch shares (their all-to-alls run in lock-step)."""
    if s.ep == 1 and not s.etp:
        return []
    c = plan.model.config
    problem = s.dims.expert_problem(c.num_experts if c is not None else 1)
    if problem:
        return [(f"{path}.ep", problem)]
    dims = s.dims
    size = dims.group_gpus  # a replica: cp groups of tp ranks
    if len({len(r.ranks) for r in s.replicas}) != 1 or len(s.replicas[0].ranks) != size:
        return []  # reported with the ranks
    replicas = sorted(s.replicas, key=lambda r: r.dp_rank)
    for j in range(len(replicas)):
        shares = {replicas[q // size].batch_share for q in dims.ep_group(j * size)}
        if len(shares) > 1:
            return [(f"{path}.replicas", f"the replicas of one expert-parallel group (ep={s.ep}) take "
                                         f"different batch shares {sorted(shares)}; their all-to-alls run in lock-step")]
    return []


def structural_problems(plan: Plan) -> list[tuple[str, str]]:
    """Every invariant a plan must hold, except memory (the cost model checks that).

    Returns (json_path, message) pairs; empty when the plan is valid.
    """
    problems: list[tuple[str, str]] = []
    t = plan.training
    n_gpus = plan.cluster.num_gpus
    expected_first = 0
    seen_by_prank: dict[int, set[int]] = {}
    first_stage: dict[int, int] = {}  # pipeline rank -> its first stage
    owner: dict[int, int] = {}
    for i, s in enumerate(plan.stages):
        path = f"stages[{i}]"
        first, end = s.layers
        if first != expected_first:
            problems.append((f"{path}.layers", f"starts at layer {first}, expected {expected_first}"))
        if end <= first:
            problems.append((f"{path}.layers", f"empty or reversed range [{first}, {end})"))
        expected_first = end
        if s.index != i:
            problems.append((f"{path}.index", f"is {s.index}, expected {i} (stages in layer order)"))
        total = 0
        ranks_here: set[int] = set()
        dp_ranks: set[int] = set()
        for j, r in enumerate(s.replicas):
            rpath = f"{path}.replicas[{j}]"
            if r.dp_rank in dp_ranks:
                problems.append((f"{rpath}.dp_rank", f"dp_rank {r.dp_rank} appears twice in one stage"))
            elif r.dp_rank >= s.dp:
                problems.append((f"{rpath}.dp_rank", f"is {r.dp_rank}, outside 0..{s.dp - 1} "
                                                     f"(the stage has {s.dp} replicas)"))
            dp_ranks.add(r.dp_rank)
            if len(r.ranks) != s.tp * s.cp:
                problems.append((f"{rpath}.ranks", f"has {len(r.ranks)} ranks but tp={s.tp}" if s.cp == 1 else
                                 f"has {len(r.ranks)} ranks but tp x cp = {s.tp}x{s.cp} = {s.tp * s.cp}"))
            if r.batch_share % t.micro_batch:
                problems.append((f"{rpath}.batch_share",
                                 f"{r.batch_share} is not a whole number of micro-batches of {t.micro_batch}"))
            total += r.batch_share
            for rank in r.ranks:
                if not 0 <= rank < n_gpus:
                    problems.append((f"{rpath}.ranks", f"rank {rank} is outside 0..{n_gpus - 1}"))
                if rank in ranks_here:
                    problems.append((f"{rpath}.ranks", f"rank {rank} used twice in one stage"))
                ranks_here.add(rank)
        cp_problem = context_parallel_problem(plan.model, t, s.tp, s.cp, s.cp_kind)
        if cp_problem:
            problems.append((f"{path}.cp", cp_problem))
        if total != t.global_batch:
            problems.append((f"{path}.replicas", f"batch shares sum to {total}, not the global batch {t.global_batch}"))
        problems += _expert_problems(plan, s, path)
        # without interleaving, stage i is pipeline rank i (trainers place stages by position)
        if t.virtual_stages == 1 and s.pipeline_rank in seen_by_prank:
            problems.append((f"{path}.pipeline_rank", f"pipeline rank {s.pipeline_rank} already runs stage "
                                                      f"{first_stage[s.pipeline_rank]}; stages share a pipeline "
                                                      "rank only when interleaved (virtual_stages > 1)"))
            continue
        if t.virtual_stages == 1 and s.pipeline_rank != i:
            problems.append((f"{path}.pipeline_rank", f"is {s.pipeline_rank}, expected {i}: without "
                                                      "interleaving, stage i runs on pipeline rank i"))
        # stages of one pipeline rank (virtual stages) share devices; different ranks may not
        if s.pipeline_rank in seen_by_prank:
            if seen_by_prank[s.pipeline_rank] != ranks_here:
                problems.append((f"{path}.replicas", "virtual stages of one pipeline rank must use the same devices"))
        else:
            seen_by_prank[s.pipeline_rank] = ranks_here
            first_stage[s.pipeline_rank] = i
            for rank in ranks_here:
                if rank in owner:
                    problems.append((f"{path}.replicas",
                                     f"rank {rank} is already used by pipeline rank {owner[rank]}"))
                owner[rank] = s.pipeline_rank
    if expected_first != plan.model.num_layers:
        problems.append(("stages", f"layers end at {expected_first}, the model has {plan.model.num_layers}"))
    pranks = sorted(seen_by_prank)
    if pranks != list(range(len(pranks))):
        problems.append(("stages", f"pipeline ranks {pranks} are not 0..{len(pranks) - 1}"))
    v = t.virtual_stages
    if v > 1 and len(plan.stages) != len(pranks) * v:
        problems.append(("stages", f"{len(plan.stages)} stages, expected pp x v = {len(pranks)} x {v}"))
    schedule = SCHEDULES.get(t.schedule)
    chunk_rank = schedule.chunk_rank if schedule is not None else (lambda c, pp, v: c % pp)
    if v > 1 and any(s.pipeline_rank != chunk_rank(s.index, len(pranks), v) for s in plan.stages):
        problems.append(("stages", f"the {t.schedule} schedule's stages must follow its placement over the "
                                   "pipeline ranks (interleaved: cycle in order; zbv: down, then back up)"))
    if schedule is not None and schedule.split_backward and pranks:
        fewest = min(r.batch_share // t.micro_batch for s in plan.stages for r in s.replicas)
        if fewest < len(pranks):
            # the zero-bubble bubbles hold with at least p micro-batches (Qi et al. 2023, sec 3.1)
            problems.append(("training.schedule", f"{t.schedule} needs at least pp = {len(pranks)} micro-batches "
                             f"on every replica; one has {fewest}"))
    if schedule is not None and v > 1 and not schedule.accepts_virtual_stages(v):
        problems.append(("training.virtual_stages", f"{v} virtual stages need the {schedules.search_schedule(v).name} "
                         "schedule"))
    return problems


def rank_ranges(ranks: list[int]) -> str:
    """Sorted ranks as ranges for people: [0, 1, 2, 3, 8, 9] -> '0-3,8-9'."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(f"{start}-{r}" if r != start else str(start))
            start = None
    return ",".join(parts)
