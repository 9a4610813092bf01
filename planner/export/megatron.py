"""`planner export --to megatron`: Megatron-LM launch arguments (planner.export)."""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from ..core.errors import BadInput
from ..inputs.hf_extras import rope_and_norm, text_config
from ..inputs.block_params import HYBRID_FEATURE, features_beyond_gpt_flags
from ..plan import Plan
from ..cost.fp8 import recipe_for
from ..cost.runtimes.megatron import SPEC as MEGATRON
from ..schedules.interleaved import microbatch_group
from .base import Uniform, Warn, block_recompute_layers, comment_line, route_comments, runtime_optimizer, uniform_form
from .launch import device_connections, placeable, placement_comments


TP_OVERLAP_NOTE = ("TP communication overlaps the weight-gradient GEMMs as priced: megatron-core's default "
                   "with CUDA_DEVICE_MAX_CONNECTIONS=1 (no --tp-comm-overlap, whose forward overlap is not priced)")

LAYOUT_CHARS = {"embedding": "E", "decoder": "t", "head": "L"}  # PipelineParallelLayerLayout.parse_str_to_list


def _runs(chars: str) -> str:
    """"Ettt" -> "Et*3" (the layout's `x*n` shorthand)."""
    out, i = [], 0
    while i < len(chars):
        j = i
        while j < len(chars) and chars[j] == chars[i]:
            j += 1
        out.append(chars[i] + (f"*{j - i}" if j - i > 1 else ""))
        i = j
    return "".join(out)


def megatron_layout(plan: Plan) -> str:
    """`--pipeline-model-parallel-layout`: one `|`-separated entry per chunk in Megatron's order
    (entry k is virtual stage k // pp of pipeline rank k % pp; megatron/core/transformer/
    pipeline_parallel_layer_layout.py), E = embedding, t = decoder layer, m = an MTP module (before the
    head that ends its stage), L = final norm + head."""
    pp = plan.pp
    parts = []
    for k, s in enumerate(plan.stages):
        if s.pipeline_rank != k % pp:
            raise BadInput(f"stage {k} is on pipeline rank {s.pipeline_rank}; Megatron puts chunk {k} on rank "
                           f"{k % pp}", "--to megatron")
        layers = [plan.model.layers[i] for i in range(*s.layers)]
        parts.append(_runs("".join("m" * len(layer.trail) + LAYOUT_CHARS.get(layer.kind, "t") for layer in layers)))
    return "|".join(parts)


def vocab_divisor(vocab: int, tp: int) -> int | None:
    """The largest `--make-vocab-size-divisible-by` (a power of two up to Megatron's default 128) under
    which Megatron keeps `vocab` unpadded: it pads to a multiple of divisor x TP
    (megatron/training/tokenizer: _vocab_size_with_padding); None when none does."""
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return None


