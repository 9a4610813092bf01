"""A reference runtime that executes a plan exactly (`planner run`): one process per rank of
the plan, each building its stages' layers with its tensor-parallel shard, running the plan's
pipeline schedule over its replica's micro-batches and applying AdamW (ZeRO-1 where the plan
says so).

* layout: what each rank does, from the plan alone (pure: no torch): the sample -> replica
  mapping, the peers of every send and receive, the process groups, the op order;
* layers: the model's layers as tensor-parallel torch modules, initialised plan-independently;
* engine: one training step (schedule, point-to-point, gradient reduction, optimizer);
* launch: the process group from torchrun's environment, the data, the step loop.

Only `layout` imports without torch; the CLI imports the rest when `planner run` runs.
"""
