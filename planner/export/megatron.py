"""`planner export --to megatron`: Megatron-LM launch arguments (planner.export)."""

from __future__ import annotations

import shlex
from typing import Any

from ..core.errors import BadInput
from ..inputs.model_families import features_beyond_gpt_flags
from ..plan import Plan
from .base import Warn, block_recompute_layers, runtime_optimizer, comment_line, route_comments, uniform_form


def megatron_split(chunks: list[int], pp: int, v: int) -> tuple[list[int], tuple[int, int] | None, bool]:
    """The legal Megatron split nearest to the planned decoder counts per chunk.

    Returns (exported counts per chunk, (first, last) per-rank totals for the uneven flags or
    None when the split is even, exact). Raises BadInput when no legal split exists.
    """
    n = sum(chunks)
    if pp == 1:
        return list(chunks), None, True
    planned_rank = [sum(chunks[k] for k in range(r, len(chunks), pp)) for r in range(pp)]
    middle = pp - 2
    best = None
    for first in range(v, n + 1, v):
        for last in range(v, n - first + 1, v):
            rem = n - first - last
            if middle == 0:
                if rem:
                    continue
                per = 0
            else:
                if rem <= 0 or rem % middle or (rem // middle) % v:
                    continue
                per = rem // middle
            totals = [first] + [per] * middle + [last]
            exported = [totals[k % pp] // v for k in range(len(chunks))]
            even = len(set(totals)) == 1
            cost = (sum(abs(a - b) for a, b in zip(exported, chunks)), not even, max(exported))
            if best is None or cost < best[0]:
                best = (cost, exported, totals, even)
    if best is None:
        raise BadInput(f"no Megatron pipeline split of {n} decoder layers over pp={pp} x "
                       f"{v} virtual stages (first/last rank > 0 layers, middle ranks equal, "
                       f"each rank's layers a multiple of {v}); planned per rank: {planned_rank}",
                       "--to megatron")
    _, exported, totals, even = best
    return exported, None if even else (totals[0], totals[-1]), exported == list(chunks)


def export_megatron(plan: Plan, warn: Warn) -> str:
    c = plan.model.config
    if c is None:
        raise BadInput("the plan's model is a layer profile without a config: Megatron needs the "
                       "architecture (hidden size, heads, ...)", "--to megatron")
    # megatron/training/arguments.py --optimizer {adam, sgd}; adam is AdamW (decoupled weight decay)
    optimizer = runtime_optimizer(plan, "megatron", {"adamw": "adam", "sgd": "sgd"})
    u = uniform_form(plan, "megatron", warn)
    exported, uneven, exact = megatron_split(u.decoders, u.pp, u.v)
    if not exact:
        warn("pipeline split changed to fit Megatron's rules (only the first and last rank may differ; "
             "each rank's layers split evenly over its virtual stages): "
             + ", ".join(f"stage {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(u.decoders, exported))
                         if a != b) + " decoder layers")
    flags: list[tuple[str, Any]] = [
        ("--tensor-model-parallel-size", u.tp), ("--pipeline-model-parallel-size", u.pp),
        ("--micro-batch-size", u.micro), ("--global-batch-size", u.global_batch)]
    if u.v > 1:
        if uneven is None:
            flags.append(("--num-layers-per-virtual-pipeline-stage", exported[0]))
        else:
            flags.append(("--num-virtual-stages-per-pipeline-rank", u.v))
    if uneven is not None:
        flags += [("--decoder-first-pipeline-num-layers", uneven[0]),
                  ("--decoder-last-pipeline-num-layers", uneven[1])]
    if u.sequence_parallel:
        flags.append(("--sequence-parallel", None))
    if u.recompute == "selective":
        flags.append(("--recompute-granularity", "selective"))
    elif u.recompute == "block" and max(u.recompute_layers) > 0:
        # Megatron-LM transformer_block.py _checkpointed_forward: the first N layers of each stage
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                  ("--recompute-num-layers", block_recompute_layers(u, warn))]
    elif u.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
    if optimizer != "adam":
        flags.append(("--optimizer", optimizer))
    if u.offload:
        # megatron-core optimizer/cpu_offloading (HybridDeviceOptimizer): needs the distributed optimizer
        flags += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", 1.0)]
        if u.zero == 0:
            flags.append(("--use-distributed-optimizer", None))
    if u.zero >= 1:
        flags.append(("--use-distributed-optimizer", None))
        if u.zero >= 2:
            warn(f"ZeRO-{u.zero} exported as --use-distributed-optimizer, which shards optimizer state "
                 "only (ZeRO-1): gradients" + (" and parameters" if u.zero == 3 else "")
                 + " are no longer sharded")
    if c.num_kv_heads % u.tp:
        warn(f"{c.num_kv_heads} query groups do not split over tp={u.tp}; Megatron will refuse it")
    flags += [("--num-layers", sum(u.decoders)), ("--hidden-size", c.hidden),
              ("--num-attention-heads", c.num_heads)]
    if c.num_kv_heads != c.num_heads:
        flags += [("--group-query-attention", None), ("--num-query-groups", c.num_kv_heads)]
    if c.q_dim != c.hidden and c.mla is None:
        flags.append(("--kv-channels", c.head_dim))  # head_dim x heads is not the hidden size
    if c.qk_norm == "head":
        flags.append(("--qk-layernorm", None))
    not_carried = features_beyond_gpt_flags(c)
    if not_carried:
        warn(f"the {c.model_type} model's {', '.join(not_carried)} are not in these flags: "
             "add them for your Megatron version")
    flags.append(("--ffn-hidden-size", c.ffn_hidden))
    if c.gated_mlp:
        flags.append(("--swiglu", None))
    flags += [("--seq-length", plan.training.seq_len),
              ("--max-position-embeddings", max(c.max_positions, plan.training.seq_len))]
    if not c.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    if c.norm == "rmsnorm":
        flags += [("--normalization", "RMSNorm")]
    flags.append(("--position-embedding-type", "learned_absolute" if c.learned_positions else "rope"))
    if not c.linear_bias:
        flags.append(("--disable-bias-linear", None))
        if c.qkv_bias:
            flags.append(("--add-qkv-bias", None))
    if not c.dropout:
        flags += [("--attention-dropout", 0), ("--hidden-dropout", 0)]
    if c.num_experts > 1:
        flags += [("--num-experts", c.num_experts), ("--moe-router-topk", c.experts_top_k)]
    if u.dtype == "bf16":
        flags.append(("--bf16", None))
    elif u.dtype == "fp16":
        flags.append(("--fp16", None))
    lines = [f"{k} {shlex.quote(str(val))}" if val is not None else k for k, val in flags]
    header = [comment_line(text) for text in (
        f"planner export --to megatron: {plan.model.name} on {plan.cluster.name}, "
        f"tp {u.tp} x pp {u.pp} x dp {u.dp} = {u.world} GPUs, "
        f"{u.grad_accum} micro-batches of {u.micro} per replica per step",
        f"decoder layers per pipeline stage: {exported}",
        f"vocabulary {c.vocab} ({c.model_type}): set by the tokenizer flags you add "
        "(--tokenizer-type ...), with --data-path etc.",
        "usage: ARGS=$(grep -v '^#' FILE | tr -d '\\\\\\n'); torchrun ... pretrain_gpt.py $ARGS ...",
        *route_comments(plan))]
    return "\n".join(header + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"
