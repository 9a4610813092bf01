"""The library API: what `planner plan`, `planner evaluate`, `planner sweep` and the benchmarks
run, as functions of typed requests.

    from planner.api import PlanRequest, plan, plan_json
    result = plan(PlanRequest(model="llama-3-8b", cluster="a100-v100-mix", global_batch=512))
    print(plan_json(result)["predicted"]["step_time_s"])

Requests are frozen dataclasses; a model or cluster is a catalog name or file (loaded here) or
an already loaded Model or Cluster. Bad input raises BadInput, no plan raises NoFeasiblePlan;
nothing here prints or exits (warnings go to the `warn` callback, progress to `on_progress`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from ..core.clock import Progress
from ..core.errors import BadInput
from ..inputs.hardware import Cluster, load_cluster
from .load import (FLAG_FIGURES, Warn, check_training_inputs, input_files, load_calibrations,  # noqa: F401
                    load_profiles, per_gpu_params, require, resolve_dtype)
from ..inputs.model import Model, load_model, with_bf16_layers
from ..plan import (CP_KINDS, OPTIMIZER_NAMES, STAGE_RECOMPUTE_MODES, Plan, Training, structural_problems,
                    moe_dispatcher_problem, tf32_problem, uniform_plan)
from ..cost.runtimes import get_runtime, tf32_setting
from ..verify.plan_checks import load_plan_file
from ..schedules import SCHEDULES, get_schedule, search_schedule
from .any_runtime import NOT_COMPARED_NOTE, with_any_runtime
from .catalogs import gpu_catalog, model_catalog
from .costs import cost_json, with_power_caps
from .requests import DEFAULT_PLAN, SOLVERS, EvaluateRequest, PlanRequest

if TYPE_CHECKING:  # the search and the cost model load when a workflow runs, not on import
    from ..cost.evaluate import Estimate
    from ..search.orchestration.driver import SearchResult, SolverOptions
    from .ranked import Ranking

# What `planner plan` plans without options.
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
DEFAULT_VIRTUAL_STAGES = (1, 2)


def _model(model: str | Model) -> Model:
    return model if isinstance(model, Model) else load_model(model)


def _cluster(cluster: str | Cluster) -> Cluster:
    return cluster if isinstance(cluster, Cluster) else load_cluster(cluster)


# --- plan --------------------------------------------------------------------------------------


def plan(request: PlanRequest, on_progress: Callable[[Progress], None] | None = None,
         warn: Warn | None = None) -> SearchResult:
    """The fastest plan for `request` (planner.search.orchestration.driver.solve), its estimate and the solver's
    account. `on_progress` is called about every quarter second while the search runs. Stopped
    early (planner.core.clock.request_stop, Ctrl-C in the CLI), the best plan found so far."""
    from ..core.clock import stop_requested
    from .no_plan import solve_or_explain

    model, cluster, training, options = search_inputs(request, warn)
    result = solve_or_explain(model, cluster, training, options, request, on_progress)
    if request.runtime != "any":
        result = (with_any_runtime(result, model, cluster, training, options)
                  if request.compare_any and not stop_requested()
                  else replace(result, any_runtime_note=NOT_COMPARED_NOTE))
    result = replace(result, estimate=_priced_with(result.estimate, request.profiles, request.calibrations))
    if request.power_caps:
        result = with_power_caps(result, request, reprice_plan)
    problems = structural_problems(result.plan)
    if problems or not result.estimate.fits:  # checked in the solver too; never hand out a bad plan
        raise RuntimeError(f"solver returned an invalid plan: {problems or 'does not fit'}")
    return result


def plan_top(request: PlanRequest, on_progress: Callable[[Progress], None] | None = None,
             warn: Warn | None = None) -> Ranking:
    """`plan --top K`: plan's plan, then the next request.top - 1 configurations (planner.api.ranked),
    every search within the request's time limit together."""
    from ..search.orchestration.driver import solve
    from .ranked import Ranking, domains, ranked, runner_up

    started = time.perf_counter()
    first = plan(request, on_progress, warn)
    if request.top <= 1:
        return Ranking((first,), first.optimal)
    model, cluster, training, options = search_inputs(request)  # its warnings were given once

    def listed(found: SearchResult) -> SearchResult:
        found = replace(runner_up(found, first), any_runtime_note=NOT_COMPARED_NOTE)
        return replace(found, estimate=_priced_with(found.estimate, request.profiles, request.calibrations))

    experts = model.config is not None and model.config.num_experts > 1
    long_sequence = training.seq_len >= options.cp_min_seq_len
    ranking = ranked(lambda sub, left: solve(model, cluster, training, replace(sub, time_limit_s=left), on_progress),
                     options, first, request.top,
                     lambda o: domains(o, cluster.num_gpus, training.global_batch, experts, long_sequence),
                     request.time_limit_s, lambda: time.perf_counter() - started)
    return replace(ranking, results=(first, *map(listed, ranking.results[1:])))


