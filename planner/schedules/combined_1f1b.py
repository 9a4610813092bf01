"""Megatron-core's combined 1F1B, the schedule of `--overlap-moe-expert-parallel-comm` (megatron-core
0.16.1 pipeline_parallel/combined_1f1b.py, combined_1f1b_schedule_for_interleaved_pipelining):
interleaved 1F1B whose steady state runs one micro-batch's forward chunk and another's backward chunk
as one step, layer by layer, so that each one's expert-parallel dispatch and combine all-to-all run
under the other's compute (DeepSeek-V3's computation-communication overlap, DeepSeek-AI 2024, sec
3.2.1): its plans are priced with CostParams.moe_a2a_overlap (Schedule.overlaps_ep_comm). To keep
the paired forward and backward independent it runs one more forward in the warm-up
(pipeline_parallel/schedules.py get_pp_rank_microbatches: "we schedule one extra micro-batch forward
step before the 1f1b stages"), which every rank holds at its peak.

What megatron-core runs it with (transformer/transformer_config.py __post_init__, asserted there):
virtual pipeline stages where pp > 1, expert parallelism, the alltoall or flex token dispatcher, no
full recomputation nor a recompute method (selective modules are allowed), a bf16 or fp16 model (fp8,
MXFP8 and NVFP4 train with bf16 parameters), and at most one MTP layer (Schedule.needs_ep,
refused_recompute, refused_dtypes, max_mtp_layers: planner.plan.structure checks them). Its
pp = 1 form (combined_1f1b_schedule_for_no_pipelining) is not priced: a plan without pipelining
runs 1F1B here.

Its overlap runs the all-to-all on a stream of its own, which needs several CUDA connections, while
Megatron-core's TP all-reduce under the weight-gradient GEMM is ordered by CUDA_DEVICE_MAX_CONNECTIONS=1
before Blackwell (Megatron-LM arguments.py warns against TP or CP beside it there): below Blackwell its
plans are priced without the TP overlap (Schedule.connections_over_tp_overlap) and the Megatron export
launches them with 32 connections."""

from __future__ import annotations

from dataclasses import dataclass

from .interleaved import Interleaved, interleaved_warmup


@dataclass(frozen=True)
class Combined1F1B(Interleaved):
    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """Interleaved 1F1B's warm-up and one more chunk forward (module docstring), each chunk 1/v of
        the rank's layers."""
        v, m = virtual_stages, num_microbatches
        return min(m * v, interleaved_warmup(pipeline_rank, pp, v, m) + 2) / v

    def title(self, virtual_stages: int) -> str:
        return f"combined 1F1B (V={virtual_stages})"


SCHEDULE = Combined1F1B(
    "combined-1f1b", searched=False, uniform_candidate=True, min_virtual_stages=2, max_virtual_stages=None,
    min_pp=2, runs_in_planner_run=False, overlaps_ep_comm=True, needs_ep=True, refused_recompute=("full", "block"),
    refused_dtypes=("fp32",), max_mtp_layers=1, connections_over_tp_overlap=True,
    # without EP: interleaved 1F1B's plan, one warm-up forward less held
    without_ep_as="interleaved",
    drawn_as="1F1B over each rank's chunks together")
