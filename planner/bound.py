"""A lower bound on any plan's step time (the gap the search reports is measured against it)."""

from __future__ import annotations

from .cost import layer_time
from .pricing import layer_price
from .dims import StageDims
from .hardware import Cluster
from .model import Model
from .plan import Training
from .sharding import Sharding
from .stage_types import SolverOptions


def compute_lower_bound_s(model: Model, cluster: Cluster, base: Training, options: SolverOptions) -> float:
    """A lower bound on any plan's step time, as a linear program.

    Each layer of each sample must run on some GPU type, costing at least its compute time
    there at the most efficient micro-batch with tp = 1, no recomputation and no
    communication; no type can be busy longer than (its GPU count) x T. Assigning
    layer-samples to types fractionally and minimising T relaxes every plan:
      1. variables: x[i, g] >= 0, samples of layer kind i run on type g; T;
      2. objective: minimise T;
      3. constraints: (a) sum_g x[i, g] = global batch x (layers of kind i);
         (b) sum_i x[i, g] c[i, g] <= GPUs of type g x T.
    """
    import pulp

    from .shares import _quiet_stdout

    b = max(options.micro_batches)
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
            per_sample = sum(layer_time(layer, group.gpu, Sharding(base.dtype, b, base.seq_len, base.attention,
                                                                   StageDims(), "none"),
                                        group.intra_node, options.params_for(group.gpu.name)).compute_s
                             for layer in layers) / b / len(layers)
            busy[name].append(share[(kind, name)] * per_sample)
    for name, (count, _) in sorted(gpus.items()):
        prob += pulp.lpSum(busy[name]) <= count * step, f"b_{name}"
    with _quiet_stdout():
        prob.solve(pulp.HiGHS(msg=False))
    if prob.status != pulp.LpStatusOptimal:
        return 0.0
    return float(step.value())


def block_latency_floor_s(model: Model, cluster: Cluster, base: Training, b: int, options: SolverOptions) -> float:
    """A floor on one decoder block's share of a pipeline rank's latency tau at micro-batch b:
    the least time of one block (compute and TP communication, pricing.layer_price.time_s)
    over the cluster's GPU types and every tp degree and recompute mode of the options.

    Why it is a floor (planner.stages prices tau): 1F1B, tau of a rank with n blocks is its
    slowest replica type's per-micro-batch time, a span of n blocks (plus the embedding or
    head, ZeRO collectives and sends, all >= 0), so tau >= n x floor. Interleaved, tau is the
    slowest chunk's latency; the V chunks hold the n blocks, so one holds >= n / V of them and
    tau >= (n / V) x floor. Hence plans whose ranks hold r blocks in all have sum tau >= r x floor / V."""
    block = next(layer for layer in model.layers if layer.kind == "decoder")
    heads = model.config.num_heads if model.config else 1
    best = float("inf")
    for g in cluster.groups:
        for tp in options.tp_degrees:
            if g.gpus_per_node % tp or heads % tp:
                continue
            for mode in options.recompute_modes:
                sh = Sharding(base.dtype, b, base.seq_len, base.attention, StageDims(tp, tp > 1), mode)
                best = min(best, layer_price(block, sh, g.gpu, g.intra_node, options.params_for(g.gpu.name)).time_s)
    return 0.0 if best == float("inf") else best
