"""The search, bottom to top: the decomposition of a cluster into parts (decompose), stage
pricing (pricing/), lower bounds (bounds/), the dynamic programme over layers and GPUs (dp) and
the uniform fall-backs (uniform), and the orchestration that runs them and returns the best plan
(orchestration/, its driver)."""
