"""Decompositions: composite ATen ops rewritten into the closed core op set of ``core_ops.py``."""
from kiln.decomp.core_ops import CORE_OPS, count_by_kind, is_core, non_core_ops, op_kind
from kiln.decomp.registry import decomposition, decomposition_table

__all__ = ["CORE_OPS", "count_by_kind", "decomposition", "decomposition_table", "is_core", "non_core_ops", "op_kind"]
