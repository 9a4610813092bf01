"""The Plan type (any plan: uniform or heterogeneous), its JSON form and its invariants.

    types      Replica, Stage, Training, Plan, the names a plan may use, uniform_plan
    json_io    plan_to_json / plan_from_json (formats.md section 5), every field checked
    structure  structural_problems: the invariants every emitted plan must hold
    tp_shares  uneven tensor-parallel shards: their invariants, each TP position's decoder
"""

from ..core.dims import CP_KINDS  # noqa: F401 (the plan's cp_kind names)
from .types import (FP8_RECIPE_NAMES, MOE_DISPATCHERS, OPTIMIZER_NAMES, PLAN_FORMAT, SCHEDULES,  # noqa: F401
                    STAGE_RECOMPUTE_MODES, Plan, Replica, Stage, Training, context_parallel_problem, even_split,
                    uniform_plan)
from .json_io import (fp8_recipe_problem, moe_dispatcher_problem, plan_from_json, plan_to_json,  # noqa: F401
                      tf32_problem)
from .structure import rank_ranges, structural_problems  # noqa: F401
