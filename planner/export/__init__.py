"""`planner export PLAN --to TARGET`: turn a plan file into a training runtime's launch config.

Targets and output formats (stdout, or FILE with -o):

* ``megatron``: Megatron-LM launch arguments, one flag per line ending in `` \\``, the last
  line without; a few ``#`` comment lines come first (the node-rank table among them). Use them as
  ``eval "ARGS=($(grep -v '^#' megatron.args))"`` then
  ``torchrun ... pretrain_gpt.py "${ARGS[@]}" --data-path ... --tokenizer-type ...``, or through
  the per-node scripts of ``--launch-dir`` (planner.export.launch). Covers parallelism, batch, the
  pipeline split (even: Megatron's own; else ``--pipeline-model-parallel-layout``, one chunk per
  virtual stage, E = embedding, t = decoder, L = norm + head), recompute, distributed optimizer,
  and every flag that builds the same model: widths, heads, query groups, kv-channels, qk-norm,
  SwiGLU, norm and its epsilon, rotary base / percent / Llama 3.1 scaling, tied or untied
  embeddings, a vocabulary divisor that leaves the vocabulary unpadded, biases, experts (count,
  top-k, expert FFN, shared experts, dense layers, router bias, expert-parallel size).
* ``deepspeed``: ``ds_config.json``. DeepSpeed ignores keys it does not know; the extra
  top-level key ``planner_pipeline`` carries what goes to ``PipelineModule`` instead:
  ``{"num_stages": P, "parts": [cumulative boundaries over the planner's layer list],
  "partition_method": "type:transformer" | "custom", "layer_list": ..., "activation_checkpoint_interval": 0|1,
  "tensor_parallel_size": TP, "data_parallel_size": DP, "sequence_parallel": bool,
  "node_ranks": [which node starts as which node rank, on which GPUs, its global ranks as
  {"first": F, "last": L}]}``, and ``planner_launch``: ``{"hostfile": ["GROUP-NODE slots=N", ...]
  (nodes in node-rank order, placeholder names to replace), "command": "deepspeed --hostfile
  hostfile --num_nodes N --num_gpus G train.py --deepspeed --deepspeed_config ds_config.json"
  (``--include`` where a node runs only some GPUs), "notes": [...]}`` (with TP > 1 the notes say that
  tensor parallelism needs Megatron-DeepSpeed; planner.export.ds_launch; ``--launch-dir`` writes
  ``hostfile`` and ``launch.sh``)
  (``type:transformer`` where every pipeline rank has the same decoder blocks, as DeepSpeed
  runs plans of its runtime: its own partitioning over the layers named like "transformer", as
  Megatron-DeepSpeed's GPTModelPipe does, gives ``parts``; ``custom`` for the reduced form of an
  uneven split: pass ``parts`` by overriding ``PipelineModule._partition_layers`` or map them to your
  LayerSpec list: entry 0 is the embedding, then the decoder blocks, then norm + head).
* ``torchtitan``: the job-config TOML of torchtitan 0.2.x (``[job]``, ``[model]``,
  ``[training]``, ``[parallelism]``, ``[activation_checkpoint]``, and ``[compile] enable = true``
  for a plan with ``training.compile``), with ``module_fqns_per_model_part`` whenever pp > 1
  (exactly the plan's split). Megatron-LM and DeepSpeed have no torch.compile setting: a plan
  with it exports without it, warned (their runtimes price the fused kernels already); rankmap
  ignores it (the reference runtime runs eager).
* ``torchtitan-cli``: the same settings as torchtitan command-line overrides on one line
  (``--parallelism.tensor_parallel_degree 2 ...``), in the form its ``ConfigManager`` (tyro)
  parses: ``module_fqns_per_model_part`` as one comma-separated word per model part
  (``tok_embeddings,layers.0 layers.1,norm,output``), booleans as ``--s.key`` /
  ``--s.no_key``.
* ``rankmap``: JSON, one entry per used rank (stage, layers, TP group, DP group, batch
  share, placement) and a ``torchrun`` line per run of alike nodes that starts ``planner
  run plan.json`` (the reference runtime, planner.runner) on each, with the node ranks it takes
  as ``"node_rank_range": {"first": F, "last": L}``; carries the whole heterogeneous plan, so it
  always exports.

Every string goes through the format's own writer: ``tomli_w`` for TOML, ``json.dumps`` for
JSON, ``shlex.quote`` for shell words (a torchtitan-cli value that starts with ``-`` is written
``--s.key=VALUE``), and ``comment_line`` for ``#`` lines, which escapes every character that is
not printable, so no name (model, cluster, group, GPU) can end a line or add a flag or a section.

Exact or refused (planner.cli.export): a plan made for another runtime (training.runtime), or one
that uses a freedom the target lacks (per-stage TP or DP, uneven batch shares, per-stage options;
planner.export.runnable), exits 2 naming ``--runtime``, unless ``--lossy``: then the nearest plan
the target runs (runnable_form: one TP and DP, equal shares, the plan's layer split and stage
placement, the target's ZeRO / recompute / precision) is written, and its step time re-priced
under the target's runtime is printed beside the plan's. The exporters themselves, called on any
plan (planner.api), still reduce it to the closest uniform form and report each loss on stderr as
``planner: warning: <target>: ...``:

* per-stage TP degrees that differ -> the largest TP on every stage;
* different GPU counts / DP degrees per stage -> DP = (fewest GPUs of any pipeline rank) //
  TP, lowered further until it divides the global batch in whole micro-batches (the other
  GPUs stay idle);
* uneven batch shares -> equal shares (global / DP);
* a placement that no torchrun node order gives (planner.export.launch) -> reported, not kept;
* per-stage ZeRO / recompute / sequence-parallel that differ -> the strongest setting
  (most memory saved) on every stage;
* DeepSpeed: ZeRO >= 2 with pp > 1 -> ZeRO-1; selective recompute -> full layer
  checkpointing; interleaving -> contiguous 1F1B stages of the same per-rank layer totals;
* torchtitan (exact: ZeRO-3 without PP as FSDP ``always``, ZeRO-1 with PP as FSDP ``never``,
  which torch.distributed.pipelining gathers and reduce-scatters once per step, ZeRO-0 as DDP
  when DP is the only parallelism; capability.py): other ZeRO stages -> FSDP without reshard
  after forward, ZeRO-0 beside TP or PP -> the same (torchtitan's DDP refuses to combine with
  them), fp16 -> bfloat16 (float32 where a GPU has no bf16), bf16 with TP or PP on one replica
  -> reported (torchtitan then trains in fp32: mixed precision comes from FSDP).

Exit 2 (refused) when there is no faithful form: the plan file is unreadable or invalid,
Megatron/torchtitan get a model without a config
(a layer profile) for which no architecture flags can be written, or torchtitan gets a
sequence length that does not divide by 2 x TP (its sequence-parallel rule) or a model whose
dimensions, rope base or norm epsilon are none of its llama3 flavours (the flavour is chosen by hidden size, layers,
heads, KV heads, FFN width and vocabulary, never by the model's name; planner.inputs.titan_flavors).
"""

