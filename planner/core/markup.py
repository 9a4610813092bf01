"""User text (names, paths) inside the rich markup the CLI prints."""

from __future__ import annotations

from rich.markup import escape


def esc(value: object) -> str:
    """`value` as text rich prints literally: a name like `evil[/]` or `[bold]x` is not markup.

    Every user-given string interpolated into a rich `print` or table cell goes through this."""
    return escape(str(value))
