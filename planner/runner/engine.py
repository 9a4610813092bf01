"""One training step of one rank (`planner run`): the schedule's forward and backward passes
with point-to-point activations and gradients, the gradient reduction across a stage's
replicas and AdamW (ZeRO-1 where the plan says so).

The loss of a micro-batch is its summed token cross-entropy divided by the global batch's
token count (global_batch x seq_len), so summing the gradients of every micro-batch of every
replica (an all-reduce SUM over the stage's DP group) gives the gradient of the mean loss over
the global batch: each replica's mean gradient weighted by its share. Sends are non-blocking
(isend, waited for at the end of the step); receives block where the schedule needs them.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .layers import Chunk, TPGroup, TPSplit, full_state, shard_shapes, shard_state
from .layout import Layout, Seat


@dataclass(frozen=True)
class AdamWSettings:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1


def adamw_update(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 step: int, settings: AdamWSettings) -> None:
    """One AdamW step in place, the arithmetic of torch.optim.AdamW's single-tensor path
    (written out: torch.optim's first use imports torch._dynamo, seconds per process)."""
    beta1, beta2 = settings.betas
    param.mul_(1 - settings.lr * settings.weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = settings.lr / (1 - beta1 ** step)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(settings.eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


class ShardedAdamW:
    """AdamW over a stage's parameters, flattened. The DP group first sums the gradients; with
    `shard` (ZeRO-1) each member keeps the optimizer state of, and updates, only its 1/dp of the
    flat vector (contiguous pieces in dp_rank order), then the pieces are all-gathered; without,
    every member updates the whole vector. Elementwise, both are AdamW on every parameter."""

    def __init__(self, params: list[torch.nn.Parameter], group, index: int, size: int, shard: bool,
                 settings: AdamWSettings):
        self.params, self.group, self.size = params, group, size
        self.numel = sum(p.numel() for p in params)
        self.piece = math.ceil(self.numel / size) if shard and size > 1 else self.numel
        self.lo = index * self.piece if self.piece < self.numel else 0
        self.hi = min(self.numel, self.lo + self.piece)
        flat = self._flat([p.detach() for p in params])
        self.master = flat[self.lo:self.hi].clone()
        self.exp_avg = torch.zeros_like(self.master)
        self.exp_avg_sq = torch.zeros_like(self.master)
        self.settings = settings
        self.steps = 0

    @staticmethod
    def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in tensors])

    def step(self) -> None:
        grad = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
        if self.group is not None:
            dist.all_reduce(grad, group=self.group)
        self.steps += 1
        adamw_update(self.master, grad[self.lo:self.hi], self.exp_avg, self.exp_avg_sq, self.steps, self.settings)
        with torch.no_grad():
            if self.piece < self.numel:  # ZeRO-1: gather every member's updated piece
                mine = torch.zeros(self.piece, dtype=self.master.dtype, device=self.master.device)
                mine[:self.hi - self.lo] = self.master
                pieces = [torch.empty_like(mine) for _ in range(self.size)]
                dist.all_gather(pieces, mine, group=self.group)
                flat = torch.cat(pieces)[:self.numel]
            else:
                flat = self.master
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                p.grad = None
                offset += p.numel()


class MixedTPReduce:
    """The gradient sum of a stage whose replicas run different TP degrees (Replica.tp), whose shards do
    not line up across replicas: each TP group puts its layers' gradients back together (all-gather,
    full_state), its TP rank 0 adds the whole gradients into a sum over every rank of the stage (the
    other ranks add zeros), and each rank keeps its own shard of the sum (shard_state). Correct for any
    degrees; it moves whole gradients, where the cost model prices each slice reduced only among the
    ranks that hold it (docs/cost-model.md)."""

    def __init__(self, chunk: Chunk, config, tp: TPGroup, stage_group):
        self.chunk, self.config, self.tp, self.stage_group = chunk, config, tp, stage_group

    def _whole(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.tp.size == 1:
            return grads
        shards: list[dict[str, torch.Tensor]] = [{} for _ in range(self.tp.size)]
        for name, grad in grads.items():
            pieces = [torch.empty_like(grad) for _ in range(self.tp.size)]
            dist.all_gather(pieces, grad.contiguous(), group=self.tp.group)
            for i, piece in enumerate(pieces):
                shards[i][name] = piece
        return full_state(shards, self.config)

    def reduce(self) -> None:
        for layer in self.chunk.layers:
            params = dict(layer.named_parameters())
            whole = self._whole({name: p.grad if p.grad is not None else torch.zeros_like(p)
                                 for name, p in params.items()})
            names = sorted(whole)
            flat = torch.cat([whole[name].reshape(-1) for name in names])
            if self.tp.rank:
                flat.zero_()
            dist.all_reduce(flat, group=self.stage_group)
            offset, summed = 0, {}
            for name in names:
                summed[name] = flat[offset:offset + whole[name].numel()].view_as(whole[name])
                offset += whole[name].numel()
            mine = shard_state(summed, self.config, self.tp.size, self.tp.rank)
            for name, p in params.items():
                p.grad = mine[name].to(p.dtype)


@dataclass
class StageState:
    seat: Seat
    chunk: Chunk
    optimizer: ShardedAdamW
    mixed: MixedTPReduce | None = None  # the gradient sum of a stage of mixed TP degrees, before the optimizer


class RankState:
    """Everything one rank holds: its stages (chunks), their optimizers, its op order."""

    def __init__(self, layout: Layout, world_rank: int, groups: dict, seed: int, device: torch.device,
                 settings: AdamWSettings):
        plan = layout.plan
        config = plan.model.config
        assert config is not None  # Layout checked it
        self.layout, self.world_rank, self.device = layout, world_rank, device
        self.order = layout.order(world_rank)
        self.last = len(plan.stages) - 1
        self.stages: dict[int, StageState] = {}
        for seat in layout.seats(world_rank):
            tp_ranks = layout.tp_group(seat)
            tp = TPGroup(len(tp_ranks), seat.tp_rank, groups.get(tp_ranks))
            split = TPSplit.of(config, tp.size, seat.stage.tp_heads, seat.stage.tp_ffn)  # (uneven TP shards)
            chunk = Chunk(config, seat.stage.layers, tp, seat.tp_rank, seed, seat.stage.recompute, device, split)
            dp_ranks = layout.dp_group(seat)
            if seat.stage.mixed_tp:  # the stage's whole group sums the gradients (MixedTPReduce), no ZeRO
                mixed = MixedTPReduce(chunk, config, tp, groups.get(dp_ranks))
                optimizer = ShardedAdamW(list(chunk.parameters()), None, 0, 1, False, settings)
            else:
                mixed = None
                optimizer = ShardedAdamW(list(chunk.parameters()), groups.get(dp_ranks), dp_ranks.index(world_rank),
                                         len(dp_ranks), seat.stage.zero >= 1, settings)
            self.stages[seat.stage.index] = StageState(seat, chunk, optimizer, mixed)
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[plan.training.dtype]

    def autocast(self):
        return nullcontext() if self.dtype is None else torch.autocast(self.device.type, dtype=self.dtype)


def train_step(state: RankState, tokens: torch.Tensor) -> float:
    """Run one step on global batch `tokens` (global_batch x (seq_len + 1) ids); returns the mean
    loss over the global batch (on every rank)."""
    layout = state.layout
    plan = layout.plan
    b, s = plan.training.micro_batch, plan.training.seq_len
    hidden, vocab = plan.model.config.hidden, plan.model.config.vocab
    scale = 1.0 / (plan.training.global_batch * s)
    saved: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    pending: list = []
    loss_sum = torch.zeros((), dtype=torch.float64)
    for op, stage, g in state.order:
        st = state.stages[stage]
        tp_rank = st.seat.tp_rank
        rows = tokens[g * b:(g + 1) * b]
        if op == "F":
            if stage == 0:
                inp = rows[:, :-1].to(state.device)
            else:
                inp = torch.empty((b, s, hidden), dtype=torch.float32, device=state.device)
                dist.recv(inp, layout.forward_source(stage, g, tp_rank), tag=layout.tag(stage - 1, False, g))
                inp.requires_grad_()
            with state.autocast():
                out = st.chunk(inp)
            if stage == state.last:
                labels = rows[:, 1:].to(state.device).reshape(-1)
                out = F.cross_entropy(out.float().reshape(-1, vocab), labels, reduction="sum") * scale
                if tp_rank == 0:
                    loss_sum += out.detach().double().cpu()
            else:
                sent = out.detach().float().contiguous()
                for dst in layout.forward_targets(stage, g, tp_rank):
                    pending.append((dist.isend(sent, dst, tag=layout.tag(stage, False, g)), sent))
            saved[(stage, g)] = (inp, out)
        else:
            inp, out = saved.pop((stage, g))
            if stage == state.last:
                out.backward()
            else:
                grad = torch.empty(out.shape, dtype=torch.float32, device=state.device)
                dist.recv(grad, layout.backward_source(stage, g, tp_rank), tag=layout.tag(stage, True, g))
                torch.autograd.backward(out, grad.to(out.dtype))
            if stage > 0:
                sent = inp.grad.float().contiguous()
                for dst in layout.backward_targets(stage, g, tp_rank):
                    pending.append((dist.isend(sent, dst, tag=layout.tag(stage - 1, True, g)), sent))
    for work, _ in pending:
        work.wait()
    assert not saved, f"passes without a backward: {sorted(saved)}"
    for st in state.stages.values():
        if st.mixed is not None:
            st.mixed.reduce()
        st.optimizer.step()
    if layout.world_size > 1:
        loss = loss_sum.to(state.device)
        dist.all_reduce(loss)
        loss_sum = loss.cpu()
    return float(loss_sum)


def gather_parameters(state: RankState, groups: dict) -> dict[int, dict[str, torch.Tensor]]:
    """The rank's layers, whole (its TP group's shards put together), on the CPU: {layer index:
    state dict}. Collective over each of the rank's TP groups."""
    config = state.layout.plan.model.config
    out = {}
    for st in state.stages.values():
        tp_ranks = state.layout.tp_group(st.seat)
        group = groups.get(tp_ranks)
        for index, layer in zip(st.chunk.indices, st.chunk.layers):
            mine = {k: v.detach() for k, v in layer.state_dict().items()}
            if group is None:
                out[index] = {k: v.cpu().clone() for k, v in mine.items()}
                continue
            shapes = shard_shapes(config, index, len(tp_ranks), st.chunk.split)
            shards: list[dict[str, torch.Tensor]] = [{} for _ in tp_ranks]
            for name, tensor in mine.items():
                # every rank sends as many elements as the largest shard (gloo gathers equal sizes)
                sizes = [math.prod(shape[name]) for shape in shapes]
                sent = torch.zeros(max(sizes), dtype=tensor.dtype, device=tensor.device)
                sent[:tensor.numel()] = tensor.reshape(-1)
                pieces = [torch.empty_like(sent) for _ in tp_ranks]
                dist.all_gather(pieces, sent, group=group)
                for i, piece in enumerate(pieces):
                    shards[i][name] = piece[:sizes[i]].reshape(shapes[i][name]).cpu()
            out[index] = full_state(shards, config, st.chunk.split)
    return out