from __future__ import annotations

from ..core.errors import BadInput
from ..plan import Plan
from .base import RECOMPUTE_ORDER, Uniform, Warn, comment_line, decoder_counts, uniform_form
from .deepspeed import export_deepspeed
from .deepspeed import deepspeed_launch_dir
from .launch import NodeLaunch, node_launches, placeable
from .launch import launch_scripts as _torchrun_scripts
from .megatron import export_megatron, megatron_layout, vocab_divisor
from .rankmap import export_rankmap
from .runnable import capability_problems, describe_form, runnable_form, runnable_forms, runtime_problems
from .targets import EXPORT_TARGETS, LAUNCH_TARGETS, TARGET_RUNTIMES, TARGETS, ExportTarget
from .torchtitan import export_torchtitan, export_torchtitan_cli, titan_cli_args, titan_fqns, titan_settings

__all__ = ["EXPORT_TARGETS", "ExportTarget", "LAUNCH_TARGETS", "NodeLaunch", "RECOMPUTE_ORDER", "TARGETS",
           "TARGET_RUNTIMES", "Uniform", "Warn",
           "capability_problems", "comment_line", "decoder_counts", "describe_form",
           "export_deepspeed", "export_megatron", "export_plan", "export_rankmap", "export_torchtitan",
           "export_torchtitan_cli", "launch_scripts", "megatron_layout", "node_launches", "placeable",
           "runnable_form", "runnable_forms", "runtime_problems",
           "titan_cli_args", "titan_fqns", "titan_settings", "uniform_form", "vocab_divisor"]


def launch_scripts(plan: Plan, target: str, config_path: str) -> dict[str, str]:
    """`--launch-dir` files: {file name: text}; a torchrun script per node (planner.export.launch),
    or DeepSpeed's hostfile and launcher script (planner.export.ds_launch)."""
    if target == "deepspeed":
        return deepspeed_launch_dir(plan, config_path)
    return _torchrun_scripts(plan, target, config_path)


def export_plan(plan: Plan, target: str, warn: Warn) -> str:
    """`plan` as `target`'s text (EXPORT_TARGETS; the exporter's warnings to `warn`)."""
    if target not in EXPORT_TARGETS:
        raise BadInput(f"unknown target {target!r} (one of {', '.join(TARGETS)})", "--to")
    return EXPORT_TARGETS[target].export(plan, warn)
