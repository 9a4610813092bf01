"""Every check of a plan file, in the order `planner validate` runs them, and the one loader
every command uses (load_plan_file, at the end, runs them). No click here.

A plan is checked in three passes, each only when the one before passed (a later pass needs
the earlier one's guarantees):

1. the JSON Schema (planner/data/plan.schema.json, draft 2020-12): keys, types, ranges; "4"
   for 4 or "false" for false is an error, never coerced;
2. the plan's invariants (plan.structural_problems) and its self-consistency (the counts it
   repeats match what it describes; `devices` lists exactly the ranks used, where cluster.spec
   places them, so a spec edited after planning that moves or retypes a used rank is caught),
   and what its runtime (training.runtime) can run (planner.cost.runtimes.capability.violations);
3. memory: the plan is re-priced with the cost model and every rank that overflows is listed.

`predicted` and `model.params` are not compared here: `planner validate` alone recomputes
them (planner.verify.figures), so that a plan priced by another planner version still loads.

Problems are (json_path, message) pairs; paths read like `stages[1].replicas[0].batch_share`
("" is the top level).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any, Iterable, Mapping

from ..core.errors import BadInput
from ..core.io import check_keys
from ..plan import PLAN_FORMAT, Plan, plan_from_json, structural_problems, tp_shares

SCHEMAS = {"plan": "plan.schema.json", "profile": "profile.schema.json"}
Problem = tuple[str, str]


# --- schemas -----------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def load_schema(kind: str) -> dict:
    """The shipped JSON Schema of `kind` ("plan" or "profile")."""
    return json.loads((files("planner") / "data" / SCHEMAS[kind]).read_text(encoding="utf-8"))


def _validator(kind: str) -> Any:
    from jsonschema import Draft202012Validator  # a core dependency, imported when first needed

    return Draft202012Validator(load_schema(kind))


def json_path(parts: Iterable[Any]) -> str:
    """['stages', 1, 'replicas', 0, 'ranks'] -> 'stages[1].replicas[0].ranks'."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _path_key(parts: Iterable[Any]) -> tuple:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in parts)


def unknown_keys(data: Any, kind: str) -> list[tuple[list, str]]:
    """(path parts, message) of the first unknown key of each mapping whose schema lists its
    `properties` and leaves `additionalProperties` unset: such a mapping takes only those keys
    (the schema is the list of documented keys; `model.config` and `cluster.spec` list none,
    and cluster.spec is checked by its own reader)."""
    schema = load_schema(kind)
    found: list[tuple[list, str]] = []

    def walk(node: Any, part: Mapping[str, Any], parts: list) -> None:
        while "$ref" in part:  # "#/$defs/stage"
            part = schema["$defs"][part["$ref"].rsplit("/", 1)[-1]]
        if isinstance(node, dict) and "properties" in part and "additionalProperties" not in part:
            try:
                check_keys(node, part["properties"], None)
            except BadInput as exc:
                found.append((parts + [exc.field], exc.message))
            for key, value in node.items():
                if key in part["properties"]:
                    walk(value, part["properties"][key], parts + [key])
        elif isinstance(node, list) and isinstance(part.get("items"), dict):
            for i, item in enumerate(node):
                walk(item, part["items"], parts + [i])

    walk(data, schema, [])
    return found


def schema_problems(data: Any, kind: str) -> list[Problem]:
    """Every JSON-Schema violation, and every unknown key (unknown_keys), sorted by path."""
    validator = _validator(kind)
    found = [(_path_key(parts), json_path(parts), message) for parts, message in unknown_keys(data, kind)]
    for error in validator.iter_errors(data):
        parts = list(error.absolute_path)
        message = error.message
        if error.validator == "required":  # name the missing key in the path, like the other checks
            missing = next((k for k in error.validator_value
                            if isinstance(error.instance, dict) and k not in error.instance), None)
            if missing is not None:
                parts.append(missing)
                message = "missing required key"
        found.append((_path_key(parts), json_path(parts), message))
    found.sort(key=lambda item: (item[0], item[2]))
    return [(path, message) for _, path, message in found]


