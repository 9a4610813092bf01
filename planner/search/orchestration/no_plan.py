"""Why the search found no plan, in one line a user can act on: one layer too big for every GPU
(its activations at this length), a long sequence and the context parallelism or length that
would fit, GPU types that cannot hold a block, or the memory the closest configuration lacked."""

from __future__ import annotations

from ...core.errors import NoFeasiblePlan
from ...inputs.hardware import GIB
from ...plan import Training
from ..bounds.layer_floor import (LAYER_WORDS, LayerFloor, SequenceFloor, StatesFloor, sequence_floor,
                                  sequence_floor_text)
from ..pricing.stage_types import SearchContext


def long_sequence(context: SearchContext) -> SequenceFloor | None:
    """The sequence floor when it explains a failed search (SequenceFloor.explains), else None."""
    floor = sequence_floor(context)
    return floor if floor is not None and floor.explains(context.training, context.options) else None


def _floor_text(floor: LayerFloor, training: Training) -> str:
    """'the activations of one 1,048,576-token sample in the output head need 129.2 GiB on
    A100-SXM4-80GB even at tp 8 with sequence parallelism, more than the 77.8 GiB left there'."""
    sample = (f"one {training.seq_len:,}-token sample" if floor.micro_batch == 1
              else f"one micro-batch ({floor.micro_batch} samples of {training.seq_len:,} tokens)")
    sharding = f"tp {floor.tp}" + (" with sequence parallelism" if floor.tp > 1 else "")
    if floor.cp > 1:
        sharding += f", cp {floor.cp}"
    if floor.layer == "decoder":
        sharding += f", recompute {floor.recompute}"
    return (f"the activations of {sample} in {LAYER_WORDS[floor.layer]} need {floor.activation_bytes / GIB:.1f} GiB "
            f"on {floor.gpu} even at {sharding}, more than the {max(0.0, floor.free_bytes) / GIB:.1f} GiB left there")


def states_too_big(floor: StatesFloor, num_gpus: int) -> NoFeasiblePlan:
    """The cause when the model's states alone exceed the memory of every GPU together."""
    what = "parameters and gradients (ZeRO-Offload keeps the optimizer states on the host)" if floor.offload \
        else "parameters, gradients and optimizer states"
    return NoFeasiblePlan(f"no configuration fits: the model's {what} need {floor.need_bytes / GIB:,.1f} GiB of GPU "
                          f"memory however they are sharded, and the {num_gpus} GPUs hold "
                          f"{floor.hold_bytes / GIB:,.1f} GiB past their reserved memory; add GPUs or use larger ones",
                          shortfall_bytes=floor.over_bytes)


def layer_too_big(floor: LayerFloor, training: Training, sequence: SequenceFloor | None = None) -> NoFeasiblePlan:
    """The real cause when one layer alone fits no GPU: one sample's activations at this length
    (and what would fit: a cp degree or a length, sequence_floor_text)."""
    smaller = " or allow --micro-batch 1" if floor.micro_batch > 1 else ""
    advice = f"shorten --seq-len{smaller}"
    if sequence is not None:
        advice += f"; {sequence_floor_text(sequence, training)}"
    return NoFeasiblePlan(
        f"no configuration fits: {_floor_text(floor, training)} (the GPU type that comes closest); {advice}",
        shortfall_bytes=floor.over_bytes, device=floor.gpu)


def no_plan(shortfall: tuple[float, str] | None, floors: dict[str, list[LayerFloor]],
             training: Training, sequence: SequenceFloor | None = None) -> NoFeasiblePlan:
    """Why the search found nothing; a long sequence whose activations overflow (`sequence`)
    adds them and the cp degree or length that would fit, or is the reason when nothing finer is known."""
    found = _no_plan_reason(shortfall, floors, training)
    if sequence is None:
        return found
    text = sequence_floor_text(sequence, training)
    if found.shortfall_bytes is None:
        return NoFeasiblePlan(f"no configuration fits: {text}", shortfall_bytes=sequence.over_bytes,
                              device=sequence.gpu)
    return NoFeasiblePlan(f"{found.message}; {text}", shortfall_bytes=found.shortfall_bytes, device=found.device)


def _no_plan_reason(shortfall: tuple[float, str] | None, floors: dict[str, list[LayerFloor]],
                    training: Training) -> NoFeasiblePlan:
    if shortfall is None or shortfall[0] <= 0:
        blocks = floors.get("decoder", [])
        left_out = sorted((f for f in blocks if f.over_bytes > 0), key=lambda f: f.gpu)
        if left_out and len(left_out) < len(blocks):
            able = ", ".join(sorted(f.gpu for f in blocks if f.over_bytes <= 0))
            worst = min(left_out, key=lambda f: f.over_bytes)
            others = [f.gpu for f in left_out if f is not worst]
            return NoFeasiblePlan(
                f"no configuration in the search space fits: {_floor_text(worst, training)}"
                + (f" ({', '.join(others)} cannot hold one either)" if others else "")
                + f", and the {able} GPUs are too few for the model's layers with their micro-batches in "
                "flight; shorten --seq-len or add GPUs with more memory",
                shortfall_bytes=worst.over_bytes, device=worst.gpu)
        return NoFeasiblePlan("no configuration in the search space fits (the global batch may be "
                              "smaller than the replicas need, or the layers too few for the stages)")
    over, gpu = shortfall
    return NoFeasiblePlan(
        f"nothing fits: the smallest memory shortfall found is {over / GIB:.1f} GiB on {gpu}; "
        "add GPUs or use larger ones, or shorten --seq-len (the search already tried full recomputation, "
        "ZeRO-1 and the smallest micro-batch)",
        shortfall_bytes=over, device=gpu)
