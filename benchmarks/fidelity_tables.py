"""The tables fidelity.py prints from its replayed rows: per source, per GPU architecture, the
issue's targets on the public set, and the same as Markdown (docs/fidelity-table.md).

A row is {"source", "architecture", "error", "too_fast", "fits", ...} (fidelity.replay); a
skipped one {"source", "architecture", "run", "reason"}.
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Iterable

from planner.inputs.devices import GpuSpec
from planner.inputs.hardware import ARCHITECTURES, load_catalog

NOT_IN_CATALOG = "not in catalog"  # a run on a GPU the planner's catalog does not know
MIXED = "mixed"  # a run whose GPUs are of more than one architecture
# the source table's row of the public set the targets are measured on (its sources only); its
# `all` row adds the calibration runs of published-runs.yaml (megatron-sc21, korthikanti-22)
PUBLIC = "public set"

# The targets of the public set (docs/fidelity.md): (key, what, limit); "source_median" holds for every
# source, "loso_median" needs --loso
TARGETS = (("median_abs_error", "median |error|", "<= 8 %"),
           ("max_abs_error", "max |error|", "<= 35 %"),
           ("source_median", "every source's median |error|", "<= 15 %"),
           ("too_fast_share", "share predicted too fast", "35-65 %"),
           ("loso_median", "leave-one-source-out median", "<= 12 %"),
           ("predicted_not_to_fit", "runs that ran predicted not to fit", "0"))


@lru_cache(maxsize=None)
def _catalog() -> dict[str, GpuSpec]:
    return load_catalog()


def architecture_of(gpus: Iterable[GpuSpec | str]) -> str:
    """The architecture of a run's GPUs (GpuSpec or catalog names) as the planner's catalog
    records it: MIXED for more than one, NOT_IN_CATALOG where a GPU is unknown or has none."""
    words = set()
    for gpu in gpus:
        spec = _catalog().get(gpu) if isinstance(gpu, str) else gpu
        words.add(spec.architecture if spec is not None and spec.architecture else NOT_IN_CATALOG)
    if NOT_IN_CATALOG in words:
        return NOT_IN_CATALOG
    return words.pop() if len(words) == 1 else MIXED


def summary(rows: list[dict]) -> tuple[float, float]:
    errors = [abs(r["error"]) for r in rows]
    return statistics.median(errors), max(errors)


def _entry(key: str, name: str, mine: list[dict], skips: list[dict]) -> dict:
    """One table row: runs, evaluated, skipped by reason, median/max |error|, share too fast, runs
    predicted not to fit, of the priced rows `mine` and the skipped `skips`."""
    reasons: dict[str, int] = {}
    for s in skips:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    entry = {key: name, "runs": len(mine) + len(skips), "evaluated": len(mine),
             "skipped": dict(sorted(reasons.items())), "predicted_not_to_fit": sum(not r["fits"] for r in mine)}
    if mine:
        med, worst = summary(mine)
        entry.update(median_abs_error=med, max_abs_error=worst,
                     too_fast_share=sum(r["too_fast"] for r in mine) / len(mine))
    return entry


def group_table(rows: list[dict], skipped: list[dict], key: str, names: list[str]) -> list[dict]:
    """Per value of `key` (in the order of `names`) and in all: runs, evaluated, skipped by reason,
    median/max |error|, share too fast, runs predicted not to fit."""
    return [_entry(key, name, [r for r in rows if name in ("all", r[key])],
                   [s for s in skipped if name in ("all", s[key])]) for name in names + ["all"]]


def source_table(rows: list[dict], skipped: list[dict], public: set[str] | None = None) -> list[dict]:
    """Per source, alphabetically, then the sources of `public` together (PUBLIC: the set the
    targets are measured on, the same figures), and in all."""
    table = group_table(rows, skipped, "source", sorted({r["source"] for r in rows} | {s["source"] for s in skipped}))
    if public is not None:
        table.insert(-1, _entry("source", PUBLIC, [r for r in rows if r["source"] in public],
                                [s for s in skipped if s["source"] in public]))
    return table


def architecture_table(rows: list[dict], skipped: list[dict]) -> list[dict]:
    """Per GPU architecture, every one the catalog names in its order (planner.inputs.hardware
    .ARCHITECTURES), then runs on GPUs the catalog lacks and runs mixing architectures, and in all."""
    seen = {r["architecture"] for r in rows} | {s["architecture"] for s in skipped}
    return group_table(rows, skipped, "architecture",
                       list(ARCHITECTURES) + [name for name in (NOT_IN_CATALOG, MIXED) if name in seen])


def targets(rows: list[dict], sources: set[str], loso: dict | None = None) -> list[dict]:
    """Each target on the rows of `sources` together (the public set: measured and MoE runs):
    its figure, the limit and whether it holds (None: not computed); the leave-one-source-out
    one needs `loso` (fidelity.leave_one_source_out over the same sources)."""
    mine = [r for r in rows if r["source"] in sources]
    med, worst = summary(mine)
    medians = {s: summary(per)[0] for s in sorted(sources) if (per := [r for r in mine if r["source"] == s])}
    above = {s: m for s, m in medians.items() if m > 0.15}
    fast = sum(r["too_fast"] for r in mine) / len(mine)
    nofit = sum(not r["fits"] for r in mine)
    figures = {"median_abs_error": (med, med <= 0.08, f"{med:.1%}"),
               "max_abs_error": (worst, worst <= 0.35, f"{worst:.1%}"),
               "source_median": (max(medians.values()), not above,
                                 ", ".join(f"{s} {m:.1%}" for s, m in above.items()) or
                                 "highest {} {:.1%}".format(*max(medians.items(), key=lambda item: item[1]))),
               "too_fast_share": (fast, 0.35 <= fast <= 0.65, f"{fast:.0%}"),
               "predicted_not_to_fit": (nofit, nofit == 0, f"{nofit} of {len(mine)}")}
    if loso is not None:
        m = loso["median_abs_error"]
        figures["loso_median"] = (m, m <= 0.12, f"{m:.1%}")
    else:
        figures["loso_median"] = (None, None, "not run (--loso)")
    return [{"target": key, "what": what, "limit": limit, "value": figures[key][0], "met": figures[key][1],
             "shown": figures[key][2]} for key, what, limit in TARGETS]


def _status(met: bool | None) -> str:
    return "-" if met is None else "met" if met else "MISSED"


def _figures(e: dict) -> list[str]:
    if "median_abs_error" not in e:
        return ["-", "-", "-"]
    return [f"{e['median_abs_error']:.1%}", f"{e['max_abs_error']:.1%}", f"{e['too_fast_share']:.0%}"]


def print_table(table: list[dict], key: str = "source") -> None:
    print(f"{key:19} {'runs':>4} {'eval':>4} {'median':>7} {'max':>7} {'fast':>5} {'nofit':>5}  skipped")
    for e in table:
        med, worst, fast = _figures(e)
        skipped = ", ".join(f"{n} {r}" for r, n in e["skipped"].items())
        print(f"{e[key]:19} {e['runs']:4} {e['evaluated']:4} {med:>7} {worst:>7} {fast:>5} "
              f"{e['predicted_not_to_fit']:5}  {skipped}")


TARGETS_TITLE = ("targets on the public set (measured-runs.yaml + moe-runs.yaml: the source table's "
                 f"'{PUBLIC}' row; its 'all' row adds published-runs.yaml's calibration runs)")


def print_targets(table: list[dict]) -> None:
    print(TARGETS_TITLE + ":")
    for t in table:
        print(f"  {t['what']:36} {t['limit']:>8}  {t['shown']:40} {_status(t['met'])}")


def print_loso(loso: dict) -> None:
    print("leave-one-source-out (fit without the source, predict it):")
    for name, e in loso["sources"].items():
        print(f"  {name:19} median {e['median_abs_error']:6.1%}  max {e['max_abs_error']:6.1%}")
    print(f"  {'all':19} median {loso['median_abs_error']:6.1%}  max {loso['max_abs_error']:6.1%}")


def _cell(text: str) -> str:
    """`text` in a Markdown table cell (its pipes escaped)."""
    return text.replace("|", "\\|")


def _md_table(table: list[dict], key: str) -> list[str]:
    lines = [f"| {key} | runs | evaluated | median | max | too fast | not fitting | skipped |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for e in table:
        skipped = _cell("; ".join(f"{n} {r}" for r, n in e["skipped"].items()))
        lines.append(f"| {e[key]} | {e['runs']} | {e['evaluated']} | {' | '.join(_figures(e))} | "
                     f"{e['predicted_not_to_fit']} | {skipped} |")
    return lines


def markdown(sources: list[dict], architectures: list[dict], target_rows: list[dict], loso: dict | None,
             command: str) -> str:
    """The tables as a Markdown page, headed by the command that writes it."""
    lines = ["# Fidelity tables", "", f"Written by `{command}`; do not edit by hand.", "",
             "## Per source", ""] + _md_table(sources, "source")
    lines += ["", "## Per GPU architecture", ""] + _md_table(architectures, "architecture")
    lines += ["", "## Targets", "", TARGETS_TITLE[0].upper() + TARGETS_TITLE[1:] + ".", "",
              "| target | limit | figure | status |",
              "|---|---|---|---|"]
    lines += [f"| {_cell(t['what'])} | {t['limit']} | {t['shown']} | {_status(t['met'])} |"
              for t in target_rows]
    if loso is not None:
        lines += ["", "## Leave-one-source-out", "", "| source | median | max |", "|---|---:|---:|"]
        lines += [f"| {n} | {e['median_abs_error']:.1%} | {e['max_abs_error']:.1%} |"
                  for n, e in loso["sources"].items()]
        lines.append(f"| all | {loso['median_abs_error']:.1%} | {loso['max_abs_error']:.1%} |")
    return "\n".join(lines) + "\n"
