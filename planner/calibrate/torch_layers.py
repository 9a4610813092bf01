"""Real PyTorch modules for each distinct layer of a model (optional: needs torch).

`build_layer(config, kind)` builds the embedding, one decoder block or the final norm + LM
head of a `ModelConfig` with its real dimensions, in plain torch (no transformers), so that
the analytic parameter and FLOP counts of `planner.inputs.model` can be checked against a module
(`sum(p.numel())`, `torch.utils.flop_counter.FlopCounterMode`) or timed on a device.

Only `planner.calibrate.profiler` (the `planner profile` command) imports this module; torch is the
optional `profile` extra.

Conventions, chosen so that a FLOP counter sees exactly the work the analytic model counts:

* attention is written out (q @ k^T, causal mask, softmax, @ v), so both s^2 GEMMs are
  counted at full size (the analytic model's `causal_skip=False`); key/value heads of GQA
  are repeated to the query heads before the matmuls;
* a mixture-of-experts block sends each expert only the tokens routed to it, so the
  counter sees top-k expert work, plus the (replicated) router GEMM;
* with `tp > 1` the module is the local shard of one tensor-parallel rank (rank 0), cut as
  Megatron-LM does: QKV and MLP-in column-parallel (heads/tp, kv_heads/tp but at least 1,
  ffn/tp, with their biases), attention-out and MLP-out row-parallel (their biases and the
  norms replicated), the vocabulary split for the embedding and the head. No communication
  is done: the output is the rank's partial sum (row-parallel) or its logit shard (head).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..inputs.model import ModelConfig
from ..inputs.model_families import PROFILED_TYPES

KINDS = ("embedding", "decoder", "head")
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "phi3")  # Phi-3's fused qkv / gate_up: same shapes
DEFAULT_ROPE_BASE = {"llama": 10000.0, "mistral": 10000.0, "mixtral": 1e6, "qwen2": 1e6,
                     "gpt_neox": 10000.0, "phi3": 10000.0}
assert set(PROFILED_TYPES) == {"gpt2", "gpt_neox", *LLAMA_LIKE}


def build_layer(config: ModelConfig, kind: str, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", tp: int = 1, *, rotary_pct: float = 1.0,
                rope_base: float | None = None, eps: float = 1e-5) -> nn.Module:
    """One layer of `config` as a module: kind is "embedding", "decoder" or "head".

    `rotary_pct` (GPT-NeoX's fraction of the head dimension that is rotated; the HF config
    has it, ModelConfig does not) and `rope_base` only change values, never the counts.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if not 0.0 <= rotary_pct <= 1.0:
        raise ValueError(f"rotary_pct must be in [0, 1], got {rotary_pct!r}")
    mtype = config.model_type
    if mtype not in PROFILED_TYPES:
        raise ValueError(f"unsupported model_type {mtype!r}")
    if kind == "embedding":
        module: nn.Module = Embedding(config, tp)
    elif kind == "head":
        module = Head(config, tp, eps)
    else:
        base = rope_base if rope_base is not None else DEFAULT_ROPE_BASE.get(mtype, 10000.0)
        if mtype == "gpt2":
            module = GPT2Block(config, tp, eps)
        elif mtype == "gpt_neox":
            module = NeoXBlock(config, tp, eps, rotary_pct, base)
        else:
            module = LlamaBlock(config, tp, eps, base)
    return module.to(device=device, dtype=dtype)


# --- sharding ------------------------------------------------------------------------------


def _split(total: int, tp: int, what: str) -> int:
    if total % tp:
        raise ValueError(f"{what} ({total}) is not divisible by tp={tp}")
    return total // tp


def _kv_heads_per_rank(config: ModelConfig, tp: int) -> int:
    """Megatron splits the key/value groups; fewer groups than ranks are replicated."""
    if config.num_kv_heads <= tp:
        return 1
    return _split(config.num_kv_heads, tp, "num_kv_heads")


# --- building blocks -----------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _norm(config: ModelConfig, eps: float) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.hidden, eps)
    return nn.LayerNorm(config.hidden, eps=eps)


