"""A lower bound on any plan's step time (the gap the search reports is measured against it)."""

from __future__ import annotations

from ..cost.formulas import layer_time, optimizer_step_s
from ..core.dims import StageDims
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Training
from ..cost.sharding import Sharding
from .stage_types import SolverOptions


def compute_lower_bound_s(model: Model, cluster: Cluster, base: Training, options: SolverOptions,
                          with_optimizer: bool = True) -> float:
    """A lower bound on any plan's step time, as a linear program.

    Each layer of each sample must run on some GPU type, costing at least its compute time
    there at the most efficient micro-batch of the options with tp = 1, no recomputation and
    no communication; and every weight parameter's optimizer step runs on some GPU, at least
    once (ZeRO-1 and above shard it over a stage's replicas, tp over its GPUs; ZeRO-0 repeats
    it), costing cost.optimizer_step_s per parameter there. No type can be busy longer than
    (its GPU count) x T. Assigning layer-samples and parameters to types fractionally and
    minimising T relaxes every plan:
      1. variables: x[i, g] >= 0, samples of layer kind i run on type g; y[g] >= 0,
         parameters stepped on type g; T;
      2. objective: minimise T;
      3. constraints: (a) sum_g x[i, g] = global batch x (layers of kind i);
         (b) sum_g y[g] = the model's weight parameters (billions, for the solver);
         (c) sum_i x[i, g] c[i, g] + y[g] o[g] <= GPUs of type g x T.
    Why a GPU's compute plus its optimizer step fits in T: a GPU of stage k computes within
    the stage's busy time B_k and steps within its tail E_k (pricing.stage_tail takes the
    slowest replica type's step), and T = max X + sum tau >= X_k + tau_k = B_k + E_k
    (evaluate.pipeline_time_s). `with_optimizer` False leaves the steps out (compute only).
    """
    import pulp

    from .shares import _quiet_stdout

    sizes = [b for b in options.micro_batches if base.global_batch % b == 0] or list(options.micro_batches)
    kinds = {"embedding": [], "decoder": [], "head": []}
    for layer in model.layers:
        kinds[layer.kind].append(layer)
    gpus: dict[str, tuple] = {}
    for g in cluster.groups:
        count, group = gpus.get(g.gpu.name, (0, g))
        gpus[g.gpu.name] = (count + g.num_gpus, group)
    prob = pulp.LpProblem("step_time_lower_bound", pulp.LpMinimize)
    step = prob.add_variable("T", lowBound=0)
    share = {(kind, name): prob.add_variable(f"x_{kind}_{j}", lowBound=0)
             for kind in kinds for j, name in enumerate(sorted(gpus))}
    prob += step
    busy = {name: [] for name in gpus}
    for kind, layers in kinds.items():
        if not layers:
            continue
        prob += pulp.lpSum(share[(kind, name)] for name in gpus) == base.global_batch * len(layers), f"a_{kind}"
        for name, (_, group) in sorted(gpus.items()):
            per_sample = min(sum(layer_time(layer, group.gpu, Sharding(base.dtype, b, base.seq_len, base.attention,
                                                                       StageDims(), "none"),
                                            group.intra_node, options.params_for(group.gpu.name)).compute_s
                                 for layer in layers) / b / len(layers) for b in sizes)
            busy[name].append(share[(kind, name)] * per_sample)
    if with_optimizer:
        stepped = {name: prob.add_variable(f"y_{j}", lowBound=0) for j, name in enumerate(sorted(gpus))}
        # in billions of parameters: the solver drops coefficients below 1e-9 (seconds per parameter are ~1e-11)
        prob += pulp.lpSum(stepped.values()) == sum(layer.weight_params for layer in model.layers) / 1e9, "b_steps"
        for name, (_, group) in sorted(gpus.items()):
            busy[name].append(stepped[name] * optimizer_step_s(1e9, group.gpu, options.params_for(group.gpu.name),
                                                                        base.optimizer))
    for name, (count, _) in sorted(gpus.items()):
        prob += pulp.lpSum(busy[name]) <= count * step, f"c_{name}"
    with _quiet_stdout():
        prob.solve(pulp.HiGHS(msg=False))
    if prob.status != pulp.LpStatusOptimal:
        return 0.0
    return float(step.value())

