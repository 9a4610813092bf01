"""Typed errors raised by the core; `cli` turns them into messages and exit codes."""

from __future__ import annotations


class BadInput(Exception):
    """A user input is malformed or impossible (exit code 2).

    `where` names the file (or flag) and `field` the offending key path, so the
    message reads `cluster.yaml: node_groups[0].nodes: must be a positive integer`.
    """

    def __init__(self, message: str, where: str | None = None, field: str | None = None):
        self.message = message
        self.where = where
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        return ": ".join(parts + [self.message])


class NoFeasiblePlan(Exception):
    """No configuration fits (exit code 1). `shortfall_bytes` is the smallest overflow seen."""

    def __init__(self, message: str, shortfall_bytes: float | None = None, device: str | None = None):
        self.message = message
        self.shortfall_bytes = shortfall_bytes
        self.device = device
        super().__init__(message)


class NothingFaster(NoFeasiblePlan):
    """The search was complete and found no plan faster than SolverOptions.upper_bound_s."""


class NotFoundInTime(NoFeasiblePlan):
    """The time limit (or a stop request) ended the search before it found a plan; `searched`:
    (searches done, searches in all) where known."""

    def __init__(self, message: str, searched: tuple[int, int] | None = None):
        super().__init__(message)
        self.searched = searched
