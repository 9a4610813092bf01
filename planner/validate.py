"""`planner validate`: check a plan or layer-profile file and list every problem.

A plan is checked in three passes, each only when the one before passed (a later pass needs
the earlier one's guarantees):

1. the JSON Schema (planner/data/plan.schema.json, draft 2020-12): keys, types, ranges;
2. the plan's invariants (plan.structural_problems) and its self-consistency (the counts it
   repeats match what it describes; `devices` lists exactly the ranks used, as the cluster
   places them);
3. memory: the plan is re-priced with the cost model and every rank that overflows is listed.

A layer profile is checked against profile.schema.json, then read as a model and, where it
carries measured times, as measurements (their lengths must agree).

Problems are (json_path, message) pairs; paths read like `stages[1].replicas[0].batch_share`
("" is the top level).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any, Iterable, Mapping

import click

from .errors import BadInput
from .io import json_text
from .plan import PLAN_FORMAT

PROFILE_FORMAT = "planner.profile/v1"
SCHEMAS = {"plan": "plan.schema.json", "profile": "profile.schema.json"}
Problem = tuple[str, str]


class SchemaUnavailable(Exception):
    """jsonschema is not installed: only the planner's own checks can run."""


# --- schemas -----------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def load_schema(kind: str) -> dict:
    """The shipped JSON Schema of `kind` ("plan" or "profile")."""
    return json.loads((files("planner") / "data" / SCHEMAS[kind]).read_text(encoding="utf-8"))


def _validator(kind: str) -> Any:
    try:
        from jsonschema import Draft202012Validator
    except ImportError:
        raise SchemaUnavailable("jsonschema is not installed") from None
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


def schema_problems(data: Any, kind: str) -> list[Problem]:
    """Every JSON-Schema violation, sorted by path. Raises SchemaUnavailable without jsonschema."""
    validator = _validator(kind)
    found = []
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


def _bad_input_problem(exc: BadInput, where: str) -> Problem:
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
        if config is not None and config.num_heads % stage.tp:
            problems.append((f"stages[{i}].tp", f"{config.num_heads} attention heads do not split over "
                                                f"tp={stage.tp}"))
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
    from .evaluate import evaluate
    from .hardware import GIB

    estimate = evaluate(plan)
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


def validate_plan_data(data: Any, where: str = "plan", *, schema: bool = True) -> list[Problem]:
    """Every problem of a parsed plan file, as (json_path, message) pairs; [] when valid.

    `schema=False` skips the JSON Schema pass; without jsonschema installed it raises
    SchemaUnavailable (call again with schema=False to run the planner's own checks).
    """
    from .plan import plan_from_json, structural_problems

    if schema:
        problems = schema_problems(data, "plan")
        if problems:
            return problems
    try:
        plan = plan_from_json(data, where)
    except BadInput as exc:
        return [_bad_input_problem(exc, where)]
    problems = structural_problems(plan) + consistency_problems(data, plan)
    if problems:
        return problems
    return memory_problems(data, plan)


# --- profile -----------------------------------------------------------------------------------


def validate_profile_data(data: Any, where: str = "profile", *, schema: bool = True) -> list[Problem]:
    """Every problem of a parsed layer-profile file, as (json_path, message) pairs; [] when valid."""
    from .measured import measured_from_profile
    from .model import model_from_dict

    if schema:
        problems = schema_problems(data, "profile")
        if problems:
            return problems
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        return [("format", f"not a layer profile (format must be {PROFILE_FORMAT!r})")]
    try:
        model_from_dict(data, str(data.get("model", "model")), where)
        layers = data.get("layers")
        if isinstance(layers, list) and any(isinstance(l, dict) and "measured" in l for l in layers):
            measured_from_profile(data, "validate", where)
    except BadInput as exc:
        return [_bad_input_problem(exc, where)]
    return []


# --- the command -------------------------------------------------------------------------------


