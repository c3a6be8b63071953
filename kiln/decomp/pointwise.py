"""Decompositions: pointwise."""
from __future__ import annotations

import torch

from kiln.decomp.registry import decomposition

aten = torch.ops.aten
