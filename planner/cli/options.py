"""Flags shared by several commands that are no request field (planner.api.requests declares those)."""

from __future__ import annotations

from typing import Callable

import click


def links_option(func: Callable) -> Callable:
    """`--links FILE`: a link fragment (planner profile-links) merged into the cluster (plan, evaluate)."""
    return click.option("--links", "links", default=None, metavar="FILE",
                        help="Measured links (planner profile-links) in place of the cluster file's "
                             "intra_node / inter_node / links.")(func)
