"""A lower bound on any plan's step time (the gap the search reports is measured against it)."""

from __future__ import annotations

from itertools import product

from ...cost.formulas import layer_time, optimizer_step_s
from ...cost.states import model_state_bytes
from ...cost.pricing import layer_price
from ...cost.runtimes.capability import capability
from ...core.dims import StageDims
from ...inputs.hardware import Cluster
from ...inputs.model import Model
from ...cost.sharding import Sharding
from ..pricing.context_parallel import cp_choices
from ..pricing.stage_types import INF, SearchContext


def compute_lower_bound_s(context: SearchContext, with_optimizer: bool = True) -> float:
    """A lower bound on any plan's step time: the larger of busy_bound_s (every GPU's compute
    and optimizer step at its cheapest) and pipeline_bound_s (that plus the wait for the other
    pipeline ranks which slow GPUs, or the memory that forces them onto more GPUs, impose)."""
    return max(busy_bound_s(context, with_optimizer), pipeline_bound_s(context, with_optimizer))


def busy_bound_s(context: SearchContext, with_optimizer: bool = True) -> float:
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
    the stage's busy time B_k and steps within its tail E_k (cost.stage_tail.stage_tail takes the
    slowest replica type's step), and T = max X + sum tau >= X_k + tau_k = B_k + E_k
    (evaluate.pipeline_time_s). `with_optimizer` False leaves the steps out (compute only).
    """
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    import pulp

    from ..pricing.shares import highs, quiet_stdout

    sizes = [b for b in options.micro_batches if training.global_batch % b == 0] or list(options.micro_batches)
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
        prob += pulp.lpSum(share[(kind, name)] for name in gpus) == training.global_batch * len(layers), f"a_{kind}"
        for name, (_, group) in sorted(gpus.items()):
            per_sample = min(sum(layer_time(layer, group.gpu, Sharding(training.dtype, b, training.seq_len, training.attention,
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
                                                                        training.optimizer))
    for name, (count, _) in sorted(gpus.items()):
        prob += pulp.lpSum(busy[name]) <= count * step, f"c_{name}"
    with quiet_stdout():
        prob.solve(highs())
    if prob.status != pulp.LpStatusOptimal:
        return 0.0
    return float(step.value())



# --- the wait for the other pipeline ranks (pipeline_bound_s) ------------------------------------


def latency_floor_s(schedule: str, price, max_v: int) -> float:
    """What one layer adds at least to a pipeline rank's latency c_k (Schedule.latency_s) under
    `schedule`, from its LayerPrice: 1F1B and GPipe take the rank's whole pass (schedules.base);
    interleaved, combined 1F1B and looped BFS its slowest chunk, at least the pass / V (interleaved.py,
    combined_1f1b.py, looped_bfs.py); ZB-H1 the pass less twice its W (zero_bubble.py); ZB-V and DualPipeV at least half
    its forward (zbv.py, dualpipev.py). None for a schedule not listed (no floor)."""
    if schedule in ("1f1b", "gpipe"):
        return price.time_s
    if schedule in ("interleaved", "combined-1f1b", "looped-bfs"):
        return price.time_s / max_v
    if schedule == "zb-h1":
        return price.time_s - 2 * price.wgrad_s
    if schedule in ("zbv", "dualpipev"):  # (dualpipev.py: the same floor)
        return price.fwd_s / 2
    return None


def _distinct_groups(cluster: Cluster) -> list:
    """The node groups, one of each (GPU, GPUs per node, intra_node): what the per-group floors
    of _modes and ends_floor depend on, so that a cluster of many alike groups prices each once."""
    out: dict[tuple, object] = {}
    for g in cluster.groups:
        out.setdefault((g.gpu, g.gpus_per_node, g.intra_node), g)
    return list(out.values())


def _shapes(model: Model, kind: str) -> list:
    """The layers of `kind`, one of each shape (they differ only by index and name otherwise)."""
    out: dict[tuple, object] = {}
    for layer in model.layers:
        if layer.kind == kind:
            out.setdefault((layer.config, layer.params, layer.weight_params, layer.fixed, layer.blend,
                            layer.expert_params), layer)
    return list(out.values())


def _modes(context: SearchContext, micro_batch: int, schedules, act_caps: bool, alone: bool) -> dict:
    """Per replica mode mu = (GPU type, tp): (kappa, tau, cap, cap_alone) at micro-batch
    b. kappa: the least GPU-seconds one decoder block of one sample costs it (tp x cp x
    LayerPrice.time_s / b, over cp, sequence parallelism and recompute; the TP ring inside a node, the fastest
    it has); tau: the least a block adds to its rank's latency (latency_floor_s, over the same and
    the schedules); cap: the most decoder blocks one of its GPUs holds: their weights and gradients
    (cost.model_state_bytes, ZeRO over every GPU of the cluster; the optimizer states only without
    ZeRO-Offload) and, with `act_caps`, the activations of one micro-batch (every schedule keeps
    at least one in flight, Schedule.in_flight_microbatches), beside the reserve. cap_alone: the
    same for the one rank of a one-stage plan, where (`alone`, Capability.activation_offload_alone)
    activation offload may take the activations of a rank that does not recompute. (One mode per
    recompute mode as well, "none" with its larger activations, gave +1.3 % on llama-3-70b for 7x
    the programmes.)"""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    decoders = _shapes(model, "decoder")
    block_params = min(layer.weight_params for layer in decoders)
    modes_rc = {"block": ("none", "full")}
    recompute = sorted({m for mode in options.recompute_modes for m in modes_rc.get(mode, (mode,))} or {"none"})
    zeros = sorted(set(options.zero_stages) | {0})
    max_v = max(options.virtual_stages)
    out: dict[tuple[str, int], tuple[float, float, float, float]] = {}
    for g in _distinct_groups(cluster):
        name, p = g.gpu.name, options.params_for(g.gpu.name)
        room = g.gpu.memory_bytes - p.reserved_memory_bytes
        for tp in options.tp_degrees:
            if g.gpus_per_node % tp:
                continue
            dp = options.most_replicas(cluster.num_gpus, tp)
            states = min(sum(model_state_bytes(block_params / tp, training.dtype, z, dp, training.optimizer)[:3 - options.offload])
                         for z in zeros)
            kappa = tau = act = INF
            for (cp, kind), sp, mode in product(cp_choices(model, training, options, tp), {False, tp > 1}, recompute):
                sh = Sharding(training.dtype, micro_batch, training.seq_len, training.attention,
                              StageDims(tp, sp, cp=cp, cp_kind=kind), mode)
                for layer in decoders:
                    price = layer_price(layer, sh, g.gpu, g.intra_node, p)
                    kappa = min(kappa, tp * cp * price.time_s / micro_batch)
                    floors = [latency_floor_s(s, price, max_v) for s in schedules]
                    tau = min(tau, 0.0 if None in floors else max(0.0, min(floors)))
                    act = min(act, price.act_bytes)
            held = states + (act if act_caps else 0.0)
            cap = INF if held <= 0 else max(0, int(room // held))
            cap_alone = INF if states <= 0 else max(0, int(room // states))
            if act_caps and not (alone and "none" in recompute):
                cap_alone = cap
            old = out.get((name, tp), (INF, INF, 0, 0))
            out[(name, tp)] = (min(old[0], kappa), min(old[1], tau), max(old[2], cap), max(old[3], cap_alone))
    return out


def ends_floor(context: SearchContext, micro_batch: int, schedules) -> tuple:
    """The embedding's and head's rates per GPU type (compute at tp 1, as busy_bound_s) and delta,
    the least (<= 0) they add to rank latencies (latency_floor_s; below 0 only under ZB-H1)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    names = sorted({g.gpu.name for g in cluster.groups})
    count = {kind: sum(1 for layer in model.layers if layer.kind == kind) for kind in ("embedding", "head")}
    other_rate, delta = {}, 0.0
    for kind in ("embedding", "head"):
        layers = _shapes(model, kind)
        floor = 0.0
        for name in names:
            group = next(g for g in cluster.groups if g.gpu.name == name)
            sh = Sharding(training.dtype, micro_batch, training.seq_len, training.attention, StageDims(), "none")
            other_rate[(kind, name)] = min((layer_time(layer, group.gpu, sh, group.intra_node,
                                                       options.params_for(name)).compute_s / micro_batch for layer in layers),
                                           default=0.0)
        for g in _distinct_groups(cluster):
            for tp in options.tp_degrees:
                if g.gpus_per_node % tp:
                    continue
                for (cp, cp_kind), sp, mode in product(cp_choices(model, training, options, tp), {False, tp > 1},
                                                       ("none", "full")):
                    sh = Sharding(training.dtype, micro_batch, training.seq_len, training.attention,
                                  StageDims(tp, sp, cp=cp, cp_kind=cp_kind),
                                  mode)
                    for layer in layers:
                        price = layer_price(layer, sh, g.gpu, g.intra_node, options.params_for(g.gpu.name))
                        floors = [latency_floor_s(s, price, max(options.virtual_stages)) for s in schedules]
                        floor = min(floor, 0.0 if None in floors else min(floors))
        delta += floor * count[kind]
    return other_rate, delta