def search_inputs(request: PlanRequest, warn: Warn | None = None) -> tuple[Model, Cluster, Training, "SolverOptions"]:
    """The model, cluster, training and search options of `request`, every input checked."""
    from ..search.orchestration.driver import SolverOptions
    from ..search.pricing.shares import IlpOptions
    from .restrict import degree_options

    model = _model(request.model)
    cluster = _cluster(request.cluster)
    global_batch = require(request.global_batch, "--global-batch")
    seq_len = require(request.seq_len, "--seq-len")
    if request.time_limit_s is not None:
        require(request.time_limit_s, "--time-limit")
    for b in request.micro_batches:
        require(b, "--micro-batch")
    for v in request.virtual_stages:
        require(v, "--virtual-stages")
    if not isinstance(request.jobs, int) or isinstance(request.jobs, bool) or request.jobs < 1:
        raise BadInput(f"must be a positive integer, got {request.jobs!r}", "--jobs")
    if request.solver not in SOLVERS:
        raise BadInput(f"expected one of {', '.join(SOLVERS)}, got {request.solver!r}", "--solver")
    dtype = resolve_dtype(cluster, request.dtype, request.runtime)
    _check_optimizer(request.optimizer)
    training = Training(global_batch, seq_len, dtype, 1, "1f1b", 1, request.attention, request.runtime, request.optimizer,
                    request.fp8_recipe, request.compile, _tf32(request.tf32, request.runtime, dtype),
                    _moe_dispatcher(request.moe_dispatcher, model), bool(request.fp8_all_gather),
                    _bf16_layers(request.bf16_layers))
    check_training_inputs(model, training)
    model = with_bf16_layers(model, training.bf16_layers)
    _check_runtime_model(request.runtime, model)
    degrees = degree_options(request, model, cluster)
    measured = per_gpu_params(request.profiles, request.calibrations, cluster, model, training, warn, request.runtime)
    options = SolverOptions(micro_batches=tuple(sorted(set(request.micro_batches))) or DEFAULT_MICRO_BATCHES,
                            virtual_stages=tuple(sorted(set(request.virtual_stages))) or DEFAULT_VIRTUAL_STAGES,
                            max_bundle_nodes=request.max_bundle_nodes, time_limit_s=request.time_limit_s,
                            jobs=request.jobs,
                            **({"cp_degrees": _cp_degrees(request.cp_degrees)} if request.cp_degrees else {}),
                            **({"recompute_modes": request.recompute_modes} if request.recompute_modes else {}),
                            offload=request.offload, activation_offload=request.activation_offload,
                            zero_bubble=request.zero_bubble, per_replica_tp=request.per_replica_tp,
                            tp_across_types=request.tp_across_types, tp_splits=request.tp_splits,
                            ilp=IlpOptions("CBC" if request.solver == "cbc" else "HiGHS"),
                            gpu_params=tuple(sorted(measured.items())), **degrees)
    if not any(global_batch % b == 0 for b in options.micro_batches):
        raise BadInput(f"no micro-batch size in {list(options.micro_batches)} divides the global batch "
                       f"{global_batch}", "--global-batch")
    return model, cluster, training, options


def _check_runtime_model(runtime: str, model: Model) -> None:
    """A model the runtime cannot build is bad input before any search (capability.model_problem)."""
    from ..cost.runtimes.capability import model_problem

    problem = model_problem(runtime, model)
    if problem:
        raise BadInput(problem, f"--runtime {runtime}")


def plan_json(result: SearchResult, tokens: int | None = None) -> dict:
    """The plan file of a search result (formats.md section 5); `tokens`: with predicted.run."""
    from ..plan import plan_to_json

    result.estimate.check_credible()
    predicted = predicted_json(result.estimate, result.plan, tokens)
    caps = getattr(result, "power_caps", None)  # (a result-like object without caps: none)
    if caps is not None:
        predicted["power_caps"] = caps.to_json()
    return plan_to_json(result.plan, predicted, result.solver_json())


