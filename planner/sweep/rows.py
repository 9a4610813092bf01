"""One row of `planner sweep`: the combinations (model, cluster, global batch, sequence
length, runtime, dtype, optimizer, cp and ep degrees, in a fixed order), their plan file names,
and plan_combination, which plans one of them (planner.api.plan) and never raises. Both
planner.sweep.run and planner.sweep.executors use these; this module imports neither.

Combination index: the cartesian product of the options, models outermost, then clusters,
global batches, sequence lengths, runtimes, dtypes, optimizers, cp and ep degrees, each in the
order given (repeated values are dropped).
Model and cluster names travel to local worker processes as strings, not objects, and every
worker loads them itself (cached per process).
"""

from __future__ import annotations

import errno
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
from ..core.runtime_default import DEFAULT_RUNTIME
from .grid import row_request
from .output import COLUMNS

EXECUTORS = ("local", "ray")  # planner.sweep.executors


DEFAULT_OPTIMIZER = "adamw"  # PlanRequest's
# the columns that identify a row, and the text a row without one of them (an older file) means
KEY_COLUMNS = ("model", "cluster", "global_batch", "seq_len", "runtime", "dtype", "optimizer", "cp_degrees",
               "ep_degrees")
_KEY_DEFAULTS = {"runtime": DEFAULT_RUNTIME, "optimizer": DEFAULT_OPTIMIZER}
MAX_PLAN_NAME = 128  # characters of a --plans-dir file name (file systems allow 255 bytes)
_HASH_HEX = 10


@dataclass(frozen=True)
class Combination:
    """One row to plan. `runtime`, `dtype`, `optimizer`: as `planner plan` takes them (None:
    the sweep's request's); `cp`, `ep`: the `--cp` / `--ep` degree of the row (None: plan's
    default search)."""
    index: int
    model: str
    cluster: str
    global_batch: int
    seq_len: int
    runtime: str | None = None
    dtype: str | None = None
    optimizer: str | None = None
    cp: int | None = None
    ep: int | None = None
    plan_name: str = ""  # its --plans-dir file name, when plan_file_names set it

    @property
    def key(self) -> tuple[str, ...]:
        return row_key(self.request_columns())

    def request_columns(self) -> dict[str, Any]:
        """The row's columns that say what was asked (KEY_COLUMNS)."""
        return {"model": self.model, "cluster": self.cluster, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "runtime": self.runtime, "dtype": self.dtype, "optimizer": self.optimizer,
                "cp_degrees": self.cp, "ep_degrees": self.ep}


def row_key(row: dict) -> tuple[str, ...]:
    """What matches a row to a combination; numbers as text, so CSV and JSONL rows agree, and
    an absent or empty column as its default."""
    def text(column: str) -> str:
        value = row.get(column)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        value = "" if value is None else str(value).strip()
        return value or _KEY_DEFAULTS.get(column, "")

    return tuple(text(c) for c in KEY_COLUMNS)


def combinations(models: Iterable[str], clusters: Iterable[str], batches: Iterable[int],
                 seq_lens: Iterable[int], runtimes: Iterable[str | None] = (None,),
                 dtypes: Iterable[str | None] = (None,), optimizers: Iterable[str | None] = (None,),
                 cps: Iterable[int | None] = (None,), eps: Iterable[int | None] = (None,)) -> list[Combination]:
    """The cartesian product in a fixed order (models outermost), duplicates dropped; an empty
    axis is its default (None)."""
    def unique(values: Iterable) -> list:
        return list(dict.fromkeys(values)) or [None]

    product = itertools.product(unique(models), unique(clusters), unique(batches), unique(seq_lens),
                                unique(runtimes), unique(dtypes), unique(optimizers), unique(cps), unique(eps))
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


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_HEX]


def capped_name(name: str) -> str:
    """`name` (…​.json) if it has at most MAX_PLAN_NAME characters, else its start and a hash
    of the whole name: `<start>-<10 hex>.json`, MAX_PLAN_NAME long (deterministic, distinct
    names stay distinct)."""
    if len(name) <= MAX_PLAN_NAME:
        return name
    suffix = f"-{_short_hash(name)}.json"
    return name[:MAX_PLAN_NAME - len(suffix)].rstrip("._-") + suffix