def pipeline_bound_s(context: SearchContext, with_optimizer: bool = True) -> float:
    """A lower bound on any plan's step time that adds to the busy time the wait for the other
    pipeline ranks that slow GPUs, or the memory that keeps blocks off a GPU, force, as a minimum of
    linear programs (0.0 for MoE models).

    For every rank j, T >= B_j + E_j + R_j with R_j = sum over the other ranks k of c_k
    (evaluate.pipeline_time_s). A replica is of a mode mu = (GPU type, tp) (_modes:
    kappa, tau, cap); call the mode of a rank's replicas with the largest tau its slowest, s(k),
    and z_mu the decoder blocks of the ranks whose slowest mode is mu (sum z = the model's blocks
    L). Rank k's latency is at least l_k tau_s(k) (l_k its blocks), so R_j >= sum_mu tau_mu z_mu -
    tau_s(j) l_j, and l_j <= min(z_s(j), cap_s(j)); the embedding and head add at least delta
    (<= 0, their floors). A GPU of rank j computes and steps within B_j + E_j <= T - R_j. The
    replicas of modes at least as slow as mu (the set U_mu) sit in ranks whose slowest mode is in
    U_mu, so the block-samples they run are at most G sum_{U_mu} z. Relaxed: variables as in
    busy_bound_s (x per mode for decoder blocks, at kappa), z_mu >= 0 and S, for each choice mu*
    of the rank j that subtracts most:
      minimise T subject to (a), (b) as there; (c') per GPU type g: work on g <=
      N_g (T - sum_mu tau_mu z_mu + S - delta); (d) for each mu: sum_{U_mu} x <= G sum_{U_mu} z;
      (e) sum z = L; (f) 0 <= S <= tau_mu* z_mu*, S <= tau_mu* cap_mu*.
    Under even shares (Capability.uneven_shares False: Megatron-LM, DeepSpeed, torchtitan) every
    replica of rank k runs n = share / b micro-batches, so each of its GPUs is held B_k = n x the
    slowest replica's pass: the rank's blocks cost every replica, of any type (with the rank's tp),
    the kappa of its slowest mode; then x is split per (class mu, GPU type) at
    kappa_mu, with (g) sum_g x_mu,g = G z_mu (and the embedding and head at the cheapest type's rate).
    One-stage plans (their rank holds all L blocks, R = 0) are bounded apart, by the same programme
    with z_mu* = L and only modes whose cap_alone reaches L; where activation offload may serve
    any stage, activations bound no cap (_modes). The least over the classes, mu* and the
    micro-batches that divide the global batch bounds every plan.
    """
    model, training, options = context.model, context.training, context.options
    config = model.config
    if config is not None and getattr(config, "num_experts", 1) > 1:
        return 0.0
    cap = capability(options.space or training.runtime, model)
    schedules = [s for s in cap.schedules if s == "1f1b" or options.max_stages > 1]
    # activations bound the blocks a GPU holds unless activation offload may serve a pipelined stage
    act_caps = not options.activation_offload or cap.activation_offload_alone
    sizes = [b for b in options.micro_batches if training.global_batch % b == 0] or list(options.micro_batches)
    best = INF
    for b in sizes:
        modes = _modes(context, b, schedules, act_caps, cap.activation_offload_alone)
        ends = ends_floor(context, b, schedules)
        blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
        for alone in ((False, True) if options.max_stages > 1 else (True,)):
            for star in modes:
                if alone and modes[star][3] < blocks:
                    continue
                best = min(best, _wait_lp_s(context, modes, ends, star, alone, not cap.uneven_shares, with_optimizer))
    return 0.0 if best == INF else best