def _rotate_half(tensor: torch.Tensor) -> torch.Tensor:
    x1, x2 = tensor.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(tensor: torch.Tensor, rot_dim: int, base: float) -> torch.Tensor:
    """Rotary embedding (Su et al. 2021) on the first `rot_dim` dims of tensor (b, heads, s, d).

    Only elementwise work (no GEMM), so FLOP counters see none, as the analytic model.
    """
    if rot_dim <= 0:
        return tensor
    s = tensor.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, rot_dim, 2, device=tensor.device, dtype=torch.float32)
                               / rot_dim))
    pos = torch.arange(s, device=tensor.device, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]  # broadcast, not torch.outer
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(tensor.dtype), emb.sin().to(tensor.dtype)
    x_rot, x_pass = tensor[..., :rot_dim], tensor[..., rot_dim:]
    x_rot = x_rot * cos + _rotate_half(x_rot) * sin
    return torch.cat((x_rot, x_pass), dim=-1)


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Explicit causal attention: query (b, a, s, d), key and value (b, a_kv, s, d) -> (b, s, a*d).

    Key/value heads are repeated to the query heads first (GQA), so both matmuls are
    (b*a) x s x s x d GEMMs: 2 * 2 s^2 a d FLOPs per sample, the full square.
    """
    b, a, s, d = query.shape
    if key.shape[1] != a:
        rep = a // key.shape[1]
        key = key.repeat_interleave(rep, dim=1)
        value = value.repeat_interleave(rep, dim=1)
    scores = torch.matmul(query, key.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    mask = torch.ones(s, s, dtype=torch.bool, device=query.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(query.dtype)
    out = torch.matmul(probs, value)  # (b, a, s, d)
    return out.transpose(1, 2).reshape(b, s, a * d)


def add_qkv_projections(module: nn.Module, hidden: int, q_out: int, kv_out: int, fused: bool, bias: bool) -> None:
    """One TP rank's query, key and value projections on `module`: one fused `qkv` Linear
    (GPT-2, NeoX) or `q_proj`, `k_proj` and `v_proj` (Llama and its kin)."""
    if fused:
        module.qkv = nn.Linear(hidden, q_out + 2 * kv_out, bias=bias)
    else:
        module.q_proj = nn.Linear(hidden, q_out, bias=bias)
        module.k_proj = nn.Linear(hidden, kv_out, bias=bias)
        module.v_proj = nn.Linear(hidden, kv_out, bias=bias)


class _Attention(nn.Module):
    """Self-attention shard: column-parallel q/k/v, row-parallel output projection."""

    def __init__(self, config: ModelConfig, tp: int, fused: bool, qkv_bias: bool,
                 out_bias: bool, rot_dim: int, rope_base: float):
        super().__init__()
        h, d = config.hidden, config.head_dim
        self.heads = _split(config.num_heads, tp, "num_heads")
        self.kv_heads = _kv_heads_per_rank(config, tp)
        self.head_dim = d
        self.rot_dim = rot_dim
        self.rope_base = rope_base
        self.fused = fused
        q_out, kv_out = self.heads * d, self.kv_heads * d
        add_qkv_projections(self, h, q_out, kv_out, fused, qkv_bias)
        self.out = nn.Linear(q_out, h, bias=out_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        if self.fused:
            q, k, v = self.qkv(x).split(
                [self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, s, self.heads, d).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, d).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, d).transpose(1, 2)
        q = apply_rope(q, self.rot_dim, self.rope_base)
        k = apply_rope(k, self.rot_dim, self.rope_base)
        return self.out(causal_attention(q, k, v))


class GeluMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, bias: bool):
        super().__init__()
        self.up = nn.Linear(hidden, ffn, bias=bias)
        self.down = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, ffn: int, bias: bool = False):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=bias)
        self.up = nn.Linear(hidden, ffn, bias=bias)
        self.down = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Top-k routed experts (Mixtral): router Linear h -> E, softmax, top-k, renormalise.

    Each expert runs only on the tokens routed to it, so the expert GEMMs total
    top_k * tokens rows; the router is replicated across TP ranks, experts are TP-sharded.
    """

    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden, ffn) for _ in range(num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (tokens, k), distinct experts
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            if token.numel() == 0:
                continue
            y = expert(x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y)
        return out.reshape(shape)


# --- layers --------------------------------------------------------------------------------


class Embedding(nn.Module):
    """Token embedding (+ GPT-2's learned positions). With tp > 1, the vocabulary-parallel
    shard of rank 0: ids outside its range look up zeros (Megatron's VocabParallelEmbedding);
    the position table is replicated."""

    def __init__(self, config: ModelConfig, tp: int = 1):
        super().__init__()
        self.vocab_shard = math.ceil(config.vocab / tp)  # Megatron pads the vocabulary
        self.tp = tp
        self.tokens = nn.Embedding(self.vocab_shard, config.hidden)
        self.positions = nn.Embedding(config.max_positions, config.hidden) \
            if config.learned_positions else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            outside = (ids < 0) | (ids >= self.vocab_shard)
            x = self.tokens(ids.masked_fill(outside, 0)).masked_fill(outside[..., None], 0.0)
        else:
            x = self.tokens(ids)
        if self.positions is not None:
            pos = torch.arange(ids.shape[-1], device=ids.device)
            x = x + self.positions(pos)
        return x


class Head(nn.Module):
    """Final norm + LM head (no bias); with tp > 1 the vocabulary shard of one rank. A tied
    head owns its own copy of the matrix here (compare with `Layer.weight_params`)."""

    def __init__(self, config: ModelConfig, tp: int = 1, eps: float = 1e-5):
        super().__init__()
        self.norm = _norm(config, eps)
        self.lm_head = nn.Linear(config.hidden, math.ceil(config.vocab / tp), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


class GPT2Block(nn.Module):
    """Pre-LN block: LayerNorm, fused QKV with bias, GeLU MLP with biases."""

    def __init__(self, config: ModelConfig, tp: int = 1, eps: float = 1e-5):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden, eps=eps)
        self.attn = _Attention(config, tp, fused=True, qkv_bias=True, out_bias=True,
                               rot_dim=0, rope_base=0.0)
        self.ln_2 = nn.LayerNorm(config.hidden, eps=eps)
        self.mlp = GeluMLP(config.hidden, _split(config.ffn_hidden, tp, "ffn_hidden"), bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NeoXBlock(nn.Module):
    """GPT-NeoX: parallel residual x + attn(ln1 x) + mlp(ln2 x), biases, partial rotary."""

    def __init__(self, config: ModelConfig, tp: int = 1, eps: float = 1e-5,
                 rotary_pct: float = 1.0, rope_base: float = 10000.0):
        super().__init__()
        rot_dim = int(config.head_dim * rotary_pct)
        rot_dim -= rot_dim % 2
        self.input_layernorm = nn.LayerNorm(config.hidden, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden, eps=eps)
        self.attn = _Attention(config, tp, fused=True, qkv_bias=True, out_bias=True,
                               rot_dim=rot_dim, rope_base=rope_base)
        self.mlp = GeluMLP(config.hidden, _split(config.ffn_hidden, tp, "ffn_hidden"), bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attn(self.input_layernorm(x)) + self.mlp(self.post_attention_layernorm(x))


class LlamaBlock(nn.Module):
    """Llama / Mistral / Qwen2 (q/k/v bias) / Mixtral (MoE): RMSNorm, GQA + RoPE, SwiGLU."""

    def __init__(self, config: ModelConfig, tp: int = 1, eps: float = 1e-5,
                 rope_base: float = 10000.0):
        super().__init__()
        self.input_layernorm = _norm(config, eps)
        self.attn = _Attention(config, tp, fused=False, qkv_bias=config.qkv_bias or config.linear_bias,
                               out_bias=config.linear_bias, rot_dim=config.head_dim,
                               rope_base=rope_base)
        self.post_attention_layernorm = _norm(config, eps)
        ffn = _split(config.ffn_hidden, tp, "ffn_hidden")
        if config.num_experts > 1:
            self.mlp: nn.Module = MoE(config.hidden, ffn, config.num_experts, config.experts_top_k)
        else:
            self.mlp = SwiGLU(config.hidden, ffn, bias=config.linear_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))