def plan_file_name(combo: Combination) -> str:
    """The name plan_file_names gave the combination, else the plain one:
    <model>__<cluster>__<global_batch>__<seq_len>[__<runtime>][__<dtype>][__<optimizer>][__cp<N>]
    [__ep<N>].json (the parts in brackets where the row asks for other than plan's default),
    with path separators and other unsafe characters of the names (which may be file paths)
    replaced by '_', capped to MAX_PLAN_NAME characters (capped_name)."""
    if combo.plan_name:
        return combo.plan_name
    def safe(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9._+-]", "_", name).strip(".") or "_"

    parts = [safe(combo.model), safe(combo.cluster), str(combo.global_batch), str(combo.seq_len)]
    parts += [safe(v) for v, default in ((combo.runtime, DEFAULT_RUNTIME), (combo.dtype, None),
                                         (combo.optimizer, DEFAULT_OPTIMIZER)) if v and v != default]
    parts += [f"{axis}{v}" for axis, v in (("cp", combo.cp), ("ep", combo.ep)) if v is not None]
    return capped_name("__".join(parts) + ".json")


def _identity(name: str) -> str:
    """What a model or cluster name denotes: the resolved path of a file, else the name."""
    return os.path.realpath(name) if os.path.exists(name) else name


def plan_file_names(combos: list[Combination]) -> list[Combination]:
    """The combinations with unique plan file names: the plain name, and where distinct inputs
    share one (`../cfg.json` and `./cfg.json` are both `_cfg.json`), a `-<10 hex>` hash of the
    resolved inputs before `.json` on each of them. Deterministic for the same inputs."""
    def identity(combination: Combination) -> tuple:
        asked = [v for v in combination.key[4:] if v not in ("", DEFAULT_RUNTIME, DEFAULT_OPTIMIZER)]
        return (_identity(combination.model), _identity(combination.cluster), combination.global_batch,
                combination.seq_len, *asked)

    plain = {c.index: plan_file_name(c) for c in combos}
    owners: dict[str, set[tuple]] = {}
    for c in combos:
        owners.setdefault(plain[c.index], set()).add(identity(c))
    named = []
    for c in combos:
        name = plain[c.index]
        if len(owners[name]) > 1:
            stem = name[:-len(".json")][:MAX_PLAN_NAME - len(".json") - _HASH_HEX - 1]
            name = f"{stem}-{_short_hash(chr(0).join(map(str, identity(c))))}.json"
        named.append(replace(c, plan_name=name))
    return named


# --- one combination (runs in a worker process) -----------------------------------------------


@lru_cache(maxsize=64)
def cached_model(name: str):
    from ..inputs.model import load_model

    return load_model(name)


@lru_cache(maxsize=64)
def cached_cluster(name: str):
    from ..inputs.hardware import load_cluster

    return load_cluster(name)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def empty_row(combo: Combination, status: str, reason: str, request: PlanRequest | None = None,
               model_name: str | None = None) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(combo.request_columns())
    if request is not None:
        row.update(runtime=request.runtime, dtype=request.dtype, optimizer=request.optimizer)
    row.update(status=status, reason=one_line(reason), model_name=model_name)
    return row


def _per_stage(values: list) -> Any:
    """One value when every stage has it, else each stage's, joined by '/'."""
    return values[0] if len(set(values)) == 1 else "/".join(map(str, values))


def stages_text(planned) -> str:
    """Each stage's tp, dp, cp and ep, runs of equal stages as `<shape> xN`, joined by ' | ':
    `tp4.dp2.cp1.ep1 x3 | tp2.dp4.cp1.ep1`."""
    shapes = [f"tp{s.tp_label()}.dp{s.dp}.cp{s.cp}.ep{s.ep}" for s in planned.stages]
    runs = [(shape, len(list(group))) for shape, group in itertools.groupby(shapes)]
    return " | ".join(shape if n == 1 else f"{shape} x{n}" for shape, n in runs)


def plan_columns(planned, est) -> dict:
    """The columns that describe a plan's shape and its estimate."""
    from ..cost.energy import rented_nodes, run_cost
    from ..cost.reliability import reliability
    from ..inputs.hardware import GIB
    from ..report.credibility import mfu_above_published

    stages = planned.stages
    cost = run_cost(planned, est)
    failures = reliability(planned, est, rented_nodes(planned))
    above = mfu_above_published(planned, est)
    t = planned.training
    return dict(step_time_s=est.step_time_s, tokens_per_s=est.tokens_per_s, mfu=est.mfu, pp=planned.pp,
                tp=max(max(s.tp_degrees) for s in stages), dp=max(s.dp for s in stages), num_gpus_used=est.num_gpus_used,
                micro_batch=t.micro_batch, schedule=t.schedule, virtual_stages=t.virtual_stages,
                cp=max(s.cp for s in stages), ep=max(s.ep for s in stages),
                zero=_per_stage([s.zero for s in stages]), recompute=_per_stage([s.recompute for s in stages]),
                peak_memory_GiB=max(m.total_bytes for m in est.memory_by_rank.values()) / GIB,
                stages=stages_text(planned), mfu_above_published=above.published_mfu if above else None,
                usd_per_hour=cost.usd_per_hour, usd_per_step=cost.usd_per_step,
                usd_per_million_tokens=cost.usd_per_million_tokens, energy_J_per_step=cost.energy_J_per_step,
                energy_J_per_token=cost.energy_J_per_token, goodput_tokens_per_s=failures.goodput_tokens_per_s,
                checkpoint_interval_s=failures.checkpoint_interval_s)


