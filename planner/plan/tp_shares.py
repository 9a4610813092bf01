"""Uneven tensor-parallel shards (Stage.tp_heads, Stage.tp_ffn): HAP (Zhang et al., EuroSys'24) splits a
TP group's attention heads and FFN columns in proportion to its GPUs' speeds, so a group of fast and
slow cards is not paced by the slow ones. Here: what such a split must respect, and the decoder a TP
position runs, as a layer of an even split (so the cost model prices each position as it prices any
TP rank)."""

from __future__ import annotations

from dataclasses import replace

from ..inputs.block_params import attention_params, mlp_params
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
    config, tp = layer.config, stage.tp
    heads = stage.tp_heads[position]
    kv = heads * config.num_kv_heads // config.num_heads
    sliced = replace(config, num_heads=heads * tp, num_kv_heads=kv * tp, attention_head_dim=config.head_dim,
                     ffn_hidden=stage.tp_ffn[position] * tp)
    params = attention_params(sliced) + mlp_params(sliced) + sliced.block_norms * sliced.norm_params
    return replace(layer, params=params, weight_params=params, config=sliced)
