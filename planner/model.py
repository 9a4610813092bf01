"""Model description -> typed, ordered list of layers with their costs.

Sources: a built-in catalog name (profiles/models/*.json), a Hugging Face `config.json`,
or a layer-profile file (formats.md section 3). A model is the embedding, N decoder blocks
and the final norm + LM head; each layer knows its parameters, forward FLOPs, saved
activation bytes and the bytes it sends to the next layer, per sample, as functions of the
sequence length (and of tensor parallelism, sequence parallelism, recompute and attention
kernel for the activations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import BadInput
from .hardware import PROFILES_DIR
from . import ranges
from .io import MAX_NUMBER, load_mapping
from .names import check_name

MODELS_DIR = PROFILES_DIR / "models"
SUPPORTED_TYPES = ("gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2")
RECOMPUTE_MODES = ("none", "selective", "full")
ATTENTION_KINDS = ("flash", "standard")
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
MAX_PER_SAMPLE = 1e24  # bound on a profile's per-sample FLOPs or bytes; keeps the math finite


@dataclass(frozen=True)
class ModelConfig:
    """The dimensions the cost depends on, read once from a config file."""

    name: str
    model_type: str
    hidden: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden: int
    vocab: int
    max_positions: int
    gated_mlp: bool  # SwiGLU (three matrices) vs GeLU (two)
    tied_embeddings: bool
    num_experts: int = 1  # 1 = dense MLP
    experts_top_k: int = 1
    norm: str = "layernorm"  # or "rmsnorm"
    linear_bias: bool = False  # biases on every linear (GPT-2, GPT-NeoX)
    qkv_bias: bool = False  # biases on q, k, v only (Qwen2)
    learned_positions: bool = False  # GPT-2's absolute position table
    dropout: bool = False  # dropout masks are saved (GPT-2 style training)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden


@dataclass(frozen=True)
class FixedCosts:
    """Per-sample costs read from a layer-profile file (valid at its `seq_len`)."""

    seq_len: int
    fwd_flops_per_sample: float
    act_bytes_per_sample: float
    out_bytes_per_sample: float
    measured: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class Layer:
    index: int
    name: str
    kind: str  # "embedding" | "decoder" | "head"
    params: int  # unique parameters (a tied head counts 0 for the shared matrix)
    weight_params: int  # parameters held in memory by the device that runs the layer
    config: ModelConfig | None = None
    fixed: FixedCosts | None = None

    # --- FLOPs -------------------------------------------------------------------------

    def fwd_flops_per_sample(self, seq_len: int) -> float:
        """Model forward FLOPs of one sample (full s^2 attention, Megatron's convention)."""
        if self.fixed is not None:
            return self.fixed.fwd_flops_per_sample * seq_len / self.fixed.seq_len
        return sum(g.flops_per_sample(seq_len) for g in self.gemms(seq_len, tp=1)) \
            + self.attention_flops_per_sample(seq_len, tp=1, causal_skip=False)

    def gemms(self, seq_len: int, tp: int) -> tuple["Gemm", ...]:
        """The layer's weight GEMMs, as shards on one of `tp` tensor-parallel ranks.

        Megatron's sharding (Shoeybi et al. 2019): QKV and MLP-in split columns, attention
        out and MLP-out split rows, the LM head splits the vocabulary.
        """
        c = self.config
        if c is None or self.kind == "embedding":
            return ()
        if self.kind == "head":
            return (Gemm(seq_len, c.vocab / tp, c.hidden, 1),)
        h, f = c.hidden, c.ffn_hidden
        mlp_in = 2 * f if c.gated_mlp else f
        experts_active = c.experts_top_k if c.num_experts > 1 else 1
        gemms = [
            Gemm(seq_len, (h + 2 * c.kv_dim) / tp, h, 1),  # QKV projection
            Gemm(seq_len, h, h / tp, 1),  # attention output projection
            Gemm(seq_len, mlp_in / tp, h, experts_active),  # MLP up (+ gate)
            Gemm(seq_len, h, f / tp, experts_active),  # MLP down
        ]
        if c.num_experts > 1:
            gemms.append(Gemm(seq_len, c.num_experts, h, 1))  # router (replicated)
        return tuple(gemms)

    def attention_flops_per_sample(self, seq_len: int, tp: int, causal_skip: bool) -> float:
        """QK^T and attention-times-V: 2 * 2 s^2 h FLOPs (Narayanan et al. 2021, sec 5.1).

        FlashAttention's causal kernels skip the masked upper triangle (`causal_skip`).
        """
        if self.kind != "decoder" or self.config is None:
            return 0.0
        flops = 4.0 * seq_len * seq_len * self.config.hidden / tp
        return flops / 2 if causal_skip else flops

    # --- activations -------------------------------------------------------------------

    def out_bytes_per_sample(self, seq_len: int, dtype_bytes: int = 2) -> float:
        """Bytes sent to the next layer (the hidden state s x h); the head sends nothing."""
        if self.fixed is not None:
            return self.fixed.out_bytes_per_sample * seq_len / self.fixed.seq_len
        if self.kind == "head":
            return 0.0
        return float(dtype_bytes * seq_len * self.config.hidden)

    def act_bytes_per_sample(self, seq_len: int, recompute: str = "none", tp: int = 1,
                             sequence_parallel: bool = False, attention: str = "flash",
                             dtype_bytes: int = 2) -> float:
        """Activation bytes saved for backward, per sample, on one TP rank.

        Korthikanti et al. 2022 (sec 4, Table 2): a GPT block saves sbh(34 + 5as/h) bytes in
        16-bit with standard attention; 10sbh of it (norm inputs, block inputs, dropout
        masks) is replicated across TP ranks unless sequence parallelism shards it;
        selective recompute drops the 5as^2b attention-score terms; full recompute keeps
        only the block input (2sbh). FlashAttention (Dao et al. 2022) never stores the
        s^2 scores, only the softmax log-sum-exp (fp32, a x s).
        """
        if recompute not in RECOMPUTE_MODES:
            raise BadInput(f"unknown recompute mode {recompute!r}", field="recompute")
        if self.fixed is not None:
            return self.fixed.act_bytes_per_sample * seq_len / self.fixed.seq_len
        c = self.config
        s, h, nb = seq_len, c.hidden, dtype_bytes
        sp_div = tp if sequence_parallel else 1
        mask = 1 if c.dropout else 0  # one byte per element of a dropout mask
        if self.kind == "embedding":
            return mask * s * h / sp_div  # embedding dropout mask
        if self.kind == "head":
            # final norm input and output (the head GEMM's input), then fp32 logits that
            # the vocab-parallel cross entropy keeps (Korthikanti et al. 2022, sec 4.3)
            return 2 * nb * s * h / sp_div + 4.0 * s * c.vocab / tp
        if recompute == "full":
            return nb * s * h / sp_div  # only the block input is checkpointed
        replicated = 4 * nb * s * h + 2 * mask * s * h  # 2 norm inputs, QKV and MLP inputs, 2 masks
        # attention: Q, K, V and the output-projection input
        sharded = nb * s * (2 * h + 2 * c.kv_dim)
        # MLP: GeLU keeps its input and output (2 x s x f); SwiGLU keeps gate, up and product
        mlp = (3 if c.gated_mlp else 2) * nb * s * c.ffn_hidden
        if c.num_experts > 1:
            mlp = c.experts_top_k * (mlp + nb * s * h) + 4 * s * c.num_experts  # routed copies, router logits
        sharded += mlp
        if attention == "standard":
            if recompute == "none":
                # softmax output (2as^2), its dropout mask (as^2) and dropout output (2as^2)
                per_score = nb + (mask + nb if c.dropout else 0)
                sharded += per_score * c.num_heads * s * s
        elif attention == "flash":
            sharded += 4 * c.num_heads * s  # log-sum-exp, fp32
        else:
            raise BadInput(f"unknown attention kind {attention!r}", field="attention")
        return replicated / sp_div + sharded / tp

    def op_sac_act_bytes_per_sample(self, seq_len: int, tp: int = 1, sequence_parallel: bool = False,
                                    dtype_bytes: int = 2) -> float:
        """Activation bytes a decoder block saves per sample on one TP rank under torchtitan's
        per-op selective checkpointing (cost.op_sac_recomputed_gemm_s): the block input, the
        outputs of the matmuls it keeps (every odd one in call order: q, v, w1, w2 with a gated
        MLP) and of flash attention (output and fp32 log-sum-exp). Other layers save what they
        save without recomputation."""
        if self.kind != "decoder" or self.config is None:
            return self.act_bytes_per_sample(seq_len, "none", tp, sequence_parallel, "flash", dtype_bytes)
        c = self.config
        s, h, nb = seq_len, c.hidden, dtype_bytes
        sp_div = tp if sequence_parallel else 1
        kept_mlp = c.ffn_hidden if c.gated_mlp else 0  # gated: w1 kept, w3 recomputed; else w1 recomputed
        # block input and the row-parallel w2 output (a full s x h partial sum per rank)
        replicated = 2 * nb * s * h
        # q, v, the attention output and its log-sum-exp, and w1 where kept
        sharded = nb * s * (2 * h + c.kv_dim + kept_mlp) + 4 * c.num_heads * s
        return replicated / sp_div + sharded / tp


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM per sample: (rows=seq_len) x n x k, repeated `count` times."""

    rows: int
    n: float
    k: float
    count: int

    def flops_per_sample(self, seq_len: int) -> float:
        return 2.0 * seq_len * self.n * self.k * self.count


@dataclass(frozen=True)
class Model:
    name: str
    config: ModelConfig | None
    layers: tuple[Layer, ...]
    raw: Mapping[str, Any] = field(compare=False, hash=False, default_factory=dict)
    source: str = "analytic"  # or "profile"

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def fwd_flops_per_sample(self, seq_len: int) -> float:
        return sum(layer.fwd_flops_per_sample(seq_len) for layer in self.layers)


# --- loading -------------------------------------------------------------------------------


def catalog_names() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def resolve_model_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.exists():
        return p
    for candidate in MODELS_DIR.glob("*.json"):
        if candidate.stem.lower() == name_or_path.lower():
            return candidate
    raise BadInput("model not found: not a file and not a catalog name (see `planner models`)",
                   name_or_path)


def load_model(name_or_path: str) -> Model:
    path = resolve_model_path(name_or_path)
    data = load_mapping(path, "model file")
    if path.parent != MODELS_DIR and data.get("_name_or_path"):
        return model_from_dict(data, data["_name_or_path"], str(path), "_name_or_path")
    return model_from_dict(data, path.stem, str(path), "(the name taken from the file name)")


def model_from_dict(data: Mapping[str, Any], name: str, where: str = "model",
                    name_field: str = "name") -> Model:
    """A model from a parsed HF config named `name`, or from a layer profile, which is named
    by its `model` key (else `name`). The name must pass `check_name`."""
    profile = data.get("format") == "planner.profile/v1"
    if profile and data.get("model"):
        name, name_field = data["model"], "model"
    check_name(name, where, name_field)
    if profile:
        return _model_from_profile(data, name, where)
    config = config_from_hf(data, name, where)
    return Model(name, config, build_layers(config), raw=dict(data))


def _first(data: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        if key in data and data[key] is not None:
            return key
    return keys[0]


def _rate(data: Mapping[str, Any], key: str, where: str) -> float:
    """A dropout probability: absent or null is 0; otherwise a number in [0, 1]."""
    value = data.get(key)
    if value is None:
        return 0.0
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise BadInput(f"must be a probability between 0 and 1, got {value!r}", where, key)
    return float(value)


def _flag(data: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadInput(f"must be true or false, got {value!r}", where, key)
    return value


def config_from_hf(data: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    """Read a Hugging Face config.json; a missing dimension is an error, never a default."""
    mtype = data.get("model_type")
    if not isinstance(mtype, str):
        raise BadInput("missing model_type", where, "model_type")
    if mtype not in SUPPORTED_TYPES:
        raise BadInput(f"unsupported model_type {mtype!r}; supported: {', '.join(SUPPORTED_TYPES)}",
                       where, "model_type")

    def pos(keys: tuple[str, ...], figure: str, required: bool = True) -> int | None:
        key = _first(data, keys)
        return ranges.get(data, key, figure, where, key, required=required)

    if mtype == "gpt2":
        hidden = pos(("n_embd", "hidden_size"), "hidden")
        layers = pos(("n_layer", "num_hidden_layers"), "num_layers")
        heads = pos(("n_head", "num_attention_heads"), "num_heads")
        vocab = pos(("vocab_size",), "vocab")
        positions = pos(("n_positions", "max_position_embeddings"), "max_positions")
        ffn = pos(("n_inner",), "ffn_hidden", required=False) or 4 * hidden  # GPT-2 defines null as 4h
        kv_heads = heads
        dropout = any([_rate(data, k, where) > 0 for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop")])
        kwargs = dict(gated_mlp=False, tied_embeddings=_flag(data, "tie_word_embeddings", True, where),
                      norm="layernorm", linear_bias=True, learned_positions=True, dropout=dropout)
    else:
        hidden = pos(("hidden_size",), "hidden")
        layers = pos(("num_hidden_layers",), "num_layers")
        heads = pos(("num_attention_heads",), "num_heads")
        vocab = pos(("vocab_size",), "vocab")
        ffn = pos(("intermediate_size",), "ffn_hidden")
        positions = pos(("max_position_embeddings",), "max_positions", required=False) or 0
        kv_heads = pos(("num_key_value_heads",), "num_heads", required=False) or heads  # HF: absent means MHA
        if mtype == "gpt_neox":
            kwargs = dict(gated_mlp=False, tied_embeddings=_flag(data, "tie_word_embeddings", False, where),
                          norm="layernorm", linear_bias=True,
                          dropout=_rate(data, "hidden_dropout", where) > 0)
        else:
            kwargs = dict(gated_mlp=True, tied_embeddings=_flag(data, "tie_word_embeddings", False, where),
                          norm="rmsnorm", qkv_bias=(mtype == "qwen2"),
                          dropout=_rate(data, "attention_dropout", where) > 0)
        if mtype == "mixtral":
            kwargs["num_experts"] = pos(("num_local_experts",), "num_experts")
            kwargs["experts_top_k"] = pos(("num_experts_per_tok",), "num_experts")
            if kwargs["experts_top_k"] > kwargs["num_experts"]:
                raise BadInput("num_experts_per_tok exceeds num_local_experts", where, "num_experts_per_tok")
    if hidden % heads:
        raise BadInput(f"hidden size {hidden} is not a multiple of the {heads} heads", where, "num_attention_heads")
    if heads % kv_heads:
        raise BadInput(f"{heads} heads are not a multiple of {kv_heads} key/value heads", where,
                       "num_key_value_heads")
    return ModelConfig(name=name, model_type=mtype, hidden=hidden, num_layers=layers,
                       num_heads=heads, num_kv_heads=kv_heads, ffn_hidden=ffn, vocab=vocab,
                       max_positions=positions, **kwargs)


def build_layers(c: ModelConfig) -> tuple[Layer, ...]:
    h = c.hidden
    embed_params = c.vocab * h + (c.max_positions * h if c.learned_positions else 0)
    attn = h * (h + 2 * c.kv_dim) + h * h
    if c.linear_bias:
        attn += (h + 2 * c.kv_dim) + h
    elif c.qkv_bias:
        attn += h + 2 * c.kv_dim
    mlp = (3 if c.gated_mlp else 2) * h * c.ffn_hidden
    if c.linear_bias:
        mlp += c.ffn_hidden + h
    if c.num_experts > 1:
        mlp = c.num_experts * mlp + h * c.num_experts  # all experts + router
    block = attn + mlp + 2 * c.norm_params
    head_matrix = c.vocab * h
    layers = [Layer(0, "embed", "embedding", embed_params, embed_params, c)]
    for i in range(c.num_layers):
        layers.append(Layer(i + 1, f"block.{i}", "decoder", block, block, c))
    head_params = c.norm_params + (0 if c.tied_embeddings else head_matrix)
    layers.append(Layer(c.num_layers + 1, "head", "head", head_params, c.norm_params + head_matrix, c))
    return tuple(layers)


def _model_from_profile(data: Mapping[str, Any], name: str, where: str) -> Model:
    seq_len = ranges.get(data, "seq_len", "seq_len", where, "seq_len")
    entries = data.get("layers")
    if not isinstance(entries, list) or not entries:
        raise BadInput("must be a non-empty list", where, "layers")
    layers = []
    kinds = ("embedding", "decoder", "head")
    for i, entry in enumerate(entries):
        prefix = f"layers[{i}]"
        if not isinstance(entry, dict):
            raise BadInput("must be a mapping", where, prefix)
        kind = entry.get("kind")
        if kind not in kinds:
            raise BadInput(f"must be one of {', '.join(kinds)}", where, f"{prefix}.kind")
        params = entry.get("params")
        if not isinstance(params, int) or isinstance(params, bool) or not 0 <= params <= MAX_NUMBER:
            raise BadInput(f"must be an integer from 0 to {MAX_NUMBER:.0e}", where, f"{prefix}.params")
        numbers = {}
        for key in ("fwd_flops_per_sample", "act_bytes_per_sample", "out_bytes_per_sample"):
            value = entry.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= MAX_PER_SAMPLE:
                raise BadInput(f"must be a number from 0 to {MAX_PER_SAMPLE:.0e}", where, f"{prefix}.{key}")
            numbers[key] = float(value)
        fixed = FixedCosts(seq_len=seq_len, measured=entry.get("measured"), **numbers)
        layer_name = check_name(entry.get("name", f"layer.{i}"), where, f"{prefix}.name")
        layers.append(Layer(i, layer_name, kind, params, params, None, fixed))
    return Model(name, None, tuple(layers), raw=dict(data), source="profile")
