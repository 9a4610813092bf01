"""`planner export PLAN --to TARGET`: turn a plan file into a training runtime's launch config.

Targets and output formats (stdout, or FILE with -o):

* ``megatron``: Megatron-LM launch arguments, one flag per line ending in `` \\``, the last
  line without; a few ``#`` comment lines come first. Use them as
  ``ARGS=$(grep -v '^#' megatron.args | tr -d '\\\\\\n')`` then
  ``torchrun ... pretrain_gpt.py $ARGS --data-path ... --tokenizer-type ...``.
  Covers parallelism, batch, pipeline split (decoder layers only; Megatron puts the
  embedding on the first and the head on the last pipeline rank), recompute, distributed
  optimizer, and the model's architecture flags.
* ``deepspeed``: ``ds_config.json``. DeepSpeed ignores keys it does not know; the extra
  top-level key ``planner_pipeline`` carries what goes to ``PipelineModule`` instead:
  ``{"num_stages": P, "parts": [cumulative boundaries over the planner's layer list],
  "partition_method": "custom", "layer_list": ..., "activation_checkpoint_interval": 0|1,
  "tensor_parallel_size": TP, "data_parallel_size": DP, "sequence_parallel": bool}``
  (pass ``parts`` by overriding ``PipelineModule._partition_layers`` or map them to your
  LayerSpec list: entry 0 is the embedding, then the decoder blocks, then norm + head).
* ``torchtitan``: the job-config TOML of torchtitan 0.2.x (``[job]``, ``[model]``,
  ``[training]``, ``[parallelism]``, ``[activation_checkpoint]``), with
  ``module_fqns_per_model_part`` whenever pp > 1 (exactly the plan's split).
* ``torchtitan-cli``: the same settings as torchtitan command-line overrides on one line
  (``--parallelism.tensor_parallel_degree 2 ...``), in the form its ``ConfigManager`` (tyro)
  parses: ``module_fqns_per_model_part`` as one comma-separated word per model part
  (``tok_embeddings,layers.0 layers.1,norm,output``), booleans as ``--s.key`` /
  ``--s.no_key``.
* ``rankmap``: JSON, one entry per used rank (stage, layers, TP group, DP group, batch
  share, placement) and a ``torchrun`` line per run of alike nodes; carries the whole
  heterogeneous plan, so it always exports.

Every string goes through the format's own writer: ``tomli_w`` for TOML, ``json.dumps`` for
JSON, ``shlex.quote`` for shell words (a torchtitan-cli value that starts with ``-`` is written
``--s.key=VALUE``), and ``comment_line`` for ``#`` lines, which escapes every character that is
not printable, so no name (model, cluster, group, GPU) can end a line or add a flag or a section.

What a runtime cannot express is reduced to the closest uniform form and each loss is
reported on stderr as ``planner: warning: <target>: ...``:

* per-stage TP degrees that differ -> the largest TP on every stage;
* different GPU counts / DP degrees per stage -> DP = (fewest GPUs of any pipeline rank) //
  TP, lowered further until it divides the global batch in whole micro-batches (the other
  GPUs stay idle);
* uneven batch shares -> equal shares (global / DP);
* mixed GPU types, a placement other than TP-innermost, DP, then PP -> reported, not kept;
* per-stage ZeRO / recompute / sequence-parallel that differ -> the strongest setting
  (most memory saved) on every stage;
* Megatron: uneven pipeline ranks beyond "first and last may differ, the rest split evenly
  (and, when interleaved, each rank's layers split evenly over its virtual stages)" ->
  the legal split nearest to the plan's (least layers moved);
* DeepSpeed: ZeRO >= 2 with pp > 1 -> ZeRO-1; selective recompute -> full layer
  checkpointing; interleaving -> contiguous 1F1B stages of the same per-rank layer totals;
* torchtitan: ZeRO-1/2 -> FSDP without reshard after forward, ZeRO-0 -> DDP (replicate)
  when DP is the only parallelism, else FSDP without reshard after forward (torchtitan's
  DDP refuses to combine with TP or PP), fp16 -> bfloat16 (float32 where a GPU has no
  bf16).

Exit 2 (refused) when there is no faithful form: the plan file is unreadable or invalid,
Megatron has no legal layer split for the plan's pipeline (e.g. a decoder count that does
not divide over the virtual stages), Megatron/torchtitan get a model without a config
(a layer profile) for which no architecture flags can be written, or torchtitan gets a
sequence length that does not divide by 2 x TP (its sequence-parallel rule) or a model whose
dimensions are none of its llama3 flavours (the flavour is chosen by hidden size, layers,
heads, KV heads, FFN width and vocabulary, never by the model's name; planner.titan_flavors).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

import tomli_w

from .errors import BadInput
from .io import json_text
from .plan import Plan
from .schedules import get_schedule
from .model_families import features_beyond_gpt_flags
from .titan_flavors import titan_llama3_flavor

TARGETS = ("megatron", "deepspeed", "torchtitan", "torchtitan-cli", "rankmap")
RECOMPUTE_ORDER = {"none": 0, "selective": 1, "full": 2}

Warn = Callable[[str], None]


# --- writing -------------------------------------------------------------------------------


def comment_line(text: str) -> str:
    """`# text` on one line: every character that is not printable (new lines, carriage
    returns, other control and separator characters) written as its Python escape."""
    return "# " + "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


# --- shared analysis -----------------------------------------------------------------------


def decoder_counts(plan: Plan) -> list[int]:
    """Decoder layers per stage (the embedding and head entries do not count)."""
    kinds = [layer.kind for layer in plan.model.layers]
    every = "decoder" not in kinds  # a profile without marked decoder layers
    return [sum(1 for i in range(*s.layers) if every or kinds[i] == "decoder") for s in plan.stages]


@dataclass
class Uniform:
    """The closest form with one TP, one DP, one set of options for every stage."""

    tp: int
    pp: int
    dp: int
    v: int
    micro: int
    global_batch: int
    zero: int
    recompute: str
    sequence_parallel: bool
    schedule: str
    dtype: str
    decoders: list[int] = field(default_factory=list)  # per stage (chunk), planned

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def grad_accum(self) -> int:
        return self.global_batch // (self.micro * self.dp)


def uniform_form(plan: Plan, target: str, warn: Warn) -> Uniform:
    t = plan.training
    stages = plan.stages
    tps = sorted({s.tp for s in stages})
    tp = tps[-1]
    if len(tps) > 1:
        warn(f"per-stage TP degrees differ ({', '.join(f'stage {s.index}: {s.tp}' for s in stages)}); "
             f"exported tp={tp} for every stage")
    gpus_by_prank: dict[int, int] = {}
    for s in stages:
        gpus_by_prank.setdefault(s.pipeline_rank, s.tp * s.dp)
    fewest = min(gpus_by_prank.values())
    dp = max(1, fewest // tp)
    while dp > 1 and t.global_batch % (t.micro_batch * dp):
        dp -= 1
    dps = sorted({s.dp for s in stages})
    used = len(plan.used_ranks())
    world = tp * plan.pp * dp
    if len(dps) > 1 or len(set(gpus_by_prank.values())) > 1 or world != used:
        warn(f"per-stage DP degrees / GPU counts differ "
             f"({', '.join(f'stage {s.index}: dp {s.dp} on {s.tp * s.dp} GPUs' for s in stages)}); "
             f"exported dp={dp} everywhere: {tp} x {plan.pp} x {dp} = {world} of the plan's {used} GPUs")
    uneven = [s for s in stages if len({r.batch_share for r in s.replicas}) > 1]
    if uneven or len(dps) > 1:
        detail = "; ".join(f"stage {s.index}: {[r.batch_share for r in s.replicas]}" for s in uneven[:4])
        warn(f"batch shares equalised to {t.global_batch // dp} samples per replica"
             + (f" (plan: {detail})" if detail else ""))
    gpu_types = sorted({plan.cluster.device(r).gpu for r in plan.used_ranks()})
    if len(gpu_types) > 1:
        warn(f"mixed GPU types ({', '.join(gpu_types)}): {target} runs one layout on all of them; "
             "the plan's per-type sizing is kept only as stated above")
    # placement: TP innermost, then DP, then PP, from rank 0
    expected_ok = True
    for s in stages:
        for d, r in enumerate(s.replicas):
            if s.tp != tp or s.dp != dp or list(r.ranks) != [s.pipeline_rank * tp * dp + d * tp + i
                                                             for i in range(tp)]:
                expected_ok = False
    if not expected_ok:
        warn(f"device placement not kept: {target} assigns ranks TP-innermost, then DP, then PP "
             "(see `--to rankmap` for the plan's placement)")
    zeros = sorted({s.zero for s in stages})
    if len(zeros) > 1:
        warn(f"per-stage ZeRO stages differ ({zeros}); exported ZeRO-{zeros[-1]}")
    modes = sorted({s.recompute for s in stages}, key=RECOMPUTE_ORDER.get)
    if len(modes) > 1:
        warn(f"per-stage recompute differs ({', '.join(modes)}); exported {modes[-1]} everywhere")
    sps = {s.sequence_parallel for s in stages if s.tp > 1}
    sp = tp > 1 and (any(sps) or (not sps and any(s.sequence_parallel for s in stages)))
    if len(sps) > 1:
        warn("sequence parallelism on some TP stages only; exported on")
    return Uniform(tp=tp, pp=plan.pp, dp=dp, v=t.virtual_stages, micro=t.micro_batch,
                   global_batch=t.global_batch, zero=zeros[-1], recompute=modes[-1],
                   sequence_parallel=sp, schedule=t.schedule, dtype=t.dtype,
                   decoders=decoder_counts(plan))


# --- Megatron ------------------------------------------------------------------------------


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
    elif u.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
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
        "usage: ARGS=$(grep -v '^#' FILE | tr -d '\\\\\\n'); torchrun ... pretrain_gpt.py $ARGS ...")]
    return "\n".join(header + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"


# --- DeepSpeed -----------------------------------------------------------------------------


def export_deepspeed(plan: Plan, warn: Warn) -> str:
    u = uniform_form(plan, "deepspeed", warn)
    zero = u.zero
    if u.pp > 1 and zero >= 2:
        warn(f"ZeRO-{zero} cannot run with DeepSpeed's pipeline engine (pp={u.pp}); exported ZeRO-1: "
             "gradients" + (" and parameters" if zero == 3 else "") + " are no longer sharded")
        zero = 1
    if u.v > 1:
        warn(f"DeepSpeed has no interleaved schedule: the {u.pp * u.v} virtual stages become {u.pp} "
             "contiguous 1F1B stages holding each pipeline rank's layer total")
    # stage boundaries over the planner's layer list, one contiguous part per pipeline rank
    per_rank = [0] * u.pp
    for s in plan.stages:
        per_rank[s.pipeline_rank] += s.layers[1] - s.layers[0]
    parts = [0]
    for count in per_rank:
        parts.append(parts[-1] + count)
    config: dict[str, Any] = {
        "train_batch_size": u.global_batch,
        "train_micro_batch_size_per_gpu": u.micro,
        "gradient_accumulation_steps": u.grad_accum,
        "zero_optimization": {"stage": zero},
    }
    if u.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif u.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                          "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    if u.recompute != "none":
        if u.recompute == "selective":
            warn("DeepSpeed checkpoints whole layers: selective recompute exported as full activation "
                 "checkpointing (less memory, about one extra forward pass of compute)")
        config["activation_checkpointing"] = {
            "partition_activations": u.tp > 1, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}
    config["planner_pipeline"] = {
        "num_stages": u.pp, "parts": parts, "partition_method": "custom",
        "layer_list": "planner layers: 0 = embedding, 1..L = decoder blocks, last = final norm + head",
        "activation_checkpoint_interval": 1 if u.recompute != "none" else 0,
        "tensor_parallel_size": u.tp, "data_parallel_size": u.dp,
        "sequence_parallel": u.sequence_parallel}
    return json_text(config) + "\n"


# --- torchtitan ----------------------------------------------------------------------------


def titan_fqns(plan: Plan) -> list[list[str]]:
    layers = plan.model.layers
    first_decoder = next((l.index for l in layers if l.kind == "decoder"), 0)
    parts = []
    for s in plan.stages:
        names: list[str] = []
        for i in range(*s.layers):
            kind = layers[i].kind
            if kind == "embedding":
                names.append("tok_embeddings")
            elif kind == "head":
                names += ["norm", "output"]
            else:
                names.append(f"layers.{i - first_decoder}")
        parts.append(names)
    return parts


def titan_settings(plan: Plan, warn: Warn) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """torchtitan sections -> {key: value}, and comment lines."""
    c = plan.model.config
    if c is None:
        raise BadInput("the plan's model is a layer profile without a config: torchtitan needs a "
                       "model name and flavor", "--to torchtitan")
    model = {"name": "llama3", "flavor": titan_llama3_flavor(c, plan.model.name)}  # by dimensions
    u = uniform_form(plan, "torchtitan", warn)
    seq_len = plan.training.seq_len
    if seq_len % (2 * u.tp):
        # torchtitan's parallelize_llama asserts seq_len % ParallelDims.seq_len_divisor == 0
        raise BadInput(f"torchtitan needs the sequence length to divide by 2 x TP = {2 * u.tp} "
                       f"(its sequence-parallel rule); the plan's is {seq_len}", "--to torchtitan")
    comments = [f"planner export --to torchtitan: {plan.model.name} on {plan.cluster.name}, "
                f"tp {u.tp} x pp {u.pp} x dp {u.dp} = {u.world} GPUs"]
    if u.dtype == "fp16":
        gpus = {plan.cluster.device(r).gpu for r in plan.used_ranks()}
        bf16 = all(g.supports("bf16") for g in plan.cluster.gpu_types if g.name in gpus)
        precision = "bfloat16" if bf16 else "float32"
        warn(f"torchtitan has no fp16 mixed precision; exported {precision}"
             + ("" if bf16 else " (a GPU of the plan has no bf16: twice the activation memory)"))
    else:
        precision = "bfloat16" if u.dtype == "bf16" else "float32"
    training = {"local_batch_size": u.global_batch // u.dp if u.pp > 1 else u.micro,
                "global_batch_size": u.global_batch, "seq_len": seq_len,
                "mixed_precision_param": precision}
    par: dict[str, Any] = {}
    # torchtitan's DDP (replicate only) refuses any other parallelism ("DDP has not supported
    # > 1D parallelism"): with TP or PP, ZeRO-0 can only be FSDP
    ddp = u.zero == 0 and (u.dp == 1 or (u.tp == 1 and u.pp == 1))
    if ddp:
        par["data_parallel_replicate_degree"] = u.dp
        par["data_parallel_shard_degree"] = 1
    else:
        par["data_parallel_replicate_degree"] = 1
        par["data_parallel_shard_degree"] = u.dp
        if u.zero < 3:
            par["fsdp_reshard_after_forward"] = "never"
            if u.zero == 0:
                warn(f"torchtitan's DDP does not combine with TP or PP: ZeRO-0 exported as FSDP "
                     f"(shard degree {u.dp}) without resharding after forward, which shards parameters, "
                     "gradients and optimizer states")
            elif u.dp > 1:
                warn(f"torchtitan has no ZeRO-{u.zero}: exported FSDP (shard degree {u.dp}) without "
                     "resharding after forward, which also shards parameters between steps")
        else:
            par["fsdp_reshard_after_forward"] = "always"
    par["tensor_parallel_degree"] = u.tp
    if u.tp > 1 and not u.sequence_parallel:
        warn("torchtitan's tensor parallelism always shards the sequence (sequence parallel on)")
    par["pipeline_parallel_degree"] = u.pp
    if u.pp > 1:
        par["pipeline_parallel_schedule"] = get_schedule(u.schedule).runtime_names["torchtitan"]
        par["pipeline_parallel_microbatch_size"] = u.micro
        par["module_fqns_per_model_part"] = titan_fqns(plan)
    ac: dict[str, Any] = {"mode": u.recompute}
    if u.recompute == "selective":
        ac["selective_ac_option"] = "op"
    job = {"dump_folder": "./outputs", "description": f"{plan.model.name} on {plan.cluster.name} (planner)"}
    return {"job": job, "model": model, "training": training, "parallelism": par,
            "activation_checkpoint": ac}, comments


def export_torchtitan(plan: Plan, warn: Warn) -> str:
    sections, comments = titan_settings(plan, warn)
    return "".join(comment_line(c) + "\n" for c in comments) + "\n" + tomli_w.dumps(sections)


def _titan_cli_args(name: str, key: str, value: Any) -> list[str]:
    """One setting as torchtitan's ConfigManager (tyro) parses it on the command line."""
    if isinstance(value, bool):  # tyro flags: --s.key / --s.no_key, no value
        return [f"--{name}.{key}" if value else f"--{name}.no_{key}"]
    if isinstance(value, list):
        # list[str] is one comma-separated word (torchtitan's registered rule); list[list[str]]
        # is one such word per inner list
        if value and all(isinstance(x, list) for x in value):
            return [f"--{name}.{key}", *(",".join(map(str, x)) for x in value)]
        return [f"--{name}.{key}", ",".join(map(str, value))]
    text = str(value)
    # a value word that starts with "-" would read as a flag; "--s.key=-x" cannot
    return [f"--{name}.{key}={text}"] if text.startswith("-") else [f"--{name}.{key}", text]


