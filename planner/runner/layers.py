"""The model's layers as tensor-parallel torch modules (Megatron-LM's cut), for `planner run`.

* q, k, v (fused for GPT-2: rows [q | k | v]) and the MLP's up/gate projections are
  column-parallel: each TP rank holds heads/tp, kv_heads/tp and ffn/tp output rows (with
  their biases); their input goes through `copy_to_tp` (identity forward, all-reduce of the
  gradient backward);
* the attention output and MLP down projections are row-parallel: each rank holds 1/tp of
  the input columns, the partial products are all-reduced (`reduce_from_tp`) and the bias,
  replicated, is added once after the sum;
* norms, the embedding (token and GPT-2 position tables) and the LM head are replicated on
  every TP rank of a stage (no vocabulary parallelism); with TP their gradients are the same
  on every TP rank, so they need no reduction. The head has its own matrix (a tied
  embedding is untied, also in a one-rank run).

Initialisation does not depend on the plan: layer i is built whole (tp = 1) from a generator
seeded with (seed, i), every matrix and bias drawn from N(0, 0.02), norms at one (bias zero),
and then cut to the rank's shard (`shard_state`); `full_state` puts shards back together.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..inputs.model import ModelConfig
from ..calibrate.torch_layers import DEFAULT_ROPE_BASE, RMSNorm, apply_rope, add_qkv_projections, causal_attention

INIT_STD = 0.02
COLUMN = ("q_proj", "k_proj", "v_proj", "qkv", "gate", "up")  # sharded on output rows
ROW = ("out", "down")  # sharded on input columns


class TPGroup:
    """A rank's tensor-parallel group: `group` is None when tp = 1."""

    def __init__(self, size: int = 1, rank: int = 0, group=None):
        self.size, self.rank, self.group = size, rank, group


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.tp.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=tp.group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(tensor: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    return tensor if tp.size == 1 else _CopyToTP.apply(tensor, tp)


def reduce_from_tp(tensor: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    return tensor if tp.size == 1 else _ReduceFromTP.apply(tensor, tp)


def _norm(config: ModelConfig) -> nn.Module:
    return RMSNorm(config.hidden) if config.norm == "rmsnorm" else nn.LayerNorm(config.hidden)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, tp: TPGroup, *, fused: bool, qkv_bias: bool, out_bias: bool,
                 rope: bool, selective: bool):
        super().__init__()
        h, d = config.hidden, config.head_dim
        self.tp, self.fused, self.selective = tp, fused, selective
        self.heads, self.kv_heads, self.head_dim = config.num_heads // tp.size, config.num_kv_heads // tp.size, d
        self.rope_base = DEFAULT_ROPE_BASE.get(config.model_type, 10000.0) if rope else None
        q_out, kv_out = self.heads * d, self.kv_heads * d
        add_qkv_projections(self, h, q_out, kv_out, fused, qkv_bias)
        self.out = nn.Linear(q_out, h, bias=False)
        self.out_bias = nn.Parameter(torch.zeros(h)) if out_bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        d = self.head_dim
        x = copy_to_tp(x, self.tp)
        if self.fused:
            q, k, v = self.qkv(x).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, s, self.heads, d).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, d).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, d).transpose(1, 2)
        if self.rope_base is not None:
            q, k = apply_rope(q, d, self.rope_base), apply_rope(k, d, self.rope_base)
        core = checkpoint(causal_attention, q, k, v, use_reentrant=False) if self.selective else \
            causal_attention(q, k, v)
        y = reduce_from_tp(self.out(core), self.tp)
        return y if self.out_bias is None else y + self.out_bias


class MLP(nn.Module):
    def __init__(self, config: ModelConfig, tp: TPGroup, *, gated: bool, bias: bool):
        super().__init__()
        ffn, h = config.ffn_hidden // tp.size, config.hidden
        self.tp, self.gated = tp, gated
        if gated:
            self.gate = nn.Linear(h, ffn, bias=bias)
        self.up = nn.Linear(h, ffn, bias=bias)
        self.down = nn.Linear(ffn, h, bias=False)
        self.down_bias = nn.Parameter(torch.zeros(h)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp(x, self.tp)
        inner = F.silu(self.gate(x)) * self.up(x) if self.gated else F.gelu(self.up(x), approximate="tanh")
        y = reduce_from_tp(self.down(inner), self.tp)
        return y if self.down_bias is None else y + self.down_bias


class Block(nn.Module):
    """Pre-norm decoder block: GPT-2 (LayerNorm, fused QKV, GeLU, biases) or Llama / Mistral /
    Qwen2 (RMSNorm, GQA + RoPE, SwiGLU, Qwen2's q/k/v biases)."""

    def __init__(self, config: ModelConfig, tp: TPGroup, selective: bool):
        super().__init__()
        gpt2 = config.model_type == "gpt2"
        self.ln_1, self.ln_2 = _norm(config), _norm(config)
        self.attn = Attention(config, tp, fused=gpt2, qkv_bias=config.linear_bias or config.qkv_bias,
                              out_bias=config.linear_bias, rope=not gpt2, selective=selective)
        self.mlp = MLP(config, tp, gated=config.gated_mlp, bias=config.linear_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embedding(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab, config.hidden)
        self.positions = nn.Embedding(config.max_positions, config.hidden) if config.learned_positions else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[-1], device=ids.device))
        return x


