"""How `planner sweep` runs its combinations (`--executor`).

- `local`: a process pool on this machine, `--jobs` processes (1: in this process).
- `ray`: one Ray task per combination, at most `--jobs` in flight (default: the cluster's CPUs),
  on the cluster that RAY_ADDRESS names, or on a local Ray started for the run (`--jobs` CPUs)
  and shut down after it. A Ray this process had already initialized is used and left running.

Both run the same per-row function, sweep_rows.plan_combination, and call on_row(index, row) in the
sweep's own process as rows finish; the sweep sorts the rows at the end, so the file depends on
neither the executor nor the order in which rows finished. With Ray, the models and clusters are
loaded here and shipped to the workers (so cluster and model files need not exist on the other
machines), and the plans of --plans-dir come back to be written here. The nodes need planner
installed, at the same version.

Ray is optional (`pip install 'planner[ray]'`) and imported only when `--executor ray` runs.

Local workers never outlive the sweep: they ignore SIGINT (the sweep's process handles Ctrl-C
and kills them), and die with their parent even when it is killed with SIGKILL (Linux:
prctl(PR_SET_PDEATHSIG); elsewhere a thread polls the parent's pid once a second).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..core.errors import BadInput
from .rows import EXECUTORS, Combination, cached_cluster, cached_model, empty_row, one_line, plan_combination, \
    run_combination, save_plan

if TYPE_CHECKING:
    from ..api import PlanRequest

INSTALL_HINT = "needs Ray, which is not installed: pip install 'planner[ray]'"

OnRow = Callable[[int, dict], None]
Execute = Callable[[list[Combination], "PlanRequest | None", "str | None", OnRow], None]


@contextmanager
def start_executor(name: str, jobs: int | None, todo: list[Combination]) -> Iterator[Execute]:
    """An execute(todo, request, plans_dir, on_row) for executor `name` (`request`: the
    sweep's PlanRequest, see sweep_rows.plan_combination). Everything that can
    fail for the executor itself (Ray missing or unreachable) fails here, before any row."""
    if name == "local":
        yield partial(run_local, jobs or os.cpu_count() or 1)
    elif name == "ray":
        ray = require_ray()
        if not todo:  # nothing to plan (e.g. --resume of a finished sweep): start nothing
            yield partial(run_ray, ray, 1)
            return
        with ray_session(ray, jobs) as in_flight:
            yield partial(run_ray, ray, in_flight)
    else:
        raise BadInput(f"expected one of {', '.join(EXECUTORS)}, got {name!r}", "--executor")


def failed_row(combo: Combination, exc: BaseException) -> dict:
    """The row of a combination whose worker failed (killed for memory, a lost node, ...):
    `failed`, so --resume plans it again."""
    return empty_row(combo, "failed", f"worker failed: {type(exc).__name__}: {exc}")


# --- local --------------------------------------------------------------------------------------


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_parent(parent: int, sweep_pid: int) -> None:
    while os.getppid() == parent and _pid_alive(sweep_pid):
        time.sleep(1.0)
    os._exit(1)


def die_with_parent(sweep_pid: int) -> str:
    """Make this process die when its parent does; returns how ("prctl" or "poll")."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if not _pid_alive(sweep_pid):  # the parent died before prctl
                    os._exit(1)
                return "prctl"
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(os.getppid(), sweep_pid), daemon=True,
                     name="planner-watch-parent").start()
    return "poll"


def _worker_init(sweep_pid: int) -> None:
    """Every local worker: Ctrl-C is the sweep's to handle; SIGTERM kills (a forked worker
    inherits the sweep's SIGTERM handler); death with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(sweep_pid)


def _kill_workers(pool: ProcessPoolExecutor, timeout_s: float = 5.0) -> None:
    """Kill the pool's processes now (a search can run for minutes) and reap them."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.join(max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError, AssertionError):
            pass


def _run_indexed(combo: Combination, request: PlanRequest | None, plans_dir: str | None) -> tuple[int, dict]:
    return combo.index, run_combination(combo, request, plans_dir)


