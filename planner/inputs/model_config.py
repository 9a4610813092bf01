"""The dimensions of a model that its costs depend on (ModelConfig), read once from a config
file by planner.inputs.model_families."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .mamba import Mamba
from .model_families import Mla


@dataclass(frozen=True)
class ModelConfig:
    """The dimensions the cost depends on, read once from a config file
    (planner.inputs.model_families reads each Hugging Face family).

    A model-level config describes the MoE layers of a mixed model; `layer_config(i)` gives
    decoder i's own config (its dense MLP, its attention window), the one its Layer holds."""

    name: str
    model_type: str
    hidden: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden: int  # an expert's FFN width in an MoE layer
    vocab: int
    max_positions: int
    gated_mlp: bool  # SwiGLU / GeGLU (three matrices) vs GeLU (two)
    tied_embeddings: bool
    num_experts: int = 1  # 1 = dense MLP; else routed experts
    experts_top_k: int = 1
    norm: str = "layernorm"  # or "rmsnorm"
    linear_bias: bool = False  # biases on every linear (GPT-2, GPT-NeoX)
    qkv_bias: bool = False  # biases on q, k, v only (Qwen2)
    learned_positions: bool = False  # GPT-2's absolute position table
    dropout: bool = False  # dropout masks are saved (GPT-2 style training)
    attention_head_dim: int = 0  # the config's head_dim; 0: hidden / heads
    # "head": RMSNorm of each q and k head (Qwen3, Gemma3); "proj": of all q, all k (OLMo2); "l2": a
    # parameter-free L2 norm of each head (Llama 4)
    qk_norm: str = "none"
    block_norms: int = 2  # norm layers per block (Gemma2/3: 4, before and after attention and MLP)
    shared_expert_ffn: int = 0  # FFN width of the always-on shared expert(s) of an MoE layer
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert (h x 1)
    router_bias: bool = False  # a per-expert router bias (DeepSeek-V3's e_score_correction_bias, GPT-OSS's)
    attention_sinks: bool = False  # GPT-OSS's learned sink logit, one per head
    mla: Mla | None = None
    window: int = 0  # this layer's sliding attention window in tokens; 0: full attention
    layer_windows: tuple[int, ...] = ()  # model level: each decoder's window (empty: all full)
    attention_chunk: int = 0  # this layer's chunked attention: tokens attend within blocks of this many; 0: none
    layer_chunks: tuple[int, ...] = ()  # model level: each decoder's attention_chunk (empty: none)
    dense_layers: tuple[int, ...] = ()  # model level: decoders with a dense MLP in an MoE model
    dense_ffn_hidden: int = 0  # their FFN width
    # hybrid models (Nemotron-H): a decoder holds one token mixer or one MLP, not both
    mixer: str = "attention"  # this decoder's token mixer: "attention", "mamba", or "" (an MLP alone)
    mamba: Mamba | None = None  # the Mamba-2 mixer's dimensions (planner.inputs.mamba)
    layer_pattern: str = ""  # model level: each decoder's kind, HYBRID_KINDS (hybrid_override_pattern)
    # model level: multi-token-prediction modules trained after the main model (DeepSeek-V3 report,
    # sec 2.2; num_nextn_predict_layers), each one decoder block that predicts one token further
    mtp_layers: int = 0
    # model level: the MTP modules are one module run mtp_layers times, its weights shared (Megatron-core's
    # mtp_use_repeated_layer): their weights, gradients and optimizer states held once, their compute and
    # activations once per depth
    mtp_repeated: bool = False
    # this decoder is an MTP module's block: before it, the hidden state's and the next token's
    # embedding's norms and their 2h -> h projection; after it, a final norm before the shared head
    mtp_module: bool = False
    # model level, hybrid models: the layers of each MTP module (mtp_hybrid_override_pattern, e.g. "*E":
    # attention and an MoE layer), one block of them; "": the main model's last block
    mtp_pattern: str = ""
    # latent experts (Nemotron 3 Super's LatentMoE; megatron-core moe_latent_size): each MoE layer projects
    # its tokens down to this width before the dispatch and back after the combine (two h x latent linears
    # every TP rank holds whole), and its routed experts read and write it; 0: they work at hidden
    moe_latent: int = 0
    # model level, under a quantized training dtype (fp8, mxfp8, nvfp4): the first and the last decoders kept in
    # bf16 (megatron-core first_last_layers_bf16 with num_layers_at_start_in_bf16 / num_layers_at_end_in_bf16;
    # a hybrid model counts each layer of its pattern), and whether the MTP modules are (a config's
    # keep_mtp_spec_in_bf16, Megatron-Bridge's hybrid_provider.py and its Nemotron 3 recipes)
    bf16_layers: tuple[int, int] = (0, 0)
    mtp_bf16: bool = False
    # this decoder runs its linears in bf16 whatever the training dtype (bf16_layers, mtp_bf16)
    high_precision: bool = False

    @property
    def expert_width(self) -> int:
        """The width of a routed token copy: what an expert's up projection reads, its down projection
        writes and the dispatch and combine move (the latent width with latent experts)."""
        return self.moe_latent or self.hidden

    @property
    def sublayers(self) -> int:
        """The residual branches of a decoder: a token mixer and an MLP (2), or one of them in a
        hybrid model's layer; each has its norm, its residual add and its TP collective."""
        return (self.mixer != "") + (self.ffn_hidden > 0)

    @property
    def tp_heads(self) -> int:
        """The count every tensor-parallel degree must divide: the attention heads and, with Mamba
        layers, their heads and groups (megatron-core MambaMixer splits both over TP)."""
        if self.mamba is None:
            return self.num_heads
        return math.gcd(self.num_heads, self.mamba.heads, self.mamba.groups)

    def tp_problem(self, tp: int) -> str:
        """Why `tp` tensor-parallel ranks cannot split this model's heads ('' when they can)."""
        if self.num_heads % tp:
            return f"{self.num_heads} attention heads do not split over tp={tp}"
        if self.tp_heads % tp:
            return f"{self.mamba.heads} Mamba heads in {self.mamba.groups} groups do not split over tp={tp}"
        return ""

    @property
    def head_dim(self) -> int:
        """Per-head width of q and k (the config's head_dim when it gives one)."""
        if self.mla is not None:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.attention_head_dim or (self.hidden // self.num_heads if self.num_heads else 0)

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla is not None else self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of all query heads (hidden, unless head_dim x heads differs from it)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key heads."""
        return self.num_kv_heads * self.head_dim

    # widths of all value heads, and the attention output projection's input (its heads' values)
    v_dim = property(lambda self: self.num_kv_heads * self.v_head_dim)
    o_dim = property(lambda self: self.num_heads * self.v_head_dim)

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def layer_config(self, index: int) -> "ModelConfig":
        """Decoder i's config: its attention window, a dense MLP if it is one of the
        dense layers of an MoE model, in a hybrid model its one mixer or MLP (HYBRID_KINDS); the
        per-model patterns cleared."""
        changes: dict[str, Any] = {"layer_windows": (), "dense_layers": (), "layer_pattern": "", "layer_chunks": (),
                                   "mtp_layers": 0, "mtp_pattern": "", "mtp_repeated": False, "bf16_layers": (0, 0),
                                   "mtp_bf16": False,
                                   "high_precision": index < self.bf16_layers[0]
                                   or index >= self.num_layers - self.bf16_layers[1],
                                   "window": self.layer_windows[index] if self.layer_windows else self.window,
                                   "attention_chunk": self.layer_chunks[index] if self.layer_chunks
                                   else self.attention_chunk}
        if index in self.dense_layers:
            changes.update(_DENSE_MLP, ffn_hidden=self.dense_ffn_hidden)
        if self.layer_pattern:
            changes.update(_hybrid_kinds(self.layer_pattern[index]))
        return replace(self, **changes)

    def mtp_config(self) -> "ModelConfig":
        """An MTP module's decoder block with the module's norms and projection (mtp_module): the main
        model's last block (DeepSeek-V3's MoE block; Megatron-core builds it from the decoder's layer
        spec), or a hybrid model's MTP pattern as one block of its mixer and its MLP, each layer with
        its norm (megatron-core builds the pattern's layers from the hybrid stack spec)."""
        if not self.mtp_pattern:
            return replace(self.layer_config(self.num_layers - 1), mtp_module=True, high_precision=self.mtp_bf16)
        mixer = next((kind for kind in self.mtp_pattern if kind in "M*"), "")  # (model_families: at most one
        mlp = next((kind for kind in self.mtp_pattern if kind in "-E"), "")  # mixer and one MLP)
        return replace(self, layer_windows=(), dense_layers=(), layer_pattern="", layer_chunks=(), mtp_layers=0,
                       mtp_pattern="", mtp_repeated=False, mtp_module=True, block_norms=len(self.mtp_pattern), attention_chunk=0,
                       bf16_layers=(0, 0), mtp_bf16=False, high_precision=self.mtp_bf16,
                       **_mixer_changes(mixer), **_mlp_changes(mlp, self.dense_ffn_hidden))


_NO_MLP = dict(num_experts=1, experts_top_k=1, ffn_hidden=0, shared_expert_ffn=0, shared_expert_gate=False,
               router_bias=False, moe_latent=0)
_DENSE_MLP = {key: value for key, value in _NO_MLP.items() if key != "ffn_hidden"}


def _hybrid_kinds(kind: str) -> dict[str, Any]:
    """A hybrid model's layer of `kind` (Nemotron-H's hybrid_override_pattern, megatron-core's
    hybrid_layer_allocation Symbols): M a Mamba-2 mixer, * attention, - a dense MLP (the model's
    dense_layers), E an MoE layer; one of them per layer."""
    return _mixer_changes(kind if kind in "M*" else "") | _mlp_changes(kind if kind in "-E" else "", None)


def _mixer_changes(kind: str) -> dict[str, Any]:
    """A hybrid block's token mixer: M Mamba-2, * attention, "" none (no attention: no heads)."""
    no_attention = dict(num_heads=0, num_kv_heads=0, qk_norm="none", attention_sinks=False, window=0)
    if kind == "*":
        return {"mixer": "attention", "mamba": None}
    return {"mixer": "mamba", **no_attention} if kind == "M" else {"mixer": "", "mamba": None, **no_attention}


def _mlp_changes(kind: str, dense_ffn: int | None) -> dict[str, Any]:
    """A hybrid block's MLP: E the model's MoE layer, - a dense one of `dense_ffn` (None: as the layer's
    dense_layers entry sets it), "" none."""
    if kind == "E":
        return {}
    if kind == "-":
        return dict(_DENSE_MLP) | ({} if dense_ffn is None else {"ffn_hidden": dense_ffn})
    return dict(_NO_MLP)
