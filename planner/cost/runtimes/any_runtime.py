"""`--runtime any`: the planner's whole search space, priced with Megatron-LM's physics.

Per-stage TP, DP, ZeRO, recomputation (with "block": per-stage counts of recomputed blocks)
and ZeRO-Offload, uneven batch shares, any contiguous layer ranges, every schedule of
planner.schedules. No runtime runs all of its plans: `planner export --to rankmap` (the
reference runtime, planner.runner) does.
"""

from dataclasses import replace

from . import megatron
from .spec import ANY, WITH_BLOCK, Capability, RuntimeSpec

SPEC = RuntimeSpec(
    # pipeline sends as Megatron-LM's where it runs the schedule, else as the runtime that does:
    # planner.runner (`export --to rankmap`) blocks on each receive for GPipe (engine.py dist.recv),
    # ZB-H1 as the authors' Megatron-LM fork (its p2p_communication); ZB-V, looped BFS and DualPipeV as torchtitan's
    pricing=replace(megatron.SPEC.pricing, name=ANY, title="any runtime (priced as Megatron-LM)",
                    pipeline_p2p=megatron.SPEC.pricing.pipeline_p2p + (
                        ("gpipe", "exchange"), ("zb-h1", "exchange"), ("zbv", "overlapped"),
                        ("looped-bfs", "overlapped"), ("dualpipev", "overlapped")),
                    # `flash` as the architecture runs it at best (PyTorch SDPA's kernel before sm80), not
                    # Megatron's unfused fallback: the whole space prices no plan slower than a runtime does
                    flash_attention=()),
    capability=Capability(
        runtime=ANY, title="any runtime", version="the planner's search space", pipeline=True, bf16_layers=True,
        tensor_parallel=True, per_stage_tp=True, per_stage_dp=True, uneven_shares=True, layer_split="any",
        schedules=("1f1b", "interleaved", "gpipe", "zb-h1", "zbv", "looped-bfs", "dualpipev", "combined-1f1b"),
        interleaved_microbatch_multiple=False,
        zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1, 2, 3),
        per_stage_zero=True, recompute_modes=WITH_BLOCK, per_stage_recompute=True,
        sequence_parallel=True, stage_placement=True, recompute_layers="per-stage",
        offload=True, per_stage_offload=True, activation_offload=True, expert_parallel_with_cp=True,
        compile=True, moe_dispatchers=("alltoall", "flex"), per_replica_tp=True, uneven_tp_shares=True, mtp_layers=True,
        dtypes=("fp32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4")))
