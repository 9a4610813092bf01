"""What each rank of a plan does, from the plan alone (pure: no torch, no I/O).

World ranks: torchrun's rank i runs the plan's i-th used cluster rank (`Plan.used_ranks()`,
the order `export --to rankmap` gives as `world_rank`).

Samples and micro-batches: the global batch of B samples is cut into B / b global
micro-batches of b samples (g = 0, 1, ...; micro-batch g holds samples g*b .. g*b + b - 1).
At every stage, the replicas take consecutive runs of micro-batches in dp_rank order, each
as many as its batch_share / b: with shares 6:2 and b = 2, dp_rank 0 runs micro-batches
0-2 and dp_rank 1 micro-batch 3. A replica runs its micro-batches in increasing order. So
micro-batch g of stage s + 1 takes its input from whichever replica of stage s owns g,
however the two stages' DP degrees and shares differ.

Between the TP groups of two consecutive stages (tensor-parallel ranks all hold the same
activations): receiver TP rank i gets the forward activation from sender TP rank i mod
tp_sender, and sender TP rank j gets the backward gradient from receiver TP rank j mod
tp_receiver.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..core.errors import BadInput
from ..plan import Plan, Replica, Stage
from ..schedules import get_schedule
from ..schedules.interleaved import interleaved_order

SUPPORTED_TYPES = ("gpt2", "llama", "mistral", "qwen2")

Op = tuple[str, int, int]  # ("F" or "B", stage index, global micro-batch)


@dataclass(frozen=True)
class Seat:
    """One stage as one rank runs it: the replica and the rank's place in its TP group."""

    stage: Stage
    replica: Replica
    tp_rank: int


