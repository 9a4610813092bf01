"""The MoE runs (profiles/reference/moe-runs.yaml) replay through the same path as the measured
runs: every row is priced or skipped with the planner's own reason (benchmarks/fidelity_moe.py)."""

from __future__ import annotations

import copy

import pytest

from .conftest import benchmark_module


@pytest.fixture(scope="module")
def moe():
    return benchmark_module("fidelity_moe")


@pytest.fixture(scope="module")
def qwen_h100(moe):
    """The Qwen3-30B-A3B row on 16 H100 at ep 16 (fp8), as published."""
    return next(r for r in moe.load_moe_runs() if r["id"].startswith("megatronbridge-moe-26.06-h100-qwen3"))


def test_every_moe_row_is_priced_or_skipped_with_a_reason(moe):
    runs = moe.load_moe_runs()
    cases = moe.moe_cases()
    assert [c.id for c in cases] == [r["id"] for r in runs]
    assert all((c.plan is None) == bool(c.skip) for c in cases)
    assert {c.source for c in cases} == {"megatron-bridge-moe"}


def test_a_priced_row_keeps_its_expert_parallelism_and_metric(moe, qwen_h100):
    c = moe.moe_case(qwen_h100)
    assert c.skip == "" and c.metric == "tokens_per_s_per_gpu" and c.runtime == "megatron"
    assert {s.ep for s in c.plan.stages} == {16}
    assert c.plan.training.dtype == "fp8" and c.plan.cluster.num_gpus == 16 and c.gpus == ("H100-SXM5-80GB",)


def _with(run: dict, **changes) -> dict:
    out = copy.deepcopy(run)
    for path, value in changes.items():
        *keys, last = path.split("__")
        where = out
        for k in keys:
            where = where[k]
        where[last] = value
    return out


def test_an_unknown_gpu_is_skipped_with_the_catalogs_message(moe, qwen_h100):
    row = _with(qwen_h100, hardware__gpus=[{"type": "X999", "count": 16}])
    assert moe.moe_case(row).skip == "unknown GPU 'X999'"


def test_an_unreadable_model_type_is_skipped_with_the_readers_message(moe, qwen_h100):
    row = _with(qwen_h100, model__hf_config={**qwen_h100["model"]["hf_config"], "model_type": "nope"})
    assert moe.moe_case(row).skip == "unsupported model_type 'nope'"


def test_a_precision_the_runtime_lacks_is_skipped_with_the_runtimes_message(moe, qwen_h100):
    skip = moe.moe_case(_with(qwen_h100, precision="INT3")).skip
    assert skip.startswith("the megatron runtime has no int3 training")


def test_a_layout_the_experts_cannot_take_is_skipped_with_the_plans_message(moe, qwen_h100):
    skip = moe.moe_case(_with(qwen_h100, parallel__ep=5)).skip
    assert skip == "ep=5 does not divide the 128 experts"


def test_a_row_without_model_dimensions_is_skipped(moe, qwen_h100):
    assert moe.moe_case(_with(qwen_h100, model__hf_config=None)).skip == "model dimensions not stated (no hf_config)"


def test_a_malformed_row_is_an_error_not_a_skip(moe, qwen_h100):
    row = copy.deepcopy(qwen_h100)
    del row["parallel"]
    with pytest.raises(KeyError):
        moe.moe_case(row)


def _row(moe, prefix: str) -> dict:
    return next(r for r in moe.load_moe_runs() if r["id"].startswith(prefix))


def test_a_row_the_table_footnotes_as_a_known_regression_is_skipped(moe):
    flagged = _row(moe, "megatronbridge-moe-26.06.01-gb200-gpt_oss")
    assert moe.moe_case(flagged).skip == moe.FLAGGED_REASON
    # the same row without the footnote is priced
    notes = [n for n in flagged["notes"] if "regression" not in n]
    assert moe.moe_case(_with(flagged, notes=notes)).skip == ""


def test_a_recipe_that_graphs_the_whole_step_and_overlaps_the_all_to_all_is_priced_with_both(moe):
    stated = dict(moe.run_settings(_row(moe, "megatronbridge-moe-26.06-gb200-qwen3")))
    assert stated["full_iteration_cuda_graph"] is True and stated["moe_a2a_overlap"] is True
    assert stated["moe_dispatcher"] == "flex"
    # a 26.08 row names only its v0.6.0 recipe, whose helper sets the same
    named = dict(moe.run_settings(_row(moe, "megatronbridge-moe-26.08-gb300-qwen3")))
    assert named["full_iteration_cuda_graph"] is True and named["moe_a2a_overlap"] is True
    assert named["moe_dispatcher"] == "flex"
    # a recipe with Transformer Engine's per-module graphs keeps the host time and the exposed all-to-all
    scoped = dict(moe.run_settings(_row(moe, "megatronbridge-moe-26.04-gb200-qwen3")))
    assert "full_iteration_cuda_graph" not in scoped and "moe_a2a_overlap" not in scoped


def test_super_rows_take_the_checked_catalog_config_its_mtp_depths_and_nvfp4_bf16_layers(moe):
    row = _row(moe, "megatronbridge-moe-26.08-gb200-nemotron_3_super-nvfp4")
    assert row["model"]["hf_config"] is None
    c = moe.moe_case(row)
    assert c.skip == "" and c.plan.model.config.mtp_layers == 2  # the recipes' two MTP depths
    decoders = [layer for layer in c.plan.model.layers if layer.kind == "decoder"]
    assert [i for i, layer in enumerate(decoders) if layer.config.high_precision] == [0] + list(range(74, 88))
    # the v0.6.0 recipe the notes missed: HybridEP flex dispatcher, expert TP 1 under TP 2
    assert dict(moe.run_settings(row))["moe_dispatcher"] == "flex"
    assert {(s.tp, s.dims.expert_tp, s.ep) for s in c.plan.stages} == {(2, 1, 64)}
    mxfp8 = moe.moe_case(_row(moe, "megatronbridge-moe-26.08-gb200-nemotron_3_super-mxfp8"))
    assert not any(layer.config.high_precision for layer in mxfp8.plan.model.layers if layer.kind == "decoder")
    # a row of a model the catalog lacks is still skipped
    assert moe.moe_case(_with(row, model__name="Nemotron_9_Giga")).skip == "model dimensions not stated (no hf_config)"
