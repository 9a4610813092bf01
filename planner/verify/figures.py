"""`planner validate`'s last pass: the figures a plan file reports must be the planner's own.

`model.params` is recounted from `model.config`, and `predicted` is re-priced: the plan under
its training settings and runtime (the way `evaluate --plan` prices it), with the measured
inputs it was priced with (`predicted.priced_with`: `--profile GPU=FILE`, `--calibration FILE`,
read again from the paths recorded). Every number in `predicted` that the re-price also
computes must agree within RELATIVE_TOLERANCE: the JSON writer keeps every digit of a float
(Python's shortest round-trip repr) and the cost model is deterministic, so a plan as written
agrees exactly, and a figure edited by hand, or priced by another version of the cost model,
does not. When a recorded input cannot be read, `predicted` is not compared and a note says so.

Only `validate` runs this pass; the commands that read a plan (export, run, show) do not, so a
plan priced by another planner version still exports.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ..core.errors import BadInput
from ..plan import Plan
from .plan_checks import Problem

if TYPE_CHECKING:
    from ..cost.evaluate import Estimate

# prices a plan as `evaluate --plan` does, with these `--profile GPU=FILE` and `--calibration FILE`
# inputs (planner.api.reprice_plan; the loading of measured inputs sits above this layer);
# BadInput when one cannot be read
Reprice = Callable[[Plan, tuple, tuple], "Estimate"]

RELATIVE_TOLERANCE = 1e-9
ABSOLUTE_TOLERANCE = 1e-12  # for figures that are zero (an empty bubble, no pipeline sends)
REPRICE_HINT = "`planner evaluate --plan FILE --plan-out NEW` writes it re-priced"


def figure_check(data: Mapping[str, Any], plan: Plan, reprice: Reprice) -> tuple[list[Problem], list[str]]:
    """(problems, notes) of the figures a checked plan file reports: one problem for model.params,
    one for `predicted` (its first differing figure; how many more differ); a note when
    `predicted` cannot be re-priced here."""
    problems: list[Problem] = []
    stored = data["model"].get("params")
    if stored != plan.model.params:
        problems.append(("model.params", f"is {stored}, the model in model.config has {plan.model.params} parameters"))
    predicted = data.get("predicted")
    if not isinstance(predicted, dict):
        return problems, []
    priced_with = predicted.get("priced_with") or {}
    try:
        estimate = reprice(plan, tuple(priced_with.get("profiles", ())), tuple(priced_with.get("calibrations", ())))
    except BadInput as exc:
        if not priced_with:
            raise
        return problems, [f"predicted not re-checked: it was priced with measured inputs that cannot be read "
                          f"here ({exc})"]
    from ..cost.energy import run_cost

    recomputed = {**estimate.predicted_json(), "cost": run_cost(plan, estimate).to_json()}
    differ = list(differences(predicted, recomputed, "predicted"))
    if differ:
        path, given, computed = differ[0]
        more = f"; {len(differ) - 1} more figures differ" if len(differ) > 1 else ""
        problems.append((path, f"is {given!r}, the plan re-prices to {computed!r}{more} (edited, or priced by "
                               f"another planner version: {REPRICE_HINT})"))
    return problems, []


def differences(given: Any, computed: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """(json path, given, computed) of every value of `computed` that `given` states otherwise,
    in `computed`'s order; numbers within the tolerances agree, keys `given` lacks are skipped."""
    if isinstance(computed, dict):
        if not isinstance(given, dict):
            yield path, given, computed
            return
        for key, value in computed.items():
            if key in given:
                yield from differences(given[key], value, f"{path}.{key}")
    elif isinstance(computed, list):
        if not isinstance(given, list) or len(given) != len(computed):
            yield path, given, computed
            return
        for i, (g, c) in enumerate(zip(given, computed)):
            yield from differences(g, c, f"{path}[{i}]")
    elif _number(computed) and _number(given):
        if not math.isclose(given, computed, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE):
            yield path, given, computed
    elif given != computed or type(given) is not type(computed):
        yield path, given, computed


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
