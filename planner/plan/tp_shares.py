"""Uneven tensor-parallel shards (Stage.tp_heads, Stage.tp_ffn): HAP (Zhang et al., EuroSys'24) splits a
TP group's attention heads and FFN columns in proportion to its GPUs' speeds, so a group of fast and
slow cards is not paced by the slow ones. Here: what such a split must respect, and the decoder a TP
position runs, as a layer of an even split (so the cost model prices each position as it prices any
TP rank)."""

from __future__ import annotations

from dataclasses import replace

from ..inputs.block_params import mixer_params, mlp_params
from ..inputs.model import Layer, ModelConfig

# FFN columns per TP rank come in multiples of 64: the tile width of the GEMM kernels (cuBLAS and
# CUTLASS tensor-core tiles are 64 or 128 wide), so no rank runs a ragged tile
FFN_COLUMN_UNIT = 64


def structural_problems(stage, path: str) -> list[tuple[str, str]]:
    """One head count and one FFN width per TP position; a stage of one TP degree, without context or
    expert parallelism (their groups fold a replica's ranks into others')."""
    if not stage.uneven_tp and not stage.tp_ffn:
        return []
    where = f"{path}.tp_shares"
    if len(stage.tp_heads) != stage.tp or len(stage.tp_ffn) != stage.tp:
        return [(where, f"gives {len(stage.tp_heads)} head counts and {len(stage.tp_ffn)} FFN widths "
                        f"for tp={stage.tp}: one of each per TP rank")]
    if stage.tp == 1:
        return [(where, "needs tp > 1")]
    if stage.mixed_tp:
        return [(where, f"needs one TP degree in the stage, not {stage.tp_label()}")]
    if stage.cp > 1 or stage.ep > 1 or stage.etp:
        return [(where, "needs cp 1 and ep 1")]
    return []


def model_problems(config: ModelConfig | None, stage, path: str) -> list[tuple[str, str]]:
    """The split against the model: every head and FFN column held once, each rank whole groups of
    query heads per KV head (its KV heads whole) and FFN columns in FFN_COLUMN_UNIT."""
    if not stage.uneven_tp:
        return []
    where = f"{path}.tp_shares"
    if config is None or config.mla is not None or config.num_experts > 1 or config.dense_layers:
        return [(where, "needs a dense decoder with multi-head or grouped-query attention (a model config)")]
    problems = []
    group = config.num_heads // config.num_kv_heads
    if sum(stage.tp_heads) != config.num_heads:
        problems.append((f"{where}.heads", f"sum to {sum(stage.tp_heads)}, the model has {config.num_heads} heads"))
    elif any(h % group for h in stage.tp_heads):
        problems.append((f"{where}.heads", f"each must be a multiple of {group} (query heads per KV head)"))
    if sum(stage.tp_ffn) != config.ffn_hidden:
        problems.append((f"{where}.ffn", f"sum to {sum(stage.tp_ffn)}, the model's FFN width is {config.ffn_hidden}"))
    elif any(f % FFN_COLUMN_UNIT for f in stage.tp_ffn):
        problems.append((f"{where}.ffn", f"each must be a multiple of {FFN_COLUMN_UNIT} columns"))
    return problems


def position_layer(layer: Layer, stage, position: int) -> Layer:
    """The decoder TP position `position` of `stage` runs, as the layer whose even split over the stage's
    tp gives each rank that position's heads (and their KV heads) and FFN columns; any other layer as it is."""
    if not stage.uneven_tp or layer.kind != "decoder" or layer.config is None:
        return layer
    return sliced_decoder(layer, stage.tp, stage.tp_heads[position], stage.tp_ffn[position])