class Head(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm = _norm(config)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))


def layer_kind(config: ModelConfig, index: int) -> str:
    return "embedding" if index == 0 else "head" if index == config.num_layers + 1 else "decoder"


def new_layer(config: ModelConfig, index: int, tp: TPGroup, recompute: str = "none") -> nn.Module:
    kind = layer_kind(config, index)
    if kind == "embedding":
        return Embedding(config)
    if kind == "head":
        return Head(config)
    return Block(config, tp, selective=recompute == "selective")


def init_full(config: ModelConfig, index: int, seed: int) -> dict[str, torch.Tensor]:
    """The whole (tp = 1) parameters of layer `index`, the same for every plan."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + index) % 2**64)  # the range manual_seed takes
    layer = new_layer(config, index, TPGroup())
    state = {}
    with torch.no_grad():
        for name, p in layer.named_parameters():
            is_norm = name.startswith(("ln_", "norm."))
            if is_norm:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.normal_(0.0, INIT_STD, generator=generator)
            state[name] = p.detach().clone()
    return state


def _split_rule(name: str, config: ModelConfig) -> tuple[int, list[int]] | None:
    """(dim, parts) for a sharded parameter: cut dim into tp pieces within each part; None: replicated."""
    parts = name.split(".")
    if len(parts) < 2 or parts[-1] not in ("weight", "bias"):
        return None
    owner = parts[-2]
    d = config.head_dim
    if owner in COLUMN:
        sizes = [config.num_heads * d, config.num_kv_heads * d, config.num_kv_heads * d] if owner == "qkv" else None
        return 0, sizes or []
    if owner in ROW and parts[-1] == "weight":
        return 1, []
    return None


def shard_state(full: dict[str, torch.Tensor], config: ModelConfig, tp: int, tp_rank: int) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in full.items():
        rule = _split_rule(name, config)
        if rule is None or tp == 1:
            out[name] = tensor.clone()
            continue
        dim, sizes = rule
        pieces = tensor.split(sizes, dim=dim) if sizes else (tensor,)
        out[name] = torch.cat([p.chunk(tp, dim=dim)[tp_rank] for p in pieces], dim=dim).clone()
    return out


def full_state(shards: list[dict[str, torch.Tensor]], config: ModelConfig) -> dict[str, torch.Tensor]:
    """The inverse of shard_state over the shards of TP ranks 0..tp-1."""
    tp = len(shards)
    out = {}
    for name in shards[0]:
        rule = _split_rule(name, config)
        if rule is None or tp == 1:
            out[name] = shards[0][name].clone()
            continue
        dim, sizes = rule
        per_rank = [s[name].split([n // tp for n in sizes], dim=dim) if sizes else (s[name],) for s in shards]
        out[name] = torch.cat([torch.cat([r[k] for r in per_rank], dim=dim) for k in range(len(per_rank[0]))],
                              dim=dim)
    return out


class Chunk(nn.Module):
    """The layers [first, end) of one stage, as one rank holds them."""

    def __init__(self, config: ModelConfig, layers: tuple[int, int], tp: TPGroup, tp_rank: int, seed: int,
                 recompute: str, device: torch.device):
        super().__init__()
        self.indices = list(range(*layers))
        self.layers = nn.ModuleList()
        self.full_recompute = recompute == "full"
        for i in self.indices:
            layer = new_layer(config, i, tp, recompute)
            layer.load_state_dict(shard_state(init_full(config, i, seed), config, tp.size, tp_rank))
            self.layers.append(layer.to(device))
        self.kinds = [layer_kind(config, i) for i in self.indices]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for kind, layer in zip(self.kinds, self.layers):
            if kind == "decoder" and self.full_recompute:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x
