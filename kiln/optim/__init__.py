"""kiln's fused optimizer step (``step.py``, per-class rules in ``rules.py``; docs/optimizers.md)."""
from kiln.optim.step import FusedOptimizerStep, fused_step_for, unsupported_reason

__all__ = ["FusedOptimizerStep", "fused_step_for", "unsupported_reason"]
