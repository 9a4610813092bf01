"""`export --lossy`: the plan an export target runs in place of one it cannot run exactly. The
target's runtime is planned for afresh (the same model, cluster, batch, length, dtype, attention
and optimizer: planner.api.plan under its runtime), so the plan exported is the fastest the
runtime can run, not the input plan bent to its rules; the dtype changes only where the runtime has
none of it, and the caller says so. Where that search finds nothing (or its plan still needs a
change the target cannot make, e.g. its node placement), the nearest form of the plan
(planner.api.nearest_form) stands in (planner.api.lossy_form)."""

from __future__ import annotations

from dataclasses import replace

from ..cost.fp8 import RECIPES
from ..cost.runtimes import get_runtime
from ..cost.runtimes.capability import bf16_layers_problem, capability, fp8_all_gather_problem
from .load import resolve_dtype
from ..plan import Plan
from .requests import PlanRequest


def target_request(plan: Plan, target: str) -> tuple[PlanRequest, str]:
    """The search for `target`'s runtime with the plan's inputs, and a one-line note when that
    runtime has no training in the plan's dtype ('' else: the dtype is kept)."""
    from ..export.targets import EXPORT_TARGETS

    runtime = EXPORT_TARGETS[target].runtime
    t = plan.training
    cap = capability(runtime)
    dtype, note = t.dtype, ""
    if dtype not in cap.dtypes:
        dtype = resolve_dtype(plan.cluster, None, runtime)
        note = f"{runtime} has no {t.dtype} training (it has {', '.join(cap.dtypes)}): planned in {dtype}"
    # an fp8 recipe of another library than the target's (torchao rowwise -> Megatron): its default
    target_recipe = get_runtime(runtime).fp8_recipe
    same_library = t.fp8_recipe and target_recipe and RECIPES[t.fp8_recipe].library == RECIPES[target_recipe].library
    fp8_recipe = t.fp8_recipe if same_library and dtype == t.dtype else ""
    # the fp8 all-gather kept where the target's FSDP runs it with the recipe kept
    gather = t.fp8_all_gather and not fp8_all_gather_problem(replace(t, dtype=dtype, fp8_recipe=fp8_recipe), runtime)
    # the decoders kept in bf16, where the target keeps them with the dtype and recipe kept
    kept = t.bf16_layers != (0, 0) and not bf16_layers_problem(replace(t, dtype=dtype, fp8_recipe=fp8_recipe), runtime)
    request = PlanRequest(model=plan.model, cluster=plan.cluster, global_batch=t.global_batch, seq_len=t.seq_len,
                          dtype=dtype, attention=t.attention, optimizer=t.optimizer, fp8_recipe=fp8_recipe,
                          fp8_all_gather=gather, bf16_layers=t.bf16_layers if kept else None,
                          compile=t.compile and cap.compile, runtime=runtime, jobs=2,
                          moe_dispatcher=t.moe_dispatcher if t.moe_dispatcher != "alltoall"
                          and t.moe_dispatcher in cap.moe_dispatchers else None)
    return request, note
