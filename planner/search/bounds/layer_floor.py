"""The least memory each kind of layer needs on a GPU, whatever stage it is in.

A stage that holds a layer holds at least that layer's activations for one micro-batch (a
pipeline rank keeps one or more micro-batches in flight, Schedule.in_flight_microbatches),
its recomputation working set, its weights, gradients and optimizer state, and the
reserved memory. Each is least at the most sharding the search may choose: the smallest
micro-batch it tries, the largest tensor-parallel degree the GPU's node and the attention
heads allow (with sequence parallelism, as the search always uses for tp > 1), the
recomputation mode that keeps least, and the highest ZeRO stage over every GPU of the
cluster. When even that exceeds every GPU type's memory for some layer, no plan exists, and
this is the reason to give (planner.search.orchestration.driver raises it before searching). Same formulas as
planner.cost.evaluate: planner.cost.pricing's activations and cost.model_state_bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...cost.states import model_state_bytes
from ...core.dims import StageDims
from ...inputs.devices import QUANTIZED_FORMATS
from ...inputs.hardware import GIB
from ...inputs.model import Layer, Model
from ...plan import Training
from ..pricing.context_parallel import cp_choices, largest_cp
from ...cost.pricing import saved_activation_bytes, transient_activation_bytes
from ...cost.sharding import Sharding
from ..pricing.stage_types import SearchContext, SolverOptions

LAYER_WORDS = {"embedding": "embedding", "decoder": "a decoder block", "head": "the output head"}


@dataclass(frozen=True)
class LayerFloor:
    """One layer kind on one GPU type at the most sharding: what it needs against what is left."""

    layer: str  # the layer kind: embedding, decoder, head
    gpu: str
    micro_batch: int
    tp: int
    recompute: str
    activation_bytes: float  # one micro-batch's saved activations plus the recomputation working set
    free_bytes: float  # GPU memory less reserved memory and the layer's model states
    cp: int = 1  # the context-parallel degree of the most sharding (largest_cp)

    @property
    def over_bytes(self) -> float:
        return self.activation_bytes - self.free_bytes


def _floor(layer: Layer, model: Model, group, training: Training, options: SolverOptions,
           micro_batch: int, num_gpus: int) -> LayerFloor | None:
    heads = model.config.tp_heads if model.config else 1
    tps = [tp for tp in options.tp_degrees if group.gpus_per_node % tp == 0 and heads % tp == 0]
    if not tps:
        return None
    tp = max(tps)
    cp, kind = largest_cp(model, training, options, tp, group)

    def need(mode: str) -> float:
        # recompute "block" holds at least what "full" does (every block recomputed)
        sh = Sharding(training.dtype, micro_batch, training.seq_len, training.attention, StageDims(tp, tp > 1, cp=cp,
                                                                                        cp_kind=kind),
                      "full" if mode == "block" else mode)
        return saved_activation_bytes(layer, sh) + transient_activation_bytes(layer, sh)

    mode = min(options.recompute_modes, key=need)
    dp = options.most_replicas(num_gpus, tp * cp)
    dims = StageDims(tp, tp > 1, dp, max(options.zero_stages) if dp > 1 else 0, cp, kind)
    states = model_state_bytes(dims.weight_share(layer.weight_params), training.dtype, dims.zero, dims.dp,
                               training.optimizer)
    states = sum(states[:2]) if options.offload else sum(states)  # ZeRO-Offload keeps the optimizer's on the host
    params = options.params_for(group.gpu.name)
    free = group.gpu.memory_bytes - params.reserved_memory_bytes - states
    return LayerFloor(layer.kind, group.gpu.name, micro_batch, tp, mode, need(mode), free, cp)


def layer_floors(context: SearchContext) -> dict[str, list[LayerFloor]]:
    """Each layer kind's floor on each GPU type of the cluster (types whose nodes allow no tp
    degree of the search left out)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    sizes = [b for b in options.micro_batches if training.global_batch % b == 0]
    if not sizes:
        return {}
    kinds: dict[str, Layer] = {}
    for layer in model.layers:
        kinds.setdefault(layer.kind, layer)
    if "decoder" in kinds:
        kinds["decoder"] = model.decoder_stand_in()  # the largest of differing decoders
    out: dict[str, list[LayerFloor]] = {}
    for kind, layer in kinds.items():
        best: dict[str, LayerFloor] = {}  # per GPU type, its best group (node sizes bound tp)
        for g in cluster.groups:
            f = _floor(layer, model, g, training, options, min(sizes), cluster.num_gpus)
            if f is not None and (f.gpu not in best or f.over_bytes < best[f.gpu].over_bytes):
                best[f.gpu] = f
        out[kind] = list(best.values())
    return out


