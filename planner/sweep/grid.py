"""The flags of `planner sweep` that set its rows' PlanRequest, each read from the request field's
declared flag (planner.api.requests: name, type, choices, documented range, default) with the
sweep's own help: an axis gives one row per value (the Combination attribute it names), the
others give every row's request their values as `planner plan` takes them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..api import PlanRequest
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
)
AXES = tuple(s for s in SWEEP_FLAGS if s.axis)  # in Combination order: models outermost

_FIELDS = {f.name: f for f in fields(PlanRequest)}


def sweep_flag(s: SweepFlag) -> tuple[Flag, Any]:
    """The flag `planner sweep` declares for `s`, the request field's with the sweep's help (an axis
    repeatable, its documented range checked by the CLI), and the field's default."""
    field = _FIELDS[s.field]
    flag: Flag = replace(field.metadata["flag"], help=s.help, group=s.group, metavar=s.metavar)
    if s.axis:
        figure = RANGES.get(flag.figure)
        low, high = (int(figure.low), int(figure.high)) if figure else (s.low, None)
        flag = replace(flag, low=low, high=high, repeatable=True, show_default=s.show_default,
                       default=(field.default,) if s.show_default else ())
    return flag, field.default


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


__all__ = ["AXES", "SWEEP_FLAGS", "SweepFlag", "row_request", "sweep_flag"]