# --- plan --------------------------------------------------------------------------------------


def bad_input_problem(exc: BadInput, where: str) -> Problem:
    """A BadInput from the plan reader as a problem; `where` may carry a path prefix
    (`FILE: model.config`) that belongs in front of the field."""
    prefix = ""
    if exc.where and exc.where.startswith(f"{where}: "):
        prefix = exc.where[len(where) + 2:]
    path = ".".join(p for p in (prefix, exc.field or "") if p)
    return path, exc.message


def consistency_problems(data: Mapping[str, Any], plan: Any) -> list[Problem]:
    """What the plan file repeats must match what it describes (trainers read these keys), and
    what a trainer needs of the model: whole attention heads per TP rank, positions to spare."""
    problems: list[Problem] = []
    if data["model"].get("num_layers") != plan.model.num_layers:
        problems.append(("model.num_layers", f"is {data['model'].get('num_layers')}, the model in "
                                             f"model.config has {plan.model.num_layers} layers"))
    if data["cluster"].get("num_gpus") != plan.cluster.num_gpus:
        problems.append(("cluster.num_gpus", f"is {data['cluster'].get('num_gpus')}, cluster.spec has "
                                             f"{plan.cluster.num_gpus} GPUs"))
    given = data["training"].get("num_microbatches")
    if given is not None and given != plan.num_microbatches:
        problems.append(("training.num_microbatches",
                         f"is {given}, the busiest replica runs {plan.num_microbatches} micro-batches"))
    config = plan.model.config
    if config is not None and config.learned_positions and plan.training.seq_len > config.max_positions:
        problems.append(("training.seq_len", f"{plan.training.seq_len} exceeds the model's "
                                             f"{config.max_positions} learned positions"))
    for i, (raw, stage) in enumerate(zip(data["stages"], plan.stages)):
        if raw.get("dp") is not None and raw["dp"] != stage.dp:
            problems.append((f"stages[{i}].dp", f"is {raw['dp']}, the stage has {stage.dp} replicas"))
        degrees = [(f"stages[{i}].tp", stage.tp)] + [(f"stages[{i}].replicas[{j}].tp", r.tp)
                                                     for j, r in enumerate(stage.replicas) if r.tp]
        problems.extend(tp_shares.model_problems(config, stage, f"stages[{i}]"))
        for where, tp in degrees:
            if config is not None and config.tp_problem(tp) and not stage.uneven_tp:
                problems.append((where, config.tp_problem(tp)))
        if stage.recompute == "block" and stage.recompute_layers > stage.decoder_blocks(plan.model):
            problems.append((f"stages[{i}].recompute_layers", f"is {stage.recompute_layers}, the stage has "
                                                            f"{stage.decoder_blocks(plan.model)} decoder blocks"))
        if stage.offload_activations > stage.decoder_blocks(plan.model):
            problems.append((f"stages[{i}].offload_activations", f"is {stage.offload_activations}, the stage has "
                                                               f"{stage.decoder_blocks(plan.model)} decoder blocks"))
        if stage.power_cap_W:
            problems.extend(_cap_problems(plan, stage, f"stages[{i}].power_cap_W"))
    devices = data.get("devices")
    if isinstance(devices, list):
        used = set(plan.used_ranks())
        listed: set[int] = set()
        for j, entry in enumerate(devices):
            rank = entry.get("rank") if isinstance(entry, dict) else None
            if not isinstance(rank, int) or isinstance(rank, bool):
                continue
            if rank in listed:
                problems.append((f"devices[{j}].rank", f"rank {rank} is listed twice"))
            listed.add(rank)
            if rank not in used:
                problems.append((f"devices[{j}].rank", f"rank {rank} is not used by any stage"))
                continue
            if not 0 <= rank < plan.cluster.num_gpus:
                continue  # a stage's rank past the cluster: structural_problems names it
            expected = plan.cluster.device(rank).to_json()
            for key, value in expected.items():
                if key in entry and entry[key] != value:
                    problems.append((f"devices[{j}].{key}",
                                     f"is {entry[key]!r}, cluster.spec places rank {rank} at {value!r}"))
        missing = sorted(used - listed)
        if missing:
            problems.append(("devices", f"ranks {_short_list(missing)} are used by stages but not listed"))
    return problems