def predicted_json(est: Estimate, plan: Plan | None = None, tokens: int | None = None) -> dict:
    """A plan file's `predicted` (formats.md section 5) from an estimate; with its plan,
    `mfu_above_published` where the MFU is above the best published (report.credibility), and
    what it costs (cost_json)."""
    return {**est.predicted_json(), **(mfu_above_json(plan, est) if plan is not None else {}),
            **(attention_kernel_json(plan) if plan is not None else {}),
            **(cost_json(plan, est, tokens) if plan is not None else {})}


def attention_kernel_json(plan: Plan) -> dict:
    """`{"attention_kernel": {GPU name: kernel}}` where the plan's `flash` attention runs another
    kernel than FlashAttention-2 under its runtime (cost.runtimes.attention_kernels), else {}."""
    from ..cost.runtimes import attention_kernels

    kernels = attention_kernels(plan.cluster.gpu_types, plan.training)
    return {"attention_kernel": kernels} if kernels else {}


def mfu_above_json(plan: Plan, est: Estimate) -> dict:
    """`{"mfu_above_published": {...}}` where `est`'s MFU is above the best published for the
    plan's GPUs and precision, else {} (formats.md section 4)."""
    from ..report.credibility import mfu_above_published

    above = mfu_above_published(plan, est)
    return {"mfu_above_published": above.to_json()} if above else {}


def _priced_with(est: Estimate, profiles: tuple[str, ...], calibrations: tuple[str, ...]) -> Estimate:
    """`est` recording the measured inputs it was priced with (a plan file's predicted.priced_with)."""
    if not profiles and not calibrations:
        return est
    return replace(est, priced_with_profiles=tuple(profiles), priced_with_calibrations=tuple(calibrations))


# --- evaluate ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """A priced plan: its estimate, and the JSON `planner evaluate` prints."""
    plan: Plan
    estimate: Estimate

    @property
    def fits(self) -> bool:
        return self.estimate.fits

    def to_json(self, tokens: int | None = None) -> dict:
        """What `planner evaluate --json` prints; `tokens`: with the run's totals."""
        return estimate_json(self.plan, self.estimate, tokens)


def _cp_degrees(degrees: tuple[int, ...]) -> tuple[int, ...]:
    """`plan --cp N ...`: the context-parallel degrees to search (1 always among them)."""
    for cp in degrees:
        if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
            raise BadInput(f"must be an integer >= 1, got {cp!r}", "--cp")
    return tuple(sorted({1, *degrees}))