# errors of the machine, not of the inputs: a full disk or quota, I/O, permissions, no memory,
# too many open files, a busy or stale resource
ENVIRONMENTAL_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EFBIG", "EIO", "EACCES", "EPERM", "EROFS", "ENOMEM", "EMFILE", "ENFILE", "EAGAIN",
    "EBUSY", "ETIMEDOUT", "ESTALE", "ENOLCK") if hasattr(errno, name))


def _environmental(exc: BaseException) -> bool:
    """A failure outside the row's inputs: out of memory, or an OS error of the machine (a full
    disk, EIO, EACCES; also when reported as bad input while handling one)."""
    if isinstance(exc, MemoryError):
        return True
    cause = exc if isinstance(exc, OSError) else exc.__context__
    return isinstance(cause, OSError) and cause.errno in ENVIRONMENTAL_ERRNOS


def plan_combination(combo: Combination, request: PlanRequest | None, want_plan: bool = False,
                     model=None, cluster=None) -> tuple[dict, dict | None]:
    """Plan one combination: its row, and its plan JSON when `want_plan` and feasible. Never
    raises (every failure is a row). The search is planner.api.plan's, of `request` (the
    sweep's flags; None: the defaults of `planner plan`, no time limit) with the combination's
    model, cluster, global batch, sequence length and other axes (row_request), so a row equals
    `planner plan` with the same inputs. Every executor runs this for every row; `model` and
    `cluster`, when given, are the loaded forms of combo.model and combo.cluster."""
    started = time.perf_counter()
    asked = row_request(combo, request if request is not None else PlanRequest(time_limit_s=None))
    name = None
    try:
        from ..api import plan, plan_json
        from ..api.objective import needs_subsets, plan_objective

        model = model if model is not None else cached_model(combo.model)
        name = model.name
        cluster = cluster if cluster is not None else cached_cluster(combo.cluster)
        loaded = replace(asked, model=model, cluster=cluster)
        result = plan_objective(loaded).result if needs_subsets(loaded) else plan(loaded)
        row = empty_row(combo, "ok", "", asked, name)
        row.update(plan_columns(result.plan, result.estimate), solver_seconds=result.seconds,
                   any_runtime_step_s=result.any_runtime_step_s)
        return row, plan_json(result) if want_plan else None
    except NoFeasiblePlan as exc:
        row = empty_row(combo, "infeasible", exc.message, asked, name)
        row["solver_seconds"] = time.perf_counter() - started
        return row, None
    except RecursionError:
        return empty_row(combo, "error", "input too deeply nested", asked, name), None
    except Exception as exc:  # noqa: BLE001 - one bad combination never stops the others
        status = "failed" if _environmental(exc) else "error"
        reason = str(exc) if isinstance(exc, BadInput) else f"{type(exc).__name__}: {exc}"
        return empty_row(combo, status, reason, asked, name), None


def save_plan(combo: Combination, row: dict, plan: dict | None, plans_dir: str | None) -> dict:
    """Write `plan` to plans_dir (if both are given); the row, or a `failed` row (which
    --resume plans again) if that fails. Written like every output (planner.core.outfile): a
    symbolic link there is refused, not followed."""
    if plan is None or plans_dir is None:
        return row
    path = str(Path(plans_dir) / plan_file_name(combo))
    try:
        write_output(path, json_text(plan) + "\n", inputs=(combo.model, combo.cluster))
    except BadInput as exc:
        failed = {c: row.get(c) for c in ("runtime", "dtype", "optimizer", "model_name")}
        return {**empty_row(combo, "failed", f"plan not written: {exc}"), **failed}
    return row


def run_combination(combo: Combination, request: PlanRequest | None, plans_dir: str | None) -> dict:
    """Plan one combination and save its plan into plans_dir; never raises."""
    row, plan = plan_combination(combo, request, plans_dir is not None)
    return save_plan(combo, row, plan, plans_dir)


__all__ = ["EXECUTORS", "KEY_COLUMNS", "MAX_PLAN_NAME", "Combination", "cached_cluster", "cached_model", "capped_name",
           "combinations", "empty_row", "one_line", "parse_shard",
           "plan_columns", "plan_combination", "plan_file_name", "plan_file_names", "row_key", "run_combination",
           "save_plan", "stages_text"]