def _model_flags(plan: Plan, tp: int, warn: Warn) -> list[tuple[str, Any]]:
    """The flags that build the plan's model (megatron/training/arguments.py names; each maps to a
    TransformerConfig / GPTModel field of megatron-core, tests/test_integration.py builds it)."""
    c = plan.model.config
    assert c is not None
    extra = rope_and_norm(plan.model.raw, c.model_type, plan.model.name)
    decoders = [layer for layer in plan.model.layers if layer.kind == "decoder"]
    flags: list[tuple[str, Any]] = [("--num-layers", len(decoders)), ("--hidden-size", c.hidden),
                                    ("--num-attention-heads", c.num_heads)]
    if c.num_kv_heads != c.num_heads:
        flags += [("--group-query-attention", None), ("--num-query-groups", c.num_kv_heads)]
    if c.mla is None:
        flags.append(("--kv-channels", c.head_dim))
    else:
        flags += _mla_flags(c.mla)
    if c.qk_norm == "head":
        flags.append(("--qk-layernorm", None))
    carried = {"shared experts", "dense layers among the MoE ones", "router bias", "multi-latent attention",
               HYBRID_FEATURE}
    not_carried = [f for f in features_beyond_gpt_flags(c) if f not in carried]
    if not_carried:
        warn(f"the {c.model_type} model's {', '.join(not_carried)} are not in these flags: "
             "add them for your Megatron version")
    moe = c.num_experts > 1
    dense_ffn = c.dense_ffn_hidden if moe and (c.dense_layers or c.mamba is not None) else c.ffn_hidden
    flags.append(("--ffn-hidden-size", dense_ffn))
    if c.gated_mlp:
        flags.append(("--swiglu", None))
    if c.mamba is not None:
        flags += _hybrid_flags(c, plan.model.raw)
    flags += [("--seq-length", plan.training.seq_len),
              ("--max-position-embeddings", max(c.max_positions, plan.training.seq_len))]
    if not c.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    if c.norm == "rmsnorm":
        flags += [("--normalization", "RMSNorm")]
    flags.append(("--norm-epsilon", extra.norm_eps))
    # Nemotron-H's attention has no position embedding (its Mamba layers carry the order)
    positions = "learned_absolute" if c.learned_positions else "none" if c.mamba is not None else "rope"
    flags.append(("--position-embedding-type", positions))
    if positions == "rope" and extra.rope_theta is not None:
        flags.append(("--rotary-base", int(extra.rope_theta) if extra.rope_theta.is_integer() else extra.rope_theta))
        if extra.rotary_fraction != 1.0:
            flags.append(("--rotary-percent", extra.rotary_fraction))
        scaling = extra.rope_scaling
        if c.mla is not None:
            flags += _mla_rope_flags(scaling, warn)
        elif scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type"))
            # megatron-core's apply_rope_scaling: Llama 3.1's rule with low/high frequency factors 1 and 4
            # over 8192 original positions (megatron/core/models/common/embeddings/rotary_pos_embedding.py)
            if kind == "llama3" and (scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0),
                                     scaling.get("original_max_position_embeddings", 8192)) == (1.0, 4.0, 8192):
                flags += [("--use-rope-scaling", None), ("--rope-scaling-factor", scaling.get("factor", 8.0))]
            else:
                warn(f"rope scaling {dict(scaling)} is not in these flags: add it for your Megatron version")
    divisor = vocab_divisor(c.vocab, tp)
    if divisor is None:
        warn(f"the vocabulary of {c.vocab} does not divide over tp={tp}: Megatron pads it, adding parameters")
    else:
        flags.append(("--make-vocab-size-divisible-by", divisor))
    if not c.linear_bias:
        flags.append(("--disable-bias-linear", None))
        if c.qkv_bias:
            flags.append(("--add-qkv-bias", None))
    if not c.dropout:
        flags += [("--attention-dropout", 0), ("--hidden-dropout", 0)]
    if moe:
        flags += [("--num-experts", c.num_experts), ("--moe-router-topk", c.experts_top_k),
                  ("--moe-ffn-hidden-size", c.ffn_hidden),
                  ("--expert-model-parallel-size", max(s.ep for s in plan.stages))]
        if any(s.ep > 1 or s.etp for s in plan.stages):
            # the EP the plan priced (cost.moe.moe_alltoall_s: the token dispatcher of
            # Training.moe_dispatcher, grouped expert GEMMs); --expert-tensor-parallel-size defaults to the TP size
            flags += [("--expert-tensor-parallel-size", max(s.dims.expert_tp for s in plan.stages)),
                      ("--moe-token-dispatcher-type", plan.training.moe_dispatcher)]
            if plan.training.moe_dispatcher == "flex":
                # megatron-core transformer_config.py moe_flex_dispatcher_backend: HybridEP (DeepEP's
                # default backend does not span an NVLink domain of more than 8 GPUs, HybridEP does)
                flags.append(("--moe-flex-dispatcher-backend", "hybridep"))
            flags.append(("--moe-grouped-gemm", None))
        if c.shared_expert_ffn:
            flags.append(("--moe-shared-expert-intermediate-size", c.shared_expert_ffn))
            if c.shared_expert_gate:
                flags.append(("--moe-shared-expert-gate", None))
        if c.dense_layers and c.mamba is None:  # a hybrid's pattern places its MLP and MoE layers
            dense = set(c.dense_layers)
            flags.append(("--moe-layer-freq", "[" + ",".join("0" if i in dense else "1"
                                                             for i in range(len(decoders))) + "]"))
        if c.router_bias:
            flags += [("--moe-router-score-function", "sigmoid"), ("--moe-router-enable-expert-bias", None)]
        if c.moe_latent:  # latent experts (megatron-core MoELayer fc1_latent_proj / fc2_latent_proj)
            flags.append(("--moe-latent-size", c.moe_latent))
        flags += _routing_flags(plan.model.raw)
    if c.mtp_layers:  # its MTP modules, on the last pipeline stage (megatron-core multi_token_prediction.py)
        flags.append(("--mtp-num-layers", c.mtp_layers))
        if c.mtp_repeated:  # one module run at every depth (transformer_config.py mtp_use_repeated_layer)
            flags.append(("--mtp-use-repeated-layer", None))
        if c.mtp_pattern:  # a hybrid's modules: their layers, built from the hybrid stack spec (Megatron-LM's
            # MTP flags for Nemotron 3 Super, which newer Megatron-LM also reads from a unified pattern)
            flags += [("--mtp-hybrid-override-pattern", c.mtp_pattern), ("--mtp-spec", HYBRID_SPEC)]
    return flags


