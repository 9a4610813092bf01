"""`planner validate`: a plan or layer-profile file -> planner.verify.validate -> every problem;
exit 2 with one `FILE: path: message` line per problem."""

from __future__ import annotations

import sys

import click

from ..core.errors import BadInput
from ..api import reprice_plan
from ..core.io import json_text
from ..verify.validate import summarize, validate_file
from .output import EXIT_BAD_INPUT, bad_input_exit


@click.command("validate")
@click.argument("file", metavar="FILE")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"valid": ..., "problems": [{"path", "message"}]} on stdout.')
def validate_command(file: str, as_json: bool) -> None:
    """Check a plan (or layer-profile) file and list every problem.

    A plan is checked against its JSON Schema (shipped in the package), then for the
    invariants a trainer relies on (every rank once, layers covered once in order,
    shares summing to the global batch in whole micro-batches) and, re-priced, for
    memory; the figures it reports (model.params, predicted) must be what the planner
    computes for it (predicted re-priced with the --profile / --calibration files the plan
    records; a note on stderr when they cannot be read). Exit 0 when valid, 2 with one
    `FILE: path: message` line per problem.

    \b
    Example:
      planner plan --model gpt2 --cluster consumer-3090-4090 --global-batch 64 \\
          --seq-len 1024 -o plan.json
      planner validate plan.json
    """
    try:
        kind, data, problems, notes = validate_file(file, reprice_plan)
    except BadInput as exc:
        bad_input_exit(exc)
        return
    if as_json:
        click.echo(json_text({"valid": not problems, "kind": kind,
                              "problems": [{"path": p, "message": m} for p, m in problems], "notes": notes}))
    for note in notes:
        click.echo(f"{file}: note: {note}", err=True)
    if problems:
        for path, message in problems:
            click.echo(": ".join(x for x in (file, path, message) if x), err=True)
        sys.exit(EXIT_BAD_INPUT)
    if not as_json:
        click.echo(f"valid: {summarize(kind, data)}")


def add_commands(group: click.Group) -> None:
    """Register `validate` on `group` (the CLI's main group, or a plain click.Group)."""
    group.add_command(validate_command)
