"""Why no plan fits at long sequences: the message names one sample's activations, from the cost model.
Without context parallelism (`--cp 1`, cp_degrees=(1,)); with it: tests/test_context_parallel.py."""

from __future__ import annotations

import pytest

from planner.cli import main
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