# megatron-core's hybrid stack (models/mamba/mamba_layer_specs.py), which pretrain_mamba.py builds
HYBRID_SPEC = ("megatron.core.models.mamba.mamba_layer_specs", "mamba_stack_spec")


def _hybrid_flags(c, raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A hybrid model as Megatron-LM's pretrain_mamba.py takes it (the flags Megatron-Bridge's
    Nemotron-H checkpoint loader and NVIDIA's Nemotron-H recipes write): the layer pattern, the
    Mamba-2 mixer's dimensions, the hybrid stack spec, and Nemotron-H's squared-ReLU MLPs."""
    m = c.mamba
    flags: list[tuple[str, Any]] = [
        ("--is-hybrid-model", None), ("--hybrid-override-pattern", c.layer_pattern), ("--spec", HYBRID_SPEC),
        ("--mamba-num-heads", m.heads), ("--mamba-head-dim", m.head_dim), ("--mamba-num-groups", m.groups),
        ("--mamba-state-dim", m.state)]
    if text_config(raw).get("mlp_hidden_act", "relu2") == "relu2":
        flags.append(("--squared-relu", None))
    return flags


def _mla_flags(mla) -> list[tuple[str, Any]]:
    """Multi-latent attention as Megatron-LM's DeepSeek-R1 and Kimi-K2 recipes write it
    (examples/post_training/modelopt/conf/: --kv-channels the value head dim; --qk-layernorm the
    RMSNorms of the q and kv latents, MLATransformerConfig's q_layernorm / kv_layernorm)."""
    flags: list[tuple[str, Any]] = [("--kv-channels", mla.v_head_dim), ("--multi-latent-attention", None)]
    if mla.q_lora_rank:
        flags.append(("--q-lora-rank", mla.q_lora_rank))
    return flags + [("--kv-lora-rank", mla.kv_lora_rank), ("--qk-head-dim", mla.qk_nope_head_dim),
                    ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim),
                    ("--qk-layernorm", None)]


# MLATransformerConfig's YaRN fields that Megatron-LM has no flag for (megatron-core
# transformer_config.py; the --yarn-* flags feed only attention without MLA): their defaults
MLA_YARN_DEFAULTS = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def _mla_rope_flags(scaling: Mapping[str, Any] | None, warn: Warn) -> list[tuple[str, Any]]:
    """The rotary embedding of multi-latent attention: YaRN (MLA's default rope_type) with the
    config's factor and mscales, else plain RoPE (--rope-type rope)."""
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind != "yarn":
        if scaling is not None:
            warn(f"rope scaling {dict(scaling)} is not in these flags: add it for your Megatron version")
        return [("--rope-type", "rope")]
    differ = {k: scaling[k] for k, v in MLA_YARN_DEFAULTS.items() if k in scaling and float(scaling[k]) != v}
    if differ:
        warn(f"YaRN {differ} differ from megatron-core's MLA defaults {MLA_YARN_DEFAULTS}, which no Megatron-LM "
             "flag sets: set them in MLATransformerConfig for your run")
    return [("--rotary-scaling-factor", scaling.get("factor", 1.0)), ("--mscale", scaling.get("mscale", 1.0)),
            ("--mscale-all-dim", scaling.get("mscale_all_dim", 0.0))]


def _routing_flags(raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """DeepSeek-V3's group-limited routing (n_group groups of experts, the top topk_group groups
    searched) and its routed scaling factor, as --moe-router-num-groups, --moe-router-group-topk and
    --moe-router-topk-scaling-factor (Megatron-LM's DeepSeek-R1 recipe)."""
    data = text_config(raw)
    flags: list[tuple[str, Any]] = []
    groups, group_topk = data.get("n_group"), data.get("topk_group")
    if isinstance(groups, int) and groups > 1 and isinstance(group_topk, int):
        flags += [("--moe-router-num-groups", groups), ("--moe-router-group-topk", group_topk)]
    scale = data.get("routed_scaling_factor")
    if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale != 1:
        flags.append(("--moe-router-topk-scaling-factor", scale))
    return flags


def priced_flags(form: Uniform, optimizer: str, warn: Warn) -> list[tuple[str, Any]]:
    """The data-parallel and optimizer flags that the megatron runtime's price assumes
    (planner.cost.runtimes.megatron; Megatron-LM leaves each of them off by default), in the
    combinations Megatron-LM's validate_args accepts (megatron/training/arguments.py):

    * ZeRO >= 1, or optimizer offload: --use-distributed-optimizer (ZeRO-1's sharded states);
    * Runtime.overlap_grad_reduce: --overlap-grad-reduce (the gradient reduction bucket by bucket
      under the backward, planner.cost.stage_tail.grad_reduce_s) and, with the distributed optimizer,
      --overlap-param-gather (its parameter all-gather, priced in the same overlapped reduction;
      validate_args asserts it only with the distributed optimizer and --overlap-grad-reduce);
    * optimizer offload: --optimizer-cpu-offload with --use-precision-aware-optimizer, which
      validate_args asserts with it (megatron-core's HybridDeviceOptimizer reuses that path;
      OptimizerConfig accepts it with adam only), the whole state on the CPU (fraction 1.0).

    The overlapped TP communication (Runtime.overlap_tp_comm) is not a flag: megatron-core's and
    Transformer Engine's linears start the input-gradient all-reduce / reduce-scatter
    asynchronously under the weight-gradient GEMM by default, given CUDA_DEVICE_MAX_CONNECTIONS=1
    (megatron/core/tensor_parallel/layers.py), which the usage line and launch scripts set.
    --tp-comm-overlap (Transformer Engine userbuffers, which also hide the forward's
    collectives) is priced by no runtime and not written."""
    flags: list[tuple[str, Any]] = []
    distributed = form.zero >= 1 or form.offload
    if distributed:
        flags.append(("--use-distributed-optimizer", None))
        if form.zero >= 2:
            warn(f"ZeRO-{form.zero} exported as --use-distributed-optimizer, which shards optimizer state "
                 "only (ZeRO-1): gradients" + (" and parameters" if form.zero == 3 else "")
                 + " are no longer sharded")
    if MEGATRON.pricing.overlap_grad_reduce:
        flags.append(("--overlap-grad-reduce", None))
        if distributed:
            flags.append(("--overlap-param-gather", None))
    if form.offload:
        if optimizer != "adam":
            raise BadInput(f"Megatron-LM offloads only Adam to the CPU (--optimizer-cpu-offload needs "
                           f"--use-precision-aware-optimizer, which takes adam only); the plan uses "
                           f"{optimizer}: plan with --optimizer adamw or without offload", "--to megatron")
        flags += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", 1.0),
                  ("--use-precision-aware-optimizer", None)]
    return flags


def export_megatron(plan: Plan, warn: Warn) -> str:
    c = plan.model.config
    if c is None:
        raise BadInput("the plan's model is a layer profile without a config: Megatron needs the "
                       "architecture (hidden size, heads, ...)", "--to megatron")
    # megatron/training/arguments.py --optimizer {adam, sgd, muon, ...}; adam is AdamW (decoupled weight decay)
    # (muon: Muon on the 2-D weights, Adam on the rest; with --use-distributed-optimizer Megatron-LM runs
    # its layer-wise distributed optimizer)
    optimizer = runtime_optimizer(plan, "megatron", {"adamw": "adam", "sgd": "sgd", "muon": "muon"})
    placed = placeable(plan)
    form = uniform_form(plan, "megatron", warn, placed)
    layout = None
    if form.pp > 1:
        layout = megatron_layout(plan)
        even = len(set(form.decoders)) == 1
    flags: list[tuple[str, Any]] = [
        ("--tensor-model-parallel-size", form.tp), ("--pipeline-model-parallel-size", form.pp),
        ("--micro-batch-size", form.micro), ("--global-batch-size", form.global_batch)]
    if layout is not None:
        if even and form.v > 1:  # Megatron's own even split, no layout needed
            flags.append(("--num-layers-per-virtual-pipeline-stage", form.decoders[0]))
        elif not even:
            flags.append(("--pipeline-model-parallel-layout", layout))
        if form.v > 1 and microbatch_group(form.pp, form.grad_accum) != form.pp:
            # the micro-batches per virtual stage at a time, as priced (schedules.interleaved.microbatch_group)
            flags.append(("--microbatch-group-size-per-virtual-pipeline-stage",
                          microbatch_group(form.pp, form.grad_accum)))
    if plan.training.schedule == "combined-1f1b":
        # the combined 1F1B schedule that hides the expert-parallel all-to-all (planner.schedules.combined_1f1b:
        # megatron-core model_parallel_config.py overlap_moe_expert_parallel_comm; Megatron-LM's MoE docs)
        flags.append(("--overlap-moe-expert-parallel-comm", None))
    if form.cp > 1:
        # megatron-core context parallelism: --cp-comm-type p2p is the ring, a2a Ulysses
        # (megatron/training/arguments.py --context-parallel-size, --cp-comm-type)
        flags += [("--context-parallel-size", form.cp), ("--cp-comm-type", "p2p" if form.cp_kind == "ring" else "a2a")]
    if form.sequence_parallel:
        flags.append(("--sequence-parallel", None))
    if form.recompute == "selective":
        flags.append(("--recompute-granularity", "selective"))
    elif form.recompute == "block" and max(form.recompute_layers) > 0:
        # Megatron-LM transformer_block.py _checkpointed_forward: the first N layers of each stage
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                  ("--recompute-num-layers", block_recompute_layers(form, warn))]
    elif form.recompute == "full":
        flags += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                  ("--recompute-num-layers", 1)]
    if optimizer != "adam":
        flags.append(("--optimizer", optimizer))
    flags += priced_flags(form, optimizer, warn)
    if form.offload_activations:
        # megatron-core model_parallel_config.py cpu_offloading / cpu_offloading_num_layers: the
        # first K layers' activations to the CPU (Transformer Engine cpu_offload.py); one stage only
        flags += [("--cpu-offloading", None), ("--cpu-offloading-num-layers", form.offload_activations)]
    if c.num_kv_heads % form.tp:
        warn(f"{c.num_kv_heads} query groups do not split over tp={form.tp}; Megatron will refuse it")
    flags += _model_flags(plan, form.tp, warn)
    if form.dtype == "bf16":
        flags.append(("--bf16", None))
    elif form.dtype in QUANTIZED_FLAGS:
        flags += quantized_flags(plan.training.dtype, plan.training.fp8_recipe, form.zero >= 1 or form.offload)
        if c.mtp_layers and c.mtp_bf16:
            warn("the MTP modules are priced in bf16 (keep_mtp_spec_in_bf16, a Megatron-Bridge setting); "
                 f"Megatron-LM has no flag for it and trains them in {plan.training.dtype}")
        start, end = plan.training.bf16_layers
        if start or end:  # the decoders kept in bf16 (transformer_config.py first_last_layers_bf16)
            flags += [("--first-last-layers-bf16", None), ("--num-layers-at-start-in-bf16", start),
                      ("--num-layers-at-end-in-bf16", end)]
    elif form.dtype == "fp16":
        flags.append(("--fp16", None))
    lines = [k if val is None else f"{k} " + " ".join(shlex.quote(str(v)) for v in (val if isinstance(val, tuple)
                                                                                   else (val,)))
             for k, val in flags]
    connections = device_connections(plan)
    header = [comment_line(text) for text in (
        f"planner export --to megatron: {plan.model.name} on {plan.cluster.name}, "
        f"tp {form.tp} x " + (f"cp {form.cp} x " if form.cp > 1 else "")
        + f"pp {form.pp} x dp {form.dp} = {form.world} GPUs, "
        + (f"ep {form.ep} over the " + ("cp x dp" if form.cp > 1 else "dp") + " ranks, " if form.ep > 1 else "") +
        f"{form.grad_accum} micro-batches of {form.micro} per replica per step",
        f"decoder layers per pipeline stage: {form.decoders}" + (f" (layout {layout})" if layout else ""),
        f"vocabulary {c.vocab} ({c.model_type}): the tokenizer you add (--tokenizer-type ...) must have "
        "exactly this many tokens, with --data-path etc.",
        "usage: eval \"ARGS=($(grep -v '^#' FILE))\"; "
        + (f"CUDA_DEVICE_MAX_CONNECTIONS={connections} " if connections else "")
        + f"torchrun ... {'pretrain_mamba.py' if c.mamba is not None else 'pretrain_gpt.py'} \"${{ARGS[@]}}\" ...",
        *([TP_OVERLAP_NOTE] if MEGATRON.pricing.overlap_tp_comm and form.tp > 1 and connections == 1 else []),
        *(placement_comments(plan) if placed else []),
        *route_comments(plan))]
    return "\n".join(header + [line + " \\" for line in lines[:-1]] + lines[-1:]) + "\n"