def plan_from_flags(request: EvaluateRequest) -> Plan:
    """The uniform plan an EvaluateRequest describes, every input checked."""
    r = request
    for value, flag in ((r.model, "--model"), (r.cluster, "--cluster"), (r.global_batch, "--global-batch"),
                        (r.seq_len, "--seq-len"), (r.tp, "--tp"), (r.pp, "--pp"), (r.dp, "--dp"),
                        (r.micro_batch, "--micro-batch"), (r.virtual_stages, "--virtual-stages")):
        require(value, flag)
    if r.schedule is not None and r.schedule not in SCHEDULES:
        raise BadInput(f"unknown schedule {r.schedule!r}, expected one of {', '.join(SCHEDULES)}", "--schedule")
    schedule = search_schedule(r.virtual_stages) if r.schedule is None else get_schedule(r.schedule)
    if r.virtual_stages < schedule.min_virtual_stages:
        raise BadInput(f"the {schedule.name} schedule needs --virtual-stages >= {schedule.min_virtual_stages}",
                       "--schedule")
    if schedule.max_virtual_stages is not None and r.virtual_stages > schedule.max_virtual_stages > 1:
        raise BadInput(f"the {schedule.name} schedule takes --virtual-stages {schedule.max_virtual_stages}",
                       "--virtual-stages")
    if not schedule.accepts_virtual_stages(r.virtual_stages):
        raise BadInput(f"--virtual-stages {r.virtual_stages} needs --schedule "
                       f"{search_schedule(r.virtual_stages).name}", "--virtual-stages")
    if r.pp < schedule.min_pp:
        raise BadInput(f"the {schedule.name} schedule needs --pp >= {schedule.min_pp}", "--schedule")
    if not schedule.accepts_layout(r.pp, r.virtual_stages):
        raise BadInput(f"the {schedule.name} schedule needs {schedule.layout_rule()}; got --pp {r.pp} with "
                       f"--virtual-stages {r.virtual_stages}", "--schedule")
    if schedule.split_backward and r.dp * r.micro_batch and r.global_batch // (r.dp * r.micro_batch) < r.pp:
        # its bubble formula holds with a micro-batch per rank at least (Qi et al. 2023, sec 3.1)
        raise BadInput(f"the {schedule.name} schedule needs at least --pp {r.pp} micro-batches per replica, "
                       f"--global-batch / (--dp x --micro-batch) = {r.global_batch // (r.dp * r.micro_batch)}",
                       "--schedule")
    model = _model(r.model)
    cluster = _cluster(r.cluster)
    dtype = resolve_dtype(cluster, r.dtype, r.runtime)
    if model.config is not None and model.config.tp_problem(r.tp):
        raise BadInput(model.config.tp_problem(r.tp), "--tp")
    if not isinstance(r.cp, int) or isinstance(r.cp, bool) or r.cp < 1:
        raise BadInput(f"must be an integer >= 1, got {r.cp!r}", "--cp")
    cp_problem = get_runtime(r.runtime).context_parallel_problem(r.cp, r.cp_kind) if r.cp_kind in CP_KINDS else ""
    if cp_problem:
        raise BadInput(cp_problem, "--cp-kind" if r.cp_kind != "ring" else "--cp")
    if r.sequence_parallel and r.tp == 1:
        raise BadInput("sequence parallelism needs --tp > 1", "--sequence-parallel")
    for value, flag in ((r.ep, "--ep"), (r.etp, "--etp")):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise BadInput(f"must be a positive integer, got {value!r}", flag)
    training = Training(r.global_batch, r.seq_len, dtype, r.micro_batch, schedule.name, r.virtual_stages,
                        r.attention, r.runtime, r.optimizer, r.fp8_recipe, r.compile, _tf32(r.tf32, r.runtime, dtype),
                        _moe_dispatcher(r.moe_dispatcher, model), bool(r.fp8_all_gather), _bf16_layers(r.bf16_layers))
    _check_optimizer(r.optimizer)
    check_training_inputs(model, training)
    model = with_bf16_layers(model, training.bf16_layers)
    if r.recompute not in STAGE_RECOMPUTE_MODES:
        raise BadInput(f"unknown recompute {r.recompute!r}, expected one of {', '.join(STAGE_RECOMPUTE_MODES)}",
                       "--recompute")
    if r.recompute_layers and r.recompute != "block":
        raise BadInput("--recompute-layers needs --recompute block", "--recompute-layers")
    if r.recompute_layers < 0:
        raise BadInput(f"must be >= 0, got {r.recompute_layers}", "--recompute-layers")
    if not isinstance(r.offload_activations, int) or r.offload_activations < 0:
        raise BadInput(f"must be an integer >= 0, got {r.offload_activations!r}", "--offload-activations")
    made = uniform_plan(model, cluster, training, tp=r.tp, pp=r.pp, dp=r.dp, zero=r.zero, recompute=r.recompute,
                        sequence_parallel=r.sequence_parallel, cp=r.cp, cp_kind=r.cp_kind,
                        ep=r.ep, etp=_etp(r.etp, r.tp), recompute_layers=r.recompute_layers, offload=r.offload,
                        offload_activations=r.offload_activations)
    # what the schedule runs with (planner.plan.structure: e.g. combined 1F1B's expert parallelism)
    for where, why in structural_problems(made):
        if where in ("training.schedule", "training.dtype"):
            raise BadInput(why, "--schedule" if where == "training.schedule" else "--dtype")
    return made


def _bf16_layers(value: str | tuple[int, int] | None) -> tuple[int, int]:
    """`--bf16-layers START,END` (or the pair) as Training.bf16_layers; None: (0, 0)."""
    if value is None:
        return (0, 0)
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        start, end = (int(str(part).strip()) for part in parts)
    except ValueError:
        raise BadInput(f"expected START,END (two whole numbers), got {value!r}", "--bf16-layers") from None
    if start < 0 or end < 0:
        raise BadInput(f"counts must be >= 0, got {start},{end}", "--bf16-layers")
    return (start, end)


