"""Integration: the runtimes build the exported model, and its parameter count is the planner's.

* Megatron (megatron-core 0.16.1, the `integration` extra): megatron-core ships no argument parser
  (that is Megatron-LM's megatron/training/arguments.py), so the exported flags are mapped to
  `TransformerConfig` / `GPTModel` arguments here, flag by flag, as Megatron-LM's
  `core_transformer_config_from_args` and pretrain_gpt.py's `model_provider` do (MEGATRON_FIELDS).
  megatron-core then builds the whole model (tp = pp = 1, a one-process gloo group) on the meta
  device from its own layer specs (`get_gpt_decoder_block_spec`, local modules, no Transformer
  Engine), and its `PipelineParallelLayerLayout` parses and validates the exported
  `--pipeline-model-parallel-layout` and says how many decoder layers each (pipeline rank, virtual
  stage) builds. Not validated: Megatron-LM's argument parser itself (`validate_args`), its
  tokenizer padding (recomputed here from its rule), and a run under TP/PP > 1 (needs GPUs).
* torchtitan 0.2.2: the exported `[model]` flavour's `TransformerModelArgs` builds torchtitan's
  llama3 Transformer on the meta device.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from planner.inputs.hardware import load_cluster
from planner.inputs.hf_extras import rope_and_norm
from planner.inputs.model import load_model
from planner.plan import Training, plan_to_json, uniform_plan

from .conftest import invoke, require
from .test_export_runnable import CLUSTERS, MODELS, megatron_flags, typed_plan

pytestmark = pytest.mark.integration
REQUIRE = "PLANNER_REQUIRE_INTEGRATION"

# the catalog models whose every feature the Megatron flags carry (dense, GQA, qk-norm, biases, tied
# or untied, learned positions, MoE with shared experts and gates, partial rotary)
MEGATRON_MODELS = ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "llama-2-7b", "qwen3-8b", "qwen2-72b", "gpt2",
                   "gpt-neox-20b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b")
# not in the list: the flags do not carry sliding windows (mistral-7b, phi-3-mini: exported with a
# warning) or Gemma's extra norms; multi-latent attention is built from a small DeepSeek-V3 below
# (fewer layers and experts than the catalog's 58 MoE layers of 256)


@pytest.fixture(scope="module")
def mcore(tmp_path_factory):
    """megatron-core with a one-process model-parallel world (tp = pp = 1), rendezvous through a
    file (no TCP port: test workers and other jobs on the machine would contend for one)."""
    require("megatron.core", REQUIRE)
    import torch.distributed as dist
    from megatron.core import parallel_state

    store = tmp_path_factory.mktemp("mcore") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    yield
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def padded_vocab(vocab: int, divisor: int, tp: int) -> int:
    """Megatron-LM's _vocab_size_with_padding: up to a multiple of divisor x TP."""
    multiple = divisor * tp
    return -(-vocab // multiple) * multiple


def megatron_model(a: dict[str, str | None], vocab: int):
    """megatron-core's GPTModel of the exported flags `a` (Megatron-LM's mapping of each flag)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import TransformerConfig

    def num(flag, kind=int):
        return kind(a[flag]) if a.get(flag) is not None else None

    kw = dict(num_layers=num("--num-layers"), hidden_size=num("--hidden-size"),
              num_attention_heads=num("--num-attention-heads"), ffn_hidden_size=num("--ffn-hidden-size"),
              kv_channels=num("--kv-channels"), layernorm_epsilon=num("--norm-epsilon", float),
              normalization=a.get("--normalization") or "LayerNorm",
              add_bias_linear="--disable-bias-linear" not in a,
              add_qkv_bias="--add-qkv-bias" in a or "--disable-bias-linear" not in a,
              qk_layernorm="--qk-layernorm" in a,
              gated_linear_unit="--swiglu" in a, activation_func=F.silu if "--swiglu" in a else F.gelu,
              use_cpu_initialization=True, init_model_with_meta_device=True)
    if "--group-query-attention" in a:
        kw["num_query_groups"] = num("--num-query-groups")
    if "--num-experts" in a:
        kw.update(num_moe_experts=num("--num-experts"), moe_router_topk=num("--moe-router-topk"),
                  moe_ffn_hidden_size=num("--moe-ffn-hidden-size"), moe_grouped_gemm=False,
                  moe_token_dispatcher_type="allgather")  # alltoall makes a CUDA stream
        if "--moe-shared-expert-intermediate-size" in a:
            kw.update(moe_shared_expert_intermediate_size=num("--moe-shared-expert-intermediate-size"),
                      moe_shared_expert_gate="--moe-shared-expert-gate" in a)
        if "--moe-layer-freq" in a:
            kw["moe_layer_freq"] = json.loads(a["--moe-layer-freq"])
        if "--moe-router-enable-expert-bias" in a:
            kw.update(moe_router_enable_expert_bias=True, moe_router_score_function=a["--moe-router-score-function"])
        if "--moe-router-num-groups" in a:
            kw.update(moe_router_num_groups=num("--moe-router-num-groups"),
                      moe_router_group_topk=num("--moe-router-group-topk"))
        if "--moe-router-topk-scaling-factor" in a:
            kw["moe_router_topk_scaling_factor"] = num("--moe-router-topk-scaling-factor", float)
    config_class = TransformerConfig
    if "--multi-latent-attention" in a:  # Megatron-LM's core_transformer_config_from_args: MLATransformerConfig
        from megatron.core.transformer import MLATransformerConfig

        config_class = MLATransformerConfig
        kw.update(multi_latent_attention=True, q_lora_rank=num("--q-lora-rank"), kv_lora_rank=num("--kv-lora-rank"),
                  qk_head_dim=num("--qk-head-dim"), qk_pos_emb_head_dim=num("--qk-pos-emb-head-dim"),
                  v_head_dim=num("--v-head-dim"), rope_type=a.get("--rope-type") or "yarn")
        if a.get("--rotary-scaling-factor") is not None:
            kw.update(rotary_scaling_factor=num("--rotary-scaling-factor", float), mscale=num("--mscale", float),
                      mscale_all_dim=num("--mscale-all-dim", float))
    if "--mtp-num-layers" in a:
        kw["mtp_num_layers"] = num("--mtp-num-layers")
    config = config_class(**kw)
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=kw["normalization"])
    mtp = None
    if config.mtp_num_layers:  # Megatron-LM's gpt_builders: the MTP block from the decoder's last layer spec
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

        mtp = get_gpt_mtp_block_spec(config, spec.layer_specs[-1], use_transformer_engine=False)
    tp = int(a["--tensor-model-parallel-size"])
    vocab_size = padded_vocab(vocab, num("--make-vocab-size-divisible-by") or 128, tp)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = GPTModel(config, spec, vocab_size=vocab_size, max_sequence_length=num("--max-position-embeddings"),
                         share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in a,
                         position_embedding_type=a["--position-embedding-type"],
                         rotary_percent=num("--rotary-percent", float) or 1.0,
                         rotary_base=num("--rotary-base", float) or 10000,
                         rope_scaling="--use-rope-scaling" in a,
                         rope_scaling_factor=num("--rope-scaling-factor", float) or 8.0, mtp_block_spec=mtp)
    return model, vocab_size


def flags_of(plan) -> dict[str, str | None]:
    """The Megatron export of `plan` (planner.export; no memory check: only the model is built)."""
    from planner.export import export_plan

    lost: list[str] = []
    a = megatron_flags(export_plan(plan, "megatron", lost.append))
    assert lost == []
    return a


def export_megatron(plan, tmp_path: Path) -> dict[str, str | None]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = invoke("export", path, "--to", "megatron")
    assert result.exit_code == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    return megatron_flags(result.stdout)


@pytest.mark.parametrize("name", MEGATRON_MODELS)
def test_megatron_core_builds_the_exported_model(name, mcore, tmp_path):
    model = load_model(name)
    # query groups and the vocabulary split over TP (else Megatron pads the vocabulary: a warning)
    tp = next(t for t in (8, 4, 2, 1) if model.config.num_kv_heads % t == 0 and model.config.vocab % t == 0)
    plan = uniform_plan(model, load_cluster("dgx-a100"), Training(64, 1024, "bf16", 1), tp=tp, pp=4, dp=8 // tp,
                        zero=1, recompute="full", sequence_parallel=True)
    a = flags_of(plan)
    built, vocab_size = megatron_model(a, model.config.vocab)
    assert vocab_size == model.config.vocab  # the divisor leaves the tokenizer's vocabulary unpadded
    assert sum(p.numel() for p in built.parameters()) == model.params
    extra = rope_and_norm(model.raw, model.config.model_type)
    assert built.config.layernorm_epsilon == extra.norm_eps
    if extra.rope_theta is not None and extra.rope_scaling is None:  # the config's rotary frequencies
        import torch

        dim = int(model.config.head_dim * extra.rotary_fraction)
        expected = 1.0 / (extra.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        assert torch.allclose(built.rotary_pos_emb.inv_freq, expected)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_megatron_core_takes_the_exported_layout(model, cluster, mcore, tmp_path):
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    for interleave in (1, 2):
        # 1536 samples: each replica's micro-batches a multiple of pp (capability.interleaved_microbatch_multiple)
        plan = typed_plan(model, cluster, interleave=interleave, global_batch=1536 if interleave > 1 else 512)
        a = export_megatron(plan, tmp_path)
        pp = int(a["--pipeline-model-parallel-size"])
        planned = [sum(1 for i in range(*s.layers) if plan.model.layers[i].kind == "decoder") for s in plan.stages]
        if "--pipeline-model-parallel-layout" not in a:  # an even split: Megatron's own
            per_chunk = int(a.get("--num-layers-per-virtual-pipeline-stage") or int(a["--num-layers"]) // pp)
            assert planned == [per_chunk] * len(planned) and per_chunk * pp * interleave == int(a["--num-layers"])
            continue
        layout = PipelineParallelLayerLayout(a["--pipeline-model-parallel-layout"], pp)
        layout.validate_layer_layout(num_layers=int(a["--num-layers"]), mtp_num_layers=None)
        assert layout.virtual_pipeline_model_parallel_size == interleave
        for k, count in enumerate(planned):  # chunk k: virtual stage k // pp of pipeline rank k % pp
            assert layout.layout[k % pp][k // pp].count(LayerType.decoder) == count
        assert LayerType.embedding in layout.layout[0][0] and LayerType.loss in layout.layout[pp - 1][-1]
        built, _ = megatron_model(a, plan.model.config.vocab)
        assert sum(p.numel() for p in built.parameters()) == plan.model.params


def small_deepseek(tmp_path: Path, **changes) -> Path:
    """DeepSeek-V3's config.json with fewer layers and experts (its MLA, shared expert, group-limited
    routing and YaRN as they are): small enough to build on the meta device in a second."""
    config = json.loads((Path(__file__).resolve().parent.parent / "profiles" / "models" / "deepseek-v3.json").read_text())
    config.update({"num_hidden_layers": 4, "first_k_dense_replace": 1, "n_routed_experts": 16, "n_group": 4,
                   "topk_group": 2, **changes})
    path = tmp_path / "small-deepseek.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("changes", [{}, {"q_lora_rank": None, "n_group": 1, "topk_group": 1,
                                          "routed_scaling_factor": 2.827, "num_attention_heads": 64}])
def test_megatron_core_builds_multi_latent_attention_and_group_limited_routing_from_the_flags(changes, mcore,
                                                                                               tmp_path,
                                                                                               monkeypatch):
    """DeepSeek-V3's layers (and Kimi K2's: 64 heads, one expert group, its scaling factor; here
    also without a q latent) as megatron-core's MLA builds them from the exported flags: the same
    parameters but for the routers' expert biases, which megatron-core keeps as buffers."""
    import torch

    # megatron-core 0.16.1's YarnRotaryEmbedding puts its frequencies on the current CUDA device
    # (multi_latent_attention.py passes no use_cpu_initialization): the CPU stands in for it here
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    # and its local (non Transformer Engine) MLA spec hands the core attention k_channels and
    # v_channels, which the local DotProductAttention (no parameters) does not take
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    import megatron.core.transformer.multi_latent_attention as mla

    # ... and, its Transformer Engine import stubbed (no TE here), checks isinstance(..., TELinear)
    monkeypatch.setattr(mla, "HAVE_TE", False)
    init = DotProductAttention.__init__
    monkeypatch.setattr(DotProductAttention, "__init__", lambda self, *args, k_channels=None, v_channels=None, **kw:
                        init(self, *args, **kw))
    model = load_model(str(small_deepseek(tmp_path, **changes)))
    plan = uniform_plan(model, load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1), tp=1, pp=1, dp=16)
    a = flags_of(plan)
    assert ("--q-lora-rank" in a) == bool(model.config.mla.q_lora_rank)
    assert ("--moe-router-num-groups" in a) == (changes.get("n_group", 4) > 1)
    built, _ = megatron_model(a, model.config.vocab)
    assert built.config.moe_router_topk_scaling_factor == changes.get("routed_scaling_factor", 2.5)
    # the MoE layers' and the MTP module's (built from the last layer's spec: Megatron-LM's gpt_builders)
    router_biases = model.config.num_experts * (sum(1 for i in range(4) if i not in model.config.dense_layers)
                                                + model.config.mtp_layers)
    assert model.config.mtp_layers == 1 and built.mtp is not None
    assert sum(p.numel() for p in built.parameters()) + router_biases == model.params


