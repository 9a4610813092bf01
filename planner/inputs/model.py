"""Model description -> typed, ordered list of layers with their costs.

Sources: a built-in catalog name (profiles/models/*.json), a Hugging Face `config.json`,
or a layer-profile file (formats.md section 3). A model is the embedding, N decoder blocks
and the final norm + LM head; each layer knows its parameters, forward FLOPs, saved
activation bytes and the bytes it sends to the next layer, per sample, as functions of the
sequence length (and of tensor parallelism, sequence parallelism, recompute and attention
kernel for the activations).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ..core.dims import StageDims
from ..core.errors import BadInput
from .hardware import PROFILES_DIR
from .measured import check_profile_keys
from ..core import ranges
from ..core.io import MAX_NUMBER, load_mapping
from .block_params import expert_params, mixer_params, mlp_params, mtp_extra_params
from .model_families import SUPPORTED_TYPES, Mla, hf_dimensions  # noqa: F401 (re-exported)
from ..core.names import check_name, name_from_file
from .model_config import ModelConfig  # noqa: F401 (re-exported)

MODELS_DIR = PROFILES_DIR / "models"
RECOMPUTE_MODES = ("none", "selective", "full")
ATTENTION_KINDS = ("flash", "standard")
# fp8, MXFP8 and NVFP4 training keep bf16 activations, weights and gradients; only the decoder
# GEMMs' operands are quantized (planner.cost.fp8)
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "mxfp8": 2, "nvfp4": 2}
MAX_PER_SAMPLE = 1e24  # bound on a profile's per-sample FLOPs or bytes; keeps the math finite


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
    # the search's stand-in for decoders of several shapes (Model.decoder_stand_in): each
    # distinct decoder with its count; time is their count-weighted mean, memory their max
    blend: tuple[tuple["Layer", int], ...] = ()
    expert_params: int = 0  # of weight_params, the routed experts' (split by expert parallelism)
    # the head's multi-token-prediction modules (ModelConfig.mtp_layers), one decoder block each, run
    # where the head runs (Megatron-core places them on the last pipeline stage); params, weight_params
    # and expert_params count them, cost.pricing.layer_price prices them as decoders beside the head
    trail: tuple["Layer", ...] = ()

    # --- FLOPs -------------------------------------------------------------------------

    def fwd_flops_per_sample(self, seq_len: int) -> float:
        """Model forward FLOPs of one sample (full s^2 attention, Megatron's convention)."""
        if self.fixed is not None:
            return self.fixed.fwd_flops_per_sample * seq_len / self.fixed.seq_len
        if self.blend:
            return _mean(self.blend, lambda part: part.fwd_flops_per_sample(seq_len))
        return (sum(g.flops_per_sample(seq_len) for g in self.gemms(seq_len, tp=1))
                + self.attention_flops_per_sample(seq_len, tp=1, causal_skip=False)
                + self.scan_flops_per_sample(seq_len, tp=1)
                + sum(part.fwd_flops_per_sample(seq_len) for part in self.trail))

    def gemms(self, seq_len: int, tp: int, ep: int = 1, etp: int = 0) -> tuple["Gemm", ...]:
        """The layer's weight GEMMs, as shards on one of `tp` tensor-parallel ranks.

        Megatron's sharding (Shoeybi et al. 2019): QKV and MLP-in split columns, attention
        out and MLP-out split rows, the LM head splits the vocabulary. Routed experts run as
        a grouped GEMM (Megatron-core's GroupedMLP): num_experts / ep GEMMs of the tokens
        routed to each, columns split over `etp` (StageDims.expert_gemm_rows).
        """
        c = self.config
        if c is None or self.kind == "embedding":
            return ()
        if self.kind == "head":  # once for the next token, once more for each MTP module's (shared head)
            return (Gemm(seq_len, c.vocab / tp, c.hidden, 1 + c.mtp_layers),)
        h, f = c.hidden, c.ffn_hidden
        mlp_in = 2 * f if c.gated_mlp else f
        gemms = self.mixer_gemms(seq_len, tp)
        if c.mtp_module:  # an MTP module's projection of [embedding; hidden] (2h) to h, column-parallel
            gemms.insert(0, Gemm(seq_len, h / tp, 2 * h, 1))
        if not f:
            return tuple(gemms)  # a hybrid model's mixer layer: no MLP
        if c.num_experts == 1:
            gemms += [Gemm(seq_len, mlp_in / tp, h, 1, linears=2 if c.gated_mlp else 1),
                      Gemm(seq_len, h, f / tp, 1)]  # MLP up (+ gate), down
        else:  # the routed experts' up (+ gate) and down, at the width of a routed copy
            dims, width = StageDims(tp, ep=ep, etp=etp), c.expert_width
            rows, local = dims.expert_gemm_rows(seq_len, c.num_experts, c.experts_top_k), c.num_experts // ep
            gemms += [Gemm(rows, mlp_in / dims.expert_tp, width, local, expert=True),
                      Gemm(rows, width, f / dims.expert_tp, local, expert=True)]
        if c.num_experts > 1:
            gemms.append(Gemm(seq_len, c.num_experts, h, 1))  # router (replicated)
        if c.num_experts > 1 and c.moe_latent:  # latent experts' down and up projections (replicated, as the router)
            gemms += [Gemm(seq_len, c.moe_latent, h, 1), Gemm(seq_len, h, c.moe_latent, 1)]
        if c.shared_expert_ffn:
            s_in = 2 * c.shared_expert_ffn if c.gated_mlp else c.shared_expert_ffn
            gemms += [Gemm(seq_len, s_in / tp, h, 1), Gemm(seq_len, h, c.shared_expert_ffn / tp, 1)]
            if c.shared_expert_gate:
                gemms.append(Gemm(seq_len, 1, h, 1))
        return tuple(gemms)

    def mixer_gemms(self, seq_len: int, tp: int) -> list["Gemm"]:
        """The token mixer's GEMMs: attention's QKV (column-parallel) and output (row-parallel)
        projections; MLA's down-projections replicated, up-projections split by heads (Megatron's
        MLA); a Mamba-2 mixer's input projection (column-parallel) and output projection (row-parallel)."""
        c, h = self.config, self.config.hidden
        if c.mixer == "mamba":
            return [Gemm(seq_len, c.mamba.in_proj_width / tp, h, 1), Gemm(seq_len, h, c.mamba.inner / tp, 1)]
        if c.mixer != "attention":
            return []
        if c.mla is None:
            gemms = [Gemm(seq_len, (c.q_dim + c.kv_dim + c.v_dim) / tp, h, 1, linears=3)]  # QKV projection
        else:
            m, heads = c.mla, c.num_heads / tp
            q_in = m.q_lora_rank or h
            gemms = [Gemm(seq_len, m.q_lora_rank, h, 1)] if m.q_lora_rank else []
            gemms += [Gemm(seq_len, heads * c.head_dim, q_in, 1),
                      Gemm(seq_len, m.kv_lora_rank + m.qk_rope_head_dim, h, 1),
                      Gemm(seq_len, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, 1)]
        return gemms + [Gemm(seq_len, h, c.o_dim / tp, 1)]  # attention output projection

    def scan_flops_per_sample(self, seq_len: int, tp: int) -> float:
        """A Mamba-2 mixer's SSD scan (planner.inputs.mamba), its heads split over TP; 0 elsewhere."""
        if self.kind != "decoder" or self.config is None or self.config.mamba is None:
            return 0.0
        return StageDims(tp).compute_share(seq_len * self.config.mamba.scan_flops_per_token())

    def attention_flops_per_sample(self, seq_len: int, tp: int, causal_skip: bool, chunked: bool = True) -> float:
        """QK^T and attention-times-V: 2 s^2 (d_qk + d_v) per head, 4 s^2 h for a GPT block
        (Narayanan et al. 2021, sec 5.1), every query against every key.

        FlashAttention's causal kernels skip the masked upper triangle (`causal_skip`). A
        sliding window of w < s keys (Mistral, Gemma 2/3, Phi-3) leaves s w - w^2/2 causal
        query-key pairs, which is what a windowed kernel computes; without the skip that is
        doubled, as the full count is (s^2 = 2 x s^2/2). Chunked attention (Llama 4's local
        layers) attends causally within blocks of c tokens: c^2/2 pairs per block; `chunked`
        False counts them as full causal attention, what a kernel that masks the other blocks
        computes. GPT-OSS's attention sinks add one
        logit per query and head to the softmax (s a of s^2 a): not counted.
        """
        if self.kind != "decoder" or self.config is None or self.config.mixer != "attention":
            return 0.0
        c = self.config
        pairs = seq_len * seq_len / 2
        if 0 < c.window < seq_len:
            pairs = seq_len * c.window - c.window * c.window / 2
        if chunked and 0 < c.attention_chunk < seq_len:  # causal within each block of attention_chunk tokens
            blocks, rest = divmod(seq_len, c.attention_chunk)
            pairs = blocks * c.attention_chunk * c.attention_chunk / 2 + rest * rest / 2
        if not causal_skip:
            pairs *= 2
        return StageDims(tp).compute_share(2.0 * pairs * c.num_heads * (c.head_dim + c.v_head_dim))  # heads split

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
        s^2 scores, only the softmax log-sum-exp (fp32, a x s). A hybrid model's layer has one
        residual branch (a mixer or an MLP) and saves for it alone; a Mamba-2 mixer saves what
        planner.inputs.mamba counts.
        """
        if recompute not in RECOMPUTE_MODES:
            raise BadInput(f"unknown recompute mode {recompute!r}", field="recompute")
        if self.fixed is not None:
            return self.fixed.act_bytes_per_sample * seq_len / self.fixed.seq_len
        if self.blend:
            return max(part.act_bytes_per_sample(seq_len, recompute, tp, sequence_parallel, attention, dtype_bytes)
                       for part, _ in self.blend)
        c = self.config
        s, h, nb = seq_len, c.hidden, dtype_bytes
        dims = StageDims(tp, sequence_parallel)
        mask = 1 if c.dropout else 0  # one byte per element of a dropout mask
        if self.kind == "embedding":
            return dims.activation_share(mask * s * h, 0.0)  # embedding dropout mask
        if self.kind == "head":
            # final norm input and output (the head GEMM's input), then fp32 logits that
            # the vocab-parallel cross entropy keeps (Korthikanti et al. 2022, sec 4.3); once more
            # for each MTP module's prediction
            return (1 + c.mtp_layers) * dims.activation_share(2 * nb * s * h, 4.0 * s * c.vocab)
        # an MTP module's: the inputs of its two norms, of its projection (2h) and of its final norm
        mtp = 5 * nb * s * h if c.mtp_module else 0.0
        if recompute == "full":
            return dims.activation_share(nb * s * h + mtp, 0.0)  # only the block input is checkpointed
        # the norm inputs, the mixer's and the MLP's inputs, a mask per residual branch
        replicated = (c.block_norms + c.sublayers) * nb * s * h + c.sublayers * mask * s * h + mtp
        if c.mla is not None:  # the replicated down-projections' outputs (the latents)
            replicated += nb * s * (c.mla.q_lora_rank + c.mla.kv_lora_rank + c.mla.qk_rope_head_dim)
        # attention: Q, K, V and the output-projection input
        sharded = nb * s * (c.q_dim + c.kv_dim + c.v_dim + c.o_dim)
        # MLP: GeLU keeps its input and output (2 x s x f); SwiGLU keeps gate, up and product
        if c.num_experts > 1:
            sharded += moe_saved_bytes(c, s, nb)
        else:
            sharded += (3 if c.gated_mlp else 2) * nb * s * c.ffn_hidden
        if c.mamba is not None:  # a Mamba-2 mixer's (planner.inputs.mamba)
            sharded += s * (nb * c.mamba.saved_elements_per_token() + 4 * c.mamba.saved_fp32_per_token())
        if attention == "standard":
            if recompute == "none":
                # softmax output (2as^2), its dropout mask (as^2) and dropout output (2as^2)
                per_score = nb + (mask + nb if c.dropout else 0)
                sharded += per_score * c.num_heads * s * s
        elif attention == "flash":
            sharded += 4 * c.num_heads * s  # log-sum-exp, fp32
        else:
            raise BadInput(f"unknown attention kind {attention!r}", field="attention")
        return dims.activation_share(replicated, sharded)

    def eager_loss_grad_bytes_per_sample(self, seq_len: int, tp: int = 1, sequence_parallel: bool = False) -> float:
        """What the head's eager cross entropy (torch.nn.functional.cross_entropy on fp32 logits:
        log_softmax, then nll_loss, under autograd) holds during its backward beside the fp32
        log-softmax output it saved (act_bytes_per_sample's 4sV): nll_loss_backward's fp32
        gradient of the log-probabilities and log_softmax_backward_data's fp32 gradient of the
        logits, both alive while the latter runs (aten LogSoftMax backward, a new s x V tensor
        from the saved output and the incoming gradient): 2 x 4 s V bytes per sample, the
        vocabulary split over TP ranks (torchtitan's loss_parallel). Other layers: none."""
        if self.kind != "head" or self.config is None:
            return 0.0
        return StageDims(tp, sequence_parallel).activation_share(0.0, 2 * 4.0 * seq_len * self.config.vocab)

    def gathered_input_bytes_per_sample(self, seq_len: int, tp: int, dtype_bytes: int = 2) -> float:
        """What a TP rank keeps beyond act_bytes_per_sample when its column-parallel GEMMs save
        their all-gathered input instead of its sequence-parallel shard: the attention's input
        (one tensor for Q, K, V or MLA's down-projections), a dense or shared-expert MLP's
        input, the LM head's input, each s x h whole on every rank less the 1/tp share already
        counted (Korthikanti et al. 2022, sec 4.2.2 count the shard; DTensor's ColwiseParallel
        after SequenceParallel saves the gathered tensor). Per sample, without recomputation."""
        c = self.config
        if c is None or tp <= 1 or self.kind == "embedding":
            return 0.0
        dense_input = c.ffn_hidden > 0 and (c.num_experts == 1 or bool(c.shared_expert_ffn))
        inputs = 1 if self.kind == "head" else (c.mixer != "") + dense_input
        return inputs * dtype_bytes * seq_len * c.hidden * (1 - 1 / tp)

    def op_sac_act_bytes_per_sample(self, seq_len: int, tp: int = 1, sequence_parallel: bool = False,
                                    dtype_bytes: int = 2) -> float:
        """Activation bytes a decoder block saves per sample on one TP rank under torchtitan's
        per-op selective checkpointing (cost.recompute.op_sac_recomputed_gemm_s): the block input, the
        outputs of the matmuls it keeps (every odd one in call order: q, v, w1, w2 with a gated
        MLP) and of flash attention (output and fp32 log-sum-exp). Other layers save what they
        save without recomputation."""
        if self.blend:
            return max(part.op_sac_act_bytes_per_sample(seq_len, tp, sequence_parallel, dtype_bytes)
                       for part, _ in self.blend)
        if self.kind != "decoder" or self.config is None:
            return self.act_bytes_per_sample(seq_len, "none", tp, sequence_parallel, "flash", dtype_bytes)
        c = self.config
        s, h, nb = seq_len, c.hidden, dtype_bytes
        kept_mlp = c.ffn_hidden if c.gated_mlp else 0  # gated: w1 kept, w3 recomputed; else w1 recomputed
        # block input and the row-parallel w2 output (a full s x h partial sum per rank)
        replicated = 2 * nb * s * h
        # q, v, the attention output and its log-sum-exp, and w1 where kept
        sharded = nb * s * (c.q_dim + c.v_dim + c.o_dim + kept_mlp) + 4 * c.num_heads * s
        return StageDims(tp, sequence_parallel).activation_share(replicated, sharded)


def moe_saved_bytes(c: ModelConfig, seq_len: int, nb: int) -> float:
    """What an MoE layer saves for the backward beyond its input, per sample on one TP rank
    (sharded): each routed copy's input (at ModelConfig.expert_width) and its MLP activations (GeLU
    keeps its input and output, 2 s f; SwiGLU gate, up and product, 3 s f), the router logits
    (fp32), the shared experts' activations, and with latent experts the up projection's input."""
    per_ffn = (3 if c.gated_mlp else 2) * nb * seq_len
    return (c.experts_top_k * (per_ffn * c.ffn_hidden + nb * seq_len * c.expert_width) + 4 * seq_len * c.num_experts
            + per_ffn * c.shared_expert_ffn + nb * seq_len * c.moe_latent)


def _mean(parts: tuple[tuple[Layer, int], ...], figure) -> float:
    """Count-weighted mean of `figure(layer)` over a blend's parts."""
    return sum(figure(part) * n for part, n in parts) / sum(n for _, n in parts)


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM per sample: rows x n x k (rows = seq_len, or for a routed expert the
    tokens routed to it), repeated `count` times."""

    rows: float
    n: float
    k: float
    count: int
    expert: bool = False  # a routed expert's (its time scales with the load imbalance under EP)
    # the separate linear layers this GEMM fuses, all reading its input (HF and torchtitan models
    # run q, k, v and gate, up as their own nn.Linear): what a per-linear fp8 cast repeats
    linears: int = 1

    def flops_per_sample(self, seq_len: int) -> float:
        return 2.0 * self.rows * self.n * self.k * self.count


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
    def mtp_params(self) -> int:
        """Of params, the multi-token-prediction modules' (Layer.trail)."""
        return sum(part.params for layer in self.layers for part in layer.trail)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def fwd_flops_per_sample(self, seq_len: int) -> float:
        return sum(layer.fwd_flops_per_sample(seq_len) for layer in self.layers)

    def decoder_stand_in(self) -> Layer:
        """One decoder block standing for every decoder: the block the search prices n times where
        the decoders have no lead (searched_decoder), and the largest one's memory for the floors.
        When the decoders differ (Gemma's windowed and global layers, DeepSeek-V3's dense and MoE
        ones), a blend of them: per micro-batch time the count-weighted mean of theirs (n blocks of a stage
        cost n x the mean), memory (weights, activations) the largest of theirs, so a stage
        the search finds fitting fits whichever blocks it gets. Evaluating a plan prices
        every layer as it is."""
        decoders = [layer for layer in self.layers if layer.kind == "decoder"]
        shapes: dict[Any, list[Layer]] = {}
        for layer in decoders:
            shapes.setdefault(layer.config, []).append(layer)
        if len(shapes) <= 1:
            return decoders[0]
        parts = tuple((group[0], len(group)) for group in shapes.values())
        largest = max((part for part, _ in parts), key=lambda part: part.weight_params)
        return replace(largest, name="block.mix", blend=parts)

    def decoder_lead(self) -> tuple[Layer, int] | None:
        """The leading decoder blocks of another shape than the rest, as (one of them, their count):
        where the decoders are a run of one shape followed by blocks of one other shape (DeepSeek-V3's
        three dense blocks before its MoE ones). The search places them as blocks of their own on the
        front stages, so that every decoder is priced as it is (docs/solver.md, Algorithm). None where
        the decoders are all alike or follow another pattern (they are blended: decoder_stand_in)."""
        decoders = [layer for layer in self.layers if layer.kind == "decoder"]
        count = next((i for i, layer in enumerate(decoders) if layer.config != decoders[0].config), 0)
        if not count or any(layer.config != decoders[count].config for layer in decoders[count:]):
            return None
        return decoders[0], count

    def searched_decoder(self) -> Layer:
        """The decoder block the search prices n times: after the lead (decoder_lead) where there is
        one, else decoder_stand_in."""
        lead = self.decoder_lead()
        if lead is None:
            return self.decoder_stand_in()
        return [layer for layer in self.layers if layer.kind == "decoder"][lead[1]]


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
    return model_from_dict(data, name_from_file(path), str(path), "(the name taken from the file name)")


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


def config_from_hf(data: Mapping[str, Any], name: str, where: str) -> ModelConfig:
    """Read a Hugging Face config.json (planner.inputs.model_families: one reader per model_type);
    a missing dimension is an error unless Hugging Face documents its default."""
    return ModelConfig(name=name, **hf_dimensions(data, where))


def with_bf16_layers(model: Model, layers: tuple[int, int]) -> Model:
    """`model` with its first layers[0] and last layers[1] decoders kept in bf16 under a quantized dtype
    (ModelConfig.bf16_layers; Training.bf16_layers), its layers rebuilt; `model` itself where it already is."""
    c, layers = model.config, tuple(layers)
    if c is None or c.bf16_layers == layers:
        if c is None and layers != (0, 0):
            raise BadInput("keeping decoders in bf16 needs a model config, not a layer profile", "--bf16-layers")
        return model
    if sum(layers) > c.num_layers:
        raise BadInput(f"keeps {layers[0]} + {layers[1]} decoder layers in bf16; {model.name} has {c.num_layers}",
                       "--bf16-layers")
    config = replace(c, bf16_layers=layers)
    return Model(model.name, config, build_layers(config), raw=model.raw, source=model.source)


def build_layers(config: ModelConfig) -> tuple[Layer, ...]:
    h = config.hidden
    embed_params = config.vocab * h + (config.max_positions * h if config.learned_positions else 0)
    head_matrix = config.vocab * h
    layers = [Layer(0, "embed", "embedding", embed_params, embed_params, config)]
    for i in range(config.num_layers):
        lc = config.layer_config(i)
        block = _block_params(lc)
        layers.append(Layer(i + 1, f"block.{i}", "decoder", block, block, lc, expert_params=expert_params(lc)))
    head_params = config.norm_params + (0 if config.tied_embeddings else head_matrix)
    head_weights = config.norm_params + head_matrix
    mc = config.mtp_config()
    trail = []
    for k in range(config.mtp_layers):
        # a repeated module (ModelConfig.mtp_repeated) holds its weights once: the depths after the first own none
        owned = k == 0 or not config.mtp_repeated
        block = _block_params(mc) if owned else 0
        trail.append(Layer(config.num_layers + 1, f"mtp.{k}", "decoder", block, block, mc,
                           expert_params=expert_params(mc) if owned else 0))
    if trail:  # Megatron-core builds the embedding on the MTP modules' stage too, to embed the next tokens
        head_weights += config.vocab * h
    layers.append(Layer(config.num_layers + 1, "head", "head", head_params + sum(t.params for t in trail),
                        head_weights + sum(t.weight_params for t in trail), config,
                        expert_params=sum(t.expert_params for t in trail), trail=tuple(trail)))
    return tuple(layers)


def _block_params(config: ModelConfig) -> int:
    """A decoder block's parameters: its token mixer, its MLP or experts, its norms, and an MTP module's
    projection and norms (block_params.mtp_extra_params)."""
    return (mixer_params(config) + mlp_params(config) + config.block_norms * config.norm_params
            + mtp_extra_params(config))


def _model_from_profile(data: Mapping[str, Any], name: str, where: str) -> Model:
    check_profile_keys(data, where)
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
