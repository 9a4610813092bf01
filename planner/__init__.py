"""planner: plan distributed training of deep networks on clusters of mixed GPUs."""

__version__ = "0.1.0"
