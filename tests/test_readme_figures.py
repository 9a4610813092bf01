"""The README-figure checker's table stays tied to README.md (benchmarks/readme_figures.py runs the
commands; this only checks the table, in well under a second)."""

from __future__ import annotations

import benchmarks.readme_figures as figures


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def test_every_claim_anchor_occurs_in_the_readme():
    readme = figures.collapse(figures.README.read_text())
    orphans = [c.what for c in figures.CLAIMS if figures.collapse(c.anchor) not in readme]
    assert orphans == []


def test_every_numeric_claim_quotes_the_figure_its_anchor_shows():
    """Editing a README figure without updating the table (or the reverse) fails here."""
    mismatched = [c.what for c in figures.CLAIMS if _is_number(c.quoted) and c.quoted not in c.anchor]
    assert mismatched == []


def test_every_claim_names_known_commands_and_every_command_is_claimed():
    used = {name for c in figures.CLAIMS for name in c.commands}
    assert used <= set(figures.COMMANDS)
    assert set(figures.COMMANDS) <= used


def test_measured_values_are_written_at_the_readme_precision():
    assert figures.as_quoted(19.5434, "19.352") == "19.543"
    assert figures.as_quoted(107307.17, "108,367") == "107,307"
    assert figures.as_quoted(0.0048, "0.005") == "0.005"
    assert figures.as_quoted(3318, "3318") == "3318"
    assert figures.as_quoted("zb-h1", "zb-h1") == "zb-h1"
    assert figures.relative("19.543", "19.352") == "+0.99%"
