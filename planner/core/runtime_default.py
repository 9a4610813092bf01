"""The runtime a plan is made for when none is named (`--runtime`, training.runtime).

Defined here, below every other layer, because plan files (planner.plan) default to it as well
as the requests and the CLI; planner.cost.runtimes registers every runtime, this one included.
"""

DEFAULT_RUNTIME = "megatron"