class Layout:
    def __init__(self, plan: Plan):
        self.plan = plan
        t = plan.training
        self.micro_batch = t.micro_batch
        self.num_microbatches = t.global_batch // t.micro_batch  # global micro-batches
        self.plan_ranks = plan.used_ranks()
        self.world = {rank: i for i, rank in enumerate(self.plan_ranks)}
        self.chunks = get_schedule(t.schedule).chunks_per_rank(t.virtual_stages)
        check_runnable(plan, self.chunks)

    @property
    def world_size(self) -> int:
        return len(self.plan_ranks)

    # --- samples -> replicas ------------------------------------------------------------------

    def replicas(self, stage: int) -> tuple[Replica, ...]:
        return tuple(sorted(self.plan.stages[stage].replicas, key=lambda r: r.dp_rank))

    @cached_property
    def _runs(self) -> list[dict[int, range]]:
        """Per stage: dp_rank -> the global micro-batches that replica runs."""
        out = []
        for s in range(len(self.plan.stages)):
            first, runs = 0, {}
            for r in self.replicas(s):
                runs[r.dp_rank] = range(first, first + r.batch_share // self.micro_batch)
                first = runs[r.dp_rank].stop
            out.append(runs)
        return out

    @cached_property
    def _owners(self) -> list[list[Replica]]:
        return [[r for r in self.replicas(s) for _ in self._runs[s][r.dp_rank]] for s in range(len(self.plan.stages))]

    def microbatches(self, stage: int, replica: Replica) -> range:
        """The global micro-batches `replica` of `stage` runs."""
        return self._runs[stage][replica.dp_rank]

    def owner(self, stage: int, microbatch: int) -> Replica:
        """The replica of `stage` that runs global micro-batch `microbatch`."""
        return self._owners[stage][microbatch]

    # --- one rank -----------------------------------------------------------------------------

    def seats(self, world_rank: int) -> list[Seat]:
        """The stages world rank `world_rank` runs, in layer order (V of them when interleaved)."""
        rank = self.plan_ranks[world_rank]
        return [Seat(s, r, r.ranks.index(rank)) for s in self.plan.stages for r in s.replicas if rank in r.ranks]

    def order(self, world_rank: int) -> list[Op]:
        """The forward and backward passes the rank runs in one step, in order."""
        seats = self.seats(world_rank)
        t = self.plan.training
        prank = seats[0].stage.pipeline_rank
        mbs = self.microbatches(seats[0].stage.index, seats[0].replica)
        if self.chunks > 1:
            return [(op, seats[c].stage.index, mbs[j])
                    for op, c, j in interleaved_order(prank, self.plan.pp, self.chunks, len(mbs))]
        stage = seats[0].stage.index
        return [(op, stage, mbs[j]) for op, j in get_schedule(t.schedule).order(prank, self.plan.pp, len(mbs))]

    # --- peers of the point-to-point messages (world ranks) ---------------------------------------

    def forward_source(self, stage: int, microbatch: int, tp_rank: int) -> int:
        sender = self.owner(stage - 1, microbatch)
        return self.world[sender.ranks[tp_rank % len(sender.ranks)]]

    def forward_targets(self, stage: int, microbatch: int, tp_rank: int) -> list[int]:
        receiver = self.owner(stage + 1, microbatch)
        tp = len(self.owner(stage, microbatch).ranks)  # the sending replica's own degree (cp is 1)
        return [self.world[r] for i, r in enumerate(receiver.ranks) if i % tp == tp_rank]

    def backward_source(self, stage: int, microbatch: int, tp_rank: int) -> int:
        receiver = self.owner(stage + 1, microbatch)
        return self.world[receiver.ranks[tp_rank % len(receiver.ranks)]]

    def backward_targets(self, stage: int, microbatch: int, tp_rank: int) -> list[int]:
        sender = self.owner(stage - 1, microbatch)
        tp = len(self.owner(stage, microbatch).ranks)  # this stage's replica's own degree (cp is 1)
        return [self.world[r] for j, r in enumerate(sender.ranks) if j % tp == tp_rank]

    def tag(self, boundary: int, backward: bool, microbatch: int) -> int:
        """The message tag of micro-batch `microbatch` crossing from stage `boundary` to the next
        one (forward) or back (backward): unique within a step."""
        return (2 * boundary + int(backward)) * self.num_microbatches + microbatch

    # --- process groups (world ranks) ---------------------------------------------------------------

    def tp_group(self, seat: Seat) -> tuple[int, ...]:
        return tuple(self.world[r] for r in seat.replica.ranks)

    def dp_group(self, seat: Seat) -> tuple[int, ...]:
        """The ranks holding the same shard of the stage's parameters, in dp_rank order; under
        per-replica TP, whose shards do not line up, every rank of the stage (engine.MixedTPReduce)."""
        replicas = self.replicas(seat.stage.index)
        if seat.stage.mixed_tp:
            return tuple(self.world[rank] for r in replicas for rank in r.ranks)
        return tuple(self.world[r.ranks[seat.tp_rank]] for r in replicas)

    @cached_property
    def groups(self) -> list[tuple[int, ...]]:
        """Every group of two or more ranks any rank needs, sorted: each rank creates them all, in
        this order (torch.distributed.new_group is collective)."""
        found: set[tuple[int, ...]] = set()
        for world_rank in range(self.world_size):
            for seat in self.seats(world_rank):
                found.update(g for g in (self.tp_group(seat), self.dp_group(seat)) if len(g) > 1)
        return sorted(found)


def check_runnable(plan: Plan, chunks: int) -> None:
    """BadInput for what the runtime cannot run (a valid plan otherwise)."""
    config = plan.model.config
    if config is None:
        raise BadInput("the runtime needs the model's config (a layer profile has no weights to build); plan with "
                       "--model CONFIG and --profile GPU=FILE instead", "plan", "model.config")
    if config.model_type not in SUPPORTED_TYPES:
        raise BadInput(f"the runtime builds {', '.join(SUPPORTED_TYPES)} models, not {config.model_type!r}",
                       "plan", "model.config.model_type")
    if config.model_type != "gpt2" and config.head_dim % 2:
        # rotary embedding turns pairs of a head's dimensions (Su et al. 2021): an odd head_dim
        # has no layer shape to build
        field = "head_dim" if config.attention_head_dim else "hidden_size"  # given, or hidden / heads
        raise BadInput(f"rotary embedding needs an even head_dim, this model's is {config.head_dim}", "plan",
                       f"model.config.{field}")
    schedule = get_schedule(plan.training.schedule)
    if not schedule.runs_in_planner_run:
        # the reference runtime runs whole backwards in Megatron's orders; the zero-bubble and
        # breadth-first schedules run under torchtitan (planner export --to torchtitan)
        raise BadInput(f"planner run does not run the {schedule.name} schedule (1F1B, interleaved and GPipe only); "
                       "export it with --to torchtitan", "plan", "training.schedule")
    for s in plan.stages:
        if s.cp > 1:
            raise BadInput(f"the runtime has no context parallelism (stage {s.index} has cp={s.cp}); export the plan "
                           "--to megatron or --to torchtitan", "plan", f"stages[{s.index}].cp")
        if s.mixed_tp and s.zero:
            raise BadInput(f"the runtime shards the optimizer (ZeRO) only over replicas of one TP degree (stage "
                           f"{s.index}'s have tp {s.tp_label()})", "plan", f"stages[{s.index}].zero")
        for j, r in enumerate(s.replicas):
            tp = s.replica_tp(r)
            where = f"stages[{s.index}].replicas[{j}].tp" if r.tp else f"stages[{s.index}].tp"
            if not s.uneven_tp and (config.num_heads % tp or config.num_kv_heads % tp or config.ffn_hidden % tp):
                raise BadInput(f"tp={tp} does not split {config.num_heads} heads, {config.num_kv_heads} key/value "
                               f"heads and an FFN of {config.ffn_hidden} evenly", "plan", where)
    if chunks > 1:
        split = [r.batch_share for r in sorted(plan.stages[0].replicas, key=lambda r: r.dp_rank)]
        for s in plan.stages:
            other = [r.batch_share for r in sorted(s.replicas, key=lambda r: r.dp_rank)]
            if other != split:
                # Megatron's interleaved order, run over different runs of micro-batches per rank,
                # can deadlock (tests/test_runtime_layout.py simulates it); 1F1B cannot
                raise BadInput(f"the runtime interleaves only plans whose stages split the batch alike (stage 0: "
                               f"shares {split}, stage {s.index}: {other}); use 1f1b", "plan",
                               f"stages[{s.index}].replicas")
        pp, b = plan.pp, plan.training.micro_batch
        for r in plan.stages[0].replicas:
            # the order runs groups of microbatch_group(pp, M) micro-batches, M >= pp (megatron-core's rule)
            if r.batch_share // b < pp:
                raise BadInput(f"interleaving needs each replica to run at least pp={pp} micro-batches "
                               f"(Megatron-LM's rule), dp_rank {r.dp_rank} runs {r.batch_share // b}; use 1f1b",
                               "plan", f"stages[0].replicas[{plan.stages[0].replicas.index(r)}].batch_share")
        by_rank: dict[int, list[Stage]] = {}
        for s in plan.stages:
            by_rank.setdefault(s.pipeline_rank, []).append(s)
        for stages in by_rank.values():
            first = stages[0]
            for s in stages[1:]:
                if sorted(s.replicas, key=lambda r: r.dp_rank) != sorted(first.replicas, key=lambda r: r.dp_rank):
                    raise BadInput("the runtime interleaves only virtual stages with the same replicas (ranks and "
                                   f"batch shares) as stage {first.index}", "plan", f"stages[{s.index}].replicas")