def _moe_dispatcher(dispatcher: str | None, model: Model) -> str:
    """`--moe-dispatcher` as Training.moe_dispatcher: alltoall when not given; given, only for a model
    with experts (moe_dispatcher_problem)."""
    if dispatcher is None:
        return "alltoall"
    problem = moe_dispatcher_problem(dispatcher, model)
    if problem:
        raise BadInput(problem, "--moe-dispatcher")
    return dispatcher


def _tf32(tf32: bool | None, runtime: str, dtype: str) -> bool | None:
    """`--tf32/--no-tf32` as Training.tf32_matmul: under fp32 the flag or the runtime's default."""
    problem = tf32_problem(tf32, dtype)
    if problem:
        raise BadInput(problem, "--tf32/--no-tf32")
    return tf32_setting(runtime, dtype, tf32)


def _etp(etp: int | None, tp: int) -> int:
    """--etp as StageDims.etp (0: as tp)."""
    return 0 if etp is None or etp == tp else etp


def _check_optimizer(name: str) -> None:
    if name not in OPTIMIZER_NAMES:
        raise BadInput(f"unknown optimizer {name!r}, expected one of {', '.join(OPTIMIZER_NAMES)}", "--optimizer")


def evaluate_plan(plan: Plan, profiles: tuple[str, ...] = (), calibrations: tuple[str, ...] = (),
                  warn: Warn | None = None, runtime: str | None = None) -> Evaluation:
    """Price `plan` with the cost model of `runtime` (default: the one the plan was made for,
    training.runtime) on each GPU architecture, measured profiles and calibrations over it."""
    runtime = runtime or plan.training.runtime
    from ..cost.formulas import DEFAULT_PARAMS
    from ..cost.evaluate import evaluate as price

    per_gpu = per_gpu_params(profiles, calibrations, plan.cluster, plan.model, plan.training, warn, runtime)
    return Evaluation(plan, _priced_with(price(plan, {"*": DEFAULT_PARAMS, **per_gpu}), profiles, calibrations))


def reprice_plan(plan: Plan, profiles: tuple[str, ...] = (), calibrations: tuple[str, ...] = ()) -> Estimate:
    """The estimate of `plan` as `evaluate --plan` prices it, under its own runtime, with these measured
    inputs: how `validate` re-checks a plan's `predicted` (planner.verify.figures)."""
    return evaluate_plan(plan, profiles, calibrations).estimate


def evaluate(request: EvaluateRequest, warn: Warn | None = None) -> Evaluation:
    """Price the uniform configuration of `request`. A configuration that does not fit is
    priced all the same (Evaluation.fits is False), not an error."""
    return evaluate_plan(plan_from_flags(request), request.profiles, request.calibrations, warn, request.runtime)


def evaluate_plan_file(path: str, profiles: tuple[str, ...] = (), calibrations: tuple[str, ...] = (),
                       warn: Warn | None = None, runtime: str | None = None) -> Evaluation:
    """Re-price a plan file (under its own runtime unless `runtime` is given). Every check `validate` runs, except memory: an overflow is
    reported in the Evaluation (fits False), with the rest of the estimate."""
    return evaluate_plan(load_plan_file(path, memory=False), profiles, calibrations, warn, runtime)


def lossy_form(made: Plan, target: str) -> tuple[Evaluation, str, Evaluation, str]:
    """`export --lossy`: (the plan `made` priced, the runtime it was priced under: its own, or the target's
    for a runtime without a cost model such as `any`; the plan `target` runs in its place: the search's
    plan under the target's runtime (planner.api.lossy), else nearest_form; a one-line note when the
    dtype had to change, '' else). A model the runtime cannot build stays bad input."""
    from ..cost.runtimes import RUNTIMES
    from ..core.errors import NoFeasiblePlan
    from ..export import runtime_problems
    from .lossy import target_request

    request, note = target_request(made, target)
    try:
        found = plan(request)
        chosen = Evaluation(found.plan, found.estimate)
        if runtime_problems(found.plan, target):  # e.g. a placement the target cannot number
            chosen = nearest_form(found.plan, target)
    except NoFeasiblePlan:
        chosen, note = nearest_form(made, target), ""
    runtime = made.training.runtime if made.training.runtime in RUNTIMES else chosen.plan.training.runtime
    return evaluate_plan(made, runtime=runtime), runtime, chosen, note