def test_megatron_flags_map_to_the_model_of_the_config(mcore, tmp_path):
    """Llama 3 builds with rotary base 500000 (Megatron's default is 10000), eps 1e-5, untied."""
    plan = typed_plan("llama-3-8b", "dgx-a100")
    a = export_megatron(plan, tmp_path)
    built, _ = megatron_model(a, plan.model.config.vocab)
    assert built.config.layernorm_epsilon == 1e-5 and not built.share_embeddings_and_output_weights
    import torch

    dim = int(a["--kv-channels"])
    expected = 1.0 / (500000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    assert torch.allclose(built.rotary_pos_emb.inv_freq, expected)  # built on the CPU, not meta


@pytest.mark.parametrize("name", MODELS)
def test_torchtitan_builds_the_exported_flavour(name, tmp_path):
    require("torchtitan", REQUIRE)
    import tomllib

    import torch
    import torchtitan.models.llama3 as titan
    from torchtitan.models.llama3.model.model import Transformer

    plan = typed_plan(name, "dgx-a100", "torchtitan", zero=1)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_json(plan)))
    result = invoke("export", path, "--to", "torchtitan")
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    cfg = tomllib.loads(result.stdout)
    args = titan.llama3_args[cfg["model"]["flavor"]]
    with torch.device("meta"):
        built = Transformer(args)
    assert sum(p.numel() for p in built.parameters()) == plan.model.params
    assert (args.rope_theta, args.norm_eps) == (500000, 1e-5)


