"""`planner validate`: check a plan or layer-profile file and list every problem.

A plan gets the checks of planner.verify.plan_checks (schema, invariants and consistency, memory),
the same that every command reading a plan runs through plan_checks.load_plan_file, then those of
planner.verify.figures: the figures it reports (model.params, predicted) are recomputed.

A layer profile is checked against profile.schema.json, then read as a model and, where it
carries measured times, as measurements (their lengths must agree).

Problems are (json_path, message) pairs; paths read like `stages[1].replicas[0].batch_share`
("" is the top level).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core.errors import BadInput
from ..plan import PLAN_FORMAT
from .figures import Reprice, figure_check
from .plan_checks import Problem, bad_input_problem, check_plan_data, schema_problems

PROFILE_FORMAT = "planner.profile/v1"


# --- profile -----------------------------------------------------------------------------------


def validate_profile_data(data: Any, where: str = "profile") -> list[Problem]:
    """Every problem of a parsed layer-profile file, as (json_path, message) pairs; [] when valid."""
    from ..inputs.measured import measured_from_profile
    from ..inputs.model import model_from_dict

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
        return [bad_input_problem(exc, where)]
    return []


# --- a file of either kind --------------------------------------------------------------------


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
    """One line about a valid file."""
    if kind == "plan":
        t, model, cluster, stages = data["training"], data.get("model", {}), data.get("cluster", {}), data["stages"]
        ranks = {r for s in stages for rep in s["replicas"] for r in rep["ranks"]}
        pp = 1 + max(s.get("pipeline_rank", i) for i, s in enumerate(stages))
        return (f"plan {model.get('name', '?')} on {cluster.get('name', '?')}: {len(ranks)} of "
                f"{cluster.get('num_gpus', '?')} GPUs, {len(stages)} stage{'s' if len(stages) != 1 else ''} "
                f"(pp {pp}), global batch {t.get('global_batch')} x {t.get('seq_len')}, {t.get('dtype')}"
                f"{', torch.compile' if t.get('compile') else ''}, "
                f"micro-batch {t.get('micro_batch')}; fits in memory")
    layers = data["layers"]
    measured = any(isinstance(layer, dict) and "measured" in layer for layer in layers)
    return (f"layer profile {data.get('model', '?')} ({data.get('source', '?')}, {data.get('dtype', '?')}, "
            f"seq-len {data.get('seq_len')}, {len(layers)} layers{', with measured times' if measured else ''})")


def validate_plan_file_data(data: Any, reprice: Reprice, where: str = "plan") -> tuple[list[Problem], list[str]]:
    """(problems, notes) of a parsed plan file: plan_checks.check_plan_data, then, when that
    passed, figures.figure_check (what the plan reports, recomputed; `predicted` with `reprice`)."""
    plan, problems = check_plan_data(data, where)
    if problems or plan is None:
        return problems, []
    return figure_check(data, plan, reprice)


def validate_file(path: str, reprice: Reprice) -> tuple[str | None, Any, list[Problem], list[str]]:
    """Read and check FILE: (kind, data, problems, notes); a note says what was not checked.
    `reprice` prices a plan as `evaluate --plan` does (figures.Reprice). Raises BadInput when the
    file cannot be read or parsed."""
    from ..core.io import parse_structured, read_text

    data = parse_structured(read_text(path, "file"), path)
    kind = detect_kind(data)
    if kind is None:
        what = "a mapping" if isinstance(data, dict) else f"{type(data).__name__}, not a mapping"
        return None, data, [("format", f"neither {PLAN_FORMAT!r} nor {PROFILE_FORMAT!r} ({what})")], []
    if kind == "plan":
        return kind, data, *validate_plan_file_data(data, reprice, path)
    return kind, data, validate_profile_data(data, path), []
