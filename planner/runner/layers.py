"""The model's layers as tensor-parallel torch modules (Megatron-LM's cut), for `planner run`.

* q, k, v (fused for GPT-2: rows [q | k | v]) and the MLP's up/gate projections are
  column-parallel: each TP rank holds heads/tp, kv_heads/tp and ffn/tp output rows (with
  their biases), or, with the plan's uneven shards (TPSplit), its own heads, their KV heads
  and its own FFN columns; their input goes through `copy_to_tp` (identity forward, all-reduce of the
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

from dataclasses import dataclass

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


@dataclass(frozen=True)
class TPSplit:
    """The query heads and FFN columns each TP rank holds: the plan's uneven shards (Stage.tp_heads,
    tp_ffn), else heads / tp and ffn / tp each. A rank holds the KV heads of its query heads."""

    heads: tuple[int, ...]
    ffn: tuple[int, ...]

    @classmethod
    def of(cls, config: ModelConfig, tp: int, heads: tuple[int, ...] = (), ffn: tuple[int, ...] = ()) -> "TPSplit":
        return cls(heads or (config.num_heads // tp,) * tp, ffn or (config.ffn_hidden // tp,) * tp)

    def sizes(self, kind: str, config: ModelConfig) -> list[int]:
        """Each rank's rows (columns) of a "q", "kv" or "ffn" block."""
        d = config.head_dim
        if kind == "q":
            return [h * d for h in self.heads]
        if kind == "kv":
            return [h * config.num_kv_heads // config.num_heads * d for h in self.heads]
        return list(self.ffn)


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
    def __init__(self, config: ModelConfig, tp: TPGroup, split: TPSplit, *, fused: bool, qkv_bias: bool,
                 out_bias: bool, rope: bool, selective: bool):
        super().__init__()
        h, d = config.hidden, config.head_dim
        self.tp, self.fused, self.selective = tp, fused, selective
        self.heads, self.head_dim = split.heads[tp.rank], d
        self.kv_heads = split.sizes("kv", config)[tp.rank] // d
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
    def __init__(self, config: ModelConfig, tp: TPGroup, split: TPSplit, *, gated: bool, bias: bool):
        super().__init__()
        ffn, h = split.ffn[tp.rank], config.hidden
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

    def __init__(self, config: ModelConfig, tp: TPGroup, split: TPSplit, selective: bool):
        super().__init__()
        gpt2 = config.model_type == "gpt2"
        self.ln_1, self.ln_2 = _norm(config), _norm(config)
        self.attn = Attention(config, tp, split, fused=gpt2, qkv_bias=config.linear_bias or config.qkv_bias,
                              out_bias=config.linear_bias, rope=not gpt2, selective=selective)
        self.mlp = MLP(config, tp, split, gated=config.gated_mlp, bias=config.linear_bias)

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


def new_layer(config: ModelConfig, index: int, tp: TPGroup, recompute: str = "none",
              split: TPSplit | None = None) -> nn.Module:
    kind = layer_kind(config, index)
    if kind == "embedding":
        return Embedding(config)
    if kind == "head":
        return Head(config)
    return Block(config, tp, split or TPSplit.of(config, tp.size), selective=recompute == "selective")


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


def _split_rule(name: str) -> tuple[int, list[str]] | None:
    """(dim, its blocks' kinds: "q", "kv", "ffn") for a sharded parameter, each block cut over the TP ranks
    (TPSplit.sizes); None: replicated."""
    parts = name.split(".")
    if len(parts) < 2 or parts[-1] not in ("weight", "bias"):
        return None
    owner = parts[-2]
    if owner in COLUMN:
        return 0, {"qkv": ["q", "kv", "kv"], "q_proj": ["q"], "k_proj": ["kv"], "v_proj": ["kv"]}.get(owner, ["ffn"])
    if owner in ROW and parts[-1] == "weight":
        return 1, ["q" if owner == "out" else "ffn"]
    return None


def shard_state(full: dict[str, torch.Tensor], config: ModelConfig, tp: int, tp_rank: int,
                split: TPSplit | None = None) -> dict[str, torch.Tensor]:
    """Rank `tp_rank`'s shard of a whole layer: its rows (columns) of each block (TPSplit, even by default)."""
    split = split or TPSplit.of(config, tp)
    out = {}
    for name, tensor in full.items():
        rule = _split_rule(name)
        if rule is None or tp == 1:
            out[name] = tensor.clone()
            continue
        dim, kinds = rule
        blocks = tensor.split([sum(split.sizes(k, config)) for k in kinds], dim=dim)
        out[name] = torch.cat([block.split(split.sizes(k, config), dim=dim)[tp_rank]
                               for block, k in zip(blocks, kinds)], dim=dim).clone()
    return out


def full_state(shards: list[dict[str, torch.Tensor]], config: ModelConfig,
               split: TPSplit | None = None) -> dict[str, torch.Tensor]:
    """The inverse of shard_state over the shards of TP ranks 0..tp-1."""
    tp = len(shards)
    split = split or TPSplit.of(config, tp)
    out = {}
    for name in shards[0]:
        rule = _split_rule(name)
        if rule is None or tp == 1:
            out[name] = shards[0][name].clone()
            continue
        dim, kinds = rule
        per_rank = [s[name].split([split.sizes(k, config)[r] for k in kinds], dim=dim) for r, s in enumerate(shards)]
        out[name] = torch.cat([torch.cat([r[k] for r in per_rank], dim=dim) for k in range(len(kinds))], dim=dim)
    return out


def shard_shapes(config: ModelConfig, index: int, tp: int, split: TPSplit) -> list[dict[str, torch.Size]]:
    """Each TP rank's parameter shapes of layer `index` (built on the meta device: no memory)."""
    with torch.device("meta"):
        return [{name: p.shape for name, p in new_layer(config, index, TPGroup(tp, r), split=split).state_dict().items()}
                for r in range(tp)]


class Chunk(nn.Module):
    """The layers [first, end) of one stage, as one rank holds them."""

    def __init__(self, config: ModelConfig, layers: tuple[int, int], tp: TPGroup, tp_rank: int, seed: int,
                 recompute: str, device: torch.device, split: TPSplit | None = None):
        super().__init__()
        self.indices = list(range(*layers))
        self.layers = nn.ModuleList()
        self.full_recompute = recompute == "full"
        self.split = split or TPSplit.of(config, tp.size)
        for i in self.indices:
            layer = new_layer(config, i, tp, recompute, self.split)
            layer.load_state_dict(shard_state(init_full(config, i, seed), config, tp.size, tp_rank, self.split))
            self.layers.append(layer.to(device))
        self.kinds = [layer_kind(config, i) for i in self.indices]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for kind, layer in zip(self.kinds, self.layers):
            if kind == "decoder" and self.full_recompute:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x
