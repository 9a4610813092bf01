"""The search: the least memory of each layer (layer_floor), stage pricing tables, the dynamic
programme over layers and GPUs, the batch-share ILP, uniform fall-backs, and the driver that
returns the best plan."""