# Megatron-LM's core_transformer_config_from_args: each quantization flag is the TransformerConfig
# field of its name (--fp8-format: fp8, --fp4-format: fp4), the param gathers fp8_param / fp4_param
QUANTIZATION_FIELDS = {"--fp8-format": "fp8", "--fp8-recipe": "fp8_recipe", "--fp4-format": "fp4",
                       "--fp4-recipe": "fp4_recipe", "--fp8-param-gather": "fp8_param",
                       "--fp4-param-gather": "fp4_param"}


@pytest.mark.parametrize("dtype, recipe", [("fp8", ""), ("fp8", "te-current"), ("mxfp8", ""), ("nvfp4", "")])
def test_megatron_core_takes_the_exported_precision(dtype, recipe):
    """megatron-core's TransformerConfig accepts the exported quantization flags: its Literal
    choices and __post_init__ checks (fp4 and fp8 not together)."""
    require("megatron.core", REQUIRE)
    from megatron.core.transformer import TransformerConfig

    cluster = {"name": "b", "node_groups": [{"name": "g", "gpu": "B200", "nodes": 1, "gpus_per_node": 8}]}
    from planner.inputs.hardware import cluster_from_spec

    plan = uniform_plan(load_model("llama-3-8b"), cluster_from_spec(cluster, "test"),
                        Training(64, 4096, dtype, 1, fp8_recipe=recipe), tp=1, pp=1, dp=8, zero=1)
    a = flags_of(plan)
    kw = {field: True if a[flag] is None else a[flag] for flag, field in QUANTIZATION_FIELDS.items() if flag in a}
    assert kw.get("fp8") or kw.get("fp4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, bf16=True, **kw)
    assert (config.fp8_recipe if config.fp8 else config.fp4_recipe) == kw.get("fp8_recipe", kw.get("fp4_recipe"))


@pytest.mark.parametrize("name", ["llama-3-8b", "qwen3-30b-a3b"])
def test_muon_updates_exactly_the_2d_weights_megatron_core_hands_it(name, mcore, tmp_path):
    """megatron-core's Muon (optimizer/muon.py) takes every 2-D parameter but the embedding and the
    output layer; AdamW the rest: the planner's Muon matrices (cost.muon.muon_matrices) are those."""
    from planner.cost.muon import muon_matrices

    plan = uniform_plan(load_model(name), load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1), tp=1, pp=1,
                        dp=16)
    built, _ = megatron_model(flags_of(plan), plan.model.config.vocab)
    muon = sum(p.numel() for p in built.parameters()
               if p.dim() == 2 and not getattr(p, "is_embedding_or_output_parameter", False))
    assert muon == sum(muon_matrices(layer)[0] for layer in plan.model.layers)