def unplaceable_layer(context: SearchContext) -> LayerFloor | None:
    """A layer kind that fits on no GPU type even alone at the most sharding, as its floor on
    the type where it comes closest (of several such kinds, the one farthest from fitting);
    None when every layer kind fits somewhere."""
    worst: LayerFloor | None = None
    for floors in layer_floors(context).values():
        if not floors:
            continue
        closest = min(floors, key=lambda f: (f.over_bytes, f.gpu))
        if closest.over_bytes > 0 and (worst is None or closest.over_bytes > worst.over_bytes):
            worst = closest
    return worst


# --- the whole model -----------------------------------------------------------------------


@dataclass(frozen=True)
class StatesFloor:
    """The model's states against the whole cluster's memory: every parameter's weight (but where fp8
    parameters may replace it), gradient and (unless ZeRO-Offload moves them to the host) optimizer
    states sit on some GPU at least once, however they are sharded (ZeRO-3 divides them, never shrinks
    their sum), in the memory each GPU has past its reserved memory. A bound, not an estimate:
    activations come on top."""

    need_bytes: float
    hold_bytes: float
    offload: bool

    @property
    def over_bytes(self) -> float:
        return self.need_bytes - self.hold_bytes


def states_floor(context: SearchContext) -> StatesFloor:
    """StatesFloor of the model's unique parameters (a tied head's matrix once) on every GPU of the cluster."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    weights, grads, optimizer = model_state_bytes(sum(layer.params for layer in model.layers), training.dtype, 3, 1,
                                                  training.optimizer)
    if training.dtype in QUANTIZED_FORMATS:
        weights = 0.0  # fp8 parameters may replace the 16-bit weights (cost.fp8.fp8_params_saving)
    need = weights + grads + (0.0 if options.offload else optimizer)
    hold = sum(g.num_gpus * (g.gpu.memory_bytes - options.params_for(g.gpu.name).reserved_memory_bytes)
               for g in cluster.groups)
    return StatesFloor(need, hold, options.offload)


# --- one long sequence ---------------------------------------------------------------------


@dataclass(frozen=True)
class SequenceFloor:
    """The activations one sequence leaves on one GPU at the most sharding the search has (the
    largest tp, the largest cp, full recomputation, micro-batch 1): under 1F1B with the layers
    split evenly the first pipeline rank keeps as many sequences in flight as there are ranks,
    each through its 1/pp of the layers, so it holds all the layers' worth of one sequence
    whatever pp is (Narayanan et al. 2021, sec 2.2; Schedule.in_flight_microbatches). An
    explanation of a failed search, not a bound (uneven splits hold less on the first rank)."""

    gpu: str
    tp: int
    cp: int
    activation_bytes: float
    free_bytes: float  # GPU memory less reserved memory and its share of the model states
    cp_needed: int | None  # the least cp (a power of two) that would fit, None if none up to 1024
    max_seq_len: int | None  # the longest sequence that fits at tp and cp (multiple of 1024), None if none
    micro_batch: int = 1  # the smallest the search may use
    group_gpus: int = 0  # GPUs of the node group it is on (a CP ring spans nodes of one group)

    @property
    def over_bytes(self) -> float:
        return self.activation_bytes - self.free_bytes

    def explains(self, training: Training, options: SolverOptions) -> bool:
        """Whether it is the reason to give: a long sequence (options.cp_min_seq_len) whose
        activations overflow the memory the model states leave."""
        return training.seq_len >= options.cp_min_seq_len and self.free_bytes > 0 and self.over_bytes > 0


def _sequence_bytes(model: Model, training: Training, seq_len: int, tp: int, cp: int, micro_batch: int = 1) -> float:
    dims = StageDims(tp, tp > 1, cp=cp)
    sh = Sharding(training.dtype, micro_batch, seq_len, training.attention, dims, "full")
    return (sum(saved_activation_bytes(layer, sh) for layer in model.layers)
            + max(transient_activation_bytes(layer, sh) for layer in model.layers))


def sequence_floor(context: SearchContext) -> SequenceFloor | None:
    """SequenceFloor on the GPU type with the most memory (None without a model config or a
    tp degree)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    if model.config is None:
        return None
    group = max(cluster.groups, key=lambda g: (g.gpu.memory_bytes, g.name))
    heads = model.config.tp_heads
    tps = [tp for tp in options.tp_degrees if group.gpus_per_node % tp == 0 and heads % tp == 0]
    if not tps:
        return None
    tp = max(tps)
    cp, kind = largest_cp(model, training, options, tp, group)
    runs_cp = len(cp_choices(model, training, options, tp)) > 1
    # the model states at their least: ZeRO-3 over every GPU of the cluster (ZeRO-Offload: the
    # optimizer's on the host)
    states = model_state_bytes(model.params, training.dtype, 3, cluster.num_gpus, training.optimizer)
    states = sum(states[:2]) if options.offload else sum(states)
    params = options.params_for(group.gpu.name)
    free = group.gpu.memory_bytes - params.reserved_memory_bytes - states
    sizes = [b for b in options.micro_batches if training.global_batch % b == 0]
    b = min(sizes, default=1)
    need = _sequence_bytes(model, training, training.seq_len, tp, cp, b)
    cp_needed = None
    if runs_cp:
        for c in (2 ** k for k in range(1, 11)):
            if c > cp and _sequence_bytes(model, training, training.seq_len - training.seq_len % (2 * c), tp, c, b) <= free:
                cp_needed = c
                break
    longest, step = None, 1024
    low, high = 1, training.seq_len // step
    while low <= high:  # activations grow with the length: the longest multiple of 1024 that fits
        mid = (low + high) // 2
        if _sequence_bytes(model, training, mid * step, tp, cp, b) <= free:
            longest, low = mid * step, mid + 1
        else:
            high = mid - 1
    return SequenceFloor(group.gpu.name, tp, cp, need, free, cp_needed, longest, b,
                         group.nodes * group.gpus_per_node)


