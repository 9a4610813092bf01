"""One row of `planner sweep`: the combinations (model, cluster, global batch, sequence
length, in a fixed order), their plan file names, and plan_combination, which plans one of
them (planner.api.plan) and never raises. Both planner.sweep.run and planner.sweep.executors use these;
this module imports neither.

Combination index: the cartesian product of the options, models outermost, then clusters,
global batches and sequence lengths, each in the order given (repeated values are dropped).
Model and cluster names travel to local worker processes as strings, not objects, and every
worker loads them itself (cached per process).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from ..api import PlanRequest
from ..core.errors import BadInput, NoFeasiblePlan
from ..core.io import json_text
from ..core.outfile import write_output
from .output import COLUMNS

EXECUTORS = ("local", "ray")  # planner.sweep.executors


@dataclass(frozen=True)
class Combination:
    index: int
    model: str
    cluster: str
    global_batch: int
    seq_len: int
    plan_name: str = ""  # its --plans-dir file name, when plan_file_names set it

    @property
    def key(self) -> tuple[str, str, str, str]:
        return row_key({"model": self.model, "cluster": self.cluster, "global_batch": self.global_batch,
                        "seq_len": self.seq_len})


def row_key(row: dict) -> tuple[str, str, str, str]:
    """What matches a row to a combination; numbers as text, so CSV and JSONL rows agree."""
    def text(value: Any) -> str:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value).strip()

    return tuple(text(row.get(c)) for c in ("model", "cluster", "global_batch", "seq_len"))  # type: ignore[return-value]


def combinations(models: Iterable[str], clusters: Iterable[str], batches: Iterable[int],
                 seq_lens: Iterable[int]) -> list[Combination]:
    """The cartesian product in a fixed order (models outermost), duplicates dropped."""
    def unique(values: Iterable) -> list:
        return list(dict.fromkeys(values))

    product = itertools.product(unique(models), unique(clusters), unique(batches), unique(seq_lens))
    return [Combination(i, *values) for i, values in enumerate(product)]


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise BadInput(f"expected i/n (e.g. 0/4), got {text!r}", "--shard")
    i, n = int(match.group(1)), int(match.group(2))
    if n < 1 or not 0 <= i < n:
        raise BadInput(f"expected 0 <= i < n, got {i}/{n}", "--shard")
    return i, n


def plan_file_name(combo: Combination) -> str:
    """The name plan_file_names gave the combination, else the plain one:
    <model>__<cluster>__<global_batch>__<seq_len>.json, with path separators and other unsafe
    characters of the names (which may be file paths) replaced by '_'."""
    if combo.plan_name:
        return combo.plan_name
    def safe(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9._+-]", "_", name).strip(".") or "_"

    return f"{safe(combo.model)}__{safe(combo.cluster)}__{combo.global_batch}__{combo.seq_len}.json"


def _identity(name: str) -> str:
    """What a model or cluster name denotes: the resolved path of a file, else the name."""
    return os.path.realpath(name) if os.path.exists(name) else name


def plan_file_names(combos: list[Combination]) -> list[Combination]:
    """The combinations with unique plan file names: the plain name, and where distinct inputs
    share one (`../cfg.json` and `./cfg.json` are both `_cfg.json`), a `-<10 hex>` hash of the
    resolved inputs before `.json` on each of them. Deterministic for the same inputs."""
    plain = {c.index: plan_file_name(c) for c in combos}
    owners: dict[str, set[tuple]] = {}
    for c in combos:
        owners.setdefault(plain[c.index], set()).add(
            (_identity(c.model), _identity(c.cluster), c.global_batch, c.seq_len))
    named = []
    for c in combos:
        name = plain[c.index]
        if len(owners[name]) > 1:
            ident = "\0".join(map(str, (_identity(c.model), _identity(c.cluster), c.global_batch, c.seq_len)))
            name = f"{name[:-len('.json')]}-{hashlib.sha256(ident.encode()).hexdigest()[:10]}.json"
        named.append(replace(c, plan_name=name))
    return named


# --- one combination (runs in a worker process) -----------------------------------------------


@lru_cache(maxsize=64)
def _model(name: str):
    from ..inputs.model import load_model

    return load_model(name)


@lru_cache(maxsize=64)
def _cluster(name: str):
    from ..inputs.hardware import load_cluster

    return load_cluster(name)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _empty_row(combo: Combination, status: str, reason: str, runtime: str | None = None) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(model=combo.model, cluster=combo.cluster, global_batch=combo.global_batch,
               seq_len=combo.seq_len, status=status, reason=_one_line(reason), runtime=runtime)
    return row


def plan_combination(combo: Combination, request: PlanRequest | None, want_plan: bool = False,
                     model=None, cluster=None) -> tuple[dict, dict | None]:
    """Plan one combination: its row, and its plan JSON when `want_plan` and feasible. Never
    raises (every failure is a row). The search is planner.api.plan's, of `request` (the
    sweep's flags; None: the defaults of `planner plan`, no time limit) with the combination's
    model, cluster, global batch and sequence length, so a row equals `planner plan` with the
    same inputs. Every executor runs this for every row; `model` and `cluster`, when given,
    are the loaded forms of combo.model and combo.cluster."""
    started = time.perf_counter()
    template = request if request is not None else PlanRequest(time_limit_s=None)
    try:
        from ..api import plan, plan_json

        model = model if model is not None else _model(combo.model)
        cluster = cluster if cluster is not None else _cluster(combo.cluster)
        result = plan(replace(template, model=model, cluster=cluster, global_batch=combo.global_batch,
                              seq_len=combo.seq_len))
        est, planned = result.estimate, result.plan
        row = _empty_row(combo, "ok", "")
        row.update(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu, pp=planned.pp,
                   tp=max(s.tp for s in planned.stages), dp=max(s.dp for s in planned.stages),
                   num_gpus_used=est.num_gpus_used, solver_seconds=result.seconds,
                   any_runtime_step_s=result.any_runtime_step_s)
        row["runtime"] = template.runtime
        return row, plan_json(result) if want_plan else None
    except NoFeasiblePlan as exc:
        row = _empty_row(combo, "infeasible", exc.message, template.runtime)
        row["solver_seconds"] = time.perf_counter() - started
        return row, None
    except BadInput as exc:
        return _empty_row(combo, "error", str(exc), template.runtime), None
    except RecursionError:
        return _empty_row(combo, "error", "input too deeply nested", template.runtime), None
    except Exception as exc:  # noqa: BLE001 - one bad combination never stops the others
        return _empty_row(combo, "error", f"{type(exc).__name__}: {exc}", template.runtime), None


def save_plan(combo: Combination, row: dict, plan: dict | None, plans_dir: str | None) -> dict:
    """Write `plan` to plans_dir (if both are given); the row, or an error row if that fails.
    Written like every output (planner.core.outfile): a symbolic link there is refused, not followed."""
    if plan is None or plans_dir is None:
        return row
    path = str(Path(plans_dir) / plan_file_name(combo))
    try:
        write_output(path, json_text(plan) + "\n", inputs=(combo.model, combo.cluster))
    except BadInput as exc:
        return _empty_row(combo, "error", f"plan not written: {exc}")
    return row


def run_combination(combo: Combination, request: PlanRequest | None, plans_dir: str | None) -> dict:
    """Plan one combination and save its plan into plans_dir; never raises."""
    row, plan = plan_combination(combo, request, plans_dir is not None)
    return save_plan(combo, row, plan, plans_dir)


__all__ = ["EXECUTORS", "Combination", "combinations", "parse_shard", "plan_combination", "plan_file_name",
           "plan_file_names", "row_key", "run_combination", "save_plan"]