def export_torchtitan_cli(plan: Plan, warn: Warn) -> str:
    sections, _ = titan_settings(plan, warn)
    args = []
    for name, values in sections.items():
        for k, v in values.items():
            args += _titan_cli_args(name, k, v)
    return " ".join(map(shlex.quote, args)) + "\n"


# --- rank map ------------------------------------------------------------------------------


def export_rankmap(plan: Plan, warn: Warn) -> str:
    t = plan.training
    entries: dict[int, dict[str, Any]] = {}
    for s in plan.stages:
        for r in s.replicas:
            for tp_rank, rank in enumerate(r.ranks):
                e = entries.get(rank)
                if e is None:
                    dev = plan.cluster.device(rank)
                    e = entries[rank] = {
                        "rank": rank, "stage": s.index, "stages": [], "pipeline_rank": s.pipeline_rank,
                        "layers": [], "tp_rank": tp_rank, "tp_group": list(r.ranks),
                        "dp_rank": r.dp_rank,
                        "dp_group": [rep.ranks[tp_rank] for rep in s.replicas],
                        "batch_share": r.batch_share, "micro_batches": r.batch_share // t.micro_batch,
                        "gpu": dev.gpu, "group": dev.group, "node": dev.node, "local_rank": dev.local_rank}
                e["stages"].append(s.index)
                e["layers"].append(list(s.layers))
    ranks = [entries[r] for r in sorted(entries)]
    # torchrun: nodes in cluster order, only those with used GPUs; world rank = order of use
    by_node: dict[tuple[str, int], list[int]] = {}
    for e in ranks:
        by_node.setdefault((e["group"], e["node"]), []).append(e["local_rank"])
    nodes = list(by_node.items())
    for world_rank, e in enumerate(ranks):
        e["world_rank"] = world_rank
    launch = []
    i = 0
    while i < len(nodes):
        (group, _), locals_ = nodes[i]
        j = i
        while j + 1 < len(nodes) and nodes[j + 1][0][0] == group and nodes[j + 1][1] == locals_:
            j += 1
        gpus_per_node = plan.cluster.group(group).gpus_per_node
        visible = "" if locals_ == list(range(gpus_per_node)) else \
            f"CUDA_VISIBLE_DEVICES={','.join(map(str, locals_))} "
        launch.append({
            "group": group, "nodes": [n for (_, n), _ in nodes[i:j + 1]],
            "nnodes": len(nodes), "nproc_per_node": len(locals_), "node_rank_range": [i, j],
            "torchrun": f"{visible}torchrun --nnodes={len(nodes)} --nproc_per_node={len(locals_)} "
                        f"--node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 "
                        f"TRAIN_SCRIPT --rankmap rankmap.json  # NODE_RANK in {i}..{j}"})
        i = j + 1
    out = {"format": "planner.rankmap/v1", "model": plan.model.name, "cluster": plan.cluster.name,
           "world_size": len(ranks), "global_batch": t.global_batch, "micro_batch": t.micro_batch,
           "seq_len": t.seq_len, "dtype": t.dtype, "schedule": t.schedule,
           "virtual_stages": t.virtual_stages, "pp": plan.pp,
           "note": "rank = the plan's cluster rank; world_rank = torchrun's rank when launched as below",
           "ranks": ranks, "launch": launch}
    return json_text(out) + "\n"


EXPORTERS: dict[str, Callable[[Plan, Warn], str]] = {
    "megatron": export_megatron, "deepspeed": export_deepspeed, "torchtitan": export_torchtitan,
    "torchtitan-cli": export_torchtitan_cli, "rankmap": export_rankmap}


def export_plan(plan: Plan, target: str, warn: Warn) -> str:
    if target not in EXPORTERS:
        raise BadInput(f"unknown target {target!r} (one of {', '.join(TARGETS)})", "--to")
    return EXPORTERS[target](plan, warn)
