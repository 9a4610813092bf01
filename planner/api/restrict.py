"""`plan --tp/--pp/--dp/--max-pp/--ep`: the degrees a search may use, checked against the model and
the cluster, as planner.search.orchestration.driver.SolverOptions fields (the search's space is cut at its
source: planner.search.orchestration.space, stage_configs, dp, uniform)."""

from __future__ import annotations

from ..core.errors import BadInput, NoFeasiblePlan
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from .requests import PlanRequest


def _positive(values: tuple[int, ...], flag: str) -> tuple[int, ...]:
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise BadInput(f"must be a positive integer, got {v!r}", flag)
    return tuple(sorted(set(values)))


def degree_options(request: PlanRequest, model: Model, cluster: Cluster) -> dict:
    """SolverOptions fields for the request's allowed degrees ({} when none is given). A degree no
    plan can take on this model and cluster is BadInput naming its flag; allowed sets whose
    smallest plan needs more GPUs than the cluster has leave nothing: NoFeasiblePlan."""
    tps = _positive(request.tp_degrees, "--tp")
    pps = _positive(request.pp_degrees, "--pp")
    dps = _positive(request.dp_degrees, "--dp")
    eps = _positive(request.ep_degrees, "--ep")
    max_pp = None if request.max_pp is None else _positive((request.max_pp,), "--max-pp")[0]
    gpus = cluster.num_gpus
    heads = model.config.tp_heads if model.config is not None else 1
    per_node = sorted({g.gpus_per_node for g in cluster.groups})
    for tp in tps:
        if heads % tp:
            why = model.config.tp_problem(tp) if model.config is not None else f"1 head does not split over tp={tp}"
            raise BadInput(f"tp {tp} does not divide the model's heads: {why}", "--tp")
        if all(n % tp for n in per_node):
            raise BadInput(f"tp {tp} does not divide the GPUs of any node ({', '.join(map(str, per_node))} "
                           "per node): a TP group stays inside one node", "--tp")
    for pp in pps:
        if pp > min(gpus, model.num_layers):
            raise BadInput(f"pp {pp} exceeds the {gpus} GPUs or the model's {model.num_layers} layers", "--pp")
        if max_pp is not None and pp > max_pp:
            raise BadInput(f"pp {pp} exceeds --max-pp {max_pp}", "--pp")
    for dp in dps:
        if dp > gpus:
            raise BadInput(f"dp {dp} exceeds the cluster's {gpus} GPUs", "--dp")
        if dp > request.global_batch:
            raise BadInput(f"dp {dp} exceeds the global batch {request.global_batch} (a sample per replica)", "--dp")
    experts = model.config.num_experts if model.config is not None else 1
    for ep in eps:
        if ep > 1 and experts <= 1:
            raise BadInput(f"ep {ep}: the model {model.name!r} has no experts", "--ep")
        if ep > 1 and experts % ep:
            raise BadInput(f"ep {ep} does not divide the model's {experts} experts", "--ep")
    least = min(tps or (1,)) * min(pps or (1,)) * min(dps or (1,))
    if least > gpus:
        raise NoFeasiblePlan(f"the smallest allowed plan, tp {min(tps or (1,))} x pp {min(pps or (1,))} x dp "
                             f"{min(dps or (1,))} = {least} GPUs, needs more than the cluster's {gpus}")
    out: dict = {}
    if tps:
        out["tp_degrees"] = tps
    if pps:
        out["pp_degrees"] = pps
    if dps:
        out["dp_degrees"] = dps
    if max_pp is not None or pps:
        out["max_stages"] = max_pp if max_pp is not None else max(pps)
    if eps:  # these degrees only, across nodes too
        out["ep_degrees"] = eps if experts > 1 else (1,)
        out["ep_inside_node"] = False
    return out


def describe_allowed(request: PlanRequest) -> str:
    """The restricting flags as given ('--tp 8 --ep 8'), '' when none."""
    parts = []
    for flag, values in (("--tp", request.tp_degrees), ("--pp", request.pp_degrees), ("--dp", request.dp_degrees),
                         ("--ep", request.ep_degrees),
                         ("--max-pp", () if request.max_pp is None else (request.max_pp,))):
        parts += [f"{flag} {v}" for v in sorted(set(values))]
    return " ".join(parts)
