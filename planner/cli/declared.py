"""The click options of a request's declared flags (planner.api.flags): each field's flag
becomes one option whose value arrives under the field's name, so a command builds its request
with planner.api.flags.from_cli and never re-lists the flags."""

from __future__ import annotations

from typing import Any, Callable

import click

from ..api.flags import Flag, declared


def click_type(flag: Flag) -> Any:
    """The click type of a flag: a choice, an integer range, or the plain type."""
    if isinstance(flag.type, tuple):
        return click.Choice(list(flag.type))
    if flag.low is not None or flag.high is not None:
        return click.IntRange(flag.low, flag.high)
    return flag.type


def option(name: str, flag: Flag, field_default: Any, **extra: Any) -> Callable:
    """The click option of the field `name` declared with `flag` (its value arrives as `name`);
    `extra`: further click.option arguments."""
    decls = [flag.name, *([flag.alias] if flag.alias else []), name]
    kwargs: dict[str, Any] = {"help": flag.help, "default": flag.cli_default(field_default), **extra}
    if flag.type is None:
        if "/" not in flag.name:
            kwargs["is_flag"] = True
    else:
        kwargs["type"] = click_type(flag)
    if flag.repeatable:
        kwargs["multiple"] = True
    if flag.show_default:
        kwargs["show_default"] = True
    if flag.metavar:
        kwargs["metavar"] = flag.metavar
    return click.option(*decls, **kwargs)


def request_options(cls: type, group: str) -> Callable[[Callable], Callable]:
    """A decorator adding the options of `cls`'s fields declared in `group`, in field order."""
    def decorate(func: Callable) -> Callable:
        for name, flag, default in reversed(declared(cls, group)):
            func = option(name, flag, default)(func)
        return func

    return decorate