def nearest_form(plan: Plan, target: str) -> Evaluation:
    """The fastest of planner.export.runnable_forms of `plan` that fits (else the one that overflows
    memory least), priced under the target's runtime; ties: runnable_forms' order (smaller TP first)."""
    from ..export import runnable_forms

    forms = [evaluate_plan(form) for form in runnable_forms(plan, target)]
    # fitting forms by step time; when none fits, the one that overflows least
    return min(forms, key=lambda e: (not e.fits, 0.0 if e.fits else max(o.over_bytes for o in e.estimate.overflows),
                                     e.estimate.step_time_s))


def describe_plan(plan: Plan) -> dict:
    """The configuration of a plan, as `planner evaluate` reports it (`config`)."""
    t = plan.training
    return {"model": plan.model.name, "cluster": plan.cluster.name, "num_gpus": plan.cluster.num_gpus,
            "global_batch": t.global_batch, "seq_len": t.seq_len, "dtype": t.dtype,
            "micro_batch": t.micro_batch, "schedule": t.schedule, "virtual_stages": t.virtual_stages,
            "attention": t.attention, "optimizer": t.optimizer,
            **({"fp8_recipe": t.fp8_recipe} if t.fp8_recipe else {}),
            **({"compile": True} if t.compile else {}),
            **({"tf32_matmul": t.tf32_matmul} if t.tf32_matmul is not None else {}),
            **({"moe_dispatcher": t.moe_dispatcher} if t.moe_dispatcher != "alltoall" else {}),
            **({"fp8_all_gather": True} if t.fp8_all_gather else {}),
            **({"bf16_layers": list(t.bf16_layers)} if t.bf16_layers != (0, 0) else {}), "pp": plan.pp,
            "stages": [{"layers": list(s.layers), "tp": s.tp, "dp": s.dp, "zero": s.zero,
                        "recompute": s.recompute, "sequence_parallel": s.sequence_parallel,
                        **({"cp": s.cp, "cp_kind": s.cp_kind} if s.cp > 1 else {}),
                        **({"ep": s.ep, "etp": s.dims.expert_tp} if s.ep > 1 or s.etp else {}),
                        **({"recompute_layers": s.recompute_layers} if s.recompute == "block" else {})}
                       for s in plan.stages]}


def estimate_json(plan: Plan, estimate: Estimate, tokens: int | None = None) -> dict:
    """What `planner evaluate --json` prints: the estimate, what it costs and the configuration priced."""
    estimate.check_credible()
    report = {**estimate.to_json(), **mfu_above_json(plan, estimate), **attention_kernel_json(plan),
              **cost_json(plan, estimate, tokens)}
    report["config"] = describe_plan(plan)
    return report


def evaluation_plan_json(evaluation: Evaluation, runtime: str | None = None) -> dict:
    """The plan file (formats.md section 5) of a priced configuration (`planner evaluate --plan-out`):
    exactly the configuration, made for `runtime` (default: its own, training.runtime), with its
    estimate as `predicted`, as `plan` writes one; `validate`, `export` and `run` read it. BadInput
    when it is not a plan every command accepts (verify.plan_checks: a configuration that does not
    fit, or that the runtime cannot run)."""
    from ..plan import plan_to_json
    from ..verify.plan_checks import check_plan_data

    plan = evaluation.plan
    if runtime and runtime != plan.training.runtime:
        plan = replace(plan, training=replace(plan.training, runtime=runtime))
    evaluation.estimate.check_credible()
    data = plan_to_json(plan, predicted_json(evaluation.estimate, plan))
    _, problems = check_plan_data(data, "--plan-out")
    if problems:
        path, message = problems[0]
        raise BadInput(f"{message} (not a valid plan; none written)", "--plan-out", path or None)
    return data


__all__ = ["DEFAULT_PLAN", "EvaluateRequest", "Evaluation", "PlanRequest", "check_training_inputs",
           "describe_plan", "estimate_json", "evaluate", "evaluation_plan_json", "evaluate_plan", "evaluate_plan_file", "gpu_catalog", "input_files",
           "load_calibrations", "lossy_form", "load_profiles", "model_catalog", "nearest_form", "per_gpu_params", "plan", "plan_from_flags", "plan_json", "plan_top",
           "cost_json", "predicted_json",
           "reprice_plan", "require", "resolve_dtype", "search_inputs"]
