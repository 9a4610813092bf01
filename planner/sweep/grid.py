"""The flags of `planner sweep` that set its rows' PlanRequest, each read from the request field's
declared flag (planner.api.requests: name, type, choices, documented range, default) with the
sweep's own help: an axis gives one row per value (the Combination attribute it names), the
others give every row's request their values as `planner plan` takes them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..api import PlanRequest, require
from ..api.flags import Flag
from ..core.ranges import RANGES


@dataclass(frozen=True)
class SweepFlag:
    """A PlanRequest field as `planner sweep` takes it: `keyword`, its sweep() parameter; `axis`,
    the Combination attribute of a row ("": not an axis); `group`, the block of options it is
    listed in; `low`, a lower bound the CLI checks where the request's flag has none. A required
    axis has no default; the others' rows take the sweep's request's value without the flag."""
    field: str
    keyword: str
    help: str
    group: str
    axis: str = ""
    required: bool = False
    metavar: str | None = None
    low: int | None = None
    show_default: bool = False  # an axis: its one value without the flag, shown in --help


SWEEP_FLAGS = (
    SweepFlag("model", "models", "Catalog name, HF config.json or layer-profile file; repeatable.", "grid", "model",
              required=True, metavar="M"),
    SweepFlag("cluster", "clusters", "Cluster file (YAML/JSON) or built-in example name; repeatable.", "grid",
              "cluster", required=True, metavar="C"),
    SweepFlag("global_batch", "batches", "Sequences per optimizer step; repeatable.", "grid", "global_batch",
              required=True, metavar="B"),
    SweepFlag("seq_len", "seq_lens", "Tokens per sequence; repeatable.", "grid", "seq_len", required=True,
              metavar="S"),
    SweepFlag("time_limit_s", "time_limit", "Stop each search after S seconds with its best plan so far and the "
              "gap.", "rows", metavar="S"),
    SweepFlag("micro_batches", "micro_batches", "Micro-batch sizes to search, as `planner plan` (repeatable) "
              "[default: 1 2 4 8].", "rows", metavar="B"),
    SweepFlag("virtual_stages", "virtual_stages", "Pipeline chunks per rank to search, as `planner plan` "
              "(repeatable) [default: 1 2].", "rows", metavar="V"),
    SweepFlag("runtime", "runtimes", "Plan what this runtime can run, as `planner plan --runtime` (megatron, "
              "torchtitan, deepspeed, megatron-2021, fsdp1, any); repeatable; the `runtime` column.", "rows",
              "runtime", metavar="NAME", show_default=True),
    SweepFlag("dtype", "dtypes", "Training precision, as `planner plan --dtype`; repeatable [default: bf16 where "
              "every GPU has it, else fp16]; the `dtype` column (empty: the default).", "rows", "dtype"),
    SweepFlag("optimizer", "optimizers", "Optimizer, as `planner plan --optimizer`; repeatable [default: adamw].",
              "rows", "optimizer"),
    SweepFlag("cp_degrees", "cp_degrees", "Context-parallel degree, as `planner plan --cp N`; repeatable, one row "
              "each [default: plan's search]; the `cp_degrees` column.", "rows", "cp", metavar="N", low=1),
    SweepFlag("ep_degrees", "ep_degrees", "Expert-parallel degree, as `planner plan --ep N`; repeatable, one row "
              "each [default: plan's search]; the `ep_degrees` column.", "rows", "ep", metavar="N", low=1),
    SweepFlag("compare_any", "compare_any", "Also search each row under --runtime any, as `planner plan "
              "--compare-any`: the `any_runtime_step_s` column (empty without it).", "rows"),
    SweepFlag("objective", "objective", "What each row's plan minimises, as `planner plan --objective` (time, "
              "cost, energy, goodput).", "rows"),
    SweepFlag("max_gpus", "max_gpus", "Each row rents at most N GPUs, as `planner plan --max-gpus`.", "rows",
              metavar="N"),
    SweepFlag("max_cost_per_hour", "max_cost_per_hour", "Each row rents nodes of at most X dollars per hour, as "
              "`planner plan --max-cost-per-hour`.", "rows", metavar="X"),
    SweepFlag("max_step_time_s", "max_step_time", "Only plans whose step takes at most S seconds, as `planner "
              "plan --max-step-time`.", "rows", metavar="S"),
    SweepFlag("power_caps", "power_caps", "Cap the power of each row's stages off the critical path, as "
              "`planner plan --power-caps` (at most 0.5 % slower).", "rows"),
)
AXES = tuple(s for s in SWEEP_FLAGS if s.axis)  # in Combination order: models outermost

