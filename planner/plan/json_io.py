"""A plan's JSON form (formats.md section 5): written and read back, every field checked."""

from __future__ import annotations

from typing import Any, Mapping

from ..core.dims import CP_KINDS
from ..core.errors import BadInput
from ..inputs.devices import QUANTIZED_FORMATS
from ..inputs.hardware import Cluster, cluster_from_spec
from ..core import ranges
from ..core.io import MAX_NUMBER, get_str
from ..inputs.model import Model, model_from_dict, with_bf16_layers
from ..core.names import check_name
from ..core.runtime_default import DEFAULT_RUNTIME
from .types import (FP8_RECIPE_NAMES, MOE_DISPATCHERS, OPTIMIZER_NAMES, PLAN_FORMAT, SCHEDULES, STAGE_RECOMPUTE_MODES,
                    Plan, Replica, Stage, Training)


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
                     **({"fp8_recipe": t.fp8_recipe} if t.fp8_recipe else {}),
                     **({"compile": True} if t.compile else {}),
                     **({"tf32_matmul": t.tf32_matmul} if t.tf32_matmul is not None else {}),
                     **({"moe_dispatcher": t.moe_dispatcher} if t.moe_dispatcher != "alltoall" else {}),
                     **({"fp8_all_gather": True} if t.fp8_all_gather else {}),
                     **({"bf16_layers": list(t.bf16_layers)} if t.bf16_layers != (0, 0) else {})},
        "stages": [
            {"index": s.index, "layers": list(s.layers), "tp": s.tp, "dp": s.dp, "zero": s.zero,
             "recompute": s.recompute, "sequence_parallel": s.sequence_parallel,
             **({"cp": s.cp, "cp_kind": s.cp_kind} if s.cp > 1 else {}),
             "pipeline_rank": s.pipeline_rank, **_expert_keys(s),
             **({"recompute_layers": s.recompute_layers} if s.recompute == "block" else {}),
             **({"offload": True} if s.offload else {}),
             **({"offload_activations": s.offload_activations} if s.offload_activations else {}),
             **({"power_cap_W": s.power_cap_W} if s.power_cap_W else {}),
             **({"tp_shares": {"heads": list(s.tp_heads), "ffn": list(s.tp_ffn)}} if s.uneven_tp else {}),
             "replicas": [{"dp_rank": r.dp_rank, "batch_share": r.batch_share, "ranks": list(r.ranks),
                           **({"tp": r.tp} if r.tp and r.tp != s.tp else {})} for r in s.replicas]}
            for s in plan.stages],
        "devices": [plan.cluster.device(rank).to_json() for rank in plan.used_ranks()],
    }
    if predicted is not None:
        out["predicted"] = dict(predicted)
    if solver is not None:
        out["solver"] = dict(solver)
    return out


def _expert_keys(stage: Stage) -> dict:
    """A stage's `ep` and `etp` (formats.md section 6: written when used): etp as it runs."""
    if stage.ep == 1 and not stage.etp:
        return {}
    return {"ep": stage.ep, "etp": stage.dims.expert_tp}


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


def tf32_problem(tf32_matmul: bool | None, dtype: str) -> str:
    """Why a training cannot state `tf32_matmul` under `dtype` ('' when it can): only fp32 GEMMs
    have a TF32 path (None, the runtime's default, is always fine)."""
    if tf32_matmul is None or dtype == "fp32":
        return ""
    return f"the TF32 setting applies to dtype fp32 only, not {dtype}"


def moe_dispatcher_problem(dispatcher: object, model: Model) -> str:
    """Why a training of `model` cannot use the token dispatcher `dispatcher` ('' when it can): one
    of MOE_DISPATCHERS, and only for a model with experts (a dense model dispatches no tokens)."""
    if dispatcher not in MOE_DISPATCHERS:
        return f"unknown MoE dispatcher {dispatcher!r}, expected one of {', '.join(MOE_DISPATCHERS)}"
    c = model.config
    if c is None or c.num_experts <= 1:
        return f"an MoE dispatcher ({dispatcher}) needs a model with experts; {model.name} is dense"
    return ""


def _tf32(tr: Mapping[str, Any], dtype: str, where: str) -> bool | None:
    """training.tf32_matmul: true, false, or absent (None: the runtime's default)."""
    if "tf32_matmul" not in tr:
        return None
    value = _bool(tr, "tf32_matmul", where, "training")
    problem = tf32_problem(value, dtype)
    if problem:
        raise BadInput(problem, where, "training.tf32_matmul")
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
    training = _training_from_json(data["training"], cluster, where)
    if "moe_dispatcher" in data["training"]:
        problem = moe_dispatcher_problem(training.moe_dispatcher, model)
        if problem:
            raise BadInput(problem, where, "training.moe_dispatcher")
    try:
        model = with_bf16_layers(model, training.bf16_layers)
    except BadInput as exc:
        raise BadInput(exc.message, where, "training.bf16_layers") from None
    stages = [_stage_from_json(st, i, where) for i, st in enumerate(data["stages"])]
    if not stages:
        raise BadInput("a plan needs at least one stage", where, "stages")
    return Plan(model, cluster, training, tuple(stages))