def sliced_decoder(layer: Layer, tp: int, heads: int, ffn: int) -> Layer:
    """The decoder whose even split over `tp` ranks gives each rank `heads` query heads (and their KV
    heads) and `ffn` FFN columns: one TP position of an uneven split, priced as any TP rank."""
    config = layer.config
    kv = heads * config.num_kv_heads // config.num_heads
    sliced = replace(config, num_heads=heads * tp, num_kv_heads=kv * tp, attention_head_dim=config.head_dim,
                     ffn_hidden=ffn * tp)
    params = mixer_params(sliced) + mlp_params(sliced) + sliced.block_norms * sliced.norm_params
    return replace(layer, params=params, weight_params=params, config=sliced)


# --- the splits the search tries (docs/solver.md, "TP groups across GPU types") ----------------------

def splits_model(config: ModelConfig | None) -> bool:
    """Whether the search may split this model's TP groups unevenly: a dense decoder with multi-head or
    grouped-query attention whose FFN width is whole FFN_COLUMN_UNIT units (model_problems' terms)."""
    return (config is not None and config.mla is None and config.mamba is None and config.num_experts <= 1
            and not config.dense_layers and config.ffn_hidden % FFN_COLUMN_UNIT == 0)


def across_type_degrees(type_counts: tuple[int, ...], tp_degrees) -> list[int]:
    """The TP degrees (of `tp_degrees`) of a TP group over every GPU type of a node holding `type_counts`
    GPUs of each type: the node's TP groups (GPUs / tp of them) take equal parts of every type."""
    gpus = sum(type_counts)
    return [tp for tp in tp_degrees if tp > 1 and gpus % tp == 0 and all(c % (gpus // tp) == 0 for c in type_counts)]


def _spread(total: int, parts: int) -> list[int]:
    """`total` units over `parts` positions as evenly as they go, the earlier ones taking the larger."""
    size, extra = divmod(total, parts)
    return [size + (1 if i < extra else 0) for i in range(parts)]


def _apportioned(total: int, weights: list[int]) -> list[int]:
    """`total` units in proportion to `weights` by largest remainder (Hamilton), ties to the earlier."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[:total - sum(parts)]:
        parts[i] += 1
    return parts


# the split spaces the search may try (SolverOptions.tp_splits, `plan --tp-splits`)
SPLIT_SPACES = ("ratio", "apart")


def type_splits(config: ModelConfig, positions: tuple[int, ...],
                space: str = "ratio") -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every uneven split the search tries for a TP group with `positions[j]` ranks of its j-th GPU type,
    as (query heads, FFN columns) per TP position, type by type: every count of KV-head groups per type
    (each position at least one), spread evenly over the type's positions (the earlier taking the
    larger), and the FFN columns in FFN_COLUMN_UNIT units. `space` "ratio": the columns in proportion to
    each position's heads (largest remainder), one ratio per GPU for every sharded dimension, as HAP's
    sharding ratios (Zhang et al., EuroSys'24); "apart": those and every count of units per type as well
    (each position at least one), spread evenly alike."""
    group = config.num_heads // config.num_kv_heads
    units, columns = config.num_kv_heads, config.ffn_hidden // FFN_COLUMN_UNIT
    out = []
    for totals in _compositions(units, positions):
        heads = [u for total, n in zip(totals, positions) for u in _spread(total, n)]
        ffns = [_apportioned(columns, heads)]
        if space == "apart":
            spreads = ([u for total, n in zip(ffn_totals, positions) for u in _spread(total, n)]
                       for ffn_totals in _compositions(columns, positions))
            ffns += [spread for spread in spreads if spread != ffns[0]]
        for ffn in ffns:
            if min(ffn) > 0:
                out.append((tuple(h * group for h in heads), tuple(f * FFN_COLUMN_UNIT for f in ffn)))
    return out


def _compositions(total: int, least: tuple[int, ...]):
    """Every tuple of len(least) integers summing to `total`, each at least its `least`, in lexicographic order."""
    if len(least) == 1:
        if total >= least[0]:
            yield (total,)
        return
    for first in range(least[0], total - sum(least[1:]) + 1):
        for rest in _compositions(total - first, least[1:]):
            yield (first,) + rest