_FIELDS = {f.name: f for f in fields(PlanRequest)}


def sweep_flag(spec: SweepFlag) -> tuple[Flag, Any]:
    """The flag `planner sweep` declares for `spec`, the request field's with the sweep's help (an axis
    repeatable, its documented range checked by the CLI), and the field's default."""
    field = _FIELDS[spec.field]
    flag: Flag = replace(field.metadata["flag"], help=spec.help, group=spec.group, metavar=spec.metavar)
    if spec.axis:
        figure = RANGES.get(flag.figure)
        low, high = (int(figure.low), int(figure.high)) if figure else (spec.low, None)
        flag = replace(flag, low=low, high=high, repeatable=True, show_default=spec.show_default,
                       default=(field.default,) if spec.show_default else ())
    return flag, field.default


KEYWORDS = {s.keyword: s for s in SWEEP_FLAGS}  # sweep()'s keyword arguments


def _absent(spec: SweepFlag) -> Any:
    """sweep()'s value of a keyword not given: an axis or repeatable flag empty (the plan's
    default), an on/off flag off, any other None (no value)."""
    flag: Flag = _FIELDS[spec.field].metadata["flag"]
    if spec.axis or flag.repeatable:
        return ()
    return False if flag.type is None else None


def sweep_keywords(given: Mapping[str, Any]) -> dict[str, Any]:
    """sweep()'s keyword arguments of the sweep's flags (SWEEP_FLAGS), every declared keyword
    present (absent: _absent), in declared order; a keyword not declared, or a required axis
    left out, is a TypeError (a call that does not match the signature)."""
    unknown = [key for key in given if key not in KEYWORDS]
    if unknown:
        raise TypeError(f"sweep() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                        f"its sweep keywords are {', '.join(KEYWORDS)}")
    missing = [s.keyword for s in SWEEP_FLAGS if s.required and s.keyword not in given]
    if missing:
        raise TypeError(f"sweep() missing required keyword argument(s) {', '.join(map(repr, missing))}")
    return {s.keyword: given[s.keyword] if s.keyword in given else _absent(s) for s in SWEEP_FLAGS}


def template_request(values: Mapping[str, Any]) -> PlanRequest:
    """The request every row starts from: the sweep's non-axis flags (`values` by keyword, as
    sweep_keywords returns them), each given value checked against its documented range
    (planner.api.require) in declared order; a repeatable one as a tuple."""
    given = {}
    for s in SWEEP_FLAGS:
        if s.axis:
            continue
        flag: Flag = _FIELDS[s.field].metadata["flag"]
        value = values[s.keyword]
        if value is None and isinstance(flag.type, tuple):  # a choice not given: the field's default
            continue
        if flag.repeatable:
            for item in value:
                require(item, flag.long)
        elif value is not None:
            require(value, flag.long)
        given[s.field] = tuple(value) if flag.repeatable else value
    return PlanRequest(**given)


def row_request(combo: Any, template: PlanRequest) -> PlanRequest:
    """The request of one row: `template` with the row's value of each axis (a Combination
    attribute) where it has one (not None; always for a required axis); a repeatable field (the
    --cp, --ep degrees) takes the row's one value."""
    given = {}
    for s in AXES:
        value = getattr(combo, s.axis)
        if value is not None or s.required:
            given[s.field] = (value,) if _FIELDS[s.field].metadata["flag"].repeatable else value
    return replace(template, **given)


__all__ = ["AXES", "KEYWORDS", "SWEEP_FLAGS", "SweepFlag", "row_request", "sweep_flag", "sweep_keywords",
           "template_request"]