def sequence_floor_text(floor: SequenceFloor, training: Training) -> str:
    """'one 1,048,576-token sequence needs 201.3 GiB of activations per GPU at tp 8, cp 2 with full
    recomputation, more than the 70.1 GiB left on H100-SXM5-80GB; it needs cp >= 8 (tp 8 x cp 8 =
    64 GPUs of one type per sequence; there are 16), or --seq-len <= 262,144'."""
    where = f"tp {floor.tp}" + (f", cp {floor.cp}" if floor.cp > 1 else "")
    sample = (f"one {training.seq_len:,}-token sequence" if floor.micro_batch == 1
              else f"one micro-batch ({floor.micro_batch} sequences of {training.seq_len:,} tokens)")
    text = (f"{sample} needs {floor.activation_bytes / GIB:.1f} GiB of activations "
            f"per GPU at {where} with full recomputation (1F1B's first pipeline rank holds all the layers' "
            f"worth), more than the {max(0.0, floor.free_bytes) / GIB:.1f} GiB left on {floor.gpu}")
    fixes = []
    if floor.cp_needed:
        fixes.append(f"context parallelism cp >= {floor.cp_needed} (tp {floor.tp} x cp {floor.cp_needed} = "
                     f"{floor.tp * floor.cp_needed} GPUs of one type per sequence; there are {floor.group_gpus})")
    if floor.max_seq_len:
        fixes.append(f"--seq-len <= {floor.max_seq_len:,}")
    return text + (f"; it would fit with {' or '.join(fixes)}" if fixes else "")
