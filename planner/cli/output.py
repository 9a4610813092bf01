"""What every command shares: exit codes, one-line messages on stderr, the JSON/human output
(`--json`, `-o FILE`), the search's progress line, and the group that turns the core's typed
errors into a message and an exit code. Only planner.cli prints or exits."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click
from rich.console import Console

from ..core.errors import BadInput, NoFeasiblePlan
from ..core.io import json_text
from ..core.markup import esc
from ..report.views import stdout_console

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT


def stdout() -> Console:
    return stdout_console()


def err(message: str) -> None:
    click.echo(f"planner: {message}", err=True)


def warn(message: str) -> None:
    """A warning on stderr; the library's `warn` callback."""
    err(f"warning: {message}")


def bad_input_exit(exc: BadInput) -> None:
    """One line for a command that also runs on a plain click.Group (export, show, validate)."""
    err(str(exc))
    sys.exit(EXIT_BAD_INPUT)


def emit(data: Any, output: str | None, as_json: bool, show: Callable[[], None], written: str | None = None,
         inputs: tuple | list = ()) -> None:
    """The JSON to `-o FILE` and/or stdout (`--json`); without --json the human view via
    `show`, then, when `written` names the thing, where the file went. The file is written
    by planner.core.outfile (atomically; never onto a link or onto one of the `inputs`)."""
    from ..core.outfile import write_output

    if as_json or output:
        text = json_text(data)
        if output:
            write_output(output, text + "\n", inputs=inputs)
        if as_json:
            click.echo(text)
    if not as_json:
        show()
        if output and written:
            stdout().print(f"{written} written to {esc(output)}")


@contextmanager
def search_progress(enabled: bool) -> Iterator[Callable | None]:
    """On a terminal, a one-line status on stderr while the search runs (gone when it ends)."""
    if not enabled:
        yield None
        return
    with Console(stderr=True).status("searching") as status:
        def report(progress) -> None:
            best = "none yet" if progress.best_step_s is None else f"{progress.best_step_s:.3f} s"
            status.update(f"searching: {progress.elapsed_s:.0f} s, subproblems {progress.subproblems_done}/"
                          f"{progress.subproblems_total}, best step {best}, lower bound {progress.lower_bound_s:.3f} s")
        yield report


class PlannerGroup(click.Group):
    """Turns the core's typed errors into one line on stderr and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            err(str(exc))
            sys.exit(EXIT_BAD_INPUT)
        except NoFeasiblePlan as exc:
            err(f"no feasible plan: {exc.message}")
            sys.exit(EXIT_INFEASIBLE)
        except click.UsageError as exc:
            hint = f" (see `{ctx.command_path} --help`)" if ctx else ""
            err(f"{exc.format_message()}{hint}")
            sys.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:  # Ctrl-C: 130, not click's "Aborted!" and 1 (no feasible plan)
            err("interrupted")
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except RecursionError:
            err("input too deeply nested")
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - a user never sees a traceback
            if os.environ.get("PLANNER_DEBUG"):
                raise
            err(f"internal error: {type(exc).__name__}: {exc} (set PLANNER_DEBUG=1 for a traceback)")
            sys.exit(EXIT_INTERNAL)