def _short_list(items: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(x) for x in items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def memory_problems(data: Mapping[str, Any], plan: Any) -> list[Problem]:
    """Re-price the plan; one problem per rank that does not fit, at its `devices` entry."""
    from ..cost.evaluate import evaluate
    from ..cost.runtimes import training_params
    from ..inputs.hardware import GIB

    estimate = evaluate(plan, training_params(plan.cluster.gpu_types, plan.training))
    index = {}
    for j, entry in enumerate(data.get("devices") or []):
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int):
            index.setdefault(entry["rank"], j)
    problems = []
    for o in sorted(estimate.overflows, key=lambda o: o.rank):
        path = f"devices[{index[o.rank]}]" if o.rank in index else "devices"
        problems.append((path, f"rank {o.rank} ({o.gpu}) needs {o.need_bytes / GIB:.2f} GiB of "
                               f"{o.capacity_bytes / GIB:.2f} GiB (over by {o.over_bytes / GIB:.2f} GiB)"))
    return problems


def runtime_problems(plan: Plan) -> list[Problem]:
    """What the plan's runtime cannot run (capability.violations), at training.runtime; a plan
    for a runtime that cannot run it is planned with `--runtime any`."""
    from ..cost.runtimes.capability import violations

    return [("training.runtime", f"{reason}; plan with --runtime any or for another runtime")
            for reason in violations(plan, plan.training.runtime)]


def check_plan_data(data: Any, where: str = "plan", *,
                    memory: bool = True) -> tuple[Plan | None, list[Problem]]:
    """The plan a parsed plan file describes and every problem of it, as (json_path, message)
    pairs: `planner validate`'s checks, and the loader's. The plan is None when it cannot be
    read; with problems, it is not safe to use.

    `memory=False` skips the re-pricing pass (for `evaluate`, whose job it is).
    """
    problems = schema_problems(data, "plan")
    if problems:
        return None, problems
    try:
        plan = plan_from_json(data, where)
    except BadInput as exc:
        return None, [bad_input_problem(exc, where)]
    problems = structural_problems(plan) + consistency_problems(data, plan)
    if not problems:
        problems = runtime_problems(plan)
    if problems or not memory:
        return plan, problems
    return plan, memory_problems(data, plan)


def validate_plan_data(data: Any, where: str = "plan") -> list[Problem]:
    """Every problem of a parsed plan file, as (json_path, message) pairs; [] when valid."""
    return check_plan_data(data, where)[1]


def load_plan_file(path: str, *, memory: bool = True) -> Plan:
    """Read a plan file and run every check `planner validate` runs (check_plan_data:
    schema, invariants, consistency, memory); BadInput naming the file and the JSON path of the
    first problem. The one way a command reads a plan. `memory=False` is for `evaluate`, which
    reports an overflow itself (exit 1, with its JSON)."""
    from ..core.io import parse_structured, read_text

    data = parse_structured(read_text(path, "plan file"), path)
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise BadInput(f"not a plan file (format must be {PLAN_FORMAT!r})", path, "format")
    plan, problems = check_plan_data(data, path, memory=memory)
    if problems:
        where, message = problems[0]
        more = f" (and {len(problems) - 1} more; see `planner validate`)" if len(problems) > 1 else ""
        raise BadInput(f"invalid plan: {message}{more}", path, where or None)
    assert plan is not None
    return plan


def _cap_problems(plan: Plan, stage, path: str) -> list[Problem]:
    """A stage's power cap outside what one of its GPU types takes (planner.cost.power.check_cap)."""
    from ..cost.power import check_cap

    gpus = {plan.cluster.group_of_rank(rank).gpu.name: plan.cluster.group_of_rank(rank).gpu
            for rep in stage.replicas for rank in rep.ranks if rank < plan.cluster.num_gpus}
    for gpu in gpus.values():
        try:
            check_cap(gpu, stage.power_cap_W, "plan", path)
        except BadInput as exc:
            return [(path, exc.message)]
    return []