def _training_from_json(tr: Mapping[str, Any], cluster: Cluster, where: str) -> Training:
    """The plan's `training` mapping, checked against the cluster's GPUs."""
    dtype = tr.get("dtype")
    if dtype not in ("fp32", "fp16", "bf16", *QUANTIZED_FORMATS):
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
    fp8_all_gather = _bool(tr, "fp8_all_gather", where, "training")
    if fp8_all_gather and dtype != "fp8":
        raise BadInput(f"the fp8 all-gather needs dtype fp8, not {dtype}", where, "training.fp8_all_gather")
    kept = tr.get("bf16_layers", [0, 0])
    if not isinstance(kept, list) or len(kept) != 2 or any(not isinstance(n, int) or isinstance(n, bool) or n < 0
                                                           for n in kept):
        raise BadInput(f"must be [START, END], two whole numbers >= 0, got {kept!r}", where, "training.bf16_layers")
    if kept != [0, 0] and dtype not in QUANTIZED_FORMATS:
        raise BadInput(f"keeping decoder layers in bf16 needs a quantized dtype, not {dtype}", where,
                       "training.bf16_layers")
    return Training(
        global_batch=ranges.get(tr, "global_batch", "global_batch", where, "training.global_batch"),
        seq_len=ranges.get(tr, "seq_len", "seq_len", where, "training.seq_len"),
        dtype=dtype, micro_batch=ranges.get(tr, "micro_batch", "micro_batch", where, "training.micro_batch"),
        schedule=schedule, virtual_stages=ranges.get(tr, "virtual_stages", "virtual_stages", where,
                                                     "training.virtual_stages", required=False, default=1),
        attention=attention,
        runtime=get_str(tr, "runtime", where, "training.runtime", required=False, default=DEFAULT_RUNTIME),
        optimizer=optimizer, fp8_recipe=fp8_recipe, compile=_bool(tr, "compile", where, "training"),
        tf32_matmul=_tf32(tr, dtype, where),
        moe_dispatcher=get_str(tr, "moe_dispatcher", where, "training.moe_dispatcher", required=False,
                               default="alltoall"),
        fp8_all_gather=fp8_all_gather, bf16_layers=(kept[0], kept[1]))


def _stage_from_json(st: Any, index: int, where: str) -> Stage:
    """Stage `index` of the plan's `stages` list."""
    path = f"stages[{index}]"
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
    tp = ranges.get(st, "tp", "degree", where, f"{path}.tp")
    replicas = _replicas_from_json(st, path, where, tp)
    heads, ffn = _tp_shares(st.get("tp_shares"), where, f"{path}.tp_shares")
    cp = _int(st, "cp", where, path) if "cp" in st else 1
    cp_kind = st.get("cp_kind", "ring")
    if cp_kind not in CP_KINDS:
        raise BadInput(f"unknown context-parallel kind {cp_kind!r} (known: {', '.join(CP_KINDS)})", where,
                       f"{path}.cp_kind")
    return Stage(
        index=_int(st, "index", where, path, 0), layers=(layers[0], layers[1]),
        tp=tp, zero=zero, recompute=recompute,
        replicas=replicas,
        pipeline_rank=_int(st, "pipeline_rank", where, path, 0) if "pipeline_rank" in st else index,
        sequence_parallel=_bool(st, "sequence_parallel", where, path), cp=cp, cp_kind=cp_kind,
        ep=ranges.get(st, "ep", "degree", where, f"{path}.ep") if "ep" in st else 1,
        etp=ranges.get(st, "etp", "degree", where, f"{path}.etp") if "etp" in st else 0,
        recompute_layers=recompute_layers, offload=_bool(st, "offload", where, path),
        offload_activations=_int(st, "offload_activations", where, path, 0) if "offload_activations" in st else 0,
        power_cap_W=ranges.get(st, "power_cap_W", "power_W", where, f"{path}.power_cap_W", required=False) or 0.0,
        tp_heads=heads, tp_ffn=ffn)


def _tp_shares(raw: Any, where: str, path: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A stage's optional `tp_shares`: {heads: [...], ffn: [...]}, one positive count per TP position."""
    if raw is None:
        return (), ()
    if not isinstance(raw, dict) or set(raw) != {"heads", "ffn"}:
        raise BadInput("must be a mapping of heads and ffn, one list each", where, path)
    out = []
    for key in ("heads", "ffn"):
        values = raw[key]
        if (not isinstance(values, list) or not values
                or not all(type(x) is int and x > 0 for x in values)):
            raise BadInput("must be a non-empty list of positive whole numbers, one per TP rank", where, f"{path}.{key}")
        out.append(tuple(values))
    return out[0], out[1]


def _replicas_from_json(st: Mapping[str, Any], path: str, where: str, stage_tp: int) -> tuple[Replica, ...]:
    """A stage's `replicas` list; a replica's `tp` equal to the stage's `stage_tp` is the default (0)."""
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
        tp = ranges.get(rep, "tp", "degree", where, f"{rpath}.tp") if "tp" in rep else 0
        replicas.append(Replica(_int(rep, "dp_rank", where, rpath, 0),
                                _int(rep, "batch_share", where, rpath, 0), tuple(ranks),
                                0 if tp == stage_tp else tp))
    return tuple(replicas)


# --- structural validation ---------------------------------------------------------------
