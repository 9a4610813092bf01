"""The least memory each kind of layer needs on a GPU, whatever stage it is in.

A stage that holds a layer holds at least that layer's activations for one micro-batch (a
pipeline rank keeps one or more micro-batches in flight, Schedule.in_flight_microbatches),
its recomputation working set, its weights, gradients and optimizer state, and the
reserved memory. Each is least at the most sharding the search may choose: the smallest
micro-batch it tries, the largest tensor-parallel degree the GPU's node and the attention
heads allow (with sequence parallelism, as the search always uses for tp > 1), the
recomputation mode that keeps least, and the highest ZeRO stage over every GPU of the
cluster. When even that exceeds every GPU type's memory for some layer, no plan exists, and
this is the reason to give (planner.search.driver raises it before searching). Same formulas as
planner.cost.evaluate: planner.cost.pricing's activations and cost.model_state_bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cost.formulas import model_state_bytes
from ..core.dims import StageDims
from ..inputs.hardware import Cluster
from ..inputs.model import Layer, Model
from ..plan import Training
from ..cost.pricing import saved_activation_bytes, transient_activation_bytes
from ..cost.sharding import Sharding
from .stage_types import SolverOptions

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

    @property
    def over_bytes(self) -> float:
        return self.activation_bytes - self.free_bytes


def _floor(layer: Layer, model: Model, group, base: Training, options: SolverOptions,
           micro_batch: int, num_gpus: int) -> LayerFloor | None:
    heads = model.config.num_heads if model.config else 1
    tps = [tp for tp in options.tp_degrees if group.gpus_per_node % tp == 0 and heads % tp == 0]
    if not tps:
        return None
    tp = max(tps)

    def need(mode: str) -> float:
        # recompute "block" holds at least what "full" does (every block recomputed)
        sh = Sharding(base.dtype, micro_batch, base.seq_len, base.attention, StageDims(tp, tp > 1),
                      "full" if mode == "block" else mode)
        return saved_activation_bytes(layer, sh) + transient_activation_bytes(layer, sh)

    mode = min(options.recompute_modes, key=need)
    dp = max(1, StageDims(tp).replicas_on(num_gpus))
    dims = StageDims(tp, tp > 1, dp, max(options.zero_stages) if dp > 1 else 0)
    states = model_state_bytes(dims.weight_share(layer.weight_params), base.dtype, dims.zero, dims.dp,
                               base.optimizer)
    states = sum(states[:2]) if options.offload else sum(states)  # ZeRO-Offload keeps the optimizer's on the host
    params = options.params_for(group.gpu.name)
    free = group.gpu.memory_bytes - params.reserved_memory_bytes - states
    return LayerFloor(layer.kind, group.gpu.name, micro_batch, tp, mode, need(mode), free)


def layer_floors(model: Model, cluster: Cluster, base: Training, options: SolverOptions) -> dict[str, list[LayerFloor]]:
    """Each layer kind's floor on each GPU type of the cluster (types whose nodes allow no tp
    degree of the search left out)."""
    sizes = [b for b in options.micro_batches if base.global_batch % b == 0]
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
            f = _floor(layer, model, g, base, options, min(sizes), cluster.num_gpus)
            if f is not None and (f.gpu not in best or f.over_bytes < best[f.gpu].over_bytes):
                best[f.gpu] = f
        out[kind] = list(best.values())
    return out


def unplaceable_layer(model: Model, cluster: Cluster, base: Training, options: SolverOptions) -> LayerFloor | None:
    """A layer kind that fits on no GPU type even alone at the most sharding, as its floor on
    the type where it comes closest (of several such kinds, the one farthest from fitting);
    None when every layer kind fits somewhere."""
    worst: LayerFloor | None = None
    for floors in layer_floors(model, cluster, base, options).values():
        if not floors:
            continue
        closest = min(floors, key=lambda f: (f.over_bytes, f.gpu))
        if closest.over_bytes > 0 and (worst is None or closest.over_bytes > worst.over_bytes):
            worst = closest
    return worst