def run_local(jobs: int, todo: list[Combination], request: PlanRequest | None, plans_dir: str | None,
              on_row: OnRow) -> None:
    """Run every combination in `jobs` processes, calling on_row(index, row) as each finishes."""
    if jobs <= 1 or len(todo) <= 1:
        for combo in todo:
            on_row(combo.index, run_combination(combo, request, plans_dir))
        return
    by_future: dict[Future, Combination] = {}
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), initializer=_worker_init,
                               initargs=(os.getpid(),))
    try:
        for combo in todo:
            by_future[pool.submit(_run_indexed, combo, request, plans_dir)] = combo
        pending = set(by_future)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: by_future[f].index):
                combo = by_future[future]
                try:
                    index, row = future.result()
                except Exception as exc:  # noqa: BLE001 - a worker died (e.g. killed for memory)
                    index, row = combo.index, failed_row(combo, exc)
                on_row(index, row)
    except BaseException:  # Ctrl-C, SIGTERM, a failing on_row: no worker outlives the sweep
        _kill_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --- Ray ----------------------------------------------------------------------------------------


def require_ray() -> Any:
    """The ray module, or BadInput with the install hint (exit 2) when it is missing."""
    try:
        import ray
    except ImportError:  # also when sys.modules["ray"] is None
        raise BadInput(INSTALL_HINT, "--executor ray") from None
    return ray


@contextmanager
def ray_session(ray: Any, jobs: int | None) -> Iterator[int]:
    """Connect to RAY_ADDRESS or start a local Ray (`jobs` CPUs); yields how many tasks to keep
    in flight. Shuts down what it initialized: a local Ray stops, a cluster is only
    disconnected from (it keeps running)."""
    if ray.is_initialized():  # the caller's Ray: use it, leave it as it is
        yield jobs or _cluster_cpus(ray)
        return
    address = os.environ.get("RAY_ADDRESS") or None
    try:
        if address:
            _check_reachable(address)
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:  # a light one, quiet on stderr
            jobs = jobs or os.cpu_count() or 1
            ray.init(address="local", num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - unreachable address, no room for a local Ray, ...
        where = f"RAY_ADDRESS={address}" if address else "--executor ray"
        action = "cannot connect to Ray" if address else "cannot start a local Ray"
        raise BadInput(f"{action}: {type(exc).__name__}: {one_line(exc)}", where) from None
    try:
        yield jobs or _cluster_cpus(ray)
    finally:
        ray.shutdown()


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a [ray://]host:port nobody listens on (ray.init would retry for minutes)."""
    match = re.fullmatch(r"(?:ray://)?\[?([^\[\]]+?)\]?:(\d+)", address.strip())
    if match:
        socket.create_connection((match.group(1), int(match.group(2))), timeout=timeout_s).close()


def _cluster_cpus(ray: Any) -> int:
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _ray_task(combo: Combination, request: PlanRequest | None, want_plan: bool, model: Any,
              cluster: Any) -> tuple[dict, dict | None]:
    """One combination on a Ray worker: its row and (for --plans-dir) its plan JSON."""
    return plan_combination(combo, request, want_plan, model, cluster)


def _put_loaded(ray: Any, load: Callable[[str], Any], names: set[str]) -> dict[str, Any]:
    """name -> object ref of the loaded model or cluster; a name that does not load here is
    left out, and each worker loads it itself (and reports the same error as `local`)."""
    refs = {}
    for name in sorted(names):
        try:
            refs[name] = ray.put(load(name))
        except Exception:  # noqa: BLE001 - reported by the worker, in the row
            continue
    return refs


def run_ray(ray: Any, in_flight: int, todo: list[Combination], request: PlanRequest | None,
            plans_dir: str | None, on_row: OnRow) -> None:
    """Run every combination as a Ray task, at most `in_flight` at a time, calling
    on_row(index, row) as each finishes; a task that fails becomes an `error` row."""
    if not todo:
        return
    task = ray.remote(num_cpus=1)(_ray_task)
    models = _put_loaded(ray, cached_model, {c.model for c in todo})
    clusters = _put_loaded(ray, cached_cluster, {c.cluster for c in todo})
    queue = iter(todo)
    running: dict[Any, Combination] = {}
    try:
        while True:
            while len(running) < in_flight and (combo := next(queue, None)) is not None:
                ref = task.remote(combo, request, plans_dir is not None, models.get(combo.model),
                                  clusters.get(combo.cluster))
                running[ref] = combo
            if not running:
                break
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                combo = running.pop(ref)
                try:
                    row, plan = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the task raised, or its worker or node died
                    row, plan = failed_row(combo, getattr(exc, "cause", None) or exc), None
                on_row(combo.index, save_plan(combo, row, plan, plans_dir))
    finally:
        for ref in running:  # interrupted: leave nothing running on the cluster
            ray.cancel(ref)


__all__ = ["INSTALL_HINT", "require_ray", "run_local", "run_ray", "start_executor"]