def _wait_lp_s(context: SearchContext, modes: dict, ends: tuple,
               star: tuple, alone: bool, even: bool, with_optimizer: bool) -> float:
    """One programme of pipeline_bound_s: rank class mu* = `star`; `alone`: one-stage plans."""
    import pulp

    from ..pricing.shares import highs, quiet_stdout

    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    count = {"embedding": 0, "decoder": 0, "head": 0}
    for layer in model.layers:
        count[layer.kind] += 1
    names = sorted({g.gpu.name for g in cluster.groups})
    gpus = {name: sum(g.num_gpus for g in cluster.groups if g.gpu.name == name) for name in names}
    params = sum(layer.weight_params for layer in model.layers) / 1e9  # billions (busy_bound_s)
    usable = {mu for mu in modes if not alone or modes[mu][3] >= count["decoder"]}
    order = sorted(usable, key=lambda mu: (-modes[mu][1], mu))  # slowest first, ties by (type, tp)
    # the replicas a rank of class mu may hold: mu's own, or (even shares) any as fast with its tp
    runs = {mu: {mu} | ({nu for nu in order[i:] if nu[1:] == mu[1:]} if even else set()) for i, mu in enumerate(order)}
    other_rate, delta = ends
    prob = pulp.LpProblem("pipeline_lower_bound", pulp.LpMinimize)
    step = prob.add_variable("T", lowBound=0)
    slack = prob.add_variable("S", lowBound=0)
    x = {(mu, g): prob.add_variable(f"x_{i}_{k}", lowBound=0)
         for i, mu in enumerate(order) for k, g in enumerate(names) if any(nu[0] == g for nu in runs[mu])}
    z = {mu: prob.add_variable(f"z_{i}", lowBound=0) for i, mu in enumerate(order)}
    xo = {(kind, name): prob.add_variable(f"o_{kind}_{j}", lowBound=0)
          for kind in ("embedding", "head") for j, name in enumerate(names)}
    y = {name: prob.add_variable(f"y_{j}", lowBound=0) for j, name in enumerate(names)}
    prob += step
    prob += pulp.lpSum(x.values()) == training.global_batch * count["decoder"], "a_decoder"
    if even:  # a rank's blocks are every sample's: G z_mu block-samples in the ranks of class mu
        for i, mu in enumerate(order):
            prob += pulp.lpSum(x[(mu, g)] for g in names if (mu, g) in x) == training.global_batch * z[mu], f"g_{i}"
    for kind in ("embedding", "head"):
        if count[kind]:
            prob += pulp.lpSum(xo[(kind, n)] for n in names) == training.global_batch * count[kind], f"a_{kind}"
    if with_optimizer:
        prob += pulp.lpSum(y.values()) == params, "b_steps"
    wait = pulp.lpSum(modes[mu][1] * z[mu] for mu in order) - slack + delta  # delta <= 0
    for j, name in enumerate(names):
        work = [x[(mu, name)] * modes[mu][0] for mu in order if (mu, name) in x]
        work += [xo[(kind, name)] * (min(other_rate[(kind, n)] for n in names) if even else other_rate[(kind, name)])
                 for kind in ("embedding", "head") if count[kind]]
        if with_optimizer:
            group = next(g for g in cluster.groups if g.gpu.name == name)
            work.append(y[name] * optimizer_step_s(1e9, group.gpu, options.params_for(name), training.optimizer))
        prob += pulp.lpSum(work) <= gpus[name] * step - gpus[name] * wait, f"c_{j}"
    # (d) through running sums: X_i = X_i-1 + the block-samples of mode i, Z_i likewise, X_i <= G Z_i
    run_x = run_z = None
    for i, mu in enumerate(order):
        here_x = pulp.lpSum(v for (nu, _), v in x.items() if nu == mu)
        cum_x, cum_z = prob.add_variable(f"X_{i}"), prob.add_variable(f"Z_{i}")
        prob += cum_x == (here_x if run_x is None else run_x + here_x), f"dx_{i}"
        prob += cum_z == (z[mu] if run_z is None else run_z + z[mu]), f"dz_{i}"
        prob += cum_x <= training.global_batch * cum_z, f"d_{i}"
        run_x, run_z = cum_x, cum_z
    prob += pulp.lpSum(z.values()) == count["decoder"], "e_blocks"
    tau_star, cap_star = modes[star][1], modes[star][3 if alone else 2]
    if alone:  # one rank, of class mu*, holds every block (then S = tau* L and R = 0)
        prob += z[star] == count["decoder"], "h_alone"
    prob += slack <= tau_star * z[star], "f_held"
    if cap_star < INF:
        prob += slack <= tau_star * cap_star, "f_memory"
    with quiet_stdout():
        prob.solve(highs())
    if prob.status != pulp.LpStatusOptimal:
        return INF if alone else 0.0
    return float(step.value())