def detect_kind(data: Any) -> str | None:
    """"plan" or "profile" from the `format` key (or, without one, the keys that are there)."""
    if not isinstance(data, dict):
        return None
    fmt = data.get("format")
    if fmt == PLAN_FORMAT:
        return "plan"
    if fmt == PROFILE_FORMAT:
        return "profile"
    if "stages" in data:
        return "plan"
    if "layers" in data:
        return "profile"
    return None


def summarize(kind: str, data: Mapping[str, Any]) -> str:
    """One line about a valid file (defensive: without jsonschema, optional keys may be absent)."""
    if kind == "plan":
        t, model, cluster, stages = data["training"], data.get("model", {}), data.get("cluster", {}), data["stages"]
        ranks = {r for s in stages for rep in s["replicas"] for r in rep["ranks"]}
        pp = 1 + max(s.get("pipeline_rank", i) for i, s in enumerate(stages))
        return (f"plan {model.get('name', '?')} on {cluster.get('name', '?')}: {len(ranks)} of "
                f"{cluster.get('num_gpus', '?')} GPUs, {len(stages)} stage{'s' if len(stages) != 1 else ''} "
                f"(pp {pp}), global batch {t.get('global_batch')} x {t.get('seq_len')}, {t.get('dtype')}, "
                f"micro-batch {t.get('micro_batch')}; fits in memory")
    layers = data["layers"]
    measured = any(isinstance(layer, dict) and "measured" in layer for layer in layers)
    return (f"layer profile {data.get('model', '?')} ({data.get('source', '?')}, {data.get('dtype', '?')}, "
            f"seq-len {data.get('seq_len')}, {len(layers)} layers{', with measured times' if measured else ''})")


def validate_file(path: str) -> tuple[str | None, Any, list[Problem], bool]:
    """Read and check FILE: (kind, data, problems, schema_checked). Raises BadInput when the
    file cannot be read or parsed."""
    from .io import parse_structured, read_text

    data = parse_structured(read_text(path, "file"), path)
    kind = detect_kind(data)
    if kind is None:
        what = "a mapping" if isinstance(data, dict) else f"{type(data).__name__}, not a mapping"
        return None, data, [("format", f"neither {PLAN_FORMAT!r} nor {PROFILE_FORMAT!r} ({what})")], True
    check = validate_plan_data if kind == "plan" else validate_profile_data
    try:
        return kind, data, check(data, path), True
    except SchemaUnavailable:
        return kind, data, check(data, path, schema=False), False


def add_commands(group: click.Group) -> None:
    """Register `validate` on `group` (the CLI's main group)."""

    @group.command("validate")
    @click.argument("file", metavar="FILE")
    @click.option("--json", "as_json", is_flag=True,
                  help='Print {"valid": ..., "problems": [{"path", "message"}]} on stdout.')
    def validate_command(file: str, as_json: bool) -> None:
        """Check a plan (or layer-profile) file and list every problem.

        A plan is checked against its JSON Schema (shipped in the package), then for the
        invariants a trainer relies on (every rank once, layers covered once in order,
        shares summing to the global batch in whole micro-batches) and, re-priced, for
        memory. Exit 0 when valid, 2 with one `FILE: path: message` line per problem.

        \b
        Example:
          planner plan --model gpt2 --cluster consumer-3090-4090 --global-batch 64 \\
              --seq-len 1024 -o plan.json
          planner validate plan.json
        """
        try:
            kind, data, problems, schema_checked = validate_file(file)
        except BadInput as exc:
            click.echo(f"planner: {exc}", err=True)
            raise SystemExit(2) from None
        if not schema_checked:
            click.echo("planner: warning: jsonschema is not installed, so the JSON Schema was not "
                       "checked (pip install jsonschema); ran the planner's own checks", err=True)
        if as_json:
            click.echo(json_text({"valid": not problems, "kind": kind,
                                   "problems": [{"path": p, "message": m} for p, m in problems]}))
        if problems:
            for path, message in problems:
                click.echo(": ".join(x for x in (file, path, message) if x), err=True)
            raise SystemExit(2)
        if not as_json:
            click.echo(f"valid: {summarize(kind, data)}")