# the quantized dtypes' Transformer Engine recipes as megatron-core's TransformerConfig flags
# (transformer_config.py: fp8 --fp8-format e4m3|hybrid, fp8_recipe --fp8-recipe
# tensorwise|delayed|mxfp8|blockwise, fp4 --fp4-format e2m1, fp4_recipe --fp4-recipe nvfp4; fp4 and fp8
# not together): (format flags, the recipe's parameter flags where the optimizer is distributed)
QUANTIZED_FLAGS: dict[str, dict[str, tuple[tuple[tuple[str, object], ...], tuple[tuple[str, object], ...]]]] = {
    # HYBRID format (E4M3 forward, E5M2 gradients), delayed scaling with TE's recipe defaults (amax
    # history 1024, max: --fp8-amax-history-len / --fp8-amax-compute-algo); per-tensor current scaling
    "fp8": {"te-delayed": ((("--fp8-format", "hybrid"), ("--fp8-recipe", "delayed"), ("--fp8-amax-history-len", 1024),
                            ("--fp8-amax-compute-algo", "max")), (("--fp8-param-gather", None),)),
            "te-current": ((("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")),
                           (("--fp8-param-gather", None),))},
    # MXFP8 is E4M3 throughout (TE MXFP8BlockScaling's default); MXFP8 parameters gathered into the
    # gradient buffer (optimizer_config.py recommends both with mxfp8; Megatron-Bridge's bf16_with_mxfp8_mixed)
    "mxfp8": {"te-mxfp8": ((("--fp8-format", "e4m3"), ("--fp8-recipe", "mxfp8")),
                           (("--fp8-param-gather", None), ("--reuse-grad-buf-for-mxfp8-param-ag", None)))},
    # NVFP4 (Transformer Engine >= 2.7, arguments.py); NVFP4 parameters (--fp4-param-gather)
    "nvfp4": {"te-nvfp4": ((("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")), (("--fp4-param-gather", None),))},
}


def quantized_flags(dtype: str, fp8_recipe: str, distributed_optimizer: bool) -> list[tuple[str, object]]:
    """--bf16 and the Transformer Engine flags of `dtype`'s recipe (QUANTIZED_FLAGS) as priced
    (planner.cost.fp8.recipe_for under the megatron runtime), with the quantized parameters the
    recipe prices (Fp8Recipe.fp8_params) where they are kept: they need the distributed optimizer
    (Megatron-LM validate_args: "--fp8-param-gather only supported with distributed optimizer")."""
    recipe = recipe_for(dtype, fp8_recipe or MEGATRON.pricing.fp8_recipe)
    if recipe.name not in QUANTIZED_FLAGS[dtype]:
        raise BadInput(f"Megatron-LM runs {dtype} through Transformer Engine ({', '.join(QUANTIZED_FLAGS[dtype])}); "
                       f"the plan is priced with {recipe.name}: export --to torchtitan or re-plan", "--to")
    fmt, params = QUANTIZED_FLAGS[dtype][recipe.name]
    return [("--bf16", None), *fmt, *(params if distributed_optimizer and recipe.fp8_params else ())]
