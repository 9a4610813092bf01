"""Stage pricing: the stage configurations of a problem and their price tables (stages,
stage_types, stage_configs, stage_links), memory-capping levels and batch shares (levels, shares),
block recompute, deferred weight gradients and interleaving (block, deferred, interleave), and the
expert and context parallel degrees a stage may take (experts, context_parallel)."""
