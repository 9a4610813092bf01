"""fidelity.py's tables: per GPU architecture through the planner's catalog, the issue's targets
with their status, the Markdown page, and leave-one-source-out over every public source
(benchmarks/fidelity_tables.py, benchmarks/fidelity.py)."""

from __future__ import annotations

import pytest

from .conftest import benchmark_module


@pytest.fixture(scope="module")
def tables():
    return benchmark_module("fidelity_tables")


def _row(source: str, error: float, architecture: str = "hopper", fits: bool = True) -> dict:
    return {"source": source, "architecture": architecture, "error": error, "too_fast": error > 0, "fits": fits}


def test_a_runs_architecture_is_the_catalogs(tables):
    assert tables.architecture_of(["T4"]) == "turing"
    assert tables.architecture_of(["H100-SXM5-80GB", "GH200-96GB"]) == "hopper"
    assert tables.architecture_of(["B200"]) == "blackwell"
    assert tables.architecture_of(["TITAN-RTX", "A100-SXM4-80GB"]) == tables.MIXED
    assert tables.architecture_of(["H100-SXM5-80GB", "X999"]) == tables.NOT_IN_CATALOG


def test_the_architecture_table_lists_every_catalog_architecture_and_unknown_gpus(tables):
    rows = [_row("a", 0.1, "turing"), _row("a", -0.3, "turing")]
    skipped = [{"source": "b", "architecture": tables.NOT_IN_CATALOG, "run": "r", "reason": "unknown GPU 'X999'"}]
    table = {e["architecture"]: e for e in tables.architecture_table(rows, skipped)}
    assert list(table)[:6] == ["volta", "turing", "ampere", "ada", "hopper", "blackwell"]
    assert table["turing"]["evaluated"] == 2 and table["turing"]["median_abs_error"] == pytest.approx(0.2)
    assert table["volta"]["runs"] == 0 and "median_abs_error" not in table["volta"]
    assert table[tables.NOT_IN_CATALOG]["skipped"] == {"unknown GPU 'X999'": 1}
    assert table["all"]["runs"] == 3


def _targets(tables, rows, loso=None) -> dict:
    return {t["target"]: t for t in tables.targets(rows, {r["source"] for r in rows}, loso)}


def test_targets_hold_on_a_set_inside_every_limit(tables):
    rows = [_row("a", e) for e in (0.05, -0.04, 0.06, -0.02)] + [_row("b", e) for e in (0.03, -0.07)]
    t = _targets(tables, rows, {"median_abs_error": 0.1})
    assert all(t[k]["met"] for k in t), t


def test_each_target_reports_its_miss(tables):
    rows = [_row("a", e) for e in (0.05, 0.04, 0.06)] + [_row("b", 0.5, fits=False), _row("b", 0.2)]
    t = _targets(tables, rows, {"median_abs_error": 0.13})
    assert not t["max_abs_error"]["met"] and t["max_abs_error"]["value"] == pytest.approx(0.5)
    assert not t["source_median"]["met"] and t["source_median"]["shown"] == "b 35.0%"
    assert not t["too_fast_share"]["met"]  # every run too fast
    assert not t["loso_median"]["met"]
    assert not t["predicted_not_to_fit"]["met"] and t["predicted_not_to_fit"]["shown"] == "1 of 5"
    assert t["median_abs_error"]["met"]  # 6 %


def test_targets_count_only_the_public_sources(tables):
    rows = [_row("public", 0.05), _row("calibration", 0.9, fits=False)]
    t = {x["target"]: x for x in tables.targets(rows, {"public"})}
    assert t["max_abs_error"]["value"] == pytest.approx(0.05) and t["predicted_not_to_fit"]["value"] == 0


def test_leave_one_source_out_is_not_run_without_loso(tables):
    t = _targets(tables, [_row("a", 0.05)])
    assert t["loso_median"]["met"] is None and "--loso" in t["loso_median"]["shown"]


def test_the_markdown_page_names_its_command_and_every_table(tables):
    rows = [_row("a", 0.05, "ampere")]
    page = tables.markdown(tables.source_table(rows, []), tables.architecture_table(rows, []),
                           tables.targets(rows, {"a"}), None, "python benchmarks/fidelity.py --markdown x.md")
    assert "`python benchmarks/fidelity.py --markdown x.md`" in page
    assert "| ampere | 1 | 1 | 5.0% | 5.0% | 100% | 0 |  |" in page
    assert "| median \\|error\\| | <= 8 % | 5.0% | met |" in page
    assert "Leave-one-source-out" not in page


def test_leave_one_source_out_predicts_a_source_without_fitted_parameters_with_the_full_fit(monkeypatch):
    fidelity = benchmark_module("fidelity")
    fit_cost_params = benchmark_module("fit_cost_params")
    fits = []
    monkeypatch.setattr(fit_cost_params, "leave_one_source_out",
                        lambda: {"sources": {"sailor-mit": {"fitted": {"turing.gemm_efficiency": 0.7}}}})
    monkeypatch.setattr(fit_cost_params, "fit", lambda: fits.append(1) or {"hopper.fp8_gemm_efficiency": 0.6})
    result = fidelity.leave_one_source_out({"sailor-mit", "megatron-bridge-moe", "opt"})
    assert fits == [1]  # one fit on every source, for the MoE runs; opt prices no run
    assert sorted(result["sources"]) == ["megatron-bridge-moe", "sailor-mit"]
    assert result["sources"]["megatron-bridge-moe"]["fitted"] == {"hopper.fp8_gemm_efficiency": 0.6}


def test_the_source_tables_public_set_row_has_the_targets_figures_and_all_adds_the_calibration_runs(tables):
    rows = [_row("public", 0.05), _row("public", -0.07), _row("calibration", 0.01)]
    table = {e["source"]: e for e in tables.source_table(rows, [], {"public"})}
    t = {x["target"]: x for x in tables.targets(rows, {"public"})}
    assert list(table)[-2:] == [tables.PUBLIC, "all"]
    assert table[tables.PUBLIC]["median_abs_error"] == t["median_abs_error"]["value"] == pytest.approx(0.06)
    assert table[tables.PUBLIC]["evaluated"] == 2 and table["all"]["evaluated"] == 3
    assert table["all"]["median_abs_error"] == pytest.approx(0.05)
    assert tables.PUBLIC in tables.TARGETS_TITLE
