"""The checks every emitted or loaded plan passes (plan files, invariants, memory re-priced),
and `validate`."""
