"""A request field's command-line flag, declared once on the field (planner.api.requests): its
name, help, type, range and default. The CLI builds its options from these declarations
(planner.cli.declared), a request is built from the parsed values (from_cli), evaluate's plan-file
conflicts and `planner sweep`'s flags (planner.sweep.grid) are read from them. Nothing here
imports click.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

FIELD_DEFAULT = object()  # Flag.default: the CLI's default follows the field's (Flag.cli_default)


@dataclass(frozen=True)
class Flag:
    """How one request field is given on the command line.

    `type`: int, float or str; a tuple of names: one of them; None: an on/off flag (or, with a
    `--x/--no-x` name, a tri-state whose default is None). `group`: the block of options a
    command lists it in (fields in declared order within a block). `low`/`high`: an integer
    range the CLI checks itself (click.IntRange); `figure`: the documented range
    (planner.core.ranges) the api checks the value against (planner.api.load.require).
    `default`: the CLI's default where it is not the field's; `show_default`: shown in --help,
    the CLI's default is then the field's (or `default`)."""
    name: str
    help: str
    type: Any = None
    group: str = ""
    low: int | None = None
    high: int | None = None
    default: Any = FIELD_DEFAULT
    show_default: bool = False
    metavar: str | None = None
    alias: str = ""  # a short form, "-j"
    repeatable: bool = False
    figure: str = ""
    plan_file: bool = False  # evaluate --plan: a plan file carries it; giving it too is bad input

    @property
    def long(self) -> str:
        """The flag as typed to turn it on: `--tf32` of `--tf32/--no-tf32`."""
        return self.name.split("/")[0]

    def cli_default(self, field_default: Any) -> Any:
        """The value the CLI passes when the flag is not given."""
        if self.default is not FIELD_DEFAULT:
            return self.default
        if self.show_default:
            return field_default
        if self.repeatable:
            return ()
        return False if self.type is None and "/" not in self.name else None

    def typed(self, value: Any) -> str:
        """The flag as typed for `value`: `--no-tf32` for False of `--tf32/--no-tf32`."""
        on, _, off = self.name.partition("/")
        return off if off and value is False else on


def declare(flag: Flag) -> dict:
    """A field's metadata declaring its flag: `field(default=..., metadata=declare(Flag(...)))`."""
    return {"flag": flag}


def declared(cls: type, group: str | None = None) -> list[tuple[str, Flag, Any]]:
    """(field name, flag, field default) of each field of `cls` with a flag, in field order;
    with `group`, that block's only."""
    out = []
    for f in fields(cls):
        flag = f.metadata.get("flag")
        if flag is not None and (group is None or flag.group == group):
            out.append((f.name, flag, f.default if f.default is not MISSING else f.default_factory()))
    return out


def from_cli(cls: type, values: dict[str, Any], **given: Any) -> Any:
    """The request `cls` of parsed flag values keyed by field name: a value left None (or an empty
    name) takes the field's default, a repeatable one becomes a tuple; `given` fields are set as
    they are."""
    kwargs = {}
    for name, flag, _ in declared(cls):
        if name in given or name not in values:
            continue
        value = values[name]
        if flag.repeatable:
            kwargs[name] = tuple(value)
        elif value is not None and value != "":
            kwargs[name] = value
    return cls(**kwargs, **given)


def plan_file_conflicts(cls: type, values: dict[str, Any]) -> list[str]:
    """The flags of `cls` that a plan file carries (Flag.plan_file) given on the command line (a
    value other than the CLI's default), as typed, in field order."""
    return [flag.typed(values[name]) for name, flag, default in declared(cls)
            if flag.plan_file and name in values and values[name] != flag.cli_default(default)]


def flag_figures(*classes: type) -> dict[str, str]:
    """{flag: the planner.core.ranges figure its value is checked against} of these requests."""
    return {flag.long: flag.figure for cls in classes for _, flag, _ in declared(cls) if flag.figure}


__all__ = ["Flag", "declare", "declared", "flag_figures", "from_cli", "plan_file_conflicts"]
