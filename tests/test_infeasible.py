"""Why no plan fits at long sequences: the message names one sample's activations, from the cost model.
Without context parallelism (`--cp 1`, cp_degrees=(1,)); with it: tests/test_context_parallel.py."""

from __future__ import annotations

import pytest

from planner.cli import main
from planner.core.errors import NoFeasiblePlan
from planner.inputs.hardware import GIB, load_cluster
from planner.search.bounds.layer_floor import unplaceable_layer
from planner.inputs.model import load_model
from planner.plan import Training
from planner.search.pricing.stage_types import SolverOptions
from planner.search.pricing.stage_types import SearchContext

from .conftest import runner

LLAMA_1M = ["plan", "--cp", "1", "--model", "llama-3-8b", "--cluster", "a100-v100-mix", "--seq-len", "1048576"]


def plan(*args: str):
    result = runner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.stderr and result.stdout == ""
    return result


def head_activation_gib(seq_len: int, micro_batch: int, tp: int, dtype_bytes: int = 2) -> str:
    """The output head's saved activations per TP rank, from the model (not a constant)."""
    head = load_model("llama-3-8b").layers[-1]
    return f"{head.act_bytes_per_sample(seq_len, 'none', tp, tp > 1, 'flash', dtype_bytes) * micro_batch / GIB:.1f}"


def test_one_micro_batch_too_long_for_any_gpu_names_its_activations():
    result = plan(*LLAMA_1M, "--micro-batch", "2")
    assert result.exit_code == 1
    message = result.stderr
    assert (f"no configuration fits: the activations of one micro-batch (2 samples of 1,048,576 tokens) in the "
            f"output head need {head_activation_gib(1048576, 2, 8)} GiB on A100-SXM4-80GB even at tp 8") in message
    assert "allow --micro-batch 1" in message and "shorten --seq-len" in message
    assert "global batch" not in message


def test_one_sample_too_long_for_any_gpu_names_its_activations():
    result = plan(*LLAMA_1M[:-1], "4194304")
    assert result.exit_code == 1
    assert (f"the activations of one 4,194,304-token sample in the output head need "
            f"{head_activation_gib(4194304, 1, 8)} GiB") in result.stderr
    assert "global batch" not in result.stderr


def test_small_gpus_name_the_head_instead_of_the_global_batch():
    """Blocks fit on 24 GB cards at 256k tokens, the head's fp32 logits do not (tp is at most 4 there)."""
    result = plan("plan", "--cp", "1", "--model", "llama-3-8b", "--cluster", "consumer-3090-4090", "--seq-len", "262144")
    assert result.exit_code == 1
    assert (f"one 262,144-token sample in the output head need {head_activation_gib(262144, 1, 4)} GiB"
            in result.stderr)
    assert "even at tp 4" in result.stderr and "global batch" not in result.stderr


@pytest.mark.slow
def test_gpus_too_small_for_a_block_are_named_when_the_rest_are_too_few():
    result = plan(*LLAMA_1M, "--dtype", "fp32", "--micro-batch", "1", "--virtual-stages", "1")
    assert result.exit_code == 1
    assert ("the activations of one 1,048,576-token sample in a decoder block need" in result.stderr
            and "on V100-SXM2-32GB even at tp 8" in result.stderr)
    assert "A100-SXM4-80GB GPUs are too few" in result.stderr and "global batch" not in result.stderr


def test_no_layer_is_unplaceable_when_one_sample_fits():
    model, cluster = load_model("llama-3-8b"), load_cluster("a100-v100-mix")
    for seq_len in (4096, 1048576):  # 1M tokens fit with tp 8 on the A100s (the head: 66 of 78 GiB)
        assert unplaceable_layer(SearchContext(model, cluster, Training(512, seq_len, "fp16", 1), SolverOptions())) is None
    floor = unplaceable_layer(SearchContext(model, cluster, Training(512, 1048576, "fp16", 1),
                              SolverOptions(micro_batches=(2,), cp_degrees=(1,))))
    assert floor is not None and floor.layer == "head" and floor.gpu == "A100-SXM4-80GB" and floor.tp == 8
    assert floor.over_bytes > 0


def test_a_model_whose_states_exceed_every_gpu_together_fails_at_once_naming_both_sizes():
    result = plan("plan", "--model", "llama-3.1-405b", "--cluster", "consumer-3090-4090", "--global-batch", "64",
                  "--seq-len", "2048")
    assert result.exit_code == 1, result.stderr
    model, cluster = load_model("llama-3.1-405b"), load_cluster("consumer-3090-4090")
    # ZeRO-Offload (the default runtime's) leaves the bf16 parameters and gradients: 4 bytes each
    need = 4 * sum(layer.params for layer in model.layers) / GIB
    hold = sum(g.num_gpus * (g.gpu.memory_bytes / GIB - 2.0) for g in cluster.groups)  # less 2 GiB reserved
    assert f"need {need:,.1f} GiB of GPU memory however they are sharded, and the 16 GPUs hold {hold:,.1f} GiB" \
        in result.stderr


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_the_states_floor_is_below_what_every_plan_that_fits_holds(seed):
    """states_floor is a bound: a fitting plan's ranks hold at least its figure past their reserve."""
    from planner.cost.evaluate import evaluate
    from planner.search.bounds.layer_floor import states_floor
    from planner.search.orchestration.driver import solve
    from planner.verify.instances import TINY_OPTIONS, tiny_instance
    model, cluster, base = tiny_instance(seed)
    options = SolverOptions(**TINY_OPTIONS)
    floor = states_floor(SearchContext(model, cluster, base, options))
    try:
        plan = solve(model, cluster, base, options).plan
    except NoFeasiblePlan:
        return
    held = sum(mem.total_bytes - 2.0 * GIB for mem in evaluate(plan).memory_by_rank.values())
    assert 0 < floor.need_bytes <= held
